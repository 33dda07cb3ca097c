//! The isolated environment of a wrapped server (DESIGN §5): a documented
//! base list per OS, plus the names passed for that server, plus its secrets.
//! Everything else is stripped; only the stripped *names* are reported.

/// Variables every wrapped server keeps on Linux and other Unixes.
pub const BASE_UNIX: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TERM",
    "TZ",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "DBUS_SESSION_BUS_ADDRESS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "ALL_PROXY",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NVM_DIR",
    "NVM_BIN",
    "VIRTUAL_ENV",
    "PYENV_ROOT",
    "CARGO_HOME",
    "RUSTUP_HOME",
];

/// Extra variables kept on macOS.
pub const BASE_MACOS_EXTRA: &[&str] = &["__CF_USER_TEXT_ENCODING", "SSH_AUTH_SOCK_DISABLED"];

/// Variables every wrapped server keeps on Windows (compared case-insensitively).
pub const BASE_WINDOWS: &[&str] = &[
    "PATH",
    "PATHEXT",
    "SystemRoot",
    "SystemDrive",
    "windir",
    "ComSpec",
    "TEMP",
    "TMP",
    "USERPROFILE",
    "USERNAME",
    "USERDOMAIN",
    "HOMEDRIVE",
    "HOMEPATH",
    "APPDATA",
    "LOCALAPPDATA",
    "ProgramData",
    "ProgramFiles",
    "ProgramFiles(x86)",
    "CommonProgramFiles",
    "PROCESSOR_ARCHITECTURE",
    "NUMBER_OF_PROCESSORS",
    "OS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
];

/// Which OS table to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Os {
    Linux,
    MacOs,
    Windows,
}

impl Os {
    pub fn current() -> Os {
        if cfg!(windows) {
            Os::Windows
        } else if cfg!(target_os = "macos") {
            Os::MacOs
        } else {
            Os::Linux
        }
    }
}

/// Is `name` in the base list of `os`?
pub fn is_base(os: Os, name: &str) -> bool {
    match os {
        Os::Linux => BASE_UNIX.contains(&name),
        Os::MacOs => BASE_UNIX.contains(&name) || BASE_MACOS_EXTRA.contains(&name),
        Os::Windows => BASE_WINDOWS.iter().any(|b| b.eq_ignore_ascii_case(name)),
    }
}

/// Splits the parent environment into what the child keeps and the names
/// stripped. `pass` are the names declared for this server.
pub fn filter_env(
    os: Os,
    parent: impl IntoIterator<Item = (String, String)>,
    pass: &[String],
) -> (Vec<(String, String)>, Vec<String>) {
    let mut kept = Vec::new();
    let mut stripped = Vec::new();
    for (name, value) in parent {
        let declared = pass.iter().any(|p| match os {
            Os::Windows => p.eq_ignore_ascii_case(&name),
            _ => *p == name,
        });
        if declared || is_base(os, &name) {
            kept.push((name, value));
        } else {
            stripped.push(name);
        }
    }
    stripped.sort();
    (kept, stripped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn strips_everything_not_declared() {
        let parent = env(&[
            ("PATH", "/bin"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("GITHUB_TOKEN", "y"),
            ("HOME", "/h"),
        ]);
        let (kept, stripped) = filter_env(Os::Linux, parent, &["GITHUB_TOKEN".to_string()]);
        let names: Vec<_> = kept.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "GITHUB_TOKEN", "HOME"]);
        assert_eq!(
            stripped,
            ["AWS_SECRET_ACCESS_KEY"],
            "parent credentials must not reach the child"
        );
    }

    #[test]
    fn per_os_tables() {
        for (os, name, expect) in [
            (Os::Linux, "PATH", true),
            (Os::Linux, "SystemRoot", false),
            (Os::Windows, "systemroot", true),
            (Os::Windows, "PATHEXT", true),
            (Os::Windows, "HOME", false),
            (Os::MacOs, "__CF_USER_TEXT_ENCODING", true),
            (Os::MacOs, "TMPDIR", true),
            (Os::Linux, "OPENAI_API_KEY", false),
        ] {
            assert_eq!(is_base(os, name), expect, "{os:?} {name}");
        }
    }
}
