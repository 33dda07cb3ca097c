//! The stable launcher: wrapped client configs run
//! `<launcher dir>/gatehouse wrap … -- <original command>`, a tiny script
//! outside the app bundle that survives updates, AppImage mounts and macOS
//! app translocation. It forwards to the app's `gatehouse` CLI; when the app
//! has been removed it warns on stderr and runs the original command, so no
//! MCP server breaks.
//!
//! Path and script logic are pure; [`install`] is the only I/O.

use std::path::{Path, PathBuf};

/// Operating systems with their own layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Os {
    Linux,
    MacOs,
    Windows,
}

impl Os {
    /// The OS this binary was built for (other Unixes use the Linux layout).
    pub fn current() -> Self {
        if cfg!(target_os = "macos") {
            Os::MacOs
        } else if cfg!(windows) {
            Os::Windows
        } else {
            Os::Linux
        }
    }
}

/// The environment variables the layout depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Env {
    pub home: Option<PathBuf>,
    pub xdg_data_home: Option<PathBuf>,
    pub local_app_data: Option<PathBuf>,
    /// Set by the AppImage runtime to the path of the `.AppImage` file.
    pub appimage: Option<PathBuf>,
}

impl Env {
    /// Reads the process environment (empty values count as unset).
    pub fn from_process() -> Self {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Env {
            home: var(if cfg!(windows) { "USERPROFILE" } else { "HOME" }),
            xdg_data_home: var("XDG_DATA_HOME"),
            local_app_data: var("LOCALAPPDATA"),
            appimage: var("APPIMAGE"),
        }
    }
}

/// Directory of the launcher: `~/.local/share/gatehouse/bin` (or under
/// `$XDG_DATA_HOME`), `~/Library/Application Support/Gatehouse/bin`,
/// `%LOCALAPPDATA%\Gatehouse\bin`.
pub fn launcher_dir(os: Os, env: &Env) -> Option<PathBuf> {
    match os {
        Os::Linux => env
            .xdg_data_home
            .as_ref()
            .filter(|p| p.is_absolute())
            .map(|d| d.join("gatehouse"))
            .or_else(|| env.home.as_ref().map(|h| h.join(".local/share/gatehouse")))
            .map(|d| d.join("bin")),
        Os::MacOs => env
            .home
            .as_ref()
            .map(|h| h.join("Library/Application Support/Gatehouse/bin")),
        Os::Windows => env
            .local_app_data
            .clone()
            .or_else(|| env.home.as_ref().map(|h| h.join("AppData").join("Local")))
            .map(|d| d.join("Gatehouse").join("bin")),
    }
}

/// File name of the launcher in [`launcher_dir`].
pub fn launcher_file_name(os: Os) -> &'static str {
    match os {
        Os::Windows => "gatehouse.cmd",
        Os::Linux | Os::MacOs => "gatehouse",
    }
}

/// What the launcher execs while the app is installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub program: PathBuf,
    /// Arguments placed before the launcher's own.
    pub prefix: Vec<String>,
}

/// The stable path of the `gatehouse` CLI for an app running as `app_exe`:
/// - inside an AppImage, the `.AppImage` file itself with `--cli` (the mount
///   point changes every run);
/// - on a translocated macOS app (`…/AppTranslocation/…/X.app`), the same
///   bundle under `/Applications`;
/// - otherwise the `gatehouse` binary beside the app binary.
pub fn stable_target(os: Os, app_exe: &Path, env: &Env) -> Target {
    if os == Os::Linux {
        if let Some(appimage) = env.appimage.as_ref().filter(|p| p.is_absolute()) {
            return Target {
                program: appimage.clone(),
                prefix: vec![CLI_FLAG.to_string()],
            };
        }
    }
    let cli = match os {
        Os::Windows => "gatehouse.exe",
        Os::Linux | Os::MacOs => "gatehouse",
    };
    let dir = app_exe.parent().unwrap_or(Path::new("."));
    if os == Os::MacOs
        && dir
            .components()
            .any(|c| c.as_os_str() == "AppTranslocation")
    {
        if let Some(bundle) = dir
            .ancestors()
            .find(|a| a.extension().is_some_and(|e| e == "app"))
            .and_then(|a| a.file_name())
        {
            return Target {
                program: Path::new("/Applications")
                    .join(bundle)
                    .join("Contents/MacOS")
                    .join(cli),
                prefix: Vec::new(),
            };
        }
    }
    Target {
        program: dir.join(cli),
        prefix: Vec::new(),
    }
}

/// `gatehouse-app --cli ARGS…` runs the bundled CLI with ARGS (used by the
/// AppImage target above).
pub const CLI_FLAG: &str = "--cli";

/// Quotes `s` for POSIX `sh`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The launcher script for `os` forwarding to `target`.
pub fn script(os: Os, target: &Target) -> String {
    match os {
        Os::Linux | Os::MacOs => {
            let program = sh_quote(&target.program.to_string_lossy());
            let prefix: Vec<String> = target.prefix.iter().map(|a| sh_quote(a)).collect();
            let prefix = if prefix.is_empty() {
                String::new()
            } else {
                format!("{} ", prefix.join(" "))
            };
            format!(
                r#"#!/bin/sh
# Gatehouse launcher, written by the Gatehouse app; rewritten on every start.
# AI-client configs call this file so that they survive app updates and moves.
GATEHOUSE_CLI={program}
if [ -x "$GATEHOUSE_CLI" ]; then
  exec "$GATEHOUSE_CLI" {prefix}"$@"
fi
# The app is gone: run the original MCP server (everything after "--")
# unprotected rather than break it.
echo "gatehouse: $GATEHOUSE_CLI not found (was Gatehouse removed?); running the MCP server WITHOUT protection. Remove Gatehouse from your AI client configs with 'gatehouse unprotect' or reinstall Gatehouse." >&2
while [ "$#" -gt 0 ]; do
  if [ "$1" = "--" ]; then
    shift
    [ "$#" -gt 0 ] && exec "$@"
    break
  fi
  shift
done
echo "gatehouse: no original command to run" >&2
exit 127
"#
            )
        }
        Os::Windows => {
            let program = target.program.to_string_lossy().replace('"', "");
            let prefix = target.prefix.join(" ");
            format!(
                "@echo off\r\n\
                 rem Gatehouse launcher, written by the Gatehouse app; rewritten on every start.\r\n\
                 setlocal EnableDelayedExpansion\r\n\
                 set \"GATEHOUSE_CLI={program}\"\r\n\
                 if exist \"%GATEHOUSE_CLI%\" (\r\n\
                 \x20 \"%GATEHOUSE_CLI%\" {prefix} %*\r\n\
                 \x20 exit /b !ERRORLEVEL!\r\n\
                 )\r\n\
                 echo gatehouse: %GATEHOUSE_CLI% not found ^(was Gatehouse removed?^); running the MCP server WITHOUT protection. 1>&2\r\n\
                 :scan\r\n\
                 if \"%~1\"==\"\" exit /b 127\r\n\
                 if \"%~1\"==\"--\" goto collect\r\n\
                 shift\r\n\
                 goto scan\r\n\
                 :collect\r\n\
                 shift\r\n\
                 set \"CMDLINE=\"\r\n\
                 :more\r\n\
                 if \"%~1\"==\"\" goto run\r\n\
                 set \"CMDLINE=!CMDLINE! %1\"\r\n\
                 shift\r\n\
                 goto more\r\n\
                 :run\r\n\
                 if \"!CMDLINE!\"==\"\" exit /b 127\r\n\
                 !CMDLINE!\r\n\
                 exit /b !ERRORLEVEL!\r\n"
            )
        }
    }
}

/// The original command in a wrapped entry's arguments: everything after the
/// first `--`. Mirrors what the script does when the app is gone.
pub fn original_command(args: &[String]) -> Option<&[String]> {
    let at = args.iter().position(|a| a == "--")?;
    let rest = &args[at + 1..];
    (!rest.is_empty()).then_some(rest)
}

/// What [`install`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Installed {
    Created,
    Updated,
    UpToDate,
}

/// Writes the launcher into `dir` (created if needed) unless it already has
/// exactly this content; atomic (temp file + rename) and executable.
pub fn install(dir: &Path, os: Os, target: &Target) -> std::io::Result<(PathBuf, Installed)> {
    let wanted = script(os, target);
    let path = dir.join(launcher_file_name(os));
    let existing = std::fs::read_to_string(&path).ok();
    if existing.as_deref() == Some(wanted.as_str()) {
        return Ok((path, Installed::UpToDate));
    }
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        launcher_file_name(os),
        std::process::id()
    ));
    std::fs::write(&tmp, &wanted)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    }
    std::fs::rename(&tmp, &path)?;
    let what = if existing.is_some() {
        Installed::Updated
    } else {
        Installed::Created
    };
    Ok((path, what))
}

/// Removes the launcher at `path` and its directory when that is left
/// empty (uninstall); false when there was no launcher.
pub fn remove(path: &Path) -> std::io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    }
    if let Some(dir) = path.parent() {
        // only when empty: never anything else a person put there
        let _ = std::fs::remove_dir(dir);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_takes_the_launcher_and_an_empty_dir_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("bin");
        let target = stable_target(
            Os::Linux,
            Path::new("/opt/g/gatehouse-app"),
            &Env::default(),
        );
        let (path, _) = install(&dir, Os::Linux, &target).unwrap();
        std::fs::write(dir.join("mine"), "a person's file").unwrap();
        assert!(remove(&path).unwrap());
        assert!(!path.exists());
        assert!(
            dir.join("mine").exists(),
            "other files stay, so does the dir"
        );
        assert!(!remove(&path).unwrap(), "nothing to remove");
        std::fs::remove_file(dir.join("mine")).unwrap();
        let (path, _) = install(&dir, Os::Linux, &target).unwrap();
        assert!(remove(&path).unwrap());
        assert!(!dir.exists(), "an emptied launcher dir goes too");
    }

    fn env(home: &str) -> Env {
        Env {
            home: Some(home.into()),
            ..Env::default()
        }
    }

    fn check_dir(os: Os, env: Env, expect: Option<&str>) {
        assert_eq!(
            launcher_dir(os, &env),
            expect.map(PathBuf::from),
            "launcher dir for {os:?} with {env:?}"
        );
    }

    #[test]
    fn launcher_dirs_per_os() {
        check_dir(
            Os::Linux,
            env("/home/u"),
            Some("/home/u/.local/share/gatehouse/bin"),
        );
        check_dir(
            Os::Linux,
            Env {
                xdg_data_home: Some("/data".into()),
                ..env("/home/u")
            },
            Some("/data/gatehouse/bin"),
        );
        // a relative XDG_DATA_HOME is invalid per the spec and ignored
        check_dir(
            Os::Linux,
            Env {
                xdg_data_home: Some("rel".into()),
                ..env("/home/u")
            },
            Some("/home/u/.local/share/gatehouse/bin"),
        );
        check_dir(
            Os::MacOs,
            env("/Users/u"),
            Some("/Users/u/Library/Application Support/Gatehouse/bin"),
        );
        check_dir(
            Os::Windows,
            Env {
                local_app_data: Some("C:/Users/u/AppData/Local".into()),
                ..Env::default()
            },
            Some("C:/Users/u/AppData/Local/Gatehouse/bin"),
        );
        check_dir(Os::Linux, Env::default(), None);
    }

    fn check_target(os: Os, exe: &str, env: Env, program: &str, prefix: &[&str]) {
        let t = stable_target(os, Path::new(exe), &env);
        assert_eq!(t.program, PathBuf::from(program), "program for {exe}");
        assert_eq!(t.prefix, prefix, "prefix for {exe}");
    }

    #[test]
    fn stable_targets() {
        check_target(
            Os::Linux,
            "/usr/bin/gatehouse-app",
            Env::default(),
            "/usr/bin/gatehouse",
            &[],
        );
        check_target(
            Os::Linux,
            "/tmp/.mount_GatehXYZ/usr/bin/gatehouse-app",
            Env {
                appimage: Some("/home/u/Apps/Gatehouse.AppImage".into()),
                ..Env::default()
            },
            "/home/u/Apps/Gatehouse.AppImage",
            &["--cli"],
        );
        check_target(
            Os::MacOs,
            "/private/var/folders/x/T/AppTranslocation/1234/d/Gatehouse.app/Contents/MacOS/gatehouse-app",
            Env::default(),
            "/Applications/Gatehouse.app/Contents/MacOS/gatehouse",
            &[],
        );
        check_target(
            Os::MacOs,
            "/Applications/Gatehouse.app/Contents/MacOS/gatehouse-app",
            Env::default(),
            "/Applications/Gatehouse.app/Contents/MacOS/gatehouse",
            &[],
        );
        check_target(
            Os::Windows,
            "C:/Program Files/Gatehouse/gatehouse-app.exe",
            Env::default(),
            "C:/Program Files/Gatehouse/gatehouse.exe",
            &[],
        );
    }

    #[test]
    fn original_command_is_after_the_separator() {
        let args: Vec<String> = ["wrap", "--id", "s1", "--", "npx", "-y", "srv", "--", "x"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            original_command(&args),
            Some(&args[4..]),
            "only the first -- separates"
        );
        assert_eq!(
            original_command(&["wrap".to_string(), "--".to_string()]),
            None
        );
        assert_eq!(original_command(&["wrap".to_string()]), None);
    }

    #[test]
    fn sh_quote_survives_quotes() {
        assert_eq!(sh_quote("/a b/it's"), r"'/a b/it'\''s'");
    }

    #[cfg(unix)]
    mod run {
        use super::super::*;
        use std::process::Command;

        fn run_launcher(target: &Target, args: &[&str]) -> (i32, String, String) {
            let dir = tempfile::tempdir().unwrap();
            let (path, what) = install(dir.path(), Os::Linux, target).unwrap();
            assert_eq!(what, Installed::Created);
            let out = Command::new(&path).args(args).output().unwrap();
            (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }

        #[test]
        fn forwards_to_the_cli_when_present() {
            let dir = tempfile::tempdir().unwrap();
            let cli = dir.path().join("it's gatehouse");
            std::fs::write(&cli, "#!/bin/sh\nprintf 'cli:%s|' \"$@\"\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
            let target = Target {
                program: cli,
                prefix: vec!["--cli".into()],
            };
            let (code, out, err) =
                run_launcher(&target, &["wrap", "--id", "a b", "--", "echo", "hi"]);
            assert_eq!(code, 0, "stderr: {err}");
            assert_eq!(
                out,
                "cli:--cli|cli:wrap|cli:--id|cli:a b|cli:--|cli:echo|cli:hi|"
            );
            assert_eq!(err, "", "no warning while the app is installed");
        }

        #[test]
        fn runs_the_original_command_when_the_app_is_gone() {
            let target = Target {
                program: "/nonexistent/gatehouse".into(),
                prefix: Vec::new(),
            };
            let (code, out, err) = run_launcher(
                &target,
                &["wrap", "--id", "s1", "--", "printf", "%s-%s", "a b", "c"],
            );
            assert_eq!(code, 0, "stderr: {err}");
            assert_eq!(
                out, "a b-c",
                "original command and its arguments run unchanged"
            );
            assert!(err.contains("WITHOUT protection"), "warns on stderr: {err}");

            let (code, _, err) = run_launcher(&target, &["wrap", "--id", "s1"]);
            assert_eq!(code, 127, "nothing to run must fail loudly: {err}");
        }

        #[test]
        fn install_is_idempotent_and_updates() {
            let dir = tempfile::tempdir().unwrap();
            let a = Target {
                program: "/opt/a/gatehouse".into(),
                prefix: Vec::new(),
            };
            let b = Target {
                program: "/opt/b/gatehouse".into(),
                prefix: Vec::new(),
            };
            let bin = dir.path().join("bin");
            assert_eq!(install(&bin, Os::Linux, &a).unwrap().1, Installed::Created);
            assert_eq!(install(&bin, Os::Linux, &a).unwrap().1, Installed::UpToDate);
            let (path, what) = install(&bin, Os::Linux, &b).unwrap();
            assert_eq!(what, Installed::Updated);
            let text = std::fs::read_to_string(path).unwrap();
            assert!(
                text.contains("'/opt/b/gatehouse'"),
                "points at the new binary"
            );
            let leftovers = std::fs::read_dir(&bin).unwrap().count();
            assert_eq!(leftovers, 1, "no temp files left behind");
        }
    }
}
