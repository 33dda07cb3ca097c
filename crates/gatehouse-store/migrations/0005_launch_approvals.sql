-- pinning.on_launch_change = "hold": the launch fingerprint (executable
-- path and hash, script hash, package spec) a person approved for each
-- server (or the first one seen), and a changed one waiting for approval.
-- A held launch runs without its secrets and with every tool withheld until
-- `gatehouse pins trust-launch` (or the API) approves it. The row is MAC'd
-- like every row that grants trust.
CREATE TABLE launch_approvals (
    server_id    TEXT PRIMARY KEY NOT NULL,
    approved     TEXT NOT NULL,                -- approved fingerprint ('' = none)
    pending      TEXT,                         -- a changed fingerprint waiting for approval
    pending_json TEXT,                         -- what changed: paths, hashes, package (no secrets)
    updated_ms   INTEGER NOT NULL,
    mac          BLOB NOT NULL
) STRICT;
