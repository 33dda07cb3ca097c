-- Gatehouse schema, version 1. Migrations only add: never drop, rename or
-- rewrite a column here or in a later file (a test enforces it).
-- Every table is STRICT so a value of the wrong type cannot be stored.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT;

-- One row per Gatehouse-assigned server id.
CREATE TABLE servers (
    id                 TEXT PRIMARY KEY NOT NULL,
    origin             TEXT NOT NULL,              -- 'protect' | 'wrap'
    display_name       TEXT,
    client             TEXT,
    config_path        TEXT,
    scope              TEXT,
    entry_name         TEXT,
    command_hash       TEXT NOT NULL,              -- identity binding
    argv_json          TEXT,
    cwd                TEXT,
    exe_path           TEXT,                       -- launch pin
    exe_hash           TEXT,
    script_hash        TEXT,
    package_spec       TEXT,
    launch_recorded_ms INTEGER,
    first_seen_ms      INTEGER NOT NULL,
    last_seen_ms       INTEGER NOT NULL
) STRICT;
CREATE INDEX servers_command_hash ON servers (command_hash);

-- Server mode (normal / paused / restricted), MAC'd: pausing lowers protection.
CREATE TABLE server_modes (
    server_id TEXT PRIMARY KEY NOT NULL,
    mode      TEXT NOT NULL,
    set_ms    INTEGER NOT NULL,
    mac       BLOB NOT NULL
) STRICT;

-- Every distinct tool definition ever seen; never deleted by pin resets.
CREATE TABLE tools (
    server_id     TEXT NOT NULL,
    name          TEXT NOT NULL,
    hash          TEXT NOT NULL,
    hash_version  INTEGER NOT NULL,
    definition    TEXT NOT NULL,
    first_seen_ms INTEGER NOT NULL,
    PRIMARY KEY (server_id, name, hash)
) STRICT;

-- Per (server, tool): what is approved and what waits. MAC'd.
CREATE TABLE pins (
    server_id     TEXT NOT NULL,
    name          TEXT NOT NULL,
    state         TEXT NOT NULL,                   -- trusted | held | quarantined | rejected
    approved_hash TEXT,
    hash_version  INTEGER NOT NULL,
    pending_hash  TEXT,
    findings      TEXT,
    pinned_at_ms  INTEGER NOT NULL,
    updated_ms    INTEGER NOT NULL,
    mac           BLOB NOT NULL,
    PRIMARY KEY (server_id, name)
) STRICT;

-- Decisions. AUTOINCREMENT: ids are never reused after pruning, so
-- `after_id` cursors of pollers stay valid.
CREATE TABLE events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    time_ms      INTEGER NOT NULL,
    last_time_ms INTEGER NOT NULL,
    type         TEXT NOT NULL,
    server_id    TEXT,
    tool         TEXT,
    action       TEXT NOT NULL,
    rule         TEXT,
    severity     TEXT NOT NULL,
    reason       TEXT NOT NULL,
    evidence     TEXT,
    session      TEXT,
    count        INTEGER NOT NULL DEFAULT 1,
    agg_key      INTEGER                           -- flood aggregation slot key
) STRICT;
CREATE INDEX events_time ON events (time_ms);
CREATE INDEX events_server_time ON events (server_id, time_ms);
CREATE INDEX events_tool_time ON events (tool, time_ms);
CREATE INDEX events_type_time ON events (type, time_ms);
CREATE INDEX events_action_time ON events (action, time_ms);
CREATE INDEX events_severity_time ON events (severity, time_ms);
CREATE UNIQUE INDEX events_agg ON events (agg_key) WHERE agg_key IS NOT NULL;

CREATE TABLE consent_requests (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    kind          TEXT NOT NULL,                   -- changed_tool | quarantined_tool | shadow_tie | elicitation
    server_id     TEXT NOT NULL,
    tool          TEXT,
    payload       TEXT NOT NULL,
    state         TEXT NOT NULL,                   -- pending | answered | declined | expired
    created_ms    INTEGER NOT NULL,
    expires_ms    INTEGER,
    answered_ms   INTEGER,
    answer        BLOB,                            -- sealed to requester_key; ciphertext only
    requester_key BLOB
) STRICT;
CREATE INDEX consent_state_created ON consent_requests (state, created_ms);

CREATE TABLE ui_sessions (
    id           TEXT PRIMARY KEY NOT NULL,
    token_hash   BLOB NOT NULL UNIQUE,
    label        TEXT,
    created_ms   INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    revoked_ms   INTEGER
) STRICT;

-- Calls that passed the whole chain, per client session. Plain rowid (no
-- AUTOINCREMENT): recording a call is exactly one row write.
CREATE TABLE call_window (
    id        INTEGER PRIMARY KEY,
    session   TEXT NOT NULL,
    server_id TEXT NOT NULL,
    tool      TEXT NOT NULL,
    category  TEXT NOT NULL,
    time_ms   INTEGER NOT NULL,
    outcome   TEXT NOT NULL,
    detail    BLOB,                                -- caller's opaque per-call material
    result    BLOB                                 -- taint material added by attach_result
) STRICT;
CREATE INDEX call_window_session_time ON call_window (session, time_ms);
CREATE INDEX call_window_time ON call_window (time_ms);

CREATE TABLE rate_buckets (
    session           TEXT NOT NULL,
    server_id         TEXT NOT NULL,
    tokens            REAL NOT NULL,
    updated_ms        INTEGER NOT NULL,
    cooldown_until_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session, server_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX rate_buckets_updated ON rate_buckets (updated_ms);
