//! Tauri glue: builds the app, translates [`crate::menu`] trees into native
//! menus, draws the tray, owns the status/dashboard window, runs the poller
//! and delivers notifications. No decisions are made here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tauri::image::Image;
use tauri::menu::{CheckMenuItem, IsMenuItem, Menu, MenuItem, PredefinedMenuItem, Submenu};
use tauri::tray::TrayIconBuilder;
use tauri::{AppHandle, Manager, Runtime, WebviewUrl, WebviewWindowBuilder};

use crate::commands::CommandError;
use crate::menu::{MenuAction, MenuNode};
use crate::notify::Rendered;
use crate::state::{self, TrayLook};
use crate::Shell;

/// Id of the tray icon.
pub const TRAY_ID: &str = "gatehouse";
/// Label of the one window (status page, then dashboard).
pub const WINDOW_LABEL: &str = "main";
/// Title of that window (the end-to-end test finds it by this).
pub const WINDOW_TITLE: &str = "Gatehouse";
/// Command-line flag used by the login item: start in the tray only.
pub const MINIMIZED_FLAG: &str = "--minimized";
/// How often the poller looks for new events.
pub const POLL_EVERY: Duration = Duration::from_millis(750);

/// Tray icon PNG for a look (files under `icons/tray/`, embedded).
pub fn tray_png(look: TrayLook) -> &'static [u8] {
    macro_rules! icons {
        ($($name:literal),*) => {
            match state::icon_name(look) {
                $($name => include_bytes!(concat!("../../icons/tray/", $name, ".png")).as_slice(),)*
                _ => include_bytes!("../../icons/tray/attention.png").as_slice(),
            }
        };
    }
    icons!(
        "protected",
        "paused",
        "attention",
        "attention-1",
        "attention-2",
        "attention-3",
        "attention-4",
        "attention-5",
        "attention-6",
        "attention-7",
        "attention-8",
        "attention-9",
        "attention-9plus"
    )
}

fn native_items<R: Runtime>(
    app: &AppHandle<R>,
    nodes: &[MenuNode],
) -> tauri::Result<Vec<Box<dyn IsMenuItem<R>>>> {
    let mut out: Vec<Box<dyn IsMenuItem<R>>> = Vec::with_capacity(nodes.len());
    for node in nodes {
        match node {
            MenuNode::Item { id, label, enabled } => out.push(Box::new(MenuItem::with_id(
                app,
                id.as_str(),
                label,
                *enabled,
                None::<&str>,
            )?)),
            MenuNode::Check { id, label, checked } => out.push(Box::new(CheckMenuItem::with_id(
                app,
                id.as_str(),
                label,
                true,
                *checked,
                None::<&str>,
            )?)),
            MenuNode::Submenu { label, children } => {
                let items = native_items(app, children)?;
                let refs: Vec<&dyn IsMenuItem<R>> = items.iter().map(|b| b.as_ref()).collect();
                out.push(Box::new(Submenu::with_items(app, label, true, &refs)?));
            }
            MenuNode::Separator => out.push(Box::new(PredefinedMenuItem::separator(app)?)),
        }
    }
    Ok(out)
}

fn native_menu<R: Runtime>(app: &AppHandle<R>, nodes: &[MenuNode]) -> tauri::Result<Menu<R>> {
    let items = native_items(app, nodes)?;
    let refs: Vec<&dyn IsMenuItem<R>> = items.iter().map(|b| b.as_ref()).collect();
    Menu::with_items(app, &refs)
}

fn create_tray<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<()> {
    let shell = app.state::<Shell>();
    let status = shell.tray_status();
    let look = state::look(status, shell.now_ms());
    let menu = native_menu(app, &shell.menu())?;
    let mut builder = TrayIconBuilder::with_id(TRAY_ID)
        .icon(Image::from_bytes(tray_png(look))?)
        .tooltip(state::tooltip(status, shell.now_ms()))
        .menu(&menu)
        .show_menu_on_left_click(true)
        .on_menu_event(|app, event| on_menu(app, event.id.as_ref()));
    if let Some(title) = state::title(look) {
        builder = builder.title(title);
    }
    builder.build(app)?;
    Ok(())
}

/// Redraws icon, tooltip, count and menu from the current [`Shell`] state.
/// A no-op where there is no tray (tests).
pub fn refresh_tray<R: Runtime>(app: &AppHandle<R>) {
    let Some(tray) = app.tray_by_id(TRAY_ID) else {
        return;
    };
    let shell = app.state::<Shell>();
    let status = shell.tray_status();
    let now = shell.now_ms();
    let look = state::look(status, now);
    let result = (|| -> tauri::Result<()> {
        tray.set_icon(Some(Image::from_bytes(tray_png(look))?))?;
        tray.set_tooltip(Some(state::tooltip(status, now)))?;
        tray.set_title(state::title(look))?;
        tray.set_menu(Some(native_menu(app, &shell.menu())?))?;
        Ok(())
    })();
    if let Err(e) = result {
        tracing::warn!(error = %e, "could not redraw the tray");
    }
}

fn on_menu<R: Runtime>(app: &AppHandle<R>, id: &str) {
    let Some(action) = MenuAction::parse(id) else {
        return;
    };
    tracing::info!(action = ?action, "tray menu");
    let shell = app.state::<Shell>();
    let result: Result<(), CommandError> = match action {
        MenuAction::OpenDashboard => show_dashboard(app, "/"),
        MenuAction::ToggleClient(client) => shell.toggle_client(&client).map_err(Into::into),
        MenuAction::ProtectAll => shell.protect_all().map_err(Into::into),
        MenuAction::Pause(min) => shell.pause(min).map_err(Into::into),
        MenuAction::Resume => shell.resume().map_err(Into::into),
        MenuAction::ToggleAutostart => {
            toggle_autostart(app);
            Ok(())
        }
        MenuAction::Uninstall => show_status(app).and_then(|()| navigate_status(app, "uninstall")),
        MenuAction::Quit => {
            app.exit(0);
            return;
        }
    };
    if let Err(e) = result {
        tracing::warn!(code = e.code(), error = %e, "tray action failed");
        deliver_plain(app, "Gatehouse: that did not work", &e.to_string());
    }
    refresh_tray(app);
}

fn toggle_autostart<R: Runtime>(app: &AppHandle<R>) {
    use tauri_plugin_autostart::ManagerExt;
    let shell = app.state::<Shell>();
    let manager = app.autolaunch();
    let want = !shell.snapshot().autostart;
    let result = if want {
        manager.enable()
    } else {
        manager.disable()
    };
    match result.and_then(|_| manager.is_enabled()) {
        Ok(now) => shell.set_autostart(now),
        Err(e) => tracing::warn!(error = %e, "could not change start at login"),
    }
}

/// Shows the window (creating it if needed) with the signed-in dashboard at
/// `route`; navigation stays on the control plane's origin.
pub fn show_dashboard<R: Runtime>(app: &AppHandle<R>, route: &str) -> Result<(), CommandError> {
    let shell = app.state::<Shell>();
    let url = shell.backend().dashboard_url(route)?;
    let url = url
        .parse::<tauri::Url>()
        .map_err(|e| CommandError::Window(e.to_string()))?;
    let window = match app.get_webview_window(WINDOW_LABEL) {
        Some(w) => {
            w.navigate(url).map_err(window_err)?;
            w
        }
        None => build_window(app, WebviewUrl::External(url))?,
    };
    let _ = window.show();
    let _ = window.unminimize();
    let _ = window.set_focus();
    Ok(())
}

/// Shows the status page (the app's own bundled page).
pub fn show_status<R: Runtime>(app: &AppHandle<R>) -> Result<(), CommandError> {
    let window = match app.get_webview_window(WINDOW_LABEL) {
        Some(w) => w,
        None => build_window(app, WebviewUrl::App("index.html".into()))?,
    };
    let _ = window.show();
    let _ = window.unminimize();
    let _ = window.set_focus();
    Ok(())
}

/// Shows a section of the status page (`index.html#section`).
fn navigate_status<R: Runtime>(app: &AppHandle<R>, section: &str) -> Result<(), CommandError> {
    let Some(window) = app.get_webview_window(WINDOW_LABEL) else {
        return Ok(());
    };
    let mut url = window.url().map_err(window_err)?;
    if url.scheme() != "tauri" && url.host_str() != Some("tauri.localhost") {
        // the window shows the dashboard: back to the bundled page
        let page = if cfg!(windows) {
            "http://tauri.localhost/index.html"
        } else {
            "tauri://localhost/index.html"
        };
        url = tauri::Url::parse(page).map_err(|e| CommandError::Window(e.to_string()))?;
    }
    url.set_fragment(Some(section));
    window.navigate(url).map_err(window_err)
}

fn window_err(e: tauri::Error) -> CommandError {
    CommandError::Window(e.to_string())
}

fn build_window<R: Runtime>(
    app: &AppHandle<R>,
    url: WebviewUrl,
) -> Result<tauri::WebviewWindow<R>, CommandError> {
    let shell = app.state::<Shell>();
    let allowed = shell
        .backend()
        .dashboard_url("/")
        .ok()
        .and_then(|u| u.parse::<tauri::Url>().ok())
        .map(|u| u.origin());
    WebviewWindowBuilder::new(app, WINDOW_LABEL, url)
        .title(WINDOW_TITLE)
        .inner_size(1100.0, 760.0)
        .min_inner_size(640.0, 480.0)
        .on_navigation(move |url| {
            // the bundled status page, or the control plane's own origin; never elsewhere
            url.scheme() == "tauri"
                || url.host_str() == Some("tauri.localhost")
                || allowed.as_ref().is_some_and(|o| *o == url.origin())
        })
        .build()
        .map_err(window_err)
}

/// Sends one notification; on Linux a click ("default" action) opens the
/// dashboard at the notification's route.
pub fn deliver<R: Runtime>(app: &AppHandle<R>, rendered: Rendered) {
    let app = app.clone();
    let spawned = std::thread::Builder::new()
        .name("gatehouse-notify".into())
        .spawn(move || {
            let body = if cfg!(all(unix, not(target_os = "macos"))) {
                crate::notify::escape_markup(&rendered.body)
            } else {
                rendered.body.clone()
            };
            let mut n = notify_rust::Notification::new();
            n.appname("Gatehouse")
                .summary(&rendered.summary)
                .body(&body);
            #[cfg(all(unix, not(target_os = "macos")))]
            n.action("default", "Open in dashboard");
            match n.show() {
                #[cfg(all(unix, not(target_os = "macos")))]
                Ok(handle) => handle.wait_for_action(|action| {
                    if action == "default" {
                        if let Err(e) = show_dashboard(&app, &rendered.route) {
                            tracing::warn!(error = %e, "could not open the dashboard");
                        }
                    }
                }),
                #[cfg(not(all(unix, not(target_os = "macos"))))]
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "notification not delivered"),
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "notification thread not started");
    }
}

fn deliver_plain<R: Runtime>(app: &AppHandle<R>, summary: &str, body: &str) {
    deliver(
        app,
        Rendered {
            kind: crate::notify::NoticeKind::Block,
            summary: summary.to_string(),
            body: body.to_string(),
            route: "/".to_string(),
        },
    );
}

fn start_poller<R: Runtime>(app: &AppHandle<R>, stop: Arc<AtomicBool>) {
    let app = app.clone();
    let spawned = std::thread::Builder::new()
        .name("gatehouse-poll".into())
        .spawn(move || {
            let mut last_error: Option<String> = None;
            while !stop.load(Ordering::SeqCst) {
                let shell = app.state::<Shell>();
                match shell.tick() {
                    Ok(tick) => {
                        last_error = None;
                        for n in tick.notify {
                            deliver(&app, n);
                        }
                        if tick.changed {
                            refresh_tray(&app);
                        }
                    }
                    Err(e) => {
                        // log once per distinct error, not every poll
                        let msg = e.to_string();
                        if last_error.as_deref() != Some(msg.as_str()) {
                            tracing::warn!(error = %msg, "poll failed");
                            last_error = Some(msg);
                        }
                    }
                }
                std::thread::sleep(POLL_EVERY);
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "poller not started; notifications are off");
    }
}

/// Whatever must be dropped before the process exits (control plane lock,
/// server handle), kept as Tauri state.
#[derive(Default)]
pub struct Keep(pub Mutex<Vec<Box<dyn std::any::Any + Send>>>);

/// Options from the command line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Options {
    /// Start in the tray only (login item).
    pub minimized: bool,
}

impl Options {
    pub fn parse(args: &[String]) -> Self {
        Options {
            minimized: args.iter().any(|a| a == MINIMIZED_FLAG),
        }
    }
}

/// Builds and runs the app until Quit.
pub fn run() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GATEHOUSE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let args: Vec<String> = std::env::args().collect();
    let options = Options::parse(&args);

    let started = match crate::live::start() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "Gatehouse cannot start");
            eprintln!("gatehouse-app: {e}");
            std::process::exit(2);
        }
    };
    let shell = Shell::new(started.backend, crate::system_clock());
    if let Err(e) = shell.refresh() {
        tracing::warn!(error = %e, "initial state unavailable");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stop_on_exit = stop.clone();

    let result = tauri::Builder::default()
        .plugin(tauri_plugin_single_instance::init(|app, _argv, _cwd| {
            // a second launch focuses the first
            if let Err(e) = show_status(app) {
                tracing::warn!(error = %e, "could not focus the window");
            }
        }))
        .plugin(
            tauri_plugin_autostart::Builder::new()
                .args([MINIMIZED_FLAG])
                .build(),
        )
        .manage(shell)
        .manage(Keep(Mutex::new(started.keep)))
        .invoke_handler(handler())
        .setup(move |app| {
            use tauri_plugin_autostart::ManagerExt;
            let handle = app.handle().clone();
            let enabled = app.autolaunch().is_enabled().unwrap_or(false);
            handle.state::<Shell>().set_autostart(enabled);
            create_tray(&handle)?;
            start_poller(&handle, stop.clone());
            if !options.minimized {
                if let Err(e) = show_status(&handle) {
                    tracing::warn!(error = %e, "could not open the window");
                }
            }
            Ok(())
        })
        .build(context());
    let app = match result {
        Ok(app) => app,
        Err(e) => {
            eprintln!("gatehouse-app: {e}");
            std::process::exit(2);
        }
    };
    app.run(move |app, event| match event {
        // closing the window keeps the tray; only Quit (an explicit exit code) ends the app
        tauri::RunEvent::ExitRequested { api, code, .. } if code.is_none() => api.prevent_exit(),
        tauri::RunEvent::Exit => {
            stop_on_exit.store(true, Ordering::SeqCst);
            let keep = app.state::<Keep>();
            let mut keep = keep.0.lock().unwrap_or_else(|e| e.into_inner());
            keep.clear();
        }
        _ => {}
    });
}

/// The app's Tauri context (config, embedded status page, icons, ACL).
pub fn context<R: Runtime>() -> tauri::Context<R> {
    tauri::generate_context!()
}

/// The command handler shared by the app and the command tests.
pub fn handler<R: Runtime>() -> impl Fn(tauri::ipc::Invoke<R>) -> bool + Send + Sync + 'static {
    tauri::generate_handler![
        crate::commands::status,
        crate::commands::open_dashboard,
        crate::commands::pause_protection,
        crate::commands::resume_protection,
        crate::commands::set_client_protected,
        crate::commands::uninstall,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Width and height from a PNG's IHDR chunk.
    fn png_size(png: &[u8]) -> (u32, u32) {
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
        assert_eq!(&png[12..16], b"IHDR");
        let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        (be(&png[16..20]), be(&png[20..24]))
    }

    #[test]
    fn every_tray_look_has_a_32px_rgba_icon() {
        let mut looks = vec![TrayLook::Protected, TrayLook::Paused];
        looks.extend((1..=12).map(TrayLook::Attention));
        let mut seen = std::collections::HashSet::new();
        for look in looks {
            let png = tray_png(look);
            assert_eq!(png_size(png), (32, 32), "tray icon for {look:?}");
            assert_eq!(png[25], 6, "colour type RGBA for {look:?}");
            seen.insert(png.as_ptr());
        }
        assert_eq!(
            seen.len(),
            12,
            "protected, paused, 1..9 and 9+ are distinct icons"
        );
    }

    #[test]
    fn options() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(Options::parse(&args(&["gatehouse-app", "--minimized"])).minimized);
        assert!(!Options::parse(&args(&["gatehouse-app"])).minimized);
    }
}
