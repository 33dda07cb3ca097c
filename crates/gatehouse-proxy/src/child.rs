//! Starting the real server: resolve its executable, give it the isolated
//! environment, tie its lifetime to ours, and stop it cleanly.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
#[cfg(not(target_os = "linux"))]
use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncWrite};
#[cfg(not(target_os = "linux"))]
use tokio::process::Command;

/// Finds `program` the way a shell would, in the `PATH` the child will get.
/// Names with a path separator are taken as paths (relative to `cwd`).
pub fn resolve_program(program: &str, path_var: Option<&OsString>, cwd: &Path) -> Option<PathBuf> {
    let candidate = Path::new(program);
    if candidate.components().count() > 1 || candidate.is_absolute() {
        let full = if candidate.is_absolute() {
            candidate.to_path_buf()
        } else {
            cwd.join(candidate)
        };
        return is_executable(&full).then_some(full);
    }
    let paths = path_var?;
    for dir in std::env::split_paths(paths) {
        for name in executable_names(program) {
            let full = dir.join(&name);
            if is_executable(&full) {
                return Some(full);
            }
        }
    }
    None
}

#[cfg(windows)]
fn executable_names(program: &str) -> Vec<String> {
    let exts = std::env::var("PATHEXT").unwrap_or_else(|_| ".COM;.EXE;.BAT;.CMD".into());
    let mut names = vec![program.to_string()];
    names.extend(
        exts.split(';')
            .filter(|e| !e.is_empty())
            .map(|e| format!("{program}{}", e.to_lowercase())),
    );
    names
}

#[cfg(not(windows))]
fn executable_names(program: &str) -> Vec<String> {
    vec![program.to_string()]
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

#[cfg(target_os = "linux")]
mod linux;

/// A started server: its stdin and stdout (taken once by the relay) and its
/// process.
pub struct Server {
    pub stdin: Option<Box<dyn AsyncWrite + Unpin + Send>>,
    pub stdout: Option<Box<dyn AsyncRead + Unpin + Send>>,
    process: Process,
    /// Its process group (its pid at spawn), still signalled after it was
    /// reaped: a process it started may hold its stdout open.
    group: Option<u32>,
}

#[cfg(target_os = "linux")]
type Process = linux::Process;
#[cfg(not(target_os = "linux"))]
type Process = tokio::process::Child;

impl Server {
    /// The pid while the server has not been reaped.
    pub fn id(&self) -> Option<u32> {
        self.process.id()
    }

    /// Waits for the server to end (cancel-safe).
    pub async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.process.wait().await
    }
}

/// Spawns `exe args` with exactly `env`, stdin/stdout piped, stderr passed
/// straight through (so it can never block the relay). The server is killed
/// if the `Server` is dropped before it ended, and cannot outlive wrap.
#[cfg(target_os = "linux")]
pub fn spawn(exe: &Path, args: &[String], env: &[(String, String)]) -> std::io::Result<Server> {
    let (process, stdin, stdout) = linux::spawn(exe, args, env)?;
    Ok(Server {
        stdin: Some(Box::new(stdin)),
        stdout: Some(Box::new(stdout)),
        group: process.id(),
        process,
    })
}

#[cfg(not(target_os = "linux"))]
pub fn spawn(exe: &Path, args: &[String], env: &[(String, String)]) -> std::io::Result<Server> {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    lifetime::tie_to_parent(&mut cmd);
    let mut child = cmd.spawn()?;
    Ok(Server {
        stdin: child
            .stdin
            .take()
            .map(|s| Box::new(s) as Box<dyn AsyncWrite + Unpin + Send>),
        stdout: child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn AsyncRead + Unpin + Send>),
        group: child.id(),
        process: child,
    })
}

/// Exit code for a finished child: its own code, or 128 + signal.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return 128 + sig;
        }
    }
    1
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod lifetime {
    // The process group and the parent-death signal are set by `spawn`
    // (`linux.rs`).

    /// Sends `signal` to the child's process group.
    pub fn signal_group(pid: u32, signal: i32) {
        // SAFETY: kill(2) with a negative pid signals that process group.
        unsafe {
            libc::kill(-(pid as i32), signal);
        }
    }
}

#[cfg(all(unix, not(target_os = "linux")))]
#[allow(unsafe_code)]
mod lifetime {
    /// macOS has no parent-death signal: the group is signalled on every
    /// exit path of wrap instead (not verified here).
    pub fn tie_to_parent(cmd: &mut tokio::process::Command) {
        cmd.process_group(0);
    }

    pub fn signal_group(pid: u32, signal: i32) {
        // SAFETY: kill(2) with a negative pid signals that process group.
        unsafe {
            libc::kill(-(pid as i32), signal);
        }
    }
}

/// Windows (not verified here: written against windows-sys, never compiled
/// or run on this Linux machine). wrap puts itself in a job object with
/// KILL_ON_JOB_CLOSE before the first spawn; children inherit the job, and
/// only wrap holds its handle, so when wrap ends (however it ends) Windows
/// closes the handle and ends the server and everything it started.
/// Stopping is `kill_on_drop` plus that; there are no signals to send.
#[cfg(windows)]
#[allow(unsafe_code)]
mod lifetime {
    use std::sync::OnceLock;

    use windows_sys::Win32::Foundation::CloseHandle;
    use windows_sys::Win32::System::JobObjects::{
        AssignProcessToJobObject, CreateJobObjectW, JobObjectExtendedLimitInformation,
        SetInformationJobObject, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
        JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    };
    use windows_sys::Win32::System::Threading::GetCurrentProcess;

    /// Whether wrap is in its kill-on-close job (the handle is never closed
    /// by us: its closing at exit is what ends the tree).
    static IN_JOB: OnceLock<bool> = OnceLock::new();

    pub fn tie_to_parent(_cmd: &mut tokio::process::Command) {
        let joined = *IN_JOB.get_or_init(|| {
            // SAFETY: every handle is checked; the limit struct is zeroed
            // and passed with its exact size.
            unsafe {
                let job = CreateJobObjectW(std::ptr::null(), std::ptr::null());
                if job.is_null() {
                    return false;
                }
                let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = std::mem::zeroed();
                limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
                let set = SetInformationJobObject(
                    job,
                    JobObjectExtendedLimitInformation,
                    std::ptr::addr_of!(limits).cast(),
                    std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
                );
                if set == 0 || AssignProcessToJobObject(job, GetCurrentProcess()) == 0 {
                    CloseHandle(job);
                    return false;
                }
                true
            }
        });
        if !joined {
            eprintln!(
                "gatehouse: could not put the server in a job object; it may outlive gatehouse if gatehouse is killed"
            );
        }
    }

    pub fn signal_group(_pid: u32, _signal: i32) {}
}

/// Asks the server's process group to stop (SIGTERM on Unix).
pub fn terminate(child: &Server) {
    if let Some(pid) = child.group {
        #[cfg(unix)]
        lifetime::signal_group(pid, libc::SIGTERM);
        #[cfg(not(unix))]
        lifetime::signal_group(pid, 15);
    }
}

/// Kills the server's process group (SIGKILL on Unix).
pub fn kill(child: &Server) {
    if let Some(pid) = child.group {
        #[cfg(unix)]
        lifetime::signal_group(pid, libc::SIGKILL);
        #[cfg(not(unix))]
        lifetime::signal_group(pid, 9);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_through_path_and_relative_paths() {
        let path = OsString::from("/nonexistent:/bin:/usr/bin");
        let sh = resolve_program("sh", Some(&path), Path::new("/")).expect("sh is on PATH");
        assert!(sh.is_absolute());
        assert_eq!(
            resolve_program("definitely-not-a-program-x", Some(&path), Path::new("/")),
            None
        );
        assert_eq!(
            resolve_program("bin/sh", None, Path::new("/")),
            Some(PathBuf::from("/bin/sh"))
        );
    }
}
