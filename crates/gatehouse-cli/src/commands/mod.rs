//! One module per subcommand. Each exposes clap argument types and `run*`
//! functions returning the process exit code.
//!
//! Everything written to stdout goes through [`outln!`] / [`out!`]: a reader
//! that went away (`gatehouse clients | head -1`) ends the process quietly
//! instead of panicking, as `print!` would.

/// `println!` that exits quietly when stdout is a closed pipe.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(err) = writeln!(std::io::stdout().lock(), $($arg)*) {
            $crate::commands::stdout_failed(err);
        }
    }};
}

/// `print!` that exits quietly when stdout is a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(err) = write!(std::io::stdout().lock(), $($arg)*) {
            $crate::commands::stdout_failed(err);
        }
    }};
}

/// Exit code of a process whose output pipe closed (128 + SIGPIPE), as a
/// command killed by the default SIGPIPE action would report.
pub const BROKEN_PIPE_EXIT: u8 = 141;

/// Stdout failed: a closed pipe ends the process quietly, anything else
/// is said on stderr (exit 2).
pub fn stdout_failed(err: std::io::Error) -> ! {
    if err.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(i32::from(BROKEN_PIPE_EXIT));
    }
    eprintln!("gatehouse: error: cannot write to stdout: {err}");
    std::process::exit(2)
}

/// Whether an error is (caused by) a closed output pipe.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Logs go to stderr (the client's log, for `wrap`): `GATEHOUSE_LOG` (as
/// in the tray app), else `RUST_LOG`, else warnings and errors, so that
/// neither an internal error behind a 500 nor a wrap that fell back to a
/// slower path is silent.
pub fn log_to_stderr() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("GATEHOUSE_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

pub mod clients;
pub mod events;
pub mod inventory;
pub mod pins;
pub mod policy;
pub mod protection;
pub mod scan;
pub mod store_access;
pub mod up;
pub mod vault;
pub mod wrap;
