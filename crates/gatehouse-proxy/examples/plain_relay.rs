//! The floor for the wrap benchmark: a relay that only copies lines.
//!
//! `plain_relay CMD [ARGS…]` starts the command and copies newline-delimited
//! frames both ways on two blocking threads, with no parsing, no inspection
//! and no database. Whatever a process in the middle costs on this machine
//! (two more pipe hops and wake-ups per round trip), this costs too; the
//! bench reports its added latency beside wrap's.
#![allow(clippy::print_stderr)]

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::process::{Command, Stdio};

fn copy_lines(from: impl Read, to: impl Write) {
    let mut from = BufReader::with_capacity(64 * 1024, from);
    let mut to = BufWriter::with_capacity(64 * 1024, to);
    let mut line = Vec::new();
    loop {
        line.clear();
        match from.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if to.write_all(&line).is_err() {
            return;
        }
        // Flush when nothing more is already buffered, as wrap does.
        if from.buffer().is_empty() && to.flush().is_err() {
            return;
        }
    }
}

fn main() {
    let mut argv = std::env::args().skip(1);
    let Some(program) = argv.next() else {
        eprintln!("usage: plain_relay CMD [ARGS…]");
        std::process::exit(2);
    };
    let mut child = Command::new(program)
        .args(argv)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the server");
    let child_in = child.stdin.take().expect("piped stdin");
    let child_out = child.stdout.take().expect("piped stdout");
    let up = std::thread::spawn(move || copy_lines(std::io::stdin().lock(), child_in));
    copy_lines(child_out, std::io::stdout().lock());
    let _ = up.join();
    let code = child.wait().map(|s| s.code().unwrap_or(1)).unwrap_or(1);
    std::process::exit(code);
}
