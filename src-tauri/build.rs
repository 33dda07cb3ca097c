//! Generates the Tauri context (config, icons, ACL) and declares the app's own
//! commands so they go through capabilities like plugin commands do.

fn main() {
    let manifest = tauri_build::AppManifest::new().commands(gatehouse_commands());
    tauri_build::try_build(tauri_build::Attributes::new().app_manifest(manifest))
        .expect("tauri-build failed (see tauri.conf.json and capabilities/)");
}

/// Every `#[tauri::command]` of the app; keep in sync with `generate_handler!`.
fn gatehouse_commands() -> &'static [&'static str] {
    &[
        "status",
        "open_dashboard",
        "pause_protection",
        "resume_protection",
        "set_client_protected",
        "uninstall",
    ]
}
