-- Incremental call checks: every change of a call_window row (a call
-- recorded, a read's result attached) stamps the row with the next value of
-- one counter, so a wrap process loads only the rows changed since its last
-- check instead of the whole window on every call. The writing statement
-- sets `seq` to the counter + 1 (calls.rs); these triggers advance the
-- counter in that statement's own transaction.
CREATE TABLE call_seq (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
) STRICT;
INSERT INTO call_seq (id, value) VALUES (1, 0);

ALTER TABLE call_window ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX call_window_session_seq ON call_window (session, seq);

CREATE TRIGGER call_window_seq_on_insert AFTER INSERT ON call_window BEGIN
    UPDATE call_seq SET value = value + 1 WHERE id = 1;
END;

CREATE TRIGGER call_window_seq_on_result AFTER UPDATE OF result ON call_window BEGIN
    UPDATE call_seq SET value = value + 1 WHERE id = 1;
END;
