//! The `gatehouse-app` binary: all behaviour lives in the library.
//! `gatehouse-app --cli ARGS…` runs the bundled `gatehouse` CLI instead (the
//! stable launcher uses this inside an AppImage, whose mount point changes).
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == gatehouse_app::launcher::CLI_FLAG)
    {
        return run_cli(&args[2..]);
    }
    gatehouse_app::run();
    ExitCode::SUCCESS
}

fn run_cli(args: &[std::ffi::OsString]) -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_default();
    let cli = exe.with_file_name(if cfg!(windows) {
        "gatehouse.exe"
    } else {
        "gatehouse"
    });
    match std::process::Command::new(&cli).args(args).status() {
        Ok(status) => status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .map_or(ExitCode::FAILURE, ExitCode::from),
        Err(e) => {
            eprintln!("gatehouse-app: cannot run {}: {e}", cli.display());
            ExitCode::from(127)
        }
    }
}
