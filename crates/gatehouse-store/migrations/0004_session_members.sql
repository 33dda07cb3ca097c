-- Issue 5: a call check loads only what its rules need, each part an index
-- range: other servers' reads (sequence rules) and the caller's own calls
-- (burst, rate limit), instead of every call of the session's window.
CREATE INDEX call_window_session_category_time ON call_window (session, category, time_ms);
CREATE INDEX call_window_session_server_time ON call_window (session, server_id, time_ms);

-- The wrap processes of each client session. A process alone in its session
-- keeps its calls in memory (no write per call); when another joins, each
-- member writes its recent calls to `call_window` and acknowledges the join
-- by raising `synced_id` to the joiner's id. A joiner checks its first call
-- only once every other live member has acknowledged it.
CREATE TABLE session_members (
    id        INTEGER PRIMARY KEY,                -- join order
    session   TEXT NOT NULL,
    server_id TEXT NOT NULL,
    pid       INTEGER NOT NULL,
    joined_ms INTEGER NOT NULL,
    synced_id INTEGER NOT NULL DEFAULT 0          -- highest member id this one has synced for
) STRICT;
CREATE INDEX session_members_session ON session_members (session);
