-- Issue 5: a call check loads only what its rules need, each part an index
-- range: other servers' reads (sequence rules) and the caller's own calls
-- (burst, rate limit), instead of every call of the session's window.
CREATE INDEX call_window_session_category_time ON call_window (session, category, time_ms);
CREATE INDEX call_window_session_server_time ON call_window (session, server_id, time_ms);
