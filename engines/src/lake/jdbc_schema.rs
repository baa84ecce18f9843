//! The SQL catalog's schema version. Java's `JdbcCatalog` (Flink, Spark, Trino) creates its
//! `iceberg_tables` without the `iceberg_type` column unless told `jdbc.schema-version=V1`;
//! iceberg-rust (and PyIceberg's v1 mode) query that column and fail on such a catalog. lakegate
//! adds the column, as `JdbcCatalog` itself does when it is given `V1` on a V0 catalog: nullable,
//! so every V0 client keeps working (a NULL type means "table" to both versions).

use sqlx::{AnyConnection, Connection, Executor};

use crate::error::Result;

/// What [`upgrade_v0`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SchemaVersion {
    /// No `iceberg_tables` yet (iceberg-rust creates it, with the column).
    Missing,
    /// Already V1.
    V1,
    /// Was V0; the column was added.
    Upgraded,
}

/// Adds `iceberg_type` to a V0 catalog's `iceberg_tables`.
pub(super) async fn upgrade_v0(uri: &str) -> Result<SchemaVersion> {
    sqlx::any::install_default_drivers();
    let mut conn = AnyConnection::connect(uri).await?;
    let version = if conn
        .execute("SELECT 1 FROM iceberg_tables WHERE 1 = 0")
        .await
        .is_err()
    {
        SchemaVersion::Missing
    } else if conn
        .execute("SELECT iceberg_type FROM iceberg_tables WHERE 1 = 0")
        .await
        .is_ok()
    {
        SchemaVersion::V1
    } else {
        conn.execute("ALTER TABLE iceberg_tables ADD COLUMN iceberg_type VARCHAR(5)")
            .await?;
        tracing::warn!(
            "the SQL catalog was a V0 JDBC catalog (as Java's JdbcCatalog creates by default): \
             added the nullable iceberg_type column to iceberg_tables (V1)"
        );
        SchemaVersion::Upgraded
    };
    let _ = conn.close().await;
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_v0_catalog_gains_the_column_and_keeps_its_rows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = format!("sqlite://{}/c.db?mode=rwc", dir.path().display());
        assert_eq!(
            upgrade_v0(&uri).await.expect("missing"),
            SchemaVersion::Missing
        );
        sqlx::any::install_default_drivers();
        let mut conn = AnyConnection::connect(&uri).await.expect("connect");
        // The V0 layout Java's JdbcCatalog creates.
        conn.execute(
            "CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, \
             table_namespace VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL, \
             metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000), \
             PRIMARY KEY (catalog_name, table_namespace, table_name))",
        )
        .await
        .expect("create");
        conn.execute("INSERT INTO iceberg_tables VALUES ('lake', 'cdc', 't', 'm.json', NULL)")
            .await
            .expect("insert");
        assert_eq!(upgrade_v0(&uri).await.expect("v0"), SchemaVersion::Upgraded);
        assert_eq!(upgrade_v0(&uri).await.expect("v1"), SchemaVersion::V1);
        let row: (String,) = sqlx::query_as(
            "SELECT metadata_location FROM iceberg_tables \
             WHERE table_name = 't' AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)",
        )
        .fetch_one(&mut conn)
        .await
        .expect("row");
        assert_eq!(row.0, "m.json");
    }
}
