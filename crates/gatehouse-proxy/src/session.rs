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
    "pnpm",
    "pnpx",
    "yarn",
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

/// A process name as compared: no path, no Windows `.exe` suffix, lower
/// case (Windows names are case-insensitive: `C:\\…\\NODE.EXE` is `node`).
fn base_name(name: &str) -> String {
    let name = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let name = match name.len().checked_sub(4) {
        Some(cut) if name.is_char_boundary(cut) && name[cut..].eq_ignore_ascii_case(".exe") => {
            &name[..cut]
        }
        _ => name,
    };
    name.to_ascii_lowercase()
}

/// Whether a process name is a launcher, not a client.
pub fn is_launcher(name: &str) -> bool {
    LAUNCHERS.contains(&base_name(name).as_str())
}

/// `python`, `python3`, `python3.12`, `pythonw`.
pub fn is_python(name: &str) -> bool {
    let name = base_name(name);
    name.starts_with("python") && name.len() <= 10
}

/// Whether a Python command line runs a launcher: `python -m pipx`,
/// `python3 -m uv`, `python3 /usr/bin/pipx` (a script whose `#!/usr/bin/env
/// python3` line makes the process `python3`). Any other Python program (an
/// agent built on an MCP SDK, `python -c …`) is a client of its own.
pub fn runs_launcher(argv: &[String]) -> bool {
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-m" => return args.next().is_some_and(|m| is_launcher(m)),
            "-c" => return false,
            "-W" | "-X" => {
                args.next();
            }
            a if a.starts_with('-') => {}
            script => return is_launcher(script),
        }
    }
    false
}

/// `node`, `nodejs`.
pub fn is_node(name: &str) -> bool {
    matches!(base_name(name).as_str(), "node" | "nodejs")
}

/// Whether a Node command line runs a launcher: `node …/npm/bin/npx-cli.js`
/// (what `npx` is), `node /usr/bin/npx`, `node …/pnpm.cjs dlx`. Any other
/// Node program (Gemini CLI, an agent on the TypeScript SDK, `node -e …`)
/// is a client of its own.
pub fn node_runs_launcher(argv: &[String]) -> bool {
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-e" | "--eval" | "-p" | "--print" => return false,
            "-r" | "--require" | "--import" | "--loader" | "--experimental-loader" => {
                args.next();
            }
            a if a.starts_with('-') => {}
            script => {
                let name = base_name(script);
                let name = [".js", ".cjs", ".mjs"]
                    .iter()
                    .find_map(|ext| name.strip_suffix(ext))
                    .unwrap_or(&name);
                return is_launcher(name.strip_suffix("-cli").unwrap_or(name));
            }
        }
    }
    false
}

/// Whether a process launched the wrap on a client's behalf. A Node whose
/// command line was not read (Windows) counts as one, as `npx` runs there.
fn launches(p: &Process) -> bool {
    is_launcher(&p.name)
        || is_python(&p.name) && runs_launcher(&p.argv)
        || is_node(&p.name) && (p.argv.is_empty() || node_runs_launcher(&p.argv))
}

/// One process as the ancestor walk sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub name: String,
    pub ppid: u32,
    /// Distinguishes a reused pid (clock ticks on Linux, FILETIME on Windows).
    pub start_time: u64,
    /// The command line, read only for Python and Node ([`runs_launcher`],
    /// [`node_runs_launcher`]); empty where it is not read (Windows: Python
    /// there is a client, Node a launcher).
    pub argv: Vec<String>,
}

/// `pid:start_time` of the nearest ancestor, from `parent` up, that is not a
/// launcher; the walk stops at the root (`ppid` 0 or 1), after 32 steps, or
/// where a process cannot be read (then `pid:0`).
pub fn nearest_client(parent: u32, lookup: impl Fn(u32) -> Option<Process>) -> String {
    let mut pid = parent;
    for _ in 0..32 {
        let Some(p) = lookup(pid) else { break };
        if !launches(&p) || p.ppid <= 1 || p.ppid == pid {
            return format!("{pid}:{}", p.start_time);
        }
        pid = p.ppid;
    }
    format!("{pid}:0")
}

/// The session key: `pid:start_time` of the nearest non-launcher ancestor.
#[cfg(target_os = "linux")]
pub fn client_session_key() -> String {
    nearest_client(std::os::unix::process::parent_id(), |pid| {
        read_stat(pid).map(|s| Process {
            argv: if is_python(&s.comm) || is_node(&s.comm) {
                read_cmdline(pid)
            } else {
                Vec::new()
            },
            name: s.comm,
            ppid: s.ppid,
            start_time: s.start_time,
        })
    })
}

/// Elsewhere (not verified here): the parent process, which is the client
/// itself when it launches `gatehouse wrap` directly (what `protect`
/// writes); no ancestor walk or start time yet, so a client that launches
/// through a shell gets one session per shell.
#[cfg(all(unix, not(target_os = "linux")))]
pub fn client_session_key() -> String {
    format!("{}:0", std::os::unix::process::parent_id())
}

/// Windows (not verified here: written against windows-sys, never compiled
/// or run on this Linux machine): the same walk over a Toolhelp process
/// snapshot, with the creation time as start time.
#[cfg(windows)]
pub fn client_session_key() -> String {
    let table = windows::snapshot();
    let me = std::process::id();
    let parent = table.get(&me).map_or(0, |p| p.ppid);
    nearest_client(parent, |pid| {
        table.get(&pid).map(|p| Process {
            start_time: windows::start_time(pid),
            ..p.clone()
        })
    })
}

#[cfg(windows)]
#[allow(unsafe_code)]
mod windows {
    use std::collections::HashMap;

    use windows_sys::Win32::Foundation::{CloseHandle, FILETIME, INVALID_HANDLE_VALUE};
    use windows_sys::Win32::System::Diagnostics::ToolHelp::{
        CreateToolhelp32Snapshot, Process32FirstW, Process32NextW, PROCESSENTRY32W,
        TH32CS_SNAPPROCESS,
    };
    use windows_sys::Win32::System::Threading::{
        GetProcessTimes, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    };

    use super::Process;

    /// Every process: pid → name and parent (start time filled in later).
    pub fn snapshot() -> HashMap<u32, Process> {
        let mut out = HashMap::new();
        // SAFETY: the snapshot handle is checked and closed; the entry is
        // zeroed with its dwSize set, as Process32FirstW requires.
        unsafe {
            let snap = CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0);
            if snap == INVALID_HANDLE_VALUE {
                return out;
            }
            let mut entry: PROCESSENTRY32W = std::mem::zeroed();
            entry.dwSize = std::mem::size_of::<PROCESSENTRY32W>() as u32;
            let mut more = Process32FirstW(snap, &mut entry) != 0;
            while more {
                let len = entry
                    .szExeFile
                    .iter()
                    .position(|&c| c == 0)
                    .unwrap_or(entry.szExeFile.len());
                out.insert(
                    entry.th32ProcessID,
                    Process {
                        name: String::from_utf16_lossy(&entry.szExeFile[..len]),
                        ppid: entry.th32ParentProcessID,
                        start_time: 0,
                        argv: Vec::new(),
                    },
                );
                more = Process32NextW(snap, &mut entry) != 0;
            }
            CloseHandle(snap);
        }
        out
    }

    /// The process's creation time (0 when it cannot be opened).
    pub fn start_time(pid: u32) -> u64 {
        // SAFETY: the process handle is checked and closed; the FILETIMEs
        // are plain out-parameters.
        unsafe {
            let handle = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid);
            if handle.is_null() {
                return 0;
            }
            let zero = FILETIME {
                dwLowDateTime: 0,
                dwHighDateTime: 0,
            };
            let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
            let ok = GetProcessTimes(handle, &mut created, &mut exited, &mut kernel, &mut user);
            CloseHandle(handle);
            if ok == 0 {
                return 0;
            }
            (u64::from(created.dwHighDateTime) << 32) | u64::from(created.dwLowDateTime)
        }
    }
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

/// `/proc/PID/cmdline`: NUL-separated arguments (empty when unreadable).
#[cfg(target_os = "linux")]
fn read_cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
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
        for name in ["sh", "/bin/bash", "npx", "disclaimer", "cmd.exe", "uv.exe"] {
            assert!(is_launcher(name), "{name} launches servers for a client");
        }
        for name in [
            "cursor",
            "claude",
            "code",
            "Windsurf",
            "cargo",
            "Claude.exe",
            ".exe",
            "python3",
            "python.EXE",
        ] {
            assert!(!is_launcher(name), "{name} is a client");
        }
    }

    /// Python is a launcher only while it runs one.
    #[test]
    fn python_launches_only_when_it_runs_a_launcher() {
        for (argv, launches) in [
            ("python3 -m pipx run mcp-server-fetch", true),
            ("python -u -m uv tool run x", true),
            ("python3 /usr/bin/pipx run x", true),
            ("python3.12 -X utf8 /home/me/.local/bin/uvx x", true),
            ("python3 agent.py", false),
            ("python3 -m my_agent", false),
            ("python3 -c import subprocess", false),
            ("python3", false),
        ] {
            let argv: Vec<String> = argv.split(' ').map(str::to_string).collect();
            assert!(is_python(&argv[0]));
            assert_eq!(runs_launcher(&argv), launches, "{argv:?}");
        }
    }

    /// Node is a launcher only while it runs one.
    #[test]
    fn node_launches_only_when_it_runs_a_launcher() {
        for (argv, launches) in [
            ("node /usr/lib/node_modules/npm/bin/npx-cli.js -y pkg", true),
            ("node /usr/bin/npx -y pkg", true),
            ("node --no-warnings /opt/pnpm/bin/pnpm.cjs dlx pkg", true),
            ("node -r ./trace.js /usr/bin/npm exec pkg", true),
            ("node /usr/local/bin/gemini", false),
            ("node dist/agent.mjs", false),
            ("node -e require('child_process')", false),
            ("node", false),
        ] {
            let argv: Vec<String> = argv.split(' ').map(str::to_string).collect();
            assert!(is_node(&argv[0]));
            assert_eq!(node_runs_launcher(&argv), launches, "{argv:?}");
        }
        assert!(is_node("C:\\Program Files\\nodejs\\NODE.EXE"));
    }

    /// A process table for the walk: pid → (command line, ppid, start); the
    /// name is the command line's first word. A one-word entry has no
    /// command line read (as on Windows).
    fn walk(table: &[(u32, &str, u32, u64)], parent: u32) -> String {
        nearest_client(parent, |pid| {
            table
                .iter()
                .find(|(p, ..)| *p == pid)
                .map(|&(_, name, ppid, start_time)| Process {
                    argv: match name.contains(' ') {
                        true => name.split(' ').map(str::to_string).collect(),
                        false => Vec::new(),
                    },
                    name: name.split(' ').next().unwrap_or(name).into(),
                    ppid,
                    start_time,
                })
        })
    }

    #[test]
    fn the_walk_skips_launchers_per_os_naming() {
        // Linux: cursor -> sh -c -> npx -> node -> gatehouse wrap
        let linux = [
            (10, "cursor", 1, 500),
            (20, "sh", 10, 600),
            (30, "npx", 20, 700),
            (
                40,
                "node /usr/lib/node_modules/npm/bin/npx-cli.js -y pkg",
                30,
                800,
            ),
        ];
        assert_eq!(walk(&linux, 40), "10:500");
        assert_eq!(walk(&linux, 10), "10:500", "a direct launch");
        // Windows: Claude.exe -> cmd.exe /c -> node.exe (npx.cmd) -> wrap
        let windows = [
            (4, "System", 0, 1),
            (900, "Claude.exe", 4, 111),
            (910, "cmd.exe", 900, 222),
            (920, "NODE.EXE", 910, 333),
            (930, "powershell.exe", 920, 444),
        ];
        assert_eq!(walk(&windows, 930), "900:111");
        // Two Python agents started from one shell are two sessions; a
        // Python running pipx is a launcher.
        let agents = [
            (10, "bash", 1, 500),
            (20, "python3 agent_a.py", 10, 600),
            (30, "python3 agent_b.py", 10, 700),
            (40, "python3 -m pipx run gatehouse", 30, 800),
        ];
        assert_eq!(walk(&agents, 20), "20:600");
        assert_eq!(walk(&agents, 30), "30:700");
        assert_eq!(walk(&agents, 40), "30:700");
        // So are two Node clients (Gemini CLI) started from one shell.
        let node_clients = [
            (10, "bash", 1, 500),
            (20, "node /usr/local/bin/gemini", 10, 600),
            (30, "node /usr/local/bin/gemini", 10, 700),
        ];
        assert_eq!(walk(&node_clients, 20), "20:600");
        assert_eq!(walk(&node_clients, 30), "30:700");
        // the root, a loop, and a process that vanished
        assert_eq!(walk(&[(7, "sh", 1, 9)], 7), "7:9", "stops below init");
        assert_eq!(
            walk(&[(7, "sh", 7, 9)], 7),
            "7:9",
            "a self-parent ends the walk"
        );
        assert_eq!(walk(&[(7, "sh", 8, 9)], 7), "8:0", "an unreadable ancestor");
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
