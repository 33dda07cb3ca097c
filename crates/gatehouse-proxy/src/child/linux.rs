//! Linux: the server is started the way `posix_spawn` starts a process —
//! `clone(CLONE_VM | CLONE_VFORK)`, the child running on its own small stack
//! in wrap's memory until it calls `execve` — but with the two steps
//! `posix_spawn` cannot do: its own process group and a parent-death signal
//! (so it cannot outlive wrap, even when wrap is SIGKILLed). std can only set
//! a parent-death signal after a full `fork` (`pre_exec`), which cost about
//! 1 ms of every wrap start here (page tables copied, then copy-on-write
//! faults in wrap itself).
//!
//! Everything the child touches is prepared before the clone; between the
//! clone and `execve` it only makes async-signal-safe system calls.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use tokio::net::unix::pipe;
use tokio::sync::oneshot;

/// The child's stack until `execve` (it makes a handful of system calls).
const CHILD_STACK: usize = 64 * 1024;
/// Signals 1..NSIG (glibc's `_NSIG`).
const NSIG: c_int = 65;

/// A started server process.
pub struct Process {
    pid: libc::pid_t,
    /// Closed or answered once the process has ended, by a thread waiting
    /// for it without reaping it: only `wait` reaps, so until then the pid
    /// stays this process's own and is safe to signal. `None` once heard.
    exited: Option<oneshot::Receiver<()>>,
    status: Option<ExitStatus>,
}

impl Process {
    /// The pid while the process has not been reaped (a reaped pid may be
    /// reused, so it is never signalled).
    pub fn id(&self) -> Option<u32> {
        match self.status {
            None => u32::try_from(self.pid).ok(),
            Some(_) => None,
        }
    }

    /// Waits for the process to end (cancel-safe).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        // A waiter that failed (and dropped its sender) leaves the answer to
        // the blocking reap below.
        if let Some(exited) = &mut self.exited {
            let _ = exited.await;
            self.exited = None;
        }
        let status = reap(self.pid)?;
        self.status = Some(status);
        Ok(status)
    }
}

impl Drop for Process {
    /// Like tokio's `kill_on_drop`: a server is never left running.
    fn drop(&mut self) {
        if self.status.is_none() {
            // SAFETY: kill(2) on our own child, not reaped (see `exited`).
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
            }
        }
    }
}

/// What the child reads between the clone and `execve`.
struct Plan {
    /// NULL-terminated, pointing into `_strings`; `argv[0]` is the program.
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    _strings: Vec<CString>,
    stdin: RawFd,
    stdout: RawFd,
    /// Write end of a close-on-exec pipe: a failure's errno, or nothing.
    report: RawFd,
    parent: libc::pid_t,
    mask: libc::sigset_t,
}

/// Starts `exe args` with exactly `env`, stdin and stdout piped, stderr
/// inherited, in its own process group with a parent-death signal.
pub fn spawn(
    exe: &Path,
    args: &[String],
    env: &[(String, String)],
) -> io::Result<(Process, pipe::Sender, pipe::Receiver)> {
    let nul = |_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in the command or its environment",
        )
    };
    let mut strings = vec![CString::new(exe.as_os_str().as_bytes()).map_err(nul)?];
    for arg in args {
        strings.push(CString::new(arg.as_bytes()).map_err(nul)?);
    }
    let argc = strings.len();
    for (name, value) in env {
        strings.push(CString::new(format!("{name}={value}")).map_err(nul)?);
    }
    let pointers = |range: &[CString]| {
        let mut list: Vec<*const libc::c_char> = range.iter().map(|s| s.as_ptr()).collect();
        list.push(std::ptr::null());
        list
    };
    let (argv, envp) = (pointers(&strings[..argc]), pointers(&strings[argc..]));

    let (stdin_read, stdin_write) = pipe_cloexec()?;
    let (stdout_read, stdout_write) = pipe_cloexec()?;
    let (report_read, report_write) = pipe_cloexec()?;
    let (stdin_read, stdout_write) = (above_stdio(stdin_read)?, above_stdio(stdout_write)?);

    // SAFETY: sigset_t is plain data; sigfillset/pthread_sigmask only write
    // the sets passed.
    let (mut all, mut mask): (libc::sigset_t, libc::sigset_t) = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut mask);
    }
    let plan = Plan {
        argv,
        envp,
        _strings: strings,
        stdin: stdin_read.as_raw_fd(),
        stdout: stdout_write.as_raw_fd(),
        report: report_write.as_raw_fd(),
        // SAFETY: getpid cannot fail.
        parent: unsafe { libc::getpid() },
        mask,
    };
    let mut stack = vec![0u8; CHILD_STACK];
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    // SAFETY: with CLONE_VFORK this thread is suspended until the child
    // calls execve or _exit, so `plan` and `stack` outlive its use of them;
    // all signals are blocked around the clone, and the child resets every
    // handler before unblocking (see `child_main`).
    let pid = unsafe {
        libc::clone(
            child_main,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::addr_of!(plan) as *mut c_void,
        )
    };
    let clone_error = io::Error::last_os_error();
    // SAFETY: restores this thread's mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &plan.mask, std::ptr::null_mut());
    }
    drop(stack);
    if pid < 0 {
        return Err(clone_error);
    }
    drop((stdin_read, stdout_write, report_write));
    if let Some(errno) = read_report(&report_read) {
        let _ = reap(pid);
        return Err(io::Error::from_raw_os_error(errno));
    }
    let (done, exited) = oneshot::channel();
    // Built first: if anything below fails, dropping it kills the server.
    let process = Process {
        pid,
        exited: Some(exited),
        status: None,
    };
    std::thread::Builder::new()
        .name("gatehouse-server-wait".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            if ended(pid) {
                let _ = done.send(());
            }
        })?;
    Ok((
        process,
        pipe::Sender::from_owned_fd(stdin_write)?,
        pipe::Receiver::from_owned_fd(stdout_read)?,
    ))
}

/// Runs in the child, on its own stack, sharing wrap's memory.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `Plan`, alive until execve (CLONE_VFORK).
    // Only async-signal-safe calls follow.
    unsafe {
        let plan = &*(arg as *const Plan);
        // Handlers installed in wrap would run on wrap's memory: back to the
        // defaults, SIGPIPE too (Rust ignores it; ignored signals survive
        // execve), before anything is unblocked.
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..NSIG {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) == 0
                && current.sa_sigaction != libc::SIG_DFL
                && (current.sa_sigaction != libc::SIG_IGN || signal == libc::SIGPIPE)
            {
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        if libc::setpgid(0, 0) != 0 || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            fail(plan.report);
        }
        if libc::getppid() != plan.parent {
            // wrap died before the parent-death signal was armed.
            libc::_exit(1);
        }
        if libc::dup2(plan.stdin, 0) < 0 || libc::dup2(plan.stdout, 1) < 0 {
            fail(plan.report);
        }
        libc::sigprocmask(libc::SIG_SETMASK, &plan.mask, std::ptr::null_mut());
        libc::execve(plan.argv[0], plan.argv.as_ptr(), plan.envp.as_ptr());
        fail(plan.report)
    }
}

/// Reports errno to the parent and ends the child.
unsafe fn fail(report: RawFd) -> ! {
    let errno = *libc::__errno_location();
    libc::write(
        report,
        std::ptr::addr_of!(errno).cast(),
        std::mem::size_of::<c_int>(),
    );
    libc::_exit(127)
}

/// The child's errno, or `None` once `execve` closed the report pipe.
fn read_report(report: &OwnedFd) -> Option<i32> {
    let mut errno = [0u8; 4];
    loop {
        // SAFETY: reads at most 4 bytes into a 4-byte buffer.
        let n = unsafe { libc::read(report.as_raw_fd(), errno.as_mut_ptr().cast(), errno.len()) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return (n == 4).then(|| i32::from_ne_bytes(errno));
    }
}

/// Blocks until `pid` has ended, leaving it to be reaped (`WNOWAIT`).
fn ended(pid: libc::pid_t) -> bool {
    loop {
        // SAFETY: waitid writes into `info`, a zeroed siginfo_t.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let id = libc::id_t::try_from(pid).unwrap_or_default();
        if unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOWAIT) } == 0 {
            return true;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
    }
}

/// Reaps `pid` (waiting if needed) and returns how it ended.
fn reap(pid: libc::pid_t) -> io::Result<ExitStatus> {
    let mut raw = 0;
    loop {
        // SAFETY: waitpid writes the status into `raw`.
        if unsafe { libc::waitpid(pid, &mut raw, 0) } == pid {
            return Ok(ExitStatus::from_raw(raw));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills both descriptors, which we then own.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// A descriptor the child can `dup2` onto 0 or 1 without clobbering the
/// other: wrap's own stdio is normally open, but if it was not, a pipe
/// could have been given 0, 1 or 2.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor we own.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::*;

    fn stat_field(pid: libc::pid_t, n: usize) -> String {
        let stat =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process exists");
        let after_name = stat.rsplit_once(')').expect("a stat line").1;
        after_name
            .split_whitespace()
            .nth(n - 3)
            .expect("the field")
            .to_string()
    }

    #[tokio::test]
    async fn the_server_gets_its_pipes_its_environment_its_own_group_and_its_status() {
        let script = "echo \"x=$GH_X home=${HOME:-unset}\"; read line; echo \"got $line\"; exit 7";
        let (mut process, mut stdin, stdout) = spawn(
            Path::new("/bin/sh"),
            &["-c".into(), script.into()],
            &[("GH_X".into(), "1".into())],
        )
        .expect("spawn");
        let pid = libc::pid_t::try_from(process.id().expect("running")).unwrap();
        assert_eq!(stat_field(pid, 5), pid.to_string(), "its own process group");
        let mut lines = BufReader::new(stdout).lines();
        assert_eq!(lines.next_line().await.unwrap().unwrap(), "x=1 home=unset");
        stdin.write_all(b"hi\n").await.unwrap();
        assert_eq!(lines.next_line().await.unwrap().unwrap(), "got hi");
        assert_eq!(process.wait().await.unwrap().code(), Some(7));
        assert_eq!(process.id(), None, "a reaped pid is never signalled");
        assert_eq!(
            process.wait().await.unwrap().code(),
            Some(7),
            "wait repeats"
        );
    }

    #[tokio::test]
    async fn a_failed_exec_is_reported_with_its_errno() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_program = dir.path().join("notes.txt");
        std::fs::write(&not_a_program, "\0\0 not an executable").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&not_a_program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = spawn(&not_a_program, &[], &[]).err().expect("exec fails");
        assert_eq!(err.raw_os_error(), Some(libc::ENOEXEC), "{err}");
        let err = spawn(Path::new("/bin/sh"), &["a\0b".into()], &[])
            .err()
            .expect("NUL");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[tokio::test]
    async fn dropping_a_running_server_kills_it() {
        let (process, _stdin, _stdout) =
            spawn(Path::new("/bin/sleep"), &["60".into()], &[]).expect("spawn");
        let pid = libc::pid_t::try_from(process.id().unwrap()).unwrap();
        drop(process);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        // Killed, then a zombie until wrap exits (nobody reaps it here).
        while stat_field(pid, 3) != "Z" {
            assert!(std::time::Instant::now() < deadline, "still running");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
