//! Tauri commands for the app's own status page (`tauri://localhost`, the
//! `shell-status` capability). Each is a thin call into [`crate::Shell`] and
//! the [`crate::backend::Backend`]; errors are [`CommandError`], serialized
//! as `{ "code": …, "message": … }`.

use serde::Serialize;
use tauri::{AppHandle, Manager, Runtime, State};

use crate::backend::BackendError;
use crate::menu::ClientItem;
use crate::state::{self, Protection, TrayStatus};
use crate::Shell;

/// Longest pause the commands accept: the control plane's (24 h); the menu
/// offers up to 8 h.
pub use gatehouse_server::protection::MAX_PAUSE_MIN;

/// A command failure the page can show as is.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("a pause must last between 1 and {MAX_PAUSE_MIN} minutes, not {0}")]
    InvalidPause(u32),
    #[error("the dashboard window could not be opened: {0}")]
    Window(String),
}

impl CommandError {
    pub fn code(&self) -> &'static str {
        match self {
            CommandError::Backend(e) => e.code(),
            CommandError::InvalidPause(_) => "invalid_pause",
            CommandError::Window(_) => "window",
        }
    }
}

impl Serialize for CommandError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("CommandError", 2)?;
        st.serialize_field("code", self.code())?;
        st.serialize_field("message", &self.to_string())?;
        st.end()
    }
}

/// What the status page shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StatusView {
    /// `"active"` or `"paused"`.
    pub protection: String,
    /// Minutes until a pause ends by itself.
    pub resumes_in_min: Option<i64>,
    pub attention: u32,
    pub clients: Vec<ClientItem>,
    /// The tray tooltip, for a one-line summary.
    pub summary: String,
}

/// Current protection state, attention count and clients.
#[tauri::command(async)]
pub fn status(shell: State<'_, Shell>) -> Result<StatusView, CommandError> {
    shell.refresh()?;
    Ok(view(&shell))
}

/// Pauses protection (audit-only) for `minutes` (default 60).
#[tauri::command(async)]
pub fn pause_protection<R: Runtime>(
    app: AppHandle<R>,
    shell: State<'_, Shell>,
    minutes: Option<u32>,
) -> Result<StatusView, CommandError> {
    let minutes = minutes.unwrap_or(state::DEFAULT_PAUSE_MIN);
    if minutes == 0 || minutes > MAX_PAUSE_MIN {
        return Err(CommandError::InvalidPause(minutes));
    }
    shell.pause(minutes)?;
    crate::app::refresh_tray(&app);
    Ok(view(&shell))
}

/// Ends a pause now.
#[tauri::command(async)]
pub fn resume_protection<R: Runtime>(
    app: AppHandle<R>,
    shell: State<'_, Shell>,
) -> Result<StatusView, CommandError> {
    shell.resume()?;
    crate::app::refresh_tray(&app);
    Ok(view(&shell))
}

/// Protects or unprotects one AI client.
#[tauri::command(async)]
pub fn set_client_protected<R: Runtime>(
    app: AppHandle<R>,
    shell: State<'_, Shell>,
    client: String,
    protected: bool,
) -> Result<StatusView, CommandError> {
    shell.set_client_protected(&client, protected)?;
    crate::app::refresh_tray(&app);
    Ok(view(&shell))
}

/// Replaces the status page with the signed-in dashboard at `route`.
#[tauri::command(async)]
pub fn open_dashboard<R: Runtime>(
    app: AppHandle<R>,
    route: Option<String>,
) -> Result<(), CommandError> {
    crate::app::show_dashboard(&app, route.as_deref().unwrap_or("/"))
}

/// What the uninstall section shows afterwards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct UninstallView {
    /// Server entries still behind `gatehouse wrap` (kept working by the launcher).
    pub still_wrapped: usize,
    pub launcher_removed: bool,
    /// How to remove the app itself on this system.
    pub next_step: String,
}

/// Uninstall, the app's part: unprotects every client first when asked,
/// stops starting at login, removes the launcher once nothing uses it, and
/// says how to remove the app itself.
#[tauri::command(async)]
pub fn uninstall<R: Runtime>(
    app: AppHandle<R>,
    shell: State<'_, Shell>,
    unprotect: bool,
) -> Result<UninstallView, CommandError> {
    let done = shell.uninstall(unprotect)?;
    if let Some(autostart) = app.try_state::<tauri_plugin_autostart::AutoLaunchManager>() {
        if let Err(e) = autostart.disable() {
            tracing::warn!(error = %e, "start at login left on");
        }
        shell.set_autostart(false);
    }
    Ok(UninstallView {
        still_wrapped: done.still_wrapped,
        launcher_removed: done.launcher_removed,
        next_step: removal_hint().to_string(),
    })
}

/// How the app itself is removed on this OS (a running app cannot remove
/// its own package).
fn removal_hint() -> &'static str {
    if cfg!(target_os = "macos") {
        "Quit Gatehouse, then move Gatehouse.app to the Trash."
    } else if cfg!(windows) {
        "Quit Gatehouse, then remove it in Settings › Apps › Installed apps."
    } else {
        "Quit Gatehouse, then remove the package (sudo apt remove gatehouse) or delete the AppImage."
    }
}

fn view(shell: &Shell) -> StatusView {
    let snap = shell.snapshot();
    let now = shell.now_ms();
    let protection = snap.protection.at(now);
    StatusView {
        protection: match protection {
            Protection::Active => "active".into(),
            Protection::Paused { .. } => "paused".into(),
        },
        resumes_in_min: protection.minutes_left(now),
        attention: snap.attention,
        clients: snap.clients,
        summary: state::tooltip(
            TrayStatus {
                protection,
                attention: snap.attention,
            },
            now,
        ),
    }
}

#[cfg(test)]
mod tests {
    //! Commands through real IPC on the mock runtime, with the app's real
    //! context: the `shell-status` capability decides what is allowed.
    use std::sync::Arc;

    use serde_json::{json, Value};
    use tauri::ipc::{CallbackFn, InvokeBody};
    use tauri::test::{get_ipc_response, mock_builder, MockRuntime, INVOKE_KEY};
    use tauri::webview::InvokeRequest;
    use tauri::{App, WebviewUrl, WebviewWindow, WebviewWindowBuilder};

    use super::StatusView;
    use crate::backend::{Backend, MemoryBackend};
    use crate::menu::ClientItem;
    use crate::state::Protection;
    use crate::Shell;

    const T0: i64 = 1_700_000_000_000;

    fn app() -> (App<MockRuntime>, Arc<MemoryBackend>) {
        let backend = Arc::new(MemoryBackend::new(
            vec![ClientItem {
                id: "cursor".into(),
                name: "Cursor".into(),
                protected: false,
                servers: 2,
                wrapped: 0,
            }],
            "http://127.0.0.1:1",
        ));
        let shell = Shell::new(backend.clone(), Arc::new(|| T0));
        let app = mock_builder()
            .manage(shell)
            .invoke_handler(crate::app::handler())
            .build(crate::app::context())
            .expect("mock app builds");
        (app, backend)
    }

    fn window(app: &App<MockRuntime>, label: &str) -> WebviewWindow<MockRuntime> {
        WebviewWindowBuilder::new(app, label, WebviewUrl::App("index.html".into()))
            .build()
            .expect("mock window")
    }

    fn call(
        w: &WebviewWindow<MockRuntime>,
        origin: &str,
        cmd: &str,
        args: Value,
    ) -> Result<Value, Value> {
        get_ipc_response(
            w,
            InvokeRequest {
                cmd: cmd.into(),
                callback: CallbackFn(0),
                error: CallbackFn(1),
                url: origin.parse().unwrap(),
                body: InvokeBody::from(args),
                headers: Default::default(),
                invoke_key: INVOKE_KEY.to_string(),
            },
        )
        .map(|body| body.deserialize::<Value>().expect("json response"))
    }

    const LOCAL: &str = "tauri://localhost";

    #[test]
    fn status_and_protect() {
        let (app, backend) = app();
        let w = window(&app, "main");
        let view: StatusView =
            serde_json::from_value(call(&w, LOCAL, "status", json!({})).unwrap()).unwrap();
        assert_eq!(view.protection, "active");
        assert_eq!(view.clients.len(), 1);
        assert!(!view.clients[0].protected);

        let view: StatusView = serde_json::from_value(
            call(
                &w,
                LOCAL,
                "set_client_protected",
                json!({"client": "cursor", "protected": true}),
            )
            .unwrap(),
        )
        .unwrap();
        assert!(view.clients[0].protected, "the answer shows the new state");
        assert!(
            backend.clients().unwrap()[0].protected,
            "the command reached the backend"
        );
    }

    #[test]
    fn uninstall_offers_unprotect_and_keeps_the_launcher_while_used() {
        let (app, backend) = app();
        let w = window(&app, "main");
        call(
            &w,
            LOCAL,
            "set_client_protected",
            json!({"client": "cursor", "protected": true}),
        )
        .unwrap();
        // declined: protected servers keep working through the launcher
        let kept: super::UninstallView = serde_json::from_value(
            call(&w, LOCAL, "uninstall", json!({"unprotect": false})).unwrap(),
        )
        .unwrap();
        assert_eq!(kept.still_wrapped, 2);
        assert!(!kept.launcher_removed, "still used by two entries");
        assert!(backend.clients().unwrap()[0].protected);
        // accepted: every client restored, then the launcher goes
        let done: super::UninstallView = serde_json::from_value(
            call(&w, LOCAL, "uninstall", json!({"unprotect": true})).unwrap(),
        )
        .unwrap();
        assert_eq!(done.still_wrapped, 0);
        assert!(done.launcher_removed);
        assert!(
            !backend.clients().unwrap()[0].protected,
            "unprotected first"
        );
        assert!(done.next_step.contains("remove"), "{}", done.next_step);
    }

    #[test]
    fn errors_are_typed() {
        let (app, _) = app();
        let w = window(&app, "main");
        let err = call(
            &w,
            LOCAL,
            "set_client_protected",
            json!({"client": "zed", "protected": true}),
        )
        .unwrap_err();
        assert_eq!(
            err,
            json!({"code": "unknown_client", "message": "unknown AI client \"zed\""})
        );
        let err = call(&w, LOCAL, "pause_protection", json!({"minutes": 0})).unwrap_err();
        assert_eq!(err["code"], "invalid_pause", "{err}");
        let err = call(&w, LOCAL, "pause_protection", json!({"minutes": 100_000})).unwrap_err();
        assert_eq!(err["code"], "invalid_pause", "{err}");
    }

    #[test]
    fn pause_defaults_to_one_hour_and_resumes() {
        let (app, backend) = app();
        let w = window(&app, "main");
        let view: StatusView =
            serde_json::from_value(call(&w, LOCAL, "pause_protection", json!({})).unwrap())
                .unwrap();
        assert_eq!(view.protection, "paused");
        assert_eq!(view.resumes_in_min, Some(60));
        assert_eq!(
            backend.protection().unwrap(),
            Protection::Paused {
                until_ms: T0 + 3_600_000
            }
        );
        let view: StatusView =
            serde_json::from_value(call(&w, LOCAL, "resume_protection", json!({})).unwrap())
                .unwrap();
        assert_eq!(view.protection, "active");
        assert_eq!(backend.protection().unwrap(), Protection::Active);
    }

    #[test]
    fn capability_is_limited_to_the_status_page() {
        let (app, backend) = app();
        let main = window(&app, "main");
        // the dashboard's origin (the control plane on loopback) gets nothing
        let remote = call(
            &main,
            "http://127.0.0.1:4317",
            "set_client_protected",
            json!({"client": "cursor", "protected": true}),
        );
        assert!(
            remote.is_err(),
            "remote origin must be denied, got {remote:?}"
        );
        // any other window gets nothing either
        let other = window(&app, "other");
        let denied = call(&other, LOCAL, "status", json!({}));
        assert!(
            denied.is_err(),
            "window 'other' must be denied, got {denied:?}"
        );
        assert!(
            !backend.clients().unwrap()[0].protected,
            "denied calls changed nothing"
        );
        // and plugin/core commands are not granted to the page at all
        let core = call(&main, LOCAL, "plugin:event|listen", json!({}));
        assert!(core.is_err(), "core:event not granted, got {core:?}");
    }
}
