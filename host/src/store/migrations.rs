//! Schema migrations, applied in order at start and recorded in `gateway_migrations`.

/// (version, SQLite text, PostgreSQL text), in order.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[(
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
)];

pub const CREATE_LEDGER: &str = "CREATE TABLE IF NOT EXISTS gateway_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)";
