-- Issue 5: the tool names each server of a client session exposes, for the
-- shadowing rule (read inside the call check's transaction). One row per
-- (session, name, server); a server's rows are replaced when it lists again
-- and removed when its wrap process ends. Pin age comes from `pins`.
CREATE TABLE session_tools (
    session       TEXT NOT NULL,
    name          TEXT NOT NULL,
    server_id     TEXT NOT NULL,
    pin_server_id TEXT NOT NULL,                  -- namespace of its pins (ID or ID~hash)
    command_hash  TEXT NOT NULL,                  -- same hash = same server, not a shadow
    updated_ms    INTEGER NOT NULL,
    PRIMARY KEY (session, name, server_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX session_tools_server ON session_tools (session, server_id);
CREATE INDEX session_tools_updated ON session_tools (updated_ms);
