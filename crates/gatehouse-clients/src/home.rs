//! [`HomeDirs`]: the directories client configs are found under. Built from
//! the environment for real use, or from a fixture root in tests, so every
//! OS's layout is testable on any OS.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Operating system whose path conventions apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    /// Linux (XDG).
    Linux,
    /// macOS.
    MacOs,
    /// Windows.
    Windows,
}

impl Os {
    /// The OS this binary was built for.
    pub fn current() -> Os {
        if cfg!(target_os = "macos") {
            Os::MacOs
        } else if cfg!(windows) {
            Os::Windows
        } else {
            Os::Linux
        }
    }
}

/// Where to look.
#[derive(Debug, Clone)]
pub struct HomeDirs {
    /// Path conventions.
    pub os: Os,
    /// The user's home (`$HOME`, `%USERPROFILE%`).
    pub home: PathBuf,
    /// Per-user config root: `$XDG_CONFIG_HOME` or `~/.config` (Linux),
    /// `~/Library/Application Support` (macOS), `%APPDATA%` (Windows).
    pub config: PathBuf,
    /// Root for system-wide files (managed policies): `/` (or `C:\`) for
    /// real, a fixture directory in tests.
    pub system_root: PathBuf,
    /// Environment variables that move client files (`CODEX_HOME`,
    /// `CLINE_MCP_SETTINGS_PATH`, `CLINE_DATA_DIR`, `CLINE_DIR`).
    pub env: BTreeMap<String, String>,
}

const PATH_VARS: &[&str] = &[
    "CODEX_HOME",
    "CLINE_MCP_SETTINGS_PATH",
    "CLINE_DATA_DIR",
    "CLINE_DIR",
];

impl HomeDirs {
    /// From this process's environment.
    pub fn from_env() -> Self {
        let os = Os::current();
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home = var(if os == Os::Windows {
            "USERPROFILE"
        } else {
            "HOME"
        })
        .unwrap_or_else(|| PathBuf::from("."));
        let config = match os {
            Os::Linux => var("XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config")),
            Os::MacOs => home.join("Library").join("Application Support"),
            Os::Windows => var("APPDATA").unwrap_or_else(|| home.join("AppData").join("Roaming")),
        };
        let system_root = if os == Os::Windows {
            PathBuf::from("C:\\")
        } else {
            PathBuf::from("/")
        };
        let env = PATH_VARS
            .iter()
            .filter_map(|k| {
                std::env::var(k)
                    .ok()
                    .filter(|v| !v.is_empty())
                    .map(|v| ((*k).to_owned(), v))
            })
            .collect();
        Self {
            os,
            home,
            config,
            system_root,
            env,
        }
    }

    /// A fixture layout under `root`: `root/home`, the OS's config root
    /// inside it, `root/system` for system files, no environment overrides.
    pub fn fixture(root: &Path, os: Os) -> Self {
        let home = root.join("home");
        let config = match os {
            Os::Linux => home.join(".config"),
            Os::MacOs => home.join("Library").join("Application Support"),
            Os::Windows => home.join("AppData").join("Roaming"),
        };
        Self {
            os,
            home,
            config,
            system_root: root.join("system"),
            env: BTreeMap::new(),
        }
    }

    /// An environment override, if set.
    pub fn var(&self, name: &str) -> Option<PathBuf> {
        self.env.get(name).map(PathBuf::from)
    }

    /// A system path given as components below the system root.
    pub fn system(&self, parts: &[&str]) -> PathBuf {
        parts
            .iter()
            .fold(self.system_root.clone(), |p, c| p.join(c))
    }
}
