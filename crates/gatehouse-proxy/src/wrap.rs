//! `gatehouse wrap --server ID [--home DIR] [--pass-env NAMES] -- CMD ARGS…`

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gatehouse_config::{LoadedPolicy, Policy, ServerRef, Trust};
use gatehouse_engine::env::{filter_env, Os};
use gatehouse_engine::settings::{OnChange, ResultAction, SamplingContext, SensitiveElicitation};
use gatehouse_engine::{
    EngineEvent, Inspector, Output, PinEntry, PinState, PinTable, PinUpdate, Relay, ServerInfo,
    Settings,
};
use gatehouse_protocol::identity::launch_command_hash;
use gatehouse_protocol::{parse_frame, peek, HASH_VERSION};
use gatehouse_store::{home, HoldState, Identity, MacKey, NewEvent, Store, StoreOptions};
use gatehouse_vault::Vault;
use sha2::{Digest, Sha256};
use tokio::io::BufReader;
use tokio::sync::{mpsc, watch, Notify};
use tracing::{debug, warn};

use crate::adapters::{BoundPolicy, ScannerInspector};
use crate::child;
use crate::control::Control;
use crate::lines::{Line, LineReader};
use crate::outbox::Outbox;

/// What `gatehouse wrap` was asked to run.
pub struct WrapOptions {
    pub server_id: String,
    pub home: Option<PathBuf>,
    pub pass_env: Vec<String>,
    /// The original command and its arguments (placeholders unexpanded).
    pub argv: Vec<String>,
    /// Where the server's secrets come from (None: no secrets).
    pub vault: Option<Arc<dyn Vault>>,
    /// How long an input request waits in the dashboard inbox.
    pub inbox_timeout: Duration,
}

/// Why wrap could not run. Each variant says which side caused it; the
/// caller prints the `gatehouse: error:` prefix and the source after a colon.
#[derive(Debug, thiserror::Error)]
pub enum WrapError {
    #[error("no command given after `--`")]
    NoCommand,
    #[error("{}", command_not_found(.0))]
    CommandNotFound(String),
    #[error("could not start the server {command:?}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("cannot use the Gatehouse home {}", .dir.display())]
    Home {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn command_not_found(program: &str) -> String {
    if Path::new(program).components().count() > 1 {
        format!("the server command {program:?} does not exist or is not executable")
    } else {
        format!("cannot find the server command {program:?} on the server's PATH")
    }
}

const POLL_INTERVAL: Duration = Duration::from_millis(250);
const STOP_GRACE: Duration = Duration::from_secs(3);
/// How long the server's stdout is still read after the server exited,
/// counted again from each frame a slow client takes meanwhile.
const EXIT_DRAIN: Duration = Duration::from_secs(1);

/// Wall-clock milliseconds, for what is stored or compared across processes.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The relay's clock: milliseconds since this process first asked, from a
/// monotonic source, so the relay's deadlines (its own listing's timeout, the
/// `list_changed` interval, retry back-off) hold when the wall clock steps.
fn relay_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// Runs the relay until the client or the server ends; returns the exit code.
pub async fn run_wrap(opts: WrapOptions) -> Result<i32, WrapError> {
    let program = opts.argv.first().cloned().ok_or(WrapError::NoCommand)?;
    let home_dir = home::resolve(opts.home.as_deref());
    let home_error = |source| WrapError::Home {
        dir: home_dir.clone(),
        source,
    };
    home::ensure_private_dir(&home_dir).map_err(home_error)?;
    let session = crate::session::client_session_key();

    // One pooled connection: a wrap process never has two of its own
    // writers waiting on each other in SQLite's busy handler.
    // The policy file is read first: its database busy budget applies to
    // the store (a broken file falls back to the last good policy below).
    let _ = gatehouse_config::write_default_if_missing(&home_dir);
    let from_file = gatehouse_config::load(&home_dir);
    let store_options = StoreOptions {
        max_connections: 1,
        busy_timeout: from_file
            .as_ref()
            .map_or(StoreOptions::default().busy_timeout, |l| {
                l.policy.limits.db_busy
            }),
        ..StoreOptions::default()
    };
    let store = match Store::open(&home_dir, store_options).await {
        Ok(store) => Some(store),
        Err(err) => {
            // DESIGN §8: relay anyway (calls blocked with fail_closed), say so.
            let fail_closed = from_file.as_ref().is_ok_and(|l| l.policy.fail_closed());
            let what = if fail_closed {
                "lists pass, calls are blocked (fail_closed)"
            } else {
                "relaying without records"
            };
            eprintln!("gatehouse: database unavailable ({err}); {what}");
            None
        }
    };
    // Read once: the MAC, fingerprint, guard and taint keys derive from it.
    let install_key = home::install_key(&home_dir).map_err(home_error)?;
    let (mac_key, fingerprint_key) = derive_keys(install_key);
    let recorder = Recorder::start(
        store.clone(),
        mac_key.clone(),
        opts.server_id.clone(),
        session.clone(),
    );
    // Start-up writes and the database pollers wait until the server's
    // first frame has been passed on (crate::ready).
    let (answered, after_answer) = crate::ready::gate();
    let (policy, policy_record) =
        settle_policy(from_file, store.as_ref(), &recorder, after_answer.clone()).await;
    let (scanner, scanner_start) = ScannerInspector::build_when_started(
        scanner_builder(&policy, &fingerprint_key),
        policy.limits.scan_budget,
        policy.fail_closed(),
    );

    // Identity: the id is bound to the launch command the first time.
    // Every known server, read once: this one's row and the typosquat
    // checks below.
    let command_hash = launch_command_hash(&opts.argv);
    let known = match &store {
        Some(s) => crate::busy::retry_busy(|| s.list_servers())
            .await
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let (identity, registered) = match &store {
        Some(s) => match crate::busy::retry_busy(|| {
            s.identify(&known, &opts.server_id, &command_hash, now_ms() as i64)
        })
        .await
        {
            Ok((identity, registered)) => (Some(identity), registered),
            Err(err) => {
                eprintln!("gatehouse: {}: identity not checked: {err}", opts.server_id);
                (None, None)
            }
        },
        None => (None, None),
    };
    let mismatch = matches!(identity, Some(Identity::Mismatch { .. }));
    // DESIGN §2: secrets only when the launch command hashes to the
    // recorded value; without a database to compare against, none.
    let unverified = identity.is_none();
    let pin_server_id = if mismatch {
        // No shared pins: a separate namespace for this command.
        format!("{}~{}", opts.server_id, &command_hash[7..19])
    } else {
        opts.server_id.clone()
    };
    let server_name = registered
        .as_ref()
        .and_then(|s| s.display_name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| opts.server_id.clone());
    if let Some(Identity::Mismatch { recorded_hash }) = &identity {
        recorder.event(
            EngineEvent::new("server_identity_mismatch", gatehouse_engine::Severity::High, gatehouse_engine::Action::Alert, "identity.mismatch")
                .reason("this server id is bound to a different launch command: no secrets, no shared pins, nothing trusted")
                .evidence(serde_json::json!({"recorded": recorded_hash, "actual": command_hash})),
        );
    }

    // Environment: base list + declared names + secrets.
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let server_settings = policy.server_settings(ServerRef::new(&server_name, &opts.server_id));
    let mut pass: Vec<String> = opts.pass_env.clone();
    pass.extend(server_settings.pass_env.iter().cloned());
    let (mut env, stripped) = filter_env(Os::current(), std::env::vars(), &pass);
    if !stripped.is_empty() {
        recorder.event(
            EngineEvent::new(
                "env_stripped",
                gatehouse_engine::Severity::Info,
                gatehouse_engine::Action::Allow,
                "env.isolated",
            )
            .reason(format!(
                "{} variable(s) not passed to the server; declare needed ones with --pass-env",
                stripped.len()
            ))
            .evidence(serde_json::json!({ "names": stripped })),
        );
    }
    let mut args: Vec<String> = opts.argv[1..].to_vec();
    let guard_key = crate::egress::guard_key(&install_key);
    let mut own_fingerprints = Vec::new();
    let mut secrets_missing = None;
    if !mismatch {
        // The policy's plain values (a `PATH` among them decides the program).
        for (name, value) in &server_settings.env {
            if let gatehouse_config::EnvValue::Literal(v) = value {
                env.push((name.clone(), v.clone()));
            }
        }
    }
    let path_var = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.into());
    let Some(exe) = child::resolve_program(&program, path_var.as_ref(), &cwd) else {
        return Err(start_failed(&recorder, WrapError::CommandNotFound(program)).await);
    };
    // Launch pinning (DESIGN §6): a changed executable, script or package
    // is held under on_launch_change = "hold" — no secrets, no tools —
    // until a person approves it.
    let (launch_held, launch_recording) = match &store {
        Some(store) if policy.pinning.launch_pinning && !mismatch => {
            let checked = crate::launch::check(
                store,
                &mac_key,
                &opts.server_id,
                &exe,
                &opts.argv,
                registered.as_ref().and_then(|s| s.launch.as_ref()),
                policy.pinning.on_launch_change == gatehouse_config::OnLaunchChange::Hold,
                &recorder,
                after_answer.clone(),
            )
            .await;
            (checked.held, Some(checked.recording))
        }
        _ => (None, None),
    };
    if let Some(reason) = &launch_held {
        eprintln!("gatehouse: {server_name}: {reason}");
    }
    let wants_secrets = wants_vault(&args, &server_settings);
    if !mismatch && !unverified && launch_held.is_none() {
        let injected = inject_secrets(
            &opts,
            &guard_key,
            &server_settings,
            registered
                .as_ref()
                .is_some_and(|s| s.origin == gatehouse_store::ServerOrigin::Protect),
            &mut env,
            &mut args,
            &recorder,
        );
        own_fingerprints = injected.fingerprints;
        recorder.keep_out(injected.values);
        secrets_missing = injected.keyring_unreadable.map(|why| SecretsMissing {
            rule: "vault.unavailable",
            event: "vault_unavailable",
            why,
        });
    } else if unverified {
        // Names only: whether it has secrets it will go without.
        let stored = || {
            opts.vault
                .as_deref()
                .is_some_and(|v| v.list(&opts.server_id).is_ok_and(|n| !n.is_empty()))
        };
        if wants_secrets || env.iter().any(|(_, v)| v.contains("{{vault:")) || stored() {
            secrets_missing = Some(SecretsMissing {
                rule: "identity.unverified",
                event: "vault_secret_withheld",
                why: "its launch command cannot be checked against the recorded one \
                      (database unavailable)"
                    .into(),
            });
        }
    } else if mismatch && args.iter().any(|a| a.contains("{{vault:")) {
        recorder.event(
            EngineEvent::new(
                "vault_secret_withheld",
                gatehouse_engine::Severity::High,
                gatehouse_engine::Action::Block,
                "identity.mismatch",
            )
            .reason("secrets are not injected into a server whose launch command changed"),
        );
    } else if launch_held.is_some() && (wants_secrets || registered.is_some()) {
        recorder.event(
            EngineEvent::new(
                "vault_secret_withheld",
                gatehouse_engine::Severity::High,
                gatehouse_engine::Action::Hold,
                "launch.held",
            )
            .reason(
                "secrets are not injected into a server whose launch changed until it is approved",
            ),
        );
    }
    let decision = policy.server_decision(
        ServerRef::new(&server_name, &opts.server_id),
        &program,
        exe.to_str(),
    );
    let max_frame = usize::try_from(policy.limits.max_frame_bytes).unwrap_or(usize::MAX);
    let mut held = Vec::new(); // issue 5: typosquatting (cross.rs)
    let typosquat = crate::cross::startup_checks(
        store.as_ref(),
        &known,
        &mac_key,
        &policy,
        &opts.server_id,
        &opts.argv,
        &mut held,
    )
    .await;
    held.into_iter().for_each(|e| recorder.event(e));
    let decision = typosquat.map_or(decision, |(rule, reason)| {
        gatehouse_config::Decision::Block { rule, reason }
    });
    // DESIGN §8, keyring locked or absent (or no identity to give secrets
    // to): fail_closed refuses `initialize` (nothing started, no secret
    // half-injected); otherwise the server starts without its secrets, loudly.
    let decision = match secrets_missing {
        Some(SecretsMissing { rule, event, why })
            if !matches!(decision, gatehouse_config::Decision::Block { .. }) =>
        {
            if policy.fail_closed() {
                gatehouse_config::Decision::Block {
                    rule: rule.into(),
                    reason: format!(
                        "{why}; the server needs its secrets and fail_closed is set, so it is not started"
                    ),
                }
            } else {
                eprintln!("gatehouse: {server_name}: {why}; starting it WITHOUT its secrets (fail_closed = false)");
                recorder.event(
                    EngineEvent::new(
                        event,
                        gatehouse_engine::Severity::High,
                        gatehouse_engine::Action::Alert,
                        rule,
                    )
                    .reason(format!(
                        "{why}; starting without secrets (fail_closed = false)"
                    )),
                );
                decision
            }
        }
        _ => decision,
    };
    let refusal = match decision {
        gatehouse_config::Decision::Block { rule, reason } => {
            if policy.is_audit_only() || crate::pause::paused_now(store.as_ref(), &mac_key).await {
                // Audit mode records what enforcement would do and blocks nothing.
                eprintln!("gatehouse: audit mode: would refuse {server_name}: {reason} ({rule})");
                recorder.event(
                    EngineEvent::new(
                        "mcp_server_refused",
                        gatehouse_engine::Severity::High,
                        gatehouse_engine::Action::Audit,
                        &rule,
                    )
                    .reason(format!("audit mode: would refuse to start: {reason}")),
                );
                None
            } else {
                Some((rule, reason))
            }
        }
        _ => None,
    };
    // Retention and the size cap (limits.*), off the start-up and call
    // paths, at most hourly per database.
    if let Some(store) = &store {
        let (store, policy) = (store.clone(), policy.clone());
        tokio::spawn(async move {
            tokio::time::sleep(crate::maintenance::AFTER_START).await;
            crate::maintenance::maintain_if_due(&store, &policy).await;
        });
    }

    // Started before the relay's own set-up below, which overlaps the
    // server's start-up instead of delaying it.
    let start = match refusal {
        None => match child::spawn(&exe, &args, &env) {
            Ok(server) => Start::Run(server),
            Err(source) => {
                let err = WrapError::Spawn {
                    command: program.clone(),
                    source,
                };
                return Err(start_failed(&recorder, err).await);
            }
        },
        Some((rule, reason)) => Start::Refuse { rule, reason },
    };
    drop(args);
    drop(env);
    // A matched identity was only read; its last-seen time is written with
    // the other start-up writes (a launch record writes it anyway), all
    // awaited on the way out.
    let mut start_writes: Vec<_> = policy_record.into_iter().collect();
    match launch_recording {
        Some(recording) => start_writes.push(recording),
        None => {
            if let (Some(store), Some(Identity::Match)) = (&store, &identity) {
                let (store, id, after) =
                    (store.clone(), opts.server_id.clone(), after_answer.clone());
                start_writes.push(tokio::spawn(async move {
                    after.wait().await;
                    let _ = store.seen(&id, now_ms() as i64).await;
                }));
            }
        }
    }

    // Secret egress guard (issue 6): publish ours, guard the others' (from
    // the server's first answer on, or the first call's need).
    let mut egress = crate::egress::Egress::start(
        store.clone(),
        guard_key,
        &opts.server_id,
        &pin_server_id,
        own_fingerprints,
        policy.is_audit_only(),
    );

    // Settings for the engine.
    // Pins that cannot be read are not "no pins": nothing is trusted at
    // first sight then (the poller brings the table once it reads).
    let (pins, pins_read) = match &store {
        Some(s) => {
            match crate::busy::retry_busy(|| read_pins(s, &mac_key, &pin_server_id)).await {
                Ok(pins) => (pins, true),
                Err(err) => {
                    eprintln!("gatehouse: {server_name}: could not read its pins ({err}); new tools are held");
                    (PinTable::default(), false)
                }
            }
        }
        None => (PinTable::default(), true),
    };
    // A replaced database (no pins while protect backups exist) trusts
    // nothing; one that protect itself recorded this server in is not
    // replaced, so the server's first session may pin at first sight.
    // (Asked only when first sight is otherwise possible: a known server
    // skips the query.)
    let protected_here = registered
        .as_ref()
        .is_some_and(|s| s.origin == gatehouse_store::ServerOrigin::Protect);
    // An identity not checked against a database that is there would
    // pin under the id what may be another program (without a database
    // nothing is recorded: DESIGN §8's relay).
    let may_trust_first = server_settings.pin_at_first_sight
        && !mismatch
        && !(unverified && store.is_some())
        && launch_held.is_none()
        && pins_read
        && pins.is_empty();
    let fresh_while_protected = match &store {
        Some(s) if may_trust_first && !protected_here => {
            // Unknown counts as fresh.
            !s.has_ever_pinned().await.unwrap_or(false) && protected_configs_exist(&home_dir)
        }
        _ => false,
    };
    let trust_first = may_trust_first && !fresh_while_protected;
    let settings = Settings {
        launch_held,
        ..engine_settings(&policy, &server_settings, &server_name, &opts, trust_first)
    };
    let inspector: Box<dyn Inspector + Send> = Box::new(scanner);
    let nonce = hex::encode(
        &Sha256::digest(format!(
            "{}{}{}",
            std::process::id(),
            now_ms(),
            opts.server_id
        ))[..6],
    );
    let loaded_pins = pins.clone();
    let mut relay = Relay::new(
        ServerInfo {
            server_id: opts.server_id.clone(),
        },
        settings,
        BoxedInspector(inspector),
        pins,
        &nonce,
    );
    let mut child = match start {
        Start::Run(child) => child,
        Start::Refuse { rule, reason } => {
            relay.refuse(&rule, &reason);
            eprintln!("gatehouse: refusing to start {server_name}: {reason} ({rule})");
            // No server will answer: the start-up writes go now.
            answered.open();
            return refuse_loop(relay, &recorder, max_frame).await;
        }
    };
    // The scanner's build, the session join, the start-up writes and the
    // pollers start once the server's first frame has been passed on:
    // started with the server they took a CPU from its start-up, and with
    // its first frame from the client waiting for it (2 cores here).
    let mut first_answer = Some((scanner_start, answered));
    let mut server_spoke = false;
    gatehouse_protocol::prepare_thread();
    let child_stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no child stdin"))?;
    let child_stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no child stdout"))?;

    let mut client_lines = line_reader(crate::stdio::client_stdin(), max_frame);
    let mut server_lines = line_reader(child_stdout, max_frame);
    let (pins_tx, pins_rx) = mpsc::channel::<PinTable>(4);
    let mut reloads = recorder.pin_reloads();
    if let Some(store) = &store {
        tokio::spawn(poll_pins(
            store.clone(),
            mac_key.clone(),
            pin_server_id.clone(),
            loaded_pins,
            after_answer.clone(),
            pins_tx,
        ));
    }
    let mut paused = crate::pause::follow(store.clone(), mac_key.clone(), after_answer);
    let mut controls = crate::control::merge(
        pins_rx,
        reloads.clone(),
        paused.clone(),
        crate::control::Signals::new()?,
    );
    let mut client_out = Outbox::new(crate::stdio::client_stdout());
    let mut server_out = Outbox::new(Box::new(child_stdin));
    let mut client_open = true;
    let mut stop_deadline: Option<tokio::time::Instant> = None;
    let mut server_exited = false;
    // Registered only while the client is not read (see `Hangup`).
    let mut hangup: Option<crate::stdio::Hangup> = None;
    let mut client_gone = false;
    let ctx = Dispatch {
        recorder: &recorder,
        pin_server_id: &pin_server_id,
    };
    let me = crate::cross::CrossIdentity {
        session: session.clone(),
        server_id: opts.server_id.clone(),
        pin_server_id: pin_server_id.clone(),
        command_hash: command_hash.clone(),
    };
    let rules = crate::cross::rules_for(&policy, &server_settings);
    let window_ms = rules.window_ms();
    // Joined in the background once the server first speaks (or the first
    // checked call, which waits for it, needs it): loading the session's
    // recent calls took the CPU from the server's start-up and delayed its
    // first answer (bench: +2 ms with 10,000 calls in the window).
    let (join_opener, join_gate) = crate::ready::gate();
    let joining = store.clone().map(|store| {
        let (home, session, server_id) = (home_dir.clone(), session.clone(), opts.server_id.clone());
        tokio::spawn(async move {
            join_gate.wait().await;
            crate::presence::Presence::join(store, &home, &session, &server_id, window_ms)
                .await
                .map_err(|err| {
                    warn!(%err, "could not join the client session; every call is checked in the database");
                })
                .ok()
        })
    });
    let mut cross = crate::cross::Cross::new(
        store.clone(),
        joining.map(|handle| (handle, join_opener)),
        me,
        &policy,
        rules,
        crate::cross::taint_key(&install_key),
    );

    let mut inbox = crate::inbox::Inbox::new(
        store.clone(),
        crate::inbox::Asker {
            server_id: opts.server_id.clone(),
            server_name: server_name.clone(),
            command: shorten(&opts.argv.join(" "), 200),
        },
        opts.inbox_timeout,
    );

    // The loop's turns, for the idle trim (one relaxed add per turn).
    let turns = Arc::new(AtomicU64::new(0));
    let code = crate::memory::code_segments();
    tokio::spawn(crate::memory::trim_when_idle(
        Arc::clone(&turns),
        crate::memory::IdleTrim {
            free: crate::memory::release_free_memory,
            code: move || crate::memory::release_code_pages(&code),
        },
    ));

    // One timer for the relay's next deadline and the stop deadline, moved
    // only when they change (a timer made each turn costs two locks).
    let timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(timer);
    let mut armed: Option<(Option<u64>, Option<tokio::time::Instant>)> = None;
    let exit = loop {
        turns.fetch_add(1, Ordering::Relaxed);
        let due = (relay.next_deadline_ms(), stop_deadline);
        if due == (None, None) {
            armed = None;
        } else if armed != Some(due) {
            let tick = due.0.map(|at| {
                tokio::time::Instant::now() + Duration::from_millis(at.saturating_sub(relay_ms()))
            });
            if let Some(at) = tick.into_iter().chain(due.1).min() {
                timer.as_mut().reset(at);
            }
            armed = Some(due);
        }
        // Each side is read only while the other side's backlog is short, and
        // sends never wait (see `Outbox`), so a pipelining client and a slow
        // server cannot hold each other on full pipes.
        let outputs = tokio::select! {
            _ = client_out.writable() => {
                // A client still reading the exited server's last frames
                // keeps the drain going: its clock restarts on each frame.
                if server_exited {
                    let drained = tokio::time::Instant::now() + EXIT_DRAIN;
                    stop_deadline = stop_deadline.max(Some(drained));
                }
                Vec::new()
            }
            _ = server_out.writable() => {
                // A server still taking the client's last requests is
                // given its grace again.
                if (!client_open || client_gone) && stop_deadline.is_some() && !server_exited {
                    stop_deadline = Some(tokio::time::Instant::now() + STOP_GRACE);
                }
                Vec::new()
            }
            // Our own answers count too: a client that does not read them
            // is not read either.
            line = next_line(&mut client_lines), if client_open && server_out.has_room() && client_out.has_room() => match line {
                Line::Frame(bytes) => {
                    let mut out = Vec::new();
                    // Another process may have pinned a tool first: that
                    // is settled before a call is judged against its pin.
                    if recorder.first_sights_pending() {
                        recorder.flush_pins().await;
                    }
                    if reloads.has_changed().unwrap_or(false) {
                        if let Some(pins) = reloads.borrow_and_update().clone() {
                            out.extend(relay.on_pins_reloaded(pins, relay_ms()));
                        }
                    }
                    out.extend(relay.on_client_frame(parse_frame(bytes), relay_ms()));
                    out
                }
                Line::Oversized(skipped) => {
                    let peeked = peek(&skipped.head, &skipped.tail);
                    relay.on_client_oversized(skipped.len, max_frame, peeked)
                }
                Line::Eof => {
                    client_open = false;
                    Vec::new()
                }
            },
            // A server that sends without reading its input is not read
            // either once Gatehouse's answers to it pile up.
            line = next_line(&mut server_lines), if client_out.has_room() && server_out.takes_answers() => {
                server_spoke = true;
                match line {
                    Line::Frame(bytes) => relay.on_server_frame(parse_frame(bytes), relay_ms()),
                    Line::Oversized(skipped) => {
                        let peeked = peek(&skipped.head, &skipped.tail);
                        relay.on_server_oversized(skipped.len, max_frame, peeked, relay_ms())
                    }
                    Line::Eof => break None,
                }
            }
            Some(control) = controls.recv() => match control {
                Control::Pins(pins) => relay.on_pins_reloaded(pins, relay_ms()),
                // Unless a call already took it (above).
                Control::Reloaded if reloads.has_changed().unwrap_or(false) => {
                    match reloads.borrow_and_update().clone() {
                        Some(pins) => relay.on_pins_reloaded(pins, relay_ms()),
                        None => Vec::new(),
                    }
                }
                Control::Reloaded => Vec::new(),
                Control::Paused => {
                    let audit_only = policy.is_audit_only() || *paused.borrow_and_update();
                    debug!(audit_only, "protection pause changed");
                    relay.set_audit_only(audit_only);
                    egress.set_audit_only(audit_only);
                    Vec::new()
                }
                Control::Signal(sig) => {
                    debug!(signal = sig, "stopping the server");
                    child::terminate(&child);
                    if tokio::time::timeout(STOP_GRACE, child.wait()).await.is_err() {
                        child::kill(&child);
                    }
                    break Some(128 + sig);
                }
            },
            Some(note) = inbox.recv() => inbox.outputs(note, &relay),
            // Not read while the server takes nothing: has the client left?
            _ = async { hangup.get_or_insert_with(crate::stdio::Hangup::client).wait().await },
                if client_open && !client_gone && !server_out.has_room() => {
                client_gone = true;
                stop_deadline.get_or_insert(tokio::time::Instant::now() + STOP_GRACE);
                Vec::new()
            }
            // The server ended, though its stdout may stay open (a process
            // it started holds it): what it wrote is read for a moment.
            _ = child.wait(), if !server_exited => {
                server_exited = true;
                // Behind a client that is not reading, the drain waits as
                // long as a client that stopped reading holds wrap open.
                let drain = if client_out.has_room() { EXIT_DRAIN } else { STOP_GRACE };
                let drained = tokio::time::Instant::now() + drain;
                stop_deadline = Some(stop_deadline.map_or(drained, |at| at.min(drained)));
                Vec::new()
            }
            _ = &mut timer, if armed.is_some() => {
                armed = None;
                if stop_deadline.is_some_and(|at| at <= tokio::time::Instant::now()) {
                    child::terminate(&child);
                    let status = tokio::time::timeout(STOP_GRACE, child.wait()).await;
                    if status.is_err() {
                        child::kill(&child);
                    }
                    break None;
                }
                relay.on_tick(relay_ms())
            }
        };
        let outputs = egress.filter(outputs).await;
        let (outputs, late_marks) = cross.filter(outputs, &relay).await;
        let outputs = inbox.take(outputs);
        for output in &outputs {
            if let Output::Settled(id) = output {
                relay.forget(id);
            }
        }
        ctx.dispatch(outputs, &mut client_out, &mut server_out);
        if server_spoke {
            if let Some((scanner_start, answered)) = first_answer.take() {
                scanner_start.start();
                cross.start_joining();
                egress.start_loading();
                answered.open();
            }
        }
        // The results went (written now when the pipe had room); their
        // marks are taken on another thread, the session lock released.
        if let Some(late) = late_marks {
            cross.attach_late(late);
        }
        if server_out.has_room() {
            hangup = None;
        }
        if !client_open && server_out.is_open() && !relay.has_outstanding_work() {
            // The client is gone and our own requests are answered: the
            // server gets a moment to finish on its own, its stdin closed
            // once it took what the client sent (a server that stops
            // taking it is stopped all the same).
            if stop_deadline.is_none() {
                stop_deadline = Some(tokio::time::Instant::now() + STOP_GRACE);
            }
            if server_out.is_idle() {
                server_out.close();
            }
        }
    };

    drop(server_out);
    // A client that stopped reading does not hold wrap open.
    let _ = tokio::time::timeout(STOP_GRACE, client_out.finish()).await;
    let code = match exit {
        Some(code) => code,
        None => match tokio::time::timeout(STOP_GRACE, child.wait()).await {
            Ok(Ok(status)) => child::exit_code(status),
            _ => {
                child::kill(&child);
                child.wait().await.map(child::exit_code).unwrap_or(1)
            }
        },
    };
    if exit.is_none() && client_open && !client_gone {
        // The server hung up on a connected client: the client only sees
        // its stream end, so say why where its log and the dashboard show.
        let reason = format!(
            "the server {server_name:?} exited with status {code} while its client was connected"
        );
        eprintln!("gatehouse: {reason}");
        let severity = if code == 0 {
            gatehouse_engine::Severity::Info
        } else {
            gatehouse_engine::Severity::Low
        };
        recorder.event(
            EngineEvent::new(
                "mcp_server_exited",
                severity,
                gatehouse_engine::Action::Allow,
                "server.exited",
            )
            .reason(reason)
            .evidence(serde_json::json!({ "status": code })),
        );
    }
    cross.leave().await;
    inbox.leave().await;
    // A server that never spoke: its start-up writes go now.
    drop(first_answer);
    let start_writes = async {
        for write in start_writes {
            let _ = write.await;
        }
    };
    let _ = tokio::time::timeout(STOP_GRACE, start_writes).await;
    recorder.finish().await;
    if let Some(store) = &store {
        // The last process to close the database folds its write-ahead log
        // back in and removes it, so the next first opener has none to
        // replay (0.5 ms per 4 MB at every wrap start). What could still
        // use the store — the launch record, events, pins — is done.
        store.close().await;
    }
    Ok(code)
}

/// The server could not be started: recorded, so the dashboard says why
/// the client's server is missing, then returned for the CLI to print.
async fn start_failed(recorder: &Recorder, err: WrapError) -> WrapError {
    let reason = match std::error::Error::source(&err) {
        Some(source) => format!("{err}: {source}"),
        None => err.to_string(),
    };
    recorder.event(
        EngineEvent::new(
            "mcp_server_start_failed",
            gatehouse_engine::Severity::Medium,
            gatehouse_engine::Action::Alert,
            "server.start_failed",
        )
        .reason(reason),
    );
    recorder.finish().await;
    err
}

/// What the start-up checks decided: run the server, or answer every
/// request with the refusal and start nothing.
enum Start {
    Run(child::Server),
    Refuse { rule: String, reason: String },
}

/// A boxed inspector, so the relay's type does not depend on the choice.
struct BoxedInspector(Box<dyn Inspector + Send>);

impl Inspector for BoxedInspector {
    fn scan_tool(&self, tool: &serde_json::Value) -> Vec<gatehouse_engine::Finding> {
        self.0.scan_tool(tool)
    }
    fn scan_instructions(&self, text: &str) -> Vec<gatehouse_engine::Finding> {
        self.0.scan_instructions(text)
    }
    fn scan_listed(&self, m: &str, item: &serde_json::Value) -> Vec<gatehouse_engine::Finding> {
        self.0.scan_listed(m, item)
    }
    fn scan_result(&self, m: &str, r: &serde_json::Value) -> Vec<gatehouse_engine::Finding> {
        self.0.scan_result(m, r)
    }
    fn scan_error(&self, e: &serde_json::Value) -> Vec<gatehouse_engine::Finding> {
        self.0.scan_error(e)
    }
    fn scan_server_request(
        &self,
        m: &str,
        p: &serde_json::Value,
    ) -> Vec<gatehouse_engine::Finding> {
        self.0.scan_server_request(m, p)
    }
    fn scan_notification(&self, m: &str, p: &serde_json::Value) -> Vec<gatehouse_engine::Finding> {
        self.0.scan_notification(m, p)
    }
}

struct Dispatch<'a> {
    recorder: &'a Recorder,
    pin_server_id: &'a str,
}

impl Dispatch<'_> {
    fn dispatch(&self, outputs: Vec<Output>, client: &mut Outbox, server: &mut Outbox) {
        for output in outputs {
            match output.written() {
                Output::ToClient(bytes) => client.push(bytes),
                Output::ToServer(bytes) => server.push(bytes),
                Output::Event(event) => self.recorder.event(event),
                Output::Persist(update) => self.recorder.persist(self.pin_server_id, update),
                // `Inbox::take` has taken these already; a passed frame
                // was written out above.
                Output::Inbox(_) | Output::Pass { .. } | Output::Settled(_) => {}
            }
        }
    }
}

/// A refused server: no child; every request is answered with the refusal.
async fn refuse_loop<I: Inspector>(
    mut relay: Relay<I>,
    recorder: &Recorder,
    max_frame: usize,
) -> Result<i32, WrapError> {
    let mut to_client = Outbox::new(crate::stdio::client_stdout());
    let mut lines = line_reader(crate::stdio::client_stdin(), max_frame);
    loop {
        // Requests are read while the answers' backlog is short, as in the
        // relay loop: a client that writes many before reading any is not
        // held on a full pipe.
        let outputs = tokio::select! {
            _ = to_client.writable() => continue,
            line = next_line(&mut lines), if to_client.has_room() => match line {
                Line::Frame(bytes) => relay.on_client_frame(parse_frame(bytes), relay_ms()),
                Line::Oversized(skipped) => {
                    let peeked = peek(&skipped.head, &skipped.tail);
                    relay.on_client_oversized(skipped.len, max_frame, peeked)
                }
                Line::Eof => break,
            },
        };
        for output in outputs {
            match output.written() {
                Output::ToClient(b) => to_client.push(b),
                Output::Event(e) => recorder.event(e),
                _ => {}
            }
        }
    }
    let _ = tokio::time::timeout(STOP_GRACE, to_client.finish()).await;
    recorder.finish().await;
    Ok(1)
}

/// Frames from one peer, read on the relay's own task: the loop selects on
/// both peers' next frame (a read that loses the race keeps its partial
/// frame), so neither side waits on the other and a frame costs no hand-off
/// between tasks.
fn line_reader<R: tokio::io::AsyncRead + Unpin>(reader: R, max: usize) -> LineReader<BufReader<R>> {
    LineReader::new(BufReader::with_capacity(64 * 1024, reader), max)
}

/// The next frame; a failed read ends the side like EOF.
async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(lines: &mut LineReader<R>) -> Line {
    lines.next().await.unwrap_or_else(|err| {
        debug!(%err, "read failed");
        Line::Eof
    })
}

/// Events and pin changes are written by one background task, off the hot path.
#[derive(Clone)]
pub(crate) struct Recorder {
    events: mpsc::UnboundedSender<Record<EngineEvent>>,
    /// Events queued for the writer, and those given up at the cap.
    backlog: Arc<EventBacklog>,
    /// Ends the events writer's gathering window early: a flush is sent.
    flushing: Arc<Notify>,
    pins: mpsc::UnboundedSender<Record<(String, PinUpdate)>>,
    /// The server's injected secrets, cut from every event written.
    scrubber: Arc<std::sync::OnceLock<crate::scrub::Scrubber>>,
    /// First-sight pins queued and not yet written (another process may
    /// have pinned the tool first).
    first_sights: Arc<AtomicUsize>,
    /// The pins reloaded after a first sight was lost, for the relay.
    reloads: watch::Receiver<Option<PinTable>>,
}

/// Events waiting for the recorder's writer. A database slower than the
/// events come (locked for long by another process, a server flooding
/// findings) must not grow wrap's memory without end: past
/// [`MAX_QUEUED_EVENTS`] an event is counted instead of kept, and the
/// count is written as one `events_dropped` event once the writer catches up.
#[derive(Default)]
struct EventBacklog {
    queued: AtomicUsize,
    dropped: AtomicUsize,
}

/// Events queued for the writer at most.
const MAX_QUEUED_EVENTS: usize = 4096;

impl EventBacklog {
    /// Queues `event` unless the queue is full (then counts it).
    fn queue(&self, tx: &mpsc::UnboundedSender<Record<EngineEvent>>, event: EngineEvent) {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= MAX_QUEUED_EVENTS {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            self.dropped.fetch_add(1, Ordering::AcqRel);
            return;
        }
        if tx.send(Record::Write(event)).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// `n` events taken by the writer.
    fn taken(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::AcqRel);
    }

    /// The event saying how many were given up since the last one.
    fn dropped_event(&self) -> Option<EngineEvent> {
        let dropped = self.dropped.swap(0, Ordering::AcqRel);
        (dropped > 0).then(|| {
            EngineEvent::new(
                "events_dropped",
                gatehouse_engine::Severity::Medium,
                gatehouse_engine::Action::Alert,
                "recorder.backlog",
            )
            .reason(format!(
                "{dropped} event(s) not recorded: more than {MAX_QUEUED_EVENTS} waited for a slow database"
            ))
        })
    }
}

/// What one recorder writer is sent: an item to write, or a flush request.
enum Record<T> {
    Write(T),
    /// Answered once everything queued before it is written.
    Flush(tokio::sync::oneshot::Sender<()>),
}

impl Recorder {
    fn start(store: Option<Store>, key: MacKey, server_id: String, session: String) -> Recorder {
        // Two writers, so events are never queued behind pin persistence
        // (a first-sight list is dozens of transactions).
        let (events, mut events_rx) = mpsc::unbounded_channel::<Record<EngineEvent>>();
        let (pins, mut pins_rx) = mpsc::unbounded_channel::<Record<(String, PinUpdate)>>();
        let (reload, reloads) = watch::channel(None);
        let event_store = store.clone();
        let conflicts = events.clone();
        let backlog = Arc::new(EventBacklog::default());
        let taking = Arc::clone(&backlog);
        let conflicts_backlog = Arc::clone(&backlog);
        let first_sights = Arc::new(AtomicUsize::new(0));
        let written = Arc::clone(&first_sights);
        let flushing = Arc::new(Notify::new());
        let flush_asked = Arc::clone(&flushing);
        let scrubber = Arc::new(std::sync::OnceLock::<crate::scrub::Scrubber>::new());
        let scrubbing = Arc::clone(&scrubber);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(RECORD_BATCH);
            let mut pending = Vec::new();
            // Everything queued at once, and whatever follows within
            // `RECORD_GATHER`, is written in one transaction: one commit per
            // burst of calls instead of one per call.
            while events_rx.recv_many(&mut batch, RECORD_BATCH).await > 0 {
                gather(&mut events_rx, &mut batch, &flush_asked).await;
                let mut flushed = Vec::new();
                for record in batch.drain(..) {
                    match record {
                        Record::Write(mut e) => {
                            taking.taken(1);
                            if let Some(scrubber) = scrubbing.get() {
                                scrubber.scrub(&mut e);
                            }
                            pending.push(new_event(e, &server_id, &session));
                        }
                        Record::Flush(done) => flushed.push(done),
                    }
                }
                if let Some(dropped) = taking.dropped_event() {
                    pending.push(new_event(dropped, &server_id, &session));
                }
                write_events(event_store.as_ref(), &mut pending).await;
                for done in flushed {
                    let _ = done.send(());
                }
            }
        });
        tokio::spawn(async move {
            while let Some(record) = pins_rx.recv().await {
                let (pin_server, update) = match record {
                    Record::Write(write) => write,
                    Record::Flush(done) => {
                        let _ = done.send(());
                        continue;
                    }
                };
                let first_sight = matches!(update, PinUpdate::TrustFirst { .. });
                if let Some(store) = &store {
                    let persisted = crate::busy::retry_busy(|| {
                        persist_pin(store, &key, &pin_server, update.clone())
                    })
                    .await;
                    match persisted {
                        Ok(None) => {}
                        Ok(Some(lost)) => {
                            conflicts_backlog.queue(&conflicts, lost);
                            // Unread, the relay keeps its own (the poller reads again).
                            if let Ok(pins) = read_pins(store, &key, &pin_server).await {
                                reload.send_replace(Some(pins));
                            }
                        }
                        Err(err) => eprintln!("gatehouse: could not persist a pin: {err}"),
                    }
                }
                // Only now: a call waiting on it sees the reloaded pins.
                if first_sight {
                    written.fetch_sub(1, Ordering::AcqRel);
                }
            }
        });
        Recorder {
            events,
            backlog,
            flushing,
            pins,
            scrubber,
            first_sights,
            reloads,
        }
    }

    /// From now on these values (the server's injected secrets) are cut
    /// from every event before it is written. Set once.
    fn keep_out(&self, values: Vec<gatehouse_vault::Secret<String>>) {
        let _ = self.scrubber.set(crate::scrub::Scrubber::new(values));
    }

    pub(crate) fn event(&self, event: EngineEvent) {
        self.backlog.queue(&self.events, event);
    }

    fn persist(&self, server: &str, update: PinUpdate) {
        if matches!(update, PinUpdate::TrustFirst { .. }) {
            self.first_sights.fetch_add(1, Ordering::AcqRel);
        }
        let _ = self.pins.send(Record::Write((server.to_string(), update)));
    }

    /// The pins reloaded after a first sight was lost to another process.
    fn pin_reloads(&self) -> watch::Receiver<Option<PinTable>> {
        self.reloads.clone()
    }

    /// Whether first-sight pins wait to be written.
    fn first_sights_pending(&self) -> bool {
        self.first_sights.load(Ordering::Acquire) > 0
    }

    /// Waits (boundedly) until the pin changes queued so far are written
    /// (and a lost first sight's reloaded pins sent).
    async fn flush_pins(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        let _ = self.pins.send(Record::Flush(done));
        let _ = tokio::time::timeout(Duration::from_secs(3), wait).await;
    }

    /// Waits (boundedly) until everything queued so far is written.
    async fn finish(&self) {
        let (events_done, events_wait) = tokio::sync::oneshot::channel();
        let (pins_done, pins_wait) = tokio::sync::oneshot::channel();
        let _ = self.events.send(Record::Flush(events_done));
        self.flushing.notify_one();
        let _ = self.pins.send(Record::Flush(pins_done));
        let both = async {
            let _ = events_wait.await;
            let _ = pins_wait.await;
        };
        if tokio::time::timeout(Duration::from_secs(3), both)
            .await
            .is_err()
        {
            eprintln!("gatehouse: gave up waiting for event records to be written");
        }
    }
}

/// Records the recorder writes per transaction at most.
const RECORD_BATCH: usize = 256;
/// How long the recorder waits for more events after the first of a batch.
/// A write per call cost more CPU than the rest of wrap's work on a 1 KB
/// call; nobody reading the events notices 20 ms.
const RECORD_GATHER: Duration = Duration::from_millis(20);

/// Adds to `batch` what arrives within [`RECORD_GATHER`] (up to
/// [`RECORD_BATCH`]), or at once when `batch` is full, holds a flush or
/// `flushing` is notified (a flush is answered at once; a backlog is
/// written without waiting). The events that arrive
/// meanwhile do not wake the writer: one timer per batch, not a wake-up
/// and a timer per call on the relay's thread.
async fn gather<T>(
    rx: &mut mpsc::UnboundedReceiver<Record<T>>,
    batch: &mut Vec<Record<T>>,
    flushing: &Notify,
) {
    if batch.len() < RECORD_BATCH && !batch.iter().any(|r| matches!(r, Record::Flush(_))) {
        let _ = tokio::time::timeout(RECORD_GATHER, flushing.notified()).await;
    }
    while batch.len() < RECORD_BATCH {
        match rx.try_recv() {
            Ok(record) => batch.push(record),
            Err(_) => return,
        }
    }
}

/// Tries for one batch of events (20 ms, doubling, between tries).
const RECORD_ATTEMPTS: u32 = 5;

fn new_event(e: EngineEvent, server_id: &str, session: &str) -> NewEvent {
    NewEvent {
        time_ms: now_ms() as i64,
        event_type: e.kind.to_string(),
        server_id: Some(server_id.to_string()),
        tool: e.tool,
        action: store_action(e.action),
        rule: Some(e.rule),
        severity: gatehouse_store::Severity::parse(e.severity.as_str())
            .unwrap_or(gatehouse_store::Severity::Info),
        reason: e.reason,
        evidence_json: (!e.evidence.is_null()).then(|| e.evidence.to_string()),
        session: Some(session.to_string()),
    }
}

async fn write_events(store: Option<&Store>, events: &mut Vec<NewEvent>) {
    if events.is_empty() {
        return;
    }
    match store {
        Some(store) => {
            // Off the hot path: a busy database is waited out a few times
            // before events are given up (and said so on stderr).
            let mut delay = Duration::from_millis(20);
            for attempt in 1..=RECORD_ATTEMPTS {
                match store.insert_events(events).await {
                    Ok(_) => break,
                    Err(err) if attempt == RECORD_ATTEMPTS => {
                        eprintln!(
                            "gatehouse: could not record {} event(s): {err}",
                            events.len()
                        );
                    }
                    Err(_) => {
                        tokio::time::sleep(delay).await;
                        delay *= 2;
                    }
                }
            }
        }
        None => {
            for e in events.iter() {
                warn!(kind = %e.event_type, rule = ?e.rule, "event not recorded: no database");
            }
        }
    }
    events.clear();
}

fn store_action(action: gatehouse_engine::Action) -> gatehouse_store::Action {
    match action {
        gatehouse_engine::Action::Allow => gatehouse_store::Action::Allow,
        gatehouse_engine::Action::Audit => gatehouse_store::Action::Audit,
        gatehouse_engine::Action::Alert => gatehouse_store::Action::Alert,
        // A dropped frame is a block of that frame.
        gatehouse_engine::Action::Block | gatehouse_engine::Action::Drop => {
            gatehouse_store::Action::Block
        }
        gatehouse_engine::Action::Hold => gatehouse_store::Action::Hold,
    }
}

/// Persists one pin update. A first-sight trust that lost to another
/// process (the tool was pinned meanwhile with another definition) holds
/// this definition instead and returns the event saying so.
async fn persist_pin(
    store: &Store,
    key: &MacKey,
    server_id: &str,
    update: PinUpdate,
) -> gatehouse_store::Result<Option<EngineEvent>> {
    let now = now_ms() as i64;
    let (tool, hash, definition) = match &update {
        PinUpdate::TrustFirst {
            tool,
            hash,
            definition,
        }
        | PinUpdate::Trust {
            tool,
            hash,
            definition,
        }
        | PinUpdate::Hold {
            tool,
            hash,
            definition,
            ..
        }
        | PinUpdate::Quarantine {
            tool,
            hash,
            definition,
            ..
        } => (tool.as_str(), hash.as_str(), definition),
        PinUpdate::Seen { .. } => return Ok(None),
    };
    // The definition first: a pin names a recorded hash.
    let seen = gatehouse_store::SeenTool {
        server_id: server_id.to_string(),
        name: tool.to_string(),
        hash: hash.to_string(),
        hash_version: i64::from(HASH_VERSION),
        definition_json: definition.to_string(),
    };
    store.record_seen_tool(key, &seen, now).await?;
    match &update {
        PinUpdate::TrustFirst { .. } => {
            if store
                .pin_first_sight(key, server_id, tool, hash, now)
                .await?
            {
                return Ok(None);
            }
            let pinned = store.get_pin(key, server_id, tool).await?;
            let pinned_hash = pinned.as_ref().and_then(|p| p.trusted_hash());
            if pinned_hash == Some(hash) {
                return Ok(None);
            }
            store
                .hold_tool(key, server_id, tool, hash, HoldState::Held, None, now)
                .await?;
            return Ok(Some(
                EngineEvent::new(
                    "mcp_tool_changed",
                    gatehouse_engine::Severity::High,
                    gatehouse_engine::Action::Hold,
                    "pin.held",
                )
                .tool(tool)
                .reason(format!(
                    "another process of this server's first session pinned a different \
                     definition first: held until a person approves hash {hash}"
                ))
                .evidence(serde_json::json!({ "previous": pinned_hash, "hash": hash })),
            ));
        }
        PinUpdate::Trust { .. } => {
            store.approve_tool(key, server_id, tool, hash, now).await?;
        }
        PinUpdate::Hold { .. } => {
            store
                .hold_tool(key, server_id, tool, hash, HoldState::Held, None, now)
                .await?;
        }
        PinUpdate::Quarantine { findings, .. } => {
            let findings = findings.to_string();
            store
                .hold_tool(
                    key,
                    server_id,
                    tool,
                    hash,
                    HoldState::Quarantined,
                    Some(&findings),
                    now,
                )
                .await?;
        }
        PinUpdate::Seen { .. } => {}
    }
    Ok(None)
}

/// The per-install MAC key (shared with the CLI and the control plane) and
/// a key derived from it for credential fingerprints in scanner evidence.
pub fn load_mac_key(home_dir: &Path) -> std::io::Result<(MacKey, [u8; 32])> {
    home::install_key(home_dir).map(derive_keys)
}

/// The MAC key and the scanner's fingerprint key of an install key.
fn derive_keys(bytes: [u8; 32]) -> (MacKey, [u8; 32]) {
    let fingerprint: [u8; 32] = Sha256::new()
        .chain_update(b"gatehouse.fingerprint.v1")
        .chain_update(bytes)
        .finalize()
        .into();
    (MacKey::new(bytes), fingerprint)
}

async fn read_pins(
    store: &Store,
    key: &MacKey,
    server_id: &str,
) -> gatehouse_store::Result<PinTable> {
    let mut table = PinTable::default();
    for pin in store.pins_of_server(key, server_id).await? {
        let state = match pin.state {
            gatehouse_store::PinState::Trusted => PinState::Trusted,
            gatehouse_store::PinState::Held => PinState::Held,
            gatehouse_store::PinState::Quarantined => PinState::Quarantined,
            gatehouse_store::PinState::Rejected => PinState::Rejected,
        };
        let approved_hash = pin.approved_hash.clone().filter(|_| pin.mac_valid);
        table.pins.insert(
            pin.tool.clone(),
            PinEntry {
                // A row with a bad MAC is never trusted.
                state: if pin.mac_valid { state } else { PinState::Held },
                approved_hash,
                pending_hash: pin.pending_hash.clone(),
            },
        );
    }
    Ok(table)
}

/// Notices approvals (from the CLI or the dashboard) once `after` opens:
/// cheap `PRAGMA data_version` polling, pins read again only after a
/// commit, and once right after the first `data_version`, so nothing
/// committed since `loaded` was read at start is missed; a read that fails
/// is tried again at the next poll.
async fn poll_pins(
    store: Store,
    key: MacKey,
    server_id: String,
    loaded: PinTable,
    after: crate::ready::Gate,
    tx: mpsc::Sender<PinTable>,
) {
    after.wait().await;
    let mut version = store.data_version().await.ok();
    let mut sent = loaded;
    let mut stale = true;
    loop {
        if stale {
            match read_pins(&store, &key, &server_id).await {
                Ok(pins) => {
                    stale = false;
                    if pins != sent {
                        sent = pins.clone();
                        if tx.send(pins).await.is_err() {
                            return;
                        }
                    }
                }
                // The process is exiting.
                Err(gatehouse_store::StoreError::Closed) => return,
                Err(err) => warn!(%err, "could not reload pins; trying again"),
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
        if tx.is_closed() {
            return;
        }
        if let Ok(now) = store.data_version().await {
            stale |= version.replace(now) != Some(now);
        }
    }
}

/// The policy in force: the file's when it is valid (remembered as the last
/// good one once `after` opens, by the task returned), else the last good
/// policy from the database, loudly.
async fn settle_policy(
    from_file: Result<LoadedPolicy, gatehouse_config::PolicyError>,
    store: Option<&Store>,
    recorder: &Recorder,
    after: crate::ready::Gate,
) -> (Policy, Option<tokio::task::JoinHandle<()>>) {
    match from_file {
        Ok(loaded) => {
            let remembering = store.map(|store| {
                let store = store.clone();
                let text = loaded.last_good_record();
                tokio::spawn(async move {
                    after.wait().await;
                    remember_good_policy(&store, &text).await;
                })
            });
            (loaded.policy, remembering)
        }
        Err(err) => {
            eprintln!("gatehouse: policy is invalid, keeping the last good policy:\n{err}");
            recorder.event(
                EngineEvent::new(
                    gatehouse_store::event_types::POLICY_INVALID,
                    gatehouse_engine::Severity::High,
                    gatehouse_engine::Action::Alert,
                    "policy.invalid",
                )
                .reason(format!(
                    "policy file is invalid; running on the last good policy: {err}"
                )),
            );
            (last_good_policy(store).await, None)
        }
    }
}

const LAST_GOOD_KEY: &str = "policy.last_good";

async fn remember_good_policy(store: &Store, text: &str) {
    if store
        .get_meta(LAST_GOOD_KEY)
        .await
        .ok()
        .flatten()
        .as_deref()
        != Some(text)
    {
        let _ = store.set_meta(LAST_GOOD_KEY, text).await;
    }
}

async fn last_good_policy(store: Option<&Store>) -> Policy {
    if let Some(store) = store {
        if let Ok(Some(text)) = store.get_meta(LAST_GOOD_KEY).await {
            if let Ok(loaded) = gatehouse_config::compile_last_good(&text) {
                return loaded.policy;
            }
        }
    }
    gatehouse_config::check_text("built-in defaults", gatehouse_config::default_policy_toml())
        .map(|l| l.policy)
        .unwrap_or_else(|_| unreachable_default())
}

fn unreachable_default() -> Policy {
    // The shipped default is tested to parse; this only satisfies the types.
    gatehouse_config::check_text("empty", "")
        .expect("an empty policy is valid")
        .policy
}

/// What the scanner thread needs, taken from the policy now.
fn scanner_builder(
    policy: &Policy,
    fingerprint_key: &[u8],
) -> impl FnOnce() -> Result<gatehouse_scanner::Scanner, String> + Send + 'static {
    let mut custom = Vec::new();
    for p in &policy.scanner.custom_patterns {
        custom.push(gatehouse_scanner::CustomPattern {
            id: p.id.clone(),
            regex: p.regex.as_str().to_string(),
            family: p
                .family
                .parse()
                .unwrap_or(gatehouse_scanner::Family::Custom),
            severity: format!("{:?}", p.severity)
                .to_lowercase()
                .parse()
                .unwrap_or(gatehouse_scanner::Severity::High),
        });
    }
    let fingerprint_key = fingerprint_key.to_vec();
    move || {
        gatehouse_scanner::Scanner::new(gatehouse_scanner::ScannerConfig {
            custom_patterns: custom,
            fingerprint_key,
        })
        .map_err(|e| e.to_string())
    }
}

fn engine_settings(
    policy: &Policy,
    server: &gatehouse_config::ServerSettings,
    server_name: &str,
    opts: &WrapOptions,
    trust_first: bool,
) -> Settings {
    let pinning = &policy.pinning;
    let lists = &policy.tool_lists;
    let scanner = &policy.scanner;
    let requests = &policy.requests;
    let command = opts.argv.join(" ");
    Settings {
        audit_only: policy.is_audit_only(),
        trust_first_sight: trust_first,
        on_change: match pinning.on_change {
            gatehouse_config::OnChange::Block => OnChange::Block,
            gatehouse_config::OnChange::Alert => OnChange::Alert,
            gatehouse_config::OnChange::Allow => OnChange::Allow,
        },
        lock_tool_list: lists.lock_tool_list,
        max_tools: lists.max_tools_per_server as usize,
        scan_definitions: scanner.definitions,
        scan_results: scanner.outputs,
        spotlight_results: scanner.spotlight_results,
        result_action: match scanner.result_action {
            gatehouse_config::ResultAction::Block => ResultAction::Block,
            _ => ResultAction::Alert,
        },
        restricted: server.trust == Trust::Restricted,
        elicitation_allowed: server.may_elicit,
        sampling_allowed: server.may_sample,
        roots_allowed: server.may_list_roots,
        sampling_context: match requests.sampling_include_context {
            gatehouse_config::SamplingContext::Allow => SamplingContext::Allow,
            gatehouse_config::SamplingContext::Strip => SamplingContext::Strip,
            gatehouse_config::SamplingContext::Decline => SamplingContext::Decline,
        },
        sensitive_elicitation: match requests.elicitation_sensitive_fields {
            gatehouse_config::SensitiveFields::Warn => SensitiveElicitation::Warn,
            gatehouse_config::SensitiveFields::Route => SensitiveElicitation::Inbox,
            gatehouse_config::SensitiveFields::Decline => SensitiveElicitation::Decline,
        },
        elicitation_inbox: server.elicit_via_inbox,
        launch_held: None,
        list_changed_interval_ms: lists.refresh_coalesce.as_millis() as u64,
        server_label: format!("{server_name} ({})", shorten(&command, 80)),
        policy: Box::new(BoundPolicy {
            policy: policy.clone(),
            server_name: server_name.to_string(),
            server_id: opts.server_id.clone(),
        }),
    }
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}…")
}

/// What [`inject_secrets`] did.
#[derive(Default)]
struct Injected {
    /// Keyed fingerprints of the secrets it fetched (egress guard).
    fingerprints: Vec<gatehouse_vault::SecretFingerprint>,
    /// The values it fetched, to keep out of events.
    values: Vec<gatehouse_vault::Secret<String>>,
    /// Why the keyring could not be read (locked, absent, not answering),
    /// when the server needs secrets from it. Names and reasons only.
    keyring_unreadable: Option<String>,
}

/// Why a server that needs secrets starts without them (or, with
/// `fail_closed`, not at all): the rule, the event type, the reason.
struct SecretsMissing {
    rule: &'static str,
    event: &'static str,
    why: String,
}

/// Whether the launch names vault secrets: a `{{vault:NAME}}` argument or a
/// `vault:` reference in the policy's per-server env.
fn wants_vault(args: &[String], server: &gatehouse_config::ServerSettings) -> bool {
    args.iter().any(|a| a.contains("{{vault:"))
        || server
            .env
            .values()
            .any(|v| matches!(v, gatehouse_config::EnvValue::Vault(_)))
}

/// Secrets for this server: `{{vault:NAME}}` in args, `vault:` references in
/// the policy's per-server env. Failures are reported by name, never value.
fn inject_secrets(
    opts: &WrapOptions,
    key: &gatehouse_vault::GuardKey,
    server: &gatehouse_config::ServerSettings,
    registered: bool,
    env: &mut Vec<(String, String)>,
    args: &mut Vec<String>,
    recorder: &Recorder,
) -> Injected {
    let mut fingerprints = Vec::new();
    let mut values = Vec::new();
    let mut keyring_unreadable: Option<String> = None;
    let wants_vault = wants_vault(args, server);
    // Secrets it is known to need (a `vault:` reference or a placeholder):
    // without them a locked keyring is a failure `fail_closed` decides.
    let needs_secrets = wants_vault || env.iter().any(|(_, v)| v.contains("{{vault:"));
    let Some(vault) = opts.vault.as_deref() else {
        return Injected::default();
    };
    // Servers that protect never registered have no stored secrets: the
    // keyring is not touched for them (it costs a D-Bus round trip).
    if !wants_vault && !registered {
        return Injected::default();
    }
    let report = |reason: String| {
        recorder.event(
            EngineEvent::new(
                "vault_unavailable",
                gatehouse_engine::Severity::High,
                gatehouse_engine::Action::Alert,
                "vault.unavailable",
            )
            .reason(reason),
        );
    };
    // Every secret stored for the server goes into its environment by name,
    // except a name a loader, interpreter or shell reads (`LD_PRELOAD`,
    // `PYTHONPATH`, …): such an entry (stored before the vault refused these
    // names) could decide what code the server runs. The event names it.
    match vault.list(&opts.server_id) {
        Ok(names) => {
            for name in names {
                if env.iter().any(|(k, _)| *k == name) {
                    continue;
                }
                if let Some(reader) = gatehouse_vault::reserved_env_name(&name) {
                    recorder.event(
                        EngineEvent::new(
                            "secret_not_injected",
                            gatehouse_engine::Severity::High,
                            gatehouse_engine::Action::Block,
                            "vault.reserved_name",
                        )
                        .reason(format!(
                            "secret {name} not injected: {reader} reads it; \
                             remove it with `gatehouse vault rm {} {name}`",
                            opts.server_id
                        )),
                    );
                    eprintln!(
                        "gatehouse: secret {name} not injected: {reader} reads it (docs/vault.md)"
                    );
                    continue;
                }
                match vault.get(&opts.server_id, &name) {
                    Ok(Some(secret)) => {
                        fingerprints.extend(gatehouse_vault::SecretFingerprint::compute(
                            key,
                            &opts.server_id,
                            &name,
                            &secret,
                        ));
                        env.push((name, secret.expose().clone()));
                        values.push(secret);
                    }
                    Ok(None) => {}
                    Err(err) => {
                        report(format!("secret {name} unavailable: {err}"));
                        use gatehouse_vault::VaultError::{Timeout, Unavailable};
                        if matches!(err, Timeout(_) | Unavailable(_)) {
                            // The keyring itself: each further read would
                            // wait as long again.
                            keyring_unreadable =
                                Some(format!("the OS keyring cannot be read: {err}"));
                            break;
                        }
                    }
                }
            }
        }
        Err(err) if needs_secrets => {
            // Asking again for each secret would only wait again.
            return Injected {
                fingerprints,
                values,
                keyring_unreadable: Some(format!("the OS keyring cannot be read: {err}")),
            };
        }
        Err(err) => report(format!(
            "keyring unavailable; starting without secrets: {err}"
        )),
    }
    for (name, value) in &server.env {
        if keyring_unreadable.is_some() {
            break;
        }
        if let gatehouse_config::EnvValue::Vault(secret_name) = value {
            match vault.get(&opts.server_id, secret_name) {
                Ok(Some(secret)) => {
                    fingerprints.extend(gatehouse_vault::SecretFingerprint::compute(
                        key,
                        &opts.server_id,
                        secret_name,
                        &secret,
                    ));
                    env.retain(|(k, _)| k != name);
                    env.push((name.clone(), secret.expose().clone()));
                    values.push(secret);
                }
                Ok(None) => report(format!("no vault secret {secret_name} for {name}")),
                Err(err) => {
                    report(format!("secret {secret_name} unavailable: {err}"));
                    keyring_unreadable
                        .get_or_insert_with(|| format!("the OS keyring cannot be read: {err}"));
                }
            }
        }
    }
    if keyring_unreadable.is_some() {
        // All or nothing: the secrets read before the keyring stopped
        // answering come out again, and placeholders stay as they are
        // (expanding them would ask again).
        env.retain(|(_, v)| !values.iter().any(|s| s.expose() == v));
        return Injected {
            fingerprints: Vec::new(),
            values: Vec::new(),
            keyring_unreadable,
        };
    }
    // Protect leaves `NAME={{vault:NAME}}` in the client's env block.
    for (name, value) in env.iter_mut() {
        if value.contains("{{vault:") {
            match gatehouse_vault::expand_placeholders(
                std::slice::from_ref(value),
                vault,
                &opts.server_id,
            ) {
                Ok(expanded) => *value = expanded.expose().concat(),
                Err(err) => {
                    report(format!("variable {name} not expanded: {err}"));
                    keyring_unreadable
                        .get_or_insert_with(|| format!("variable {name} not expanded: {err}"));
                }
            }
        }
    }
    if args.iter().any(|a| a.contains("{{vault:")) {
        match gatehouse_vault::expand_placeholders(args, vault, &opts.server_id) {
            Ok(expanded) => *args = expanded.expose().clone(),
            Err(err) => {
                report(format!("argument placeholders not expanded: {err}"));
                keyring_unreadable
                    .get_or_insert_with(|| format!("argument placeholders not expanded: {err}"));
            }
        }
    }
    Injected {
        fingerprints,
        values,
        keyring_unreadable,
    }
}

/// Backups exist only after `gatehouse protect` rewrote a config.
fn protected_configs_exist(home_dir: &Path) -> bool {
    std::fs::read_dir(home_dir.join("backups"))
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_recorder_gathers_a_burst_and_answers_a_flush_at_once() {
        let (tx, mut rx) = mpsc::unbounded_channel::<Record<u32>>();
        let mut batch = Vec::new();
        tx.send(Record::Write(1)).unwrap();
        rx.recv_many(&mut batch, RECORD_BATCH).await;
        let late = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RECORD_GATHER / 2).await;
            late.send(Record::Write(2)).unwrap();
            tokio::time::sleep(RECORD_GATHER).await;
            late.send(Record::Write(3)).unwrap();
        });
        let flushing = Notify::new();
        let started = tokio::time::Instant::now();
        gather(&mut rx, &mut batch, &flushing).await;
        assert_eq!(started.elapsed(), RECORD_GATHER);
        let written: Vec<u32> = batch
            .drain(..)
            .filter_map(|r| match r {
                Record::Write(n) => Some(n),
                Record::Flush(_) => None,
            })
            .collect();
        assert_eq!(written, vec![1, 2], "3 arrives after the gathering window");

        // A flush (wrap ending) is not kept waiting.
        let (done, _wait) = tokio::sync::oneshot::channel();
        tx.send(Record::Write(4)).unwrap();
        tx.send(Record::Flush(done)).unwrap();
        rx.recv_many(&mut batch, RECORD_BATCH).await;
        let started = tokio::time::Instant::now();
        gather(&mut rx, &mut batch, &flushing).await;
        assert_eq!(started.elapsed(), Duration::ZERO);

        // Nor is a backlog of a full batch.
        batch.clear();
        for n in 0..RECORD_BATCH as u32 {
            tx.send(Record::Write(n)).unwrap();
        }
        rx.recv_many(&mut batch, RECORD_BATCH).await;
        let started = tokio::time::Instant::now();
        gather(&mut rx, &mut batch, &flushing).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(batch.len(), RECORD_BATCH);

        // Nor is a flush that comes while the writer gathers.
        batch.clear();
        tx.send(Record::Write(5)).unwrap();
        rx.recv_many(&mut batch, RECORD_BATCH).await;
        let flushing = Arc::new(Notify::new());
        let notify = Arc::clone(&flushing);
        let (done, _wait) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            tokio::time::sleep(RECORD_GATHER / 4).await;
            tx.send(Record::Flush(done)).unwrap();
            notify.notify_one();
        });
        let started = tokio::time::Instant::now();
        gather(&mut rx, &mut batch, &flushing).await;
        assert_eq!(started.elapsed(), RECORD_GATHER / 4);
        assert!(
            matches!(batch.last(), Some(Record::Flush(_))),
            "the flush is in the batch"
        );
    }

    #[tokio::test]
    async fn the_pin_poller_reads_what_changed_since_the_start_read() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::open(home.path(), StoreOptions::default())
            .await
            .unwrap();
        let key = MacKey::new([3; 32]);
        let loaded = read_pins(&store, &key, "srv").await.unwrap();
        assert!(loaded.is_empty());
        // Approved after the start read, before the poller's first version.
        let seen = gatehouse_store::SeenTool {
            server_id: "srv".into(),
            name: "echo".into(),
            hash: "sha256:aa".into(),
            hash_version: i64::from(HASH_VERSION),
            definition_json: "{}".into(),
        };
        store.record_seen_tool(&key, &seen, 1).await.unwrap();
        assert!(store
            .pin_first_sight(&key, "srv", "echo", "sha256:aa", 1)
            .await
            .unwrap());
        let (opener, after) = crate::ready::gate();
        let (tx, mut rx) = mpsc::channel(1);
        tokio::spawn(poll_pins(store, key, "srv".into(), loaded, after, tx));
        tokio::time::sleep(POLL_INTERVAL * 2).await;
        assert!(rx.try_recv().is_err(), "nothing read before the gate opens");
        opener.open();
        let pins = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("read as soon as the gate opens")
            .unwrap();
        let echo = pins.get("echo").expect("the approved pin");
        assert_eq!(echo.state, PinState::Trusted);
        assert_eq!(echo.approved_hash.as_deref(), Some("sha256:aa"));
    }

    /// A recorder whose events the test reads.
    fn test_recorder() -> (Recorder, mpsc::UnboundedReceiver<Record<EngineEvent>>) {
        let (events, events_rx) = mpsc::unbounded_channel();
        let (pins, _pins_rx) = mpsc::unbounded_channel();
        let recorder = Recorder {
            events,
            backlog: Arc::default(),
            flushing: Arc::default(),
            pins,
            scrubber: Arc::default(),
            first_sights: Arc::default(),
            reloads: watch::channel(None).1,
        };
        (recorder, events_rx)
    }

    /// Past the cap, events are counted instead of queued: memory stays
    /// bounded while the database cannot keep up.
    #[test]
    fn events_past_the_cap_are_counted_not_kept() {
        let (recorder, rx) = test_recorder();
        for _ in 0..MAX_QUEUED_EVENTS + 7 {
            recorder.event(EngineEvent::new(
                "e",
                gatehouse_engine::Severity::Info,
                gatehouse_engine::Action::Allow,
                "r",
            ));
        }
        assert_eq!(rx.len(), MAX_QUEUED_EVENTS);
        let summary = recorder.backlog.dropped_event().expect("the count");
        assert!(
            summary.reason.starts_with("7 event(s) not recorded"),
            "{}",
            summary.reason
        );
        assert!(recorder.backlog.dropped_event().is_none(), "said once");
    }

    /// The writer says how many it gave up, in the database, once it
    /// catches up; what it kept is all written.
    #[tokio::test]
    async fn the_recorder_writes_how_many_events_it_gave_up() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::open(home.path(), StoreOptions::default())
            .await
            .unwrap();
        let recorder = Recorder::start(
            Some(store.clone()),
            MacKey::new([3; 32]),
            "srv".into(),
            "session".into(),
        );
        // Queued without a yield: the writer has taken none yet.
        for _ in 0..MAX_QUEUED_EVENTS + 7 {
            recorder.event(EngineEvent::new(
                "flood",
                gatehouse_engine::Severity::Low,
                gatehouse_engine::Action::Alert,
                "r",
            ));
        }
        recorder.finish().await;
        let read = |event_type: &str| gatehouse_store::EventFilter {
            event_type: Some(event_type.into()),
            limit: 1000,
            ..Default::default()
        };
        let flood = store.query_events(&read("flood")).await.unwrap();
        let kept: i64 = flood.iter().map(|e| e.count).sum();
        assert_eq!(kept, MAX_QUEUED_EVENTS as i64);
        let dropped = store.query_events(&read("events_dropped")).await.unwrap();
        assert_eq!(dropped.len(), 1, "{dropped:?}");
        assert!(
            dropped[0].reason.starts_with("7 event(s)"),
            "{:?}",
            dropped[0]
        );
    }

    /// A keyring that stops answering at one secret.
    struct StallsAt {
        inner: gatehouse_vault::MemoryVault,
        stalls_at: &'static str,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl Vault for StallsAt {
        fn get(
            &self,
            server: &str,
            name: &str,
        ) -> Result<Option<gatehouse_vault::Secret<String>>, gatehouse_vault::VaultError> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            if name == self.stalls_at {
                return Err(gatehouse_vault::VaultError::Timeout(Duration::from_secs(3)));
            }
            self.inner.get(server, name)
        }
        fn set(
            &self,
            server: &str,
            name: &str,
            value: gatehouse_vault::Secret<String>,
        ) -> Result<(), gatehouse_vault::VaultError> {
            self.inner.set(server, name, value)
        }
        fn delete(&self, server: &str, name: &str) -> Result<bool, gatehouse_vault::VaultError> {
            self.inner.delete(server, name)
        }
        fn list(&self, server: &str) -> Result<Vec<String>, gatehouse_vault::VaultError> {
            self.inner.list(server)
        }
    }

    /// A keyring that stops answering part-way is asked nothing more (each
    /// read would wait its 3 s again), and the server gets none of its
    /// secrets: fail_closed then refuses it, else it starts without them.
    #[test]
    fn a_keyring_that_stops_answering_gives_no_secret_and_is_not_asked_again() {
        let inner = gatehouse_vault::MemoryVault::new();
        for name in ["A_TOKEN", "B_TOKEN", "C_TOKEN"] {
            let value = gatehouse_vault::Secret::new(format!("{name}-value"));
            inner.set("srv_a", name, value).unwrap();
        }
        let vault = Arc::new(StallsAt {
            inner,
            stalls_at: "B_TOKEN",
            reads: Default::default(),
        });
        let opts = WrapOptions {
            server_id: "srv_a".into(),
            home: None,
            pass_env: vec![],
            argv: vec!["server".into()],
            vault: Some(vault.clone()),
            inbox_timeout: Duration::from_secs(1),
        };
        let (recorder, _events_rx) = test_recorder();
        let policy = gatehouse_config::check_text("p", "").unwrap().policy;
        let server = policy.server_settings("server");
        let key = gatehouse_vault::GuardKey::for_install(b"key");
        let mut env = vec![("PATH".to_owned(), "/usr/bin".to_owned())];
        let mut args = vec!["--token={{vault:C_TOKEN}}".to_owned()];
        let injected = inject_secrets(&opts, &key, &server, true, &mut env, &mut args, &recorder);
        assert!(injected.keyring_unreadable.is_some());
        assert_eq!(env, vec![("PATH".to_owned(), "/usr/bin".to_owned())]);
        assert_eq!(args, ["--token={{vault:C_TOKEN}}"], "not expanded");
        assert_eq!(
            vault.reads.load(Ordering::Relaxed),
            2,
            "nothing asked after the stall"
        );
        assert!(injected.values.is_empty() && injected.fingerprints.is_empty());
    }

    #[test]
    fn a_stored_secret_with_a_reserved_name_is_never_injected() {
        let vault = gatehouse_vault::MemoryVault::new();
        let secret = |v: &str| gatehouse_vault::Secret::new(v.to_owned());
        vault
            .set("srv_a", "GITHUB_TOKEN", secret("ghp_ok"))
            .unwrap();
        // As an older version could have stored them.
        vault
            .insert_legacy("srv_a", "PYTHONPATH", secret("/tmp/attacker"))
            .unwrap();
        vault
            .insert_legacy("srv_a", "LD_PRELOAD", secret("/tmp/x.so"))
            .unwrap();
        let opts = WrapOptions {
            server_id: "srv_a".into(),
            home: None,
            pass_env: vec![],
            argv: vec!["server".into()],
            vault: Some(Arc::new(vault)),
            inbox_timeout: Duration::from_secs(1),
        };
        let (recorder, mut events_rx) = test_recorder();
        let policy = gatehouse_config::check_text("p", "").unwrap().policy;
        let server = policy.server_settings("server");
        let key = gatehouse_vault::GuardKey::for_install(b"key");
        let mut env = vec![("PATH".to_owned(), "/usr/bin".to_owned())];
        let mut args = vec![];
        inject_secrets(&opts, &key, &server, true, &mut env, &mut args, &recorder);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            vec!["PATH", "GITHUB_TOKEN"],
            "only the data secret reaches the environment"
        );
        let mut reasons = Vec::new();
        while let Ok(Record::Write(e)) = events_rx.try_recv() {
            assert_eq!(e.kind, "secret_not_injected");
            reasons.push(e.reason);
        }
        assert_eq!(reasons.len(), 2, "one event per refused name: {reasons:?}");
        assert!(
            reasons.iter().all(|r| !r.contains("/tmp/")),
            "events name the secret, never its value: {reasons:?}"
        );
        assert!(reasons[0].contains("LD_PRELOAD") && reasons[1].contains("PYTHONPATH"));
    }
}
