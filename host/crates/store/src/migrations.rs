//! Schema migrations, applied in order at start and recorded in `gateway_migrations`.

/// (version, SQLite text, PostgreSQL text), in order.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "CREATE TABLE plugin_kv (
            tenant TEXT NOT NULL, plugin TEXT NOT NULL, collection TEXT NOT NULL,
            key TEXT NOT NULL, value TEXT NOT NULL,
            PRIMARY KEY (tenant, plugin, collection, key))",
        // Byte-wise key order, as on SQLite.
        "CREATE TABLE plugin_kv (
            tenant TEXT NOT NULL, plugin TEXT NOT NULL, collection TEXT NOT NULL,
            key TEXT COLLATE \"C\" NOT NULL, value TEXT NOT NULL,
            PRIMARY KEY (tenant, plugin, collection, key))",
    ),
    (
        // Values become bytes and gain versions from one clock per database.
        2,
        "CREATE TABLE plugin_kv_v2 (
            tenant TEXT NOT NULL, plugin TEXT NOT NULL, collection TEXT NOT NULL,
            key TEXT NOT NULL, value BLOB NOT NULL, version INTEGER NOT NULL,
            PRIMARY KEY (tenant, plugin, collection, key));
         INSERT INTO plugin_kv_v2 SELECT tenant, plugin, collection, key, CAST(value AS BLOB), 1 FROM plugin_kv;
         DROP TABLE plugin_kv;
         ALTER TABLE plugin_kv_v2 RENAME TO plugin_kv;
         CREATE TABLE kv_clock (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
         INSERT INTO kv_clock VALUES (1, 1);",
        "ALTER TABLE plugin_kv ALTER COLUMN value TYPE BYTEA USING convert_to(value, 'UTF8');
         ALTER TABLE plugin_kv ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
         ALTER TABLE plugin_kv ALTER COLUMN version DROP DEFAULT;
         CREATE SEQUENCE kv_clock START 2;",
    ),
    (
        // Leases of singleton plugins in a cluster: one holder per (tenant,
        // plugin), a fencing token bumped at every takeover. Only PostgreSQL
        // uses it; SQLite serves one process, which holds every lease.
        3,
        "CREATE TABLE plugin_leases (
            tenant TEXT NOT NULL, plugin TEXT NOT NULL, holder TEXT NOT NULL,
            token INTEGER NOT NULL, expires_at INTEGER NOT NULL,
            PRIMARY KEY (tenant, plugin))",
        "CREATE TABLE plugin_leases (
            tenant TEXT NOT NULL, plugin TEXT NOT NULL, holder TEXT NOT NULL,
            token BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (tenant, plugin))",
    ),
    (
        // Compiled plugins shared by the gateways of one database, keyed by
        // the component and the engine (`artifacts`). Only PostgreSQL uses it.
        // Machine code compresses poorly: stored out of line, uncompressed.
        4,
        "CREATE TABLE plugin_artifacts (
            key TEXT PRIMARY KEY, plugin TEXT NOT NULL, digest TEXT NOT NULL,
            artifact BLOB NOT NULL, created_at INTEGER NOT NULL, used_at INTEGER NOT NULL)",
        "CREATE TABLE plugin_artifacts (
            key TEXT PRIMARY KEY, plugin TEXT NOT NULL, digest TEXT NOT NULL,
            artifact BYTEA NOT NULL, created_at TIMESTAMPTZ NOT NULL, used_at TIMESTAMPTZ NOT NULL);
         ALTER TABLE plugin_artifacts ALTER COLUMN artifact SET STORAGE EXTERNAL;
         CREATE INDEX plugin_artifacts_by_plugin ON plugin_artifacts (plugin, used_at);",
    ),
    (
        // Each cluster's current rollout (`rollouts`), so a node that starts
        // serves what the others do. Only PostgreSQL uses it.
        5,
        "CREATE TABLE cluster_rollouts (
            cluster TEXT PRIMARY KEY, id TEXT NOT NULL, kind TEXT NOT NULL, from_node TEXT NOT NULL,
            pins TEXT NOT NULL, previous TEXT NOT NULL, at INTEGER NOT NULL)",
        "CREATE TABLE cluster_rollouts (
            cluster TEXT PRIMARY KEY, id TEXT COLLATE \"C\" NOT NULL, kind TEXT NOT NULL, from_node TEXT NOT NULL,
            pins TEXT NOT NULL, previous TEXT NOT NULL, at BIGINT NOT NULL)",
    ),
];

pub const CREATE_LEDGER: &str = "CREATE TABLE IF NOT EXISTS gateway_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)";

/// Held by the transaction that migrates, so that gateways starting together migrate one at a time.
pub const LOCK_POSTGRES: &str = "SELECT pg_advisory_xact_lock(7305860473)";
