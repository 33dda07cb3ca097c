//! Real OS keyring round trip. Runs only with `KEYRING_IT=1`, inside a
//! session that has an unlocked Secret Service (see docs/vault.md):
//!
//! ```sh
//! KR=$(mktemp -d); dbus-run-session -- sh -c "export XDG_DATA_HOME=$KR/data XDG_RUNTIME_DIR=$KR/run; \
//!   mkdir -p -m 700 \$XDG_DATA_HOME \$XDG_RUNTIME_DIR; \
//!   printf pw | gnome-keyring-daemon --unlock --components=secrets >/dev/null; \
//!   KEYRING_IT=1 cargo test -p gatehouse-vault --test keyring_it"
//! ```

use std::time::{Duration, Instant};

use gatehouse_vault::{KeyringVault, Secret, Vault, VaultError};

fn enabled() -> bool {
    std::env::var("KEYRING_IT").is_ok_and(|v| v == "1")
}

#[test]
fn real_keyring_round_trip() {
    if !enabled() {
        eprintln!("skipped: set KEYRING_IT=1 inside dbus-run-session with gnome-keyring unlocked");
        return;
    }
    let service = format!("gatehouse-it-{}", std::process::id());
    let vault = KeyringVault::with_service(&service);
    vault
        .probe()
        .expect("the Secret Service must answer inside the test session");
    let canary = "ghp_KeyringCanary0123456789abcdefABCDEF";
    vault
        .set("srv_it", "GITHUB_TOKEN", Secret::new(canary.to_owned()))
        .expect("set");
    vault
        .set("srv_it", "OTHER", Secret::new("second".to_owned()))
        .expect("set second");

    // A fresh vault object reads what the first stored: it is in the keyring, not in memory.
    let again = KeyringVault::with_service(&service);
    let got = again
        .get("srv_it", "GITHUB_TOKEN")
        .expect("get")
        .expect("stored secret is found");
    assert_eq!(got.expose(), canary);
    assert_eq!(
        again.list("srv_it").expect("list"),
        vec!["GITHUB_TOKEN", "OTHER"],
        "the names index lists both"
    );

    // Same name under another server is another entry.
    assert!(again
        .get("srv_other", "GITHUB_TOKEN")
        .expect("get other")
        .is_none());

    assert!(again.delete("srv_it", "GITHUB_TOKEN").expect("delete"));
    assert!(again.delete("srv_it", "OTHER").expect("delete"));
    assert!(again
        .get("srv_it", "GITHUB_TOKEN")
        .expect("get after delete")
        .is_none());
    assert!(
        again.list("srv_it").expect("list after delete").is_empty(),
        "the index entry is removed with the last name"
    );
}

#[test]
fn no_session_bus_is_an_error_not_a_fallback() {
    if enabled() || std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some() {
        eprintln!("skipped: a session bus may be present");
        return;
    }
    let vault = KeyringVault::with_service("gatehouse-it-nobus");
    let start = Instant::now();
    let err = vault
        .set(
            "srv_it",
            "TOKEN",
            Secret::new("ghp_NoBusCanary0123456789abcdef".into()),
        )
        .unwrap_err();
    assert!(
        matches!(err, VaultError::Unavailable(_) | VaultError::Timeout(_)),
        "without a keyring the vault must fail, got {err:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "and fail within the 3 s budget"
    );
    assert!(
        !err.to_string().contains("NoBusCanary"),
        "errors never carry the value"
    );
}
