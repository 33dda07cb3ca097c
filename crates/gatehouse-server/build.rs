//! Embeds the dashboard: `ui/dist` (from `npm run build`) when it exists,
//! otherwise a one-page fallback that says how to build it. A fresh clone
//! therefore builds without Node; a release build runs `npm ci && npm run build` first.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const FALLBACK: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Gatehouse</title></head>\n<body><main><h1>Gatehouse dashboard not built</h1>\n<p>This binary was built without the dashboard. Run <code>npm ci &amp;&amp; npm run build</code> at the repository root, then rebuild.</p>\n<p>The JSON API under <code>/api/</code> works without it.</p></main></body></html>\n";

fn main() {
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let dist = manifest.join("../../ui/dist");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed={}", dist.display());
    println!("cargo:rerun-if-changed=build.rs");

    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        collect(&dist, &dist, &mut files);
    }
    let mut code = String::from("/// Embedded dashboard files: (path below `/`, contents).\npub static FILES: &[(&str, &[u8])] = &[\n");
    if files.is_empty() {
        let fallback = out.join("fallback-index.html");
        std::fs::write(&fallback, FALLBACK).expect("write fallback page");
        writeln!(
            code,
            "    (\"index.html\", include_bytes!({:?})),",
            fallback.display().to_string()
        )
        .unwrap();
        code.push_str(
            "];\n/// Whether the real dashboard was embedded.\npub const BUILT: bool = false;\n",
        );
    } else {
        files.sort();
        for (rel, abs) in &files {
            writeln!(
                code,
                "    ({rel:?}, include_bytes!({:?})),",
                abs.display().to_string()
            )
            .unwrap();
        }
        code.push_str(
            "];\n/// Whether the real dashboard was embedded.\npub const BUILT: bool = true;\n",
        );
    }
    std::fs::write(out.join("ui_assets.rs"), code).expect("write ui_assets.rs");
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, files);
        } else if let Ok(rel) = path.strip_prefix(root) {
            let rel = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let abs = path.canonicalize().unwrap_or(path.clone());
            files.push((rel, abs));
        }
    }
}
