-- Issue 6: keyed fingerprints of each protected server's vault secrets, for
-- the secret egress guard. A wrap process replaces its server's rows when it
-- starts with secrets; every wrap checks outgoing call arguments against the
-- other servers' rows. `fingerprint` is `v1:<len>:<prefix>:<mac>` under a key
-- derived from the per-install key (gatehouse_vault::guard): never a value.
CREATE TABLE secret_fingerprints (
    server_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    updated_ms  INTEGER NOT NULL,
    PRIMARY KEY (server_id, name)
) STRICT, WITHOUT ROWID;
