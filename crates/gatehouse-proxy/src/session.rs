//! The client session a wrap process belongs to (DESIGN §2): the nearest
//! ancestor that is not a known launcher, identified by pid and start time.

/// Process names that launch servers on a client's behalf.
pub const LAUNCHERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "fish",
    "env",
    "cmd.exe",
    "cmd",
    "powershell",
    "pwsh",
    "npx",
    "npm",
    "npm exec",
    "node",
    "uvx",
    "uv",
    "pipx",
    "bunx",
    "timeout",
    "nohup",
    "disclaimer",
    "gatehouse",
    "xargs",
    "sudo",
    "doas",
    "stdbuf",
];

/// Whether a process name is a launcher, not a client.
pub fn is_launcher(name: &str) -> bool {
    let name = name.rsplit(['/', '\\']).next().unwrap_or(name);
    LAUNCHERS.contains(&name) || name.starts_with("python") && name.len() <= 10
}

/// The session key: `pid:start_time` of the nearest non-launcher ancestor.
#[cfg(target_os = "linux")]
pub fn client_session_key() -> String {
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..32 {
        let Some(stat) = read_stat(pid) else { break };
        if !is_launcher(&stat.comm) || stat.ppid <= 1 {
            return format!("{pid}:{}", stat.start_time);
        }
        pid = stat.ppid;
    }
    format!("{pid}:0")
}

/// Elsewhere (not verified here): the parent process, which is the client
/// itself when it launches `gatehouse wrap` directly (what `protect`
/// writes); no ancestor walk or start time yet, so a client that launches
/// through a shell gets one session per shell.
#[cfg(all(unix, not(target_os = "linux")))]
pub fn client_session_key() -> String {
    format!("{}:0", std::os::unix::process::parent_id())
}

/// Windows (not verified here): no parent lookup yet; every wrap process is
/// its own session, so cross-server rules see only its own calls.
#[cfg(not(unix))]
pub fn client_session_key() -> String {
    format!("{}:0", std::process::id())
}

#[cfg(target_os = "linux")]
struct Stat {
    comm: String,
    ppid: u32,
    start_time: u64,
}

/// Parses `/proc/PID/stat`; `comm` may contain spaces and parentheses, so the
/// fields after it are read from the last `)`.
#[cfg(target_os = "linux")]
fn read_stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

#[cfg(target_os = "linux")]
fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 2..)?.split(' ').collect();
    // After comm: state(0) ppid(1) ... starttime is field 22 overall → index 19.
    Some(Stat {
        comm,
        ppid: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_names() {
        let stat = parse_stat(
            "1234 (my (odd) prog) S 77 1234 1234 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 998877 0 0",
        )
        .unwrap();
        assert_eq!(stat.comm, "my (odd) prog");
        assert_eq!(stat.ppid, 77);
        assert_eq!(stat.start_time, 998877);
    }

    #[test]
    fn launchers_are_skipped() {
        for name in ["sh", "/bin/bash", "npx", "disclaimer", "python3", "cmd.exe"] {
            assert!(is_launcher(name), "{name} launches servers for a client");
        }
        for name in ["cursor", "claude", "code", "Windsurf", "cargo"] {
            assert!(!is_launcher(name), "{name} is a client");
        }
    }

    #[test]
    fn session_key_names_an_ancestor() {
        let key = client_session_key();
        let (pid, start) = key.split_once(':').unwrap();
        assert!(pid.parse::<u32>().unwrap() > 0);
        assert!(
            start.parse::<u64>().unwrap() > 0,
            "start time distinguishes reused pids"
        );
    }
}
