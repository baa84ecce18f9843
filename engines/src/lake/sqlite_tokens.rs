//! Version tokens of a SQLite catalog read on the caller's thread.
//!
//! sqlx runs each SQLite connection on a thread of its own: a lookup is a message to that
//! thread and one back, two thread wake-ups that cost more than the indexed read itself (a
//! fifth of a cached answer's CPU, measured by `perf` on bench/serving). Here the read runs in
//! place on a read-only connection; it never waits: a catalog locked by a committing writer
//! (`SQLITE_BUSY`) or any other failure gives `None`, and the caller takes the sqlx path,
//! which waits its turn as before. Each read is its own transaction, so it sees every commit
//! that finished before it began.

use rusqlite::{Connection, OpenFlags, OptionalExtension};
use tracing::debug;

use crate::idle::Idle;

/// Connections kept idle for reuse (one per concurrent lookup at most).
const IDLE: usize = 8;

/// Read-only connections to one SQLite catalog file.
pub(super) struct SqliteTokens {
    path: String,
    query: String,
    idle: Idle<Connection>,
}

impl SqliteTokens {
    /// For the catalog at `uri` (sqlx's form), `None` for an in-memory database (each
    /// connection would be a different one).
    pub(super) fn new(uri: &str, query: &str) -> Option<Self> {
        let path = super::sqlite_path(uri);
        if path.is_empty() || path.starts_with(":memory:") || uri.contains("mode=memory") {
            return None;
        }
        Some(Self {
            path: path.to_string(),
            query: query.to_string(),
            idle: Idle::new(IDLE),
        })
    }

    /// The table's metadata location: `Some(None)` when there is no such table (or it is
    /// being created), `None` when this path could not read it now.
    pub(super) fn lookup(&self, binds: [&str; 3]) -> Option<Option<String>> {
        let connection = match self.idle.take() {
            Some(c) => c,
            None => self.open()?,
        };
        match read(&connection, &self.query, binds) {
            Ok(location) => {
                self.idle.give_back(connection);
                Some(location)
            }
            Err(e) => {
                debug!(error = %e, "SQLite token read in place failed: through sqlx instead");
                None
            }
        }
    }

    fn open(&self) -> Option<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        // rusqlite waits 5 s on a lock by default; this path must not wait at all.
        let opened = Connection::open_with_flags(&self.path, flags)
            .and_then(|c| c.busy_timeout(std::time::Duration::ZERO).map(|()| c));
        match opened {
            Ok(c) => Some(c),
            Err(e) => {
                debug!(error = %e, path = %self.path, "cannot open the SQLite catalog read-only");
                None
            }
        }
    }
}

fn read(
    connection: &Connection,
    query: &str,
    [catalog, namespace, name]: [&str; 3],
) -> rusqlite::Result<Option<String>> {
    let row: Option<Option<String>> = connection
        .prepare_cached(query)?
        .query_row([catalog, namespace, name], |row| row.get(0))
        .optional()?;
    Ok(row.flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUERY: &str = "SELECT metadata_location FROM iceberg_tables \
        WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?";

    #[test]
    fn reads_each_commit_and_gives_way_to_a_writer() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("c.db");
        let writer = Connection::open(&path).expect("open");
        writer
            .execute_batch(
                "CREATE TABLE iceberg_tables (catalog_name TEXT, table_namespace TEXT, \
                 table_name TEXT, metadata_location TEXT);
                 INSERT INTO iceberg_tables VALUES ('c', 'shop', 'orders', 'v1.json');",
            )
            .expect("schema");
        let uri = format!("sqlite://{}?mode=rwc", path.display());
        let tokens = SqliteTokens::new(&uri, QUERY).expect("a file catalog");
        assert_eq!(
            tokens.lookup(["c", "shop", "orders"]),
            Some(Some("v1.json".into()))
        );
        assert_eq!(tokens.lookup(["c", "shop", "missing"]), Some(None));
        writer
            .execute(
                "UPDATE iceberg_tables SET metadata_location = 'v2.json'",
                [],
            )
            .expect("commit");
        assert_eq!(
            tokens.lookup(["c", "shop", "orders"]),
            Some(Some("v2.json".into())),
            "a reused connection sees the commit"
        );
        // A writer holding the database's exclusive lock: no waiting, the caller goes async.
        writer.execute_batch("BEGIN EXCLUSIVE").expect("lock");
        let started = std::time::Instant::now();
        assert_eq!(tokens.lookup(["c", "shop", "orders"]), None);
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
        writer.execute_batch("COMMIT").expect("unlock");
        assert!(tokens.lookup(["c", "shop", "orders"]).is_some());
        assert!(SqliteTokens::new("sqlite::memory:", QUERY).is_none());
    }
}
