-- cross_server.typosquat.packages: a launched npx/uvx/pipx package similar
-- to a configured or popular one is held until a person approves exactly
-- that package for that server (`gatehouse pins trust-package`, or the
-- dashboard's inbox). MAC'd like every row that grants trust.
CREATE TABLE package_approvals (
    server_id   TEXT NOT NULL,
    package     TEXT NOT NULL,                 -- the launched package spec, as held
    approved_ms INTEGER NOT NULL,
    mac         BLOB NOT NULL,
    PRIMARY KEY (server_id, package)
) STRICT;
