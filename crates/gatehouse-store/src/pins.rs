//! `pins`: per (server, tool) the approved hash and what waits for a person.
//!
//! Every row carries an HMAC-SHA256 over all its fields, keyed by the
//! caller's per-install [`MacKey`]. A row whose MAC does not verify is
//! reported (`Pin::mac_valid == false`) and grants nothing: its approved
//! hash is never trusted and is not carried into a rewritten row.

use sqlx::SqliteConnection;

use crate::consent::{self, ConsentKind, ConsentState};
use crate::db::Store;
use crate::error::{corrupt, Result, StoreError};
use crate::mac::{self, Field, MacKey};
use crate::tools::{validate_seen, SeenTool};
use crate::util::check_json;

const DOMAIN: &str = "gatehouse.pins.v1";

/// State of a pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinState {
    /// The approved hash may be used.
    Trusted,
    /// A changed or new definition waits for approval.
    Held,
    /// A definition with serious findings waits for review.
    Quarantined,
    /// A person rejected the pending definition.
    Rejected,
}

impl PinState {
    /// Stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PinState::Trusted => "trusted",
            PinState::Held => "held",
            PinState::Quarantined => "quarantined",
            PinState::Rejected => "rejected",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "trusted" => Some(PinState::Trusted),
            "held" => Some(PinState::Held),
            "quarantined" => Some(PinState::Quarantined),
            "rejected" => Some(PinState::Rejected),
            _ => None,
        }
    }
}

/// The two waiting states [`Store::hold_tool`] can set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldState {
    Held,
    Quarantined,
}

impl From<HoldState> for PinState {
    fn from(state: HoldState) -> Self {
        match state {
            HoldState::Held => PinState::Held,
            HoldState::Quarantined => PinState::Quarantined,
        }
    }
}

/// A pin as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    pub server_id: String,
    pub tool: String,
    /// What the row claims; see [`Pin::trusted_hash`] for what to act on.
    pub state: PinState,
    pub approved_hash: Option<String>,
    /// Hash version of `approved_hash` (of `pending_hash` while nothing was
    /// ever approved).
    pub hash_version: i64,
    pub pending_hash: Option<String>,
    /// Scanner findings for a quarantined definition (JSON).
    pub findings_json: Option<String>,
    pub pinned_at_ms: i64,
    pub updated_ms: i64,
    /// False when the MAC does not verify: the row grants nothing and the
    /// caller reports it.
    pub mac_valid: bool,
}

impl Pin {
    /// The hash that may be used: only for a trusted row with a valid MAC.
    pub fn trusted_hash(&self) -> Option<&str> {
        if self.mac_valid && self.state == PinState::Trusted {
            self.approved_hash.as_deref()
        } else {
            None
        }
    }

    /// Whether a definition with `hash` is approved by this pin.
    pub fn is_trusted(&self, hash: &str) -> bool {
        self.trusted_hash() == Some(hash)
    }
}

#[derive(sqlx::FromRow)]
struct PinRow {
    server_id: String,
    name: String,
    state: String,
    approved_hash: Option<String>,
    hash_version: i64,
    pending_hash: Option<String>,
    findings: Option<String>,
    pinned_at_ms: i64,
    updated_ms: i64,
    mac: Vec<u8>,
}

macro_rules! pin_columns {
    () => {
        "server_id, name, state, approved_hash, hash_version, pending_hash, findings, \
         pinned_at_ms, updated_ms, mac"
    };
}

/// The values of a row before its MAC.
struct PinFields<'a> {
    server_id: &'a str,
    name: &'a str,
    state: PinState,
    approved_hash: Option<&'a str>,
    hash_version: i64,
    pending_hash: Option<&'a str>,
    findings: Option<&'a str>,
    pinned_at_ms: i64,
    updated_ms: i64,
}

impl PinFields<'_> {
    fn mac_fields(&self) -> [Field<'_>; 9] {
        [
            Field::Str(self.server_id),
            Field::Str(self.name),
            Field::Str(self.state.as_str()),
            Field::OptStr(self.approved_hash),
            Field::Int(self.hash_version),
            Field::OptStr(self.pending_hash),
            Field::OptStr(self.findings),
            Field::Int(self.pinned_at_ms),
            Field::Int(self.updated_ms),
        ]
    }

    async fn upsert(&self, key: &MacKey, conn: &mut SqliteConnection) -> Result<()> {
        let tag = mac::compute(key, DOMAIN, &self.mac_fields());
        sqlx::query(
            "INSERT INTO pins (server_id, name, state, approved_hash, hash_version, pending_hash, \
                               findings, pinned_at_ms, updated_ms, mac) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (server_id, name) DO UPDATE SET state = excluded.state, \
                 approved_hash = excluded.approved_hash, hash_version = excluded.hash_version, \
                 pending_hash = excluded.pending_hash, findings = excluded.findings, \
                 pinned_at_ms = excluded.pinned_at_ms, updated_ms = excluded.updated_ms, \
                 mac = excluded.mac",
        )
        .bind(self.server_id)
        .bind(self.name)
        .bind(self.state.as_str())
        .bind(self.approved_hash)
        .bind(self.hash_version)
        .bind(self.pending_hash)
        .bind(self.findings)
        .bind(self.pinned_at_ms)
        .bind(self.updated_ms)
        .bind(tag)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}

fn parse(key: &MacKey, row: PinRow) -> Result<Pin> {
    let state = PinState::parse(&row.state).ok_or_else(|| corrupt("pins", "unknown state"))?;
    if let Some(findings) = &row.findings {
        check_json("pins", "findings", findings)?;
    }
    let fields = PinFields {
        server_id: &row.server_id,
        name: &row.name,
        state,
        approved_hash: row.approved_hash.as_deref(),
        hash_version: row.hash_version,
        pending_hash: row.pending_hash.as_deref(),
        findings: row.findings.as_deref(),
        pinned_at_ms: row.pinned_at_ms,
        updated_ms: row.updated_ms,
    };
    let mac_valid = mac::verify(key, DOMAIN, &fields.mac_fields(), &row.mac);
    if !mac_valid {
        tracing::warn!(
            table = "pins",
            "pin row failed its MAC check; treating it as not approved"
        );
    }
    Ok(Pin {
        server_id: row.server_id,
        tool: row.name,
        state,
        approved_hash: row.approved_hash,
        hash_version: row.hash_version,
        pending_hash: row.pending_hash,
        findings_json: row.findings,
        pinned_at_ms: row.pinned_at_ms,
        updated_ms: row.updated_ms,
        mac_valid,
    })
}

async fn read_pin(
    key: &MacKey,
    conn: &mut SqliteConnection,
    server_id: &str,
    name: &str,
) -> Result<Option<Pin>> {
    let row: Option<PinRow> = sqlx::query_as(concat!(
        "SELECT ",
        pin_columns!(),
        " FROM pins WHERE server_id = ? AND name = ?"
    ))
    .bind(server_id)
    .bind(name)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|row| parse(key, row)).transpose()
}

/// The hash version recorded for a seen definition, `None` if never seen.
async fn seen_version(
    conn: &mut SqliteConnection,
    server_id: &str,
    name: &str,
    hash: &str,
) -> Result<Option<i64>> {
    let version = sqlx::query_scalar(
        "SELECT hash_version FROM tools WHERE server_id = ? AND name = ? AND hash = ?",
    )
    .bind(server_id)
    .bind(name)
    .bind(hash)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(version)
}

fn unknown_hash(server_id: &str, name: &str) -> StoreError {
    StoreError::UnknownToolHash {
        server_id: server_id.to_owned(),
        tool: name.to_owned(),
    }
}

/// [`unknown_hash`], or [`StoreError::UnknownTool`] when no definition of
/// the tool was ever recorded for that server.
async fn unknown_hash_or_tool(
    conn: &mut SqliteConnection,
    server_id: &str,
    name: &str,
) -> Result<StoreError> {
    let seen: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM tools WHERE server_id = ? AND name = ?)")
            .bind(server_id)
            .bind(name)
            .fetch_one(&mut *conn)
            .await?;
    if seen {
        return Ok(unknown_hash(server_id, name));
    }
    Ok(StoreError::UnknownTool {
        server_id: server_id.to_owned(),
        tool: name.to_owned(),
    })
}

/// The consent payload for a waiting tool: the versions to diff, and the
/// findings of a quarantined one.
fn waiting_payload(pin: &Pin) -> String {
    let mut payload = serde_json::json!({
        "from_hash": pin.approved_hash,
        "to_hash": pin.pending_hash,
    });
    if let Some(findings) = pin.findings_json.as_deref() {
        payload["findings"] = serde_json::from_str(findings).unwrap_or(serde_json::Value::Null);
    }
    payload.to_string()
}

impl Store {
    /// Records the definitions of one `tools/list` answer and returns, per
    /// tool in order, its pin before this call (`None` = never pinned). One
    /// transaction for the whole list.
    pub async fn record_seen_tools(
        &self,
        key: &MacKey,
        tools: &[SeenTool],
        now_ms: i64,
    ) -> Result<Vec<Option<Pin>>> {
        for tool in tools {
            validate_seen(tool)?;
        }
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let mut pins = Vec::with_capacity(tools.len());
        for tool in tools {
            sqlx::query(
                "INSERT INTO tools (server_id, name, hash, hash_version, definition, first_seen_ms) \
                 VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (server_id, name, hash) DO NOTHING",
            )
            .bind(&tool.server_id)
            .bind(&tool.name)
            .bind(&tool.hash)
            .bind(tool.hash_version)
            .bind(&tool.definition_json)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
            pins.push(read_pin(key, &mut tx, &tool.server_id, &tool.name).await?);
        }
        tx.commit().await?;
        Ok(pins)
    }

    /// [`Store::record_seen_tools`] for one tool.
    pub async fn record_seen_tool(
        &self,
        key: &MacKey,
        tool: &SeenTool,
        now_ms: i64,
    ) -> Result<Option<Pin>> {
        let mut pins = self
            .record_seen_tools(key, std::slice::from_ref(tool), now_ms)
            .await?;
        Ok(pins.pop().flatten())
    }

    /// Trusts a tool seen in the server's first session: inserts a trusted
    /// pin for `hash` only if the tool has no pin yet. True when it pinned.
    /// Fails with [`StoreError::UnknownToolHash`] unless the definition was
    /// recorded first.
    pub async fn pin_first_sight(
        &self,
        key: &MacKey,
        server_id: &str,
        name: &str,
        hash: &str,
        now_ms: i64,
    ) -> Result<bool> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let version = seen_version(&mut tx, server_id, name, hash)
            .await?
            .ok_or_else(|| unknown_hash(server_id, name))?;
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pins WHERE server_id = ? AND name = ?)",
        )
        .bind(server_id)
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
        if exists {
            return Ok(false);
        }
        PinFields {
            server_id,
            name,
            state: PinState::Trusted,
            approved_hash: Some(hash),
            hash_version: version,
            pending_hash: None,
            findings: None,
            pinned_at_ms: now_ms,
            updated_ms: now_ms,
        }
        .upsert(key, &mut tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Holds or quarantines a tool at `pending_hash` (which must have been
    /// recorded). A previously approved hash is kept only if its row's MAC
    /// verifies; `findings_json` is stored for quarantined tools. In the
    /// same transaction the person is asked once per hash (a pending
    /// `changed_tool` / `quarantined_tool` consent request; one about an
    /// older waiting hash expires).
    #[allow(clippy::too_many_arguments)]
    pub async fn hold_tool(
        &self,
        key: &MacKey,
        server_id: &str,
        name: &str,
        pending_hash: &str,
        state: HoldState,
        findings_json: Option<&str>,
        now_ms: i64,
    ) -> Result<Pin> {
        if let Some(findings) = findings_json {
            check_json("pins", "findings", findings)
                .map_err(|_| StoreError::Invalid("findings are not valid JSON"))?;
        }
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let pending_version = seen_version(&mut tx, server_id, name, pending_hash)
            .await?
            .ok_or_else(|| unknown_hash(server_id, name))?;
        let previous = read_pin(key, &mut tx, server_id, name).await?;
        let kept = previous.as_ref().filter(|pin| pin.mac_valid);
        let approved_hash = kept.and_then(|pin| pin.approved_hash.as_deref());
        let (hash_version, pinned_at_ms) = match (kept, approved_hash) {
            (Some(pin), Some(_)) => (pin.hash_version, pin.pinned_at_ms),
            _ => (pending_version, now_ms),
        };
        PinFields {
            server_id,
            name,
            state: state.into(),
            approved_hash,
            hash_version,
            pending_hash: Some(pending_hash),
            findings: findings_json,
            pinned_at_ms,
            updated_ms: now_ms,
        }
        .upsert(key, &mut tx)
        .await?;
        let pin = read_pin(key, &mut tx, server_id, name)
            .await?
            .ok_or(StoreError::NotFound { what: "pin" })?;
        let kind = match state {
            HoldState::Held => ConsentKind::ChangedTool,
            HoldState::Quarantined => ConsentKind::QuarantinedTool,
        };
        consent::ask_about_tool(
            &mut tx,
            kind,
            server_id,
            name,
            &waiting_payload(&pin),
            pending_hash,
            now_ms,
        )
        .await?;
        tx.commit().await?;
        Ok(pin)
    }

    /// Approves exactly `hash` for a tool: the pin becomes trusted at that
    /// hash. Refused with [`StoreError::UnknownToolHash`] if that hash was
    /// never seen for that tool (a person approves what they were shown),
    /// [`StoreError::UnknownTool`] if the tool was never seen at all. Wrap
    /// uses it to re-pin (`on_change`); a person's approval goes through
    /// [`Store::approve_waiting_tool`]. Settles the tool's pending consent
    /// requests as answered.
    pub async fn approve_tool(
        &self,
        key: &MacKey,
        server_id: &str,
        name: &str,
        hash: &str,
        now_ms: i64,
    ) -> Result<Pin> {
        self.approve(key, server_id, name, hash, false, now_ms)
            .await
    }

    /// A person's approval: [`Store::approve_tool`], but while a definition
    /// waits (held, quarantined or rejected at a pending hash) only that
    /// hash may be approved; any other, the one already approved included,
    /// is refused with [`StoreError::NotWaiting`] and the waiting one stays.
    pub async fn approve_waiting_tool(
        &self,
        key: &MacKey,
        server_id: &str,
        name: &str,
        hash: &str,
        now_ms: i64,
    ) -> Result<Pin> {
        self.approve(key, server_id, name, hash, true, now_ms).await
    }

    async fn approve(
        &self,
        key: &MacKey,
        server_id: &str,
        name: &str,
        hash: &str,
        only_waiting: bool,
        now_ms: i64,
    ) -> Result<Pin> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let Some(version) = seen_version(&mut tx, server_id, name, hash).await? else {
            return Err(unknown_hash_or_tool(&mut tx, server_id, name).await?);
        };
        let previous = read_pin(key, &mut tx, server_id, name).await?;
        if only_waiting {
            // The waiting hash as the row says (what the person was shown),
            // even when its MAC fails; a row that fails its MAC and says
            // nothing waits is not a licence to approve any seen version.
            let refused = match &previous {
                Some(pin) => match pin.pending_hash.as_deref() {
                    Some(waiting) => waiting != hash,
                    None => !pin.mac_valid,
                },
                None => false,
            };
            if refused {
                return Err(StoreError::NotWaiting {
                    server_id: server_id.to_owned(),
                    tool: name.to_owned(),
                });
            }
        }
        // The pin of the name keeps its age across definitions: it says
        // since when this server exposes the name (the shadowing rule's
        // seniority), not when its current definition was approved. A row
        // whose MAC fails says nothing.
        let pinned_at_ms = previous
            .as_ref()
            .filter(|pin| pin.mac_valid)
            .map_or(now_ms, |pin| pin.pinned_at_ms.min(now_ms));
        PinFields {
            server_id,
            name,
            state: PinState::Trusted,
            approved_hash: Some(hash),
            hash_version: version,
            pending_hash: None,
            findings: None,
            pinned_at_ms,
            updated_ms: now_ms,
        }
        .upsert(key, &mut tx)
        .await?;
        consent::settle_tool(&mut tx, server_id, name, ConsentState::Answered, now_ms).await?;
        let pin = read_pin(key, &mut tx, server_id, name)
            .await?
            .ok_or(StoreError::NotFound { what: "pin" })?;
        tx.commit().await?;
        Ok(pin)
    }

    /// Rejects a tool's pending definition: its calls stay blocked until an
    /// approval or a reset; its pending consent requests are declined.
    /// Fails with `NotFound` when the tool has no pin.
    pub async fn reject_tool(
        &self,
        key: &MacKey,
        server_id: &str,
        name: &str,
        now_ms: i64,
    ) -> Result<Pin> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let previous = read_pin(key, &mut tx, server_id, name)
            .await?
            .ok_or(StoreError::NotFound { what: "pin" })?;
        let approved_hash = previous
            .approved_hash
            .as_deref()
            .filter(|_| previous.mac_valid);
        PinFields {
            server_id,
            name,
            state: PinState::Rejected,
            approved_hash,
            hash_version: previous.hash_version,
            pending_hash: previous.pending_hash.as_deref(),
            findings: previous.findings_json.as_deref(),
            pinned_at_ms: previous.pinned_at_ms,
            updated_ms: now_ms,
        }
        .upsert(key, &mut tx)
        .await?;
        consent::settle_tool(&mut tx, server_id, name, ConsentState::Declined, now_ms).await?;
        let pin = read_pin(key, &mut tx, server_id, name)
            .await?
            .ok_or(StoreError::NotFound { what: "pin" })?;
        tx.commit().await?;
        Ok(pin)
    }

    /// Deletes a tool's pin so the next sight pins again. Definitions stay.
    /// True if a pin existed.
    pub async fn reset_pin(&self, server_id: &str, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM pins WHERE server_id = ? AND name = ?")
            .bind(server_id)
            .bind(name)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// One tool's pin.
    pub async fn get_pin(&self, key: &MacKey, server_id: &str, name: &str) -> Result<Option<Pin>> {
        let mut conn = self.pool().acquire().await?;
        read_pin(key, &mut conn, server_id, name).await
    }

    /// Every pin of a server, by tool name.
    pub async fn pins_of_server(&self, key: &MacKey, server_id: &str) -> Result<Vec<Pin>> {
        let rows: Vec<PinRow> = sqlx::query_as(concat!(
            "SELECT ",
            pin_columns!(),
            " FROM pins WHERE server_id = ? ORDER BY name"
        ))
        .bind(server_id)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(|row| parse(key, row)).collect()
    }

    /// Every pin, by server then tool.
    pub async fn all_pins(&self, key: &MacKey) -> Result<Vec<Pin>> {
        let rows: Vec<PinRow> = sqlx::query_as(concat!(
            "SELECT ",
            pin_columns!(),
            " FROM pins ORDER BY server_id, name"
        ))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(|row| parse(key, row)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{key, mem};

    fn seen(name: &str, hash: &str) -> SeenTool {
        SeenTool {
            server_id: "srv".into(),
            name: name.into(),
            hash: hash.into(),
            hash_version: 1,
            definition_json: format!(r#"{{"name":"{name}","description":"v {hash}"}}"#),
        }
    }

    /// Shadowing seniority follows the name's pin, not the definition's:
    /// the legitimate server whose tool changed (re-pinned by `on_change =
    /// "allow"`, or a person's approval) stays older than a shadow that
    /// exposed the name in between.
    #[tokio::test]
    async fn approving_a_changed_definition_keeps_the_names_seniority() {
        let store = mem().await;
        let key = key();
        let seen_by = |server: &str, hash: &str| SeenTool {
            server_id: server.into(),
            ..seen("search_docs", hash)
        };
        let cases: &[(&str, bool, &str)] = &[
            ("wrap's re-pin (on_change = allow)", false, "a1"),
            ("a person's approval of the waiting definition", true, "a2"),
        ];
        store
            .record_seen_tools(&key, &[seen_by("A", "a0")], 1_000)
            .await
            .unwrap();
        assert!(store
            .pin_first_sight(&key, "A", "search_docs", "a0", 1_000)
            .await
            .unwrap());
        store
            .record_seen_tools(&key, &[seen_by("B", "b0")], 100_000)
            .await
            .unwrap();
        assert!(store
            .pin_first_sight(&key, "B", "search_docs", "b0", 100_000)
            .await
            .unwrap());
        for (i, (why, person, hash)) in cases.iter().enumerate() {
            let at = 200_000 + i as i64 * 100_000;
            store
                .record_seen_tools(&key, &[seen_by("A", hash)], at)
                .await
                .unwrap();
            let pin = if *person {
                store
                    .hold_tool(&key, "A", "search_docs", hash, HoldState::Held, None, at)
                    .await
                    .unwrap();
                store
                    .approve_waiting_tool(&key, "A", "search_docs", hash, at + 5)
                    .await
                    .unwrap()
            } else {
                store
                    .approve_tool(&key, "A", "search_docs", hash, at)
                    .await
                    .unwrap()
            };
            assert!(
                pin.is_trusted(hash),
                "{why}: the new definition is approved"
            );
            assert_eq!(pin.pinned_at_ms, 1_000, "{why}: A exposed the name first");
        }
        let b = store
            .get_pin(&key, "B", "search_docs")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(b.pinned_at_ms, 100_000, "B's pin is untouched");
    }

    #[tokio::test]
    async fn first_sight_then_change_then_approve() {
        let store = mem().await;
        let key = key();
        assert!(store.database_is_fresh().await.unwrap());
        assert!(!store.has_ever_pinned().await.unwrap());

        let before = store
            .record_seen_tools(&key, &[seen("read", "h1"), seen("send", "s1")], 10)
            .await
            .unwrap();
        assert_eq!(
            before,
            vec![None, None],
            "nothing pinned before first sight"
        );
        assert!(store.has_ever_pinned().await.unwrap());
        assert!(!store.database_is_fresh().await.unwrap());
        assert!(store
            .pin_first_sight(&key, "srv", "read", "h1", 11)
            .await
            .unwrap());
        assert!(
            !store
                .pin_first_sight(&key, "srv", "read", "h1", 12)
                .await
                .unwrap(),
            "an existing pin is never replaced by first sight"
        );

        // Rug pull: the definition changes.
        let previous = store
            .record_seen_tool(&key, &seen("read", "h2"), 20)
            .await
            .unwrap()
            .unwrap();
        assert!(previous.is_trusted("h1") && !previous.is_trusted("h2"));
        let held = store
            .hold_tool(&key, "srv", "read", "h2", HoldState::Held, None, 21)
            .await
            .unwrap();
        assert_eq!(held.state, PinState::Held);
        assert_eq!(
            held.approved_hash.as_deref(),
            Some("h1"),
            "hold keeps what was approved"
        );
        assert_eq!(held.pending_hash.as_deref(), Some("h2"));
        assert_eq!(held.trusted_hash(), None, "a held tool trusts nothing");
        assert_eq!(held.pinned_at_ms, 11);

        // Approving a hash never seen for this tool is refused.
        let err = store
            .approve_tool(&key, "srv", "read", "h3", 30)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::UnknownToolHash { .. }),
            "got {err:?}"
        );
        let err = store
            .approve_tool(&key, "srv", "send", "h2", 30)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::UnknownToolHash { .. }),
            "a hash seen for another tool must not approve this one: {err:?}"
        );
        let approved = store
            .approve_tool(&key, "srv", "read", "h2", 31)
            .await
            .unwrap();
        assert!(approved.is_trusted("h2"));
        assert_eq!(
            (approved.pending_hash, approved.pinned_at_ms),
            (None, 11),
            "approving a new definition keeps the age of the name's pin (shadowing seniority)"
        );

        let versions: Vec<_> = store
            .tool_versions("srv", "read")
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.hash)
            .collect();
        assert_eq!(versions, ["h1", "h2"], "both definitions kept for the diff");
        let def = store
            .tool_definition("srv", "read", "h1")
            .await
            .unwrap()
            .unwrap();
        assert!(def.definition_json.contains("v h1"));
        assert_eq!(store.tools_of_server("srv").await.unwrap().len(), 3);
    }

    #[tokio::test]
    async fn quarantine_reject_reset() {
        let store = mem().await;
        let key = key();
        store
            .record_seen_tool(&key, &seen("t", "bad"), 1)
            .await
            .unwrap();
        let err = store
            .hold_tool(&key, "srv", "t", "never-seen", HoldState::Held, None, 2)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::UnknownToolHash { .. }));
        let findings = r#"[{"rule":"hidden_instructions","severity":"high"}]"#;
        let pin = store
            .hold_tool(
                &key,
                "srv",
                "t",
                "bad",
                HoldState::Quarantined,
                Some(findings),
                2,
            )
            .await
            .unwrap();
        assert_eq!(pin.state, PinState::Quarantined);
        assert_eq!(pin.approved_hash, None, "a new tool has nothing approved");
        assert_eq!(pin.findings_json.as_deref(), Some(findings));
        assert!(pin.mac_valid);

        let rejected = store.reject_tool(&key, "srv", "t", 3).await.unwrap();
        assert_eq!(rejected.state, PinState::Rejected);
        assert_eq!(rejected.pending_hash.as_deref(), Some("bad"));
        assert!(!rejected.is_trusted("bad"));
        assert!(matches!(
            store.reject_tool(&key, "srv", "missing", 3).await,
            Err(StoreError::NotFound { .. })
        ));

        assert_eq!(store.pins_of_server(&key, "srv").await.unwrap().len(), 1);
        assert!(store.reset_pin("srv", "t").await.unwrap());
        assert!(!store.reset_pin("srv", "t").await.unwrap());
        assert_eq!(store.get_pin(&key, "srv", "t").await.unwrap(), None);
        assert!(
            store.has_ever_pinned().await.unwrap(),
            "a reset must not make the database look fresh"
        );
        assert!(
            store
                .pin_first_sight(&key, "srv", "t", "bad", 4)
                .await
                .unwrap(),
            "reset re-pins"
        );
        let bad_json = store
            .hold_tool(&key, "srv", "t", "bad", HoldState::Held, Some("{oops"), 5)
            .await;
        assert!(matches!(bad_json, Err(StoreError::Invalid(_))));
    }

    /// `read` approved at h1 and held at h2.
    async fn held_read() -> (Store, MacKey) {
        let store = mem().await;
        let key = key();
        store
            .record_seen_tools(&key, &[seen("read", "h1"), seen("read", "h2")], 1)
            .await
            .unwrap();
        store
            .pin_first_sight(&key, "srv", "read", "h1", 2)
            .await
            .unwrap();
        store
            .hold_tool(&key, "srv", "read", "h2", HoldState::Held, None, 3)
            .await
            .unwrap();
        (store, key)
    }

    #[tokio::test]
    async fn a_person_approves_only_the_waiting_version() {
        let (store, key) = held_read().await;
        let err = store
            .approve_waiting_tool(&key, "srv", "read", "h1", 4)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::NotWaiting { .. }),
            "the approved version is not what waits: {err:?}"
        );
        let pin = store.get_pin(&key, "srv", "read").await.unwrap().unwrap();
        assert_eq!(
            (pin.state, pin.pending_hash.as_deref()),
            (PinState::Held, Some("h2")),
            "a refused approval leaves the waiting version waiting"
        );
        let err = store
            .approve_waiting_tool(&key, "srv", "nope", "h1", 4)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::UnknownTool { .. }),
            "a tool never seen is not a hash never seen: {err:?}"
        );
        let approved = store
            .approve_waiting_tool(&key, "srv", "read", "h2", 5)
            .await
            .unwrap();
        assert!(approved.is_trusted("h2"));
        let again = store
            .approve_waiting_tool(&key, "srv", "read", "h1", 6)
            .await
            .unwrap();
        assert!(
            again.is_trusted("h1"),
            "with nothing waiting any seen version may be approved"
        );
    }

    #[tokio::test]
    async fn a_hold_asks_once_per_hash_and_any_approval_settles_it() {
        let (store, key) = held_read().await;
        let pending = |store: Store| async move {
            store
                .list_consents(Some(ConsentState::Pending), 10)
                .await
                .unwrap()
        };
        store
            .hold_tool(&key, "srv", "read", "h2", HoldState::Held, None, 4)
            .await
            .unwrap();
        let asked = pending(store.clone()).await;
        assert_eq!(asked.len(), 1, "the same hold asks once: {asked:?}");
        assert_eq!(asked[0].kind, ConsentKind::ChangedTool);
        assert_eq!(asked[0].tool.as_deref(), Some("read"));
        let payload: serde_json::Value = serde_json::from_str(&asked[0].payload_json).unwrap();
        assert_eq!(
            payload,
            serde_json::json!({ "from_hash": "h1", "to_hash": "h2" })
        );

        store
            .record_seen_tool(&key, &seen("read", "h3"), 5)
            .await
            .unwrap();
        let findings = r#"[{"rule":"hidden_instructions"}]"#;
        store
            .hold_tool(
                &key,
                "srv",
                "read",
                "h3",
                HoldState::Quarantined,
                Some(findings),
                6,
            )
            .await
            .unwrap();
        let asked = pending(store.clone()).await;
        assert_eq!(asked.len(), 1, "h2 no longer waits: {asked:?}");
        assert_eq!(asked[0].kind, ConsentKind::QuarantinedTool);
        assert!(asked[0].payload_json.contains("hidden_instructions"));
        assert_eq!(
            store
                .get_consent(asked[0].id - 1)
                .await
                .unwrap()
                .unwrap()
                .state,
            ConsentState::Expired
        );

        // Wrap's own re-pin settles it as well as a person's approval.
        store
            .approve_tool(&key, "srv", "read", "h3", 7)
            .await
            .unwrap();
        assert!(pending(store.clone()).await.is_empty());
        assert_eq!(
            store.get_consent(asked[0].id).await.unwrap().unwrap().state,
            ConsentState::Answered
        );

        store
            .hold_tool(&key, "srv", "read", "h2", HoldState::Held, None, 8)
            .await
            .unwrap();
        store.reject_tool(&key, "srv", "read", 9).await.unwrap();
        let all = store.list_consents(None, 10).await.unwrap();
        assert_eq!(
            all.last().map(|c| c.state),
            Some(ConsentState::Declined),
            "a rejection declines the request"
        );
    }

    /// Runs `sql` (what an attacker with file access does) on a held pin
    /// and checks whether the row still verifies.
    async fn check_tamper(sql: &'static str, expect_valid: bool, why: &str) {
        let store = mem().await;
        let key = key();
        store
            .record_seen_tools(&key, &[seen("x", "good"), seen("x", "evil")], 1)
            .await
            .unwrap();
        store
            .pin_first_sight(&key, "srv", "x", "good", 2)
            .await
            .unwrap();
        store
            .hold_tool(&key, "srv", "x", "evil", HoldState::Held, None, 3)
            .await
            .unwrap();
        sqlx::query(sql).execute(store.pool()).await.unwrap();
        let pin = store.get_pin(&key, "srv", "x").await.unwrap().unwrap();
        assert_eq!(pin.mac_valid, expect_valid, "{why}: MAC check");
        if expect_valid {
            return;
        }
        assert_eq!(
            pin.trusted_hash(),
            None,
            "{why}: a tampered row trusts nothing"
        );
        assert!(!pin.is_trusted("evil") && !pin.is_trusted("good"), "{why}");
        // A person's approval still names exactly what the row says waits.
        let other = match pin.pending_hash.as_deref() {
            Some("evil") => "good",
            _ => "evil",
        };
        let refused = store.approve_waiting_tool(&key, "srv", "x", other, 4).await;
        assert!(
            matches!(refused, Err(StoreError::NotWaiting { .. })),
            "{why}: approving {other} on a tampered row: {refused:?}"
        );
        let all = store.all_pins(&key).await.unwrap();
        assert!(!all[0].mac_valid, "{why}: listing reports it too");
        // Rewriting the row must not launder a forged approval.
        let rewritten = store
            .hold_tool(&key, "srv", "x", "evil", HoldState::Held, None, 4)
            .await
            .unwrap();
        assert!(rewritten.mac_valid);
        assert_eq!(
            rewritten.approved_hash, None,
            "{why}: forged approval carried forward"
        );
    }

    #[tokio::test]
    async fn tampered_pins_grant_nothing() {
        check_tamper(
            "UPDATE pins SET state = 'trusted', approved_hash = 'evil', pending_hash = NULL",
            false,
            "approve the pending hash by hand",
        )
        .await;
        check_tamper(
            "UPDATE pins SET state = 'trusted'",
            false,
            "flip held to trusted",
        )
        .await;
        check_tamper(
            "UPDATE pins SET pinned_at_ms = 99",
            false,
            "change a timestamp",
        )
        .await;
        check_tamper("UPDATE pins SET mac = x'00'", false, "truncate the MAC").await;
        check_tamper(
            "UPDATE pins SET pending_hash = NULL",
            false,
            "hide what waits",
        )
        .await;
        check_tamper("UPDATE pins SET findings = '[]'", false, "add findings").await;
        check_tamper(
            "UPDATE pins SET state = state, mac = mac",
            true,
            "control: an identical rewrite still verifies",
        )
        .await;
    }

    #[tokio::test]
    async fn another_key_verifies_nothing() {
        let store = mem().await;
        store
            .record_seen_tool(&key(), &seen("x", "h"), 1)
            .await
            .unwrap();
        store
            .pin_first_sight(&key(), "srv", "x", "h", 1)
            .await
            .unwrap();
        let other = MacKey::new([9; 32]);
        let pin = store.get_pin(&other, "srv", "x").await.unwrap().unwrap();
        assert!(!pin.mac_valid && pin.trusted_hash().is_none());
    }

    #[tokio::test]
    async fn corrupt_pin_state_is_an_error() {
        let store = mem().await;
        store
            .record_seen_tool(&key(), &seen("x", "h"), 1)
            .await
            .unwrap();
        store
            .pin_first_sight(&key(), "srv", "x", "h", 1)
            .await
            .unwrap();
        sqlx::query("UPDATE pins SET state = 'blessed'")
            .execute(store.pool())
            .await
            .unwrap();
        assert!(matches!(
            store.pins_of_server(&key(), "srv").await,
            Err(StoreError::CorruptRow { table: "pins", .. })
        ));
        sqlx::query("UPDATE tools SET definition = 'not json'")
            .execute(store.pool())
            .await
            .unwrap();
        assert!(matches!(
            store.tool_versions("srv", "x").await,
            Err(StoreError::CorruptRow { .. })
        ));
    }

    #[tokio::test]
    async fn seen_tool_input_is_validated() {
        let store = mem().await;
        let mut bad = seen("x", "h");
        bad.definition_json = "{".into();
        assert!(matches!(
            store.record_seen_tool(&key(), &bad, 1).await,
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            store.record_tool_definition(&bad, 1).await,
            Err(StoreError::Invalid(_))
        ));
        assert!(
            store
                .record_tool_definition(&seen("x", "h"), 1)
                .await
                .unwrap(),
            "new definition"
        );
        assert!(
            !store
                .record_tool_definition(&seen("x", "h"), 2)
                .await
                .unwrap(),
            "known definition"
        );
        let fresh_with_protect = {
            store
                .register_protected_server(
                    &crate::NewServer {
                        id: "p".into(),
                        command_hash: "c".into(),
                        argv_json: "[]".into(),
                        ..Default::default()
                    },
                    1,
                )
                .await
                .unwrap();
            store.database_is_fresh().await.unwrap()
        };
        assert!(!fresh_with_protect);
    }

    #[tokio::test]
    async fn protect_registration_alone_is_not_fresh() {
        let store = mem().await;
        store.check_identity("w", "c", 1).await.unwrap();
        assert!(
            store.database_is_fresh().await.unwrap(),
            "a server bound by wrap alone does not make a database trustworthy"
        );
        store
            .register_protected_server(
                &crate::NewServer {
                    id: "p".into(),
                    command_hash: "c".into(),
                    argv_json: "[]".into(),
                    ..Default::default()
                },
                1,
            )
            .await
            .unwrap();
        assert!(
            !store.database_is_fresh().await.unwrap(),
            "protect ran against this database"
        );
    }
}
