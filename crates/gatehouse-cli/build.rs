//! Lays out the code `gatehouse wrap` runs in one place, so an idle wrap
//! maps about 4 MB of the binary's code instead of 9 MB (the kernel maps the
//! 64 KiB around every page a process touches). `wrap-symbols.txt` lists
//! those functions; `scripts/order-symbols.py` makes it (ARCHITECTURE.md,
//! "Code layout"). The linker skips a name the build does not have, so a
//! stale list costs memory, never correctness.

use std::path::PathBuf;
use std::process::Command;

const LIST: &str = "wrap-symbols.txt";

fn main() {
    println!("cargo:rerun-if-changed={LIST}");
    println!("cargo:rerun-if-env-changed=GATEHOUSE_NO_SYMBOL_ORDER");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    // Rust links this target with its bundled LLD (since 1.90), which reads
    // the list; other targets keep their linker's layout.
    let lld = std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu");
    if !release || !lld || std::env::var_os("GATEHOUSE_NO_SYMBOL_ORDER").is_some() {
        return;
    }
    let text = std::fs::read_to_string(LIST).expect("crates/gatehouse-cli/wrap-symbols.txt");
    // The first line names the compiler the list was made with: mangled
    // names carry a hash of the compiler's version, so another one matches
    // almost nothing.
    let (made_with, names) = text.split_once('\n').unwrap_or_default();
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = Command::new(rustc)
        .arg("-V")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_default();
    if made_with.strip_prefix("# ") != Some(version.as_str()) {
        println!(
            "cargo:warning=wrap-symbols.txt was made for {}, this is {version}: \
             run scripts/order-symbols.py to lay out `gatehouse wrap` again \
             (an idle wrap maps about 5 MB more code until then)",
            made_with.trim_start_matches("# ")
        );
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join(LIST);
    std::fs::write(&out, names).expect("write the symbol list to OUT_DIR");
    let list = out.display();
    println!("cargo:rustc-link-arg-bin=gatehouse=-Wl,--symbol-ordering-file={list}");
    println!("cargo:rustc-link-arg-bin=gatehouse=-Wl,--no-warn-symbol-ordering");
}
