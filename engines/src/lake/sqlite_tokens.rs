//! Version tokens of a SQLite catalog read on the caller's thread.
//!
//! sqlx runs each SQLite connection on a thread of its own: a lookup is a message to that
//! thread and one back, two thread wake-ups that cost more than the indexed read itself (a
//! fifth of a cached answer's CPU, measured by `perf` on bench/serving). Here the read runs in
//! place on a read-only connection; it never waits: a catalog locked by a committing writer
//! (`SQLITE_BUSY`) or any other failure gives `None`, and the caller takes the sqlx path,
//! which waits its turn as before. Each read is its own transaction, so it sees every commit
//! that finished before it began.
//!
//! Most statements find nothing committed since the last one: SQLite's file header carries a
//! change counter that every commit in rollback-journal mode increments (its own page cache
//! relies on it). A lookup first reads those 100 bytes (one `pread`), and when the counter is
//! the one its kept answer for the table was read under, that answer stands: no lock, no
//! transaction. The counter is read before the row, so a commit in between only costs one more
//! read later. A WAL database (header versions 2) does not keep the counter per commit and is
//! always read. A file replaced under its path (or removed) loses a name: the kept file's link
//! count, read from its descriptor (no path walk), drops, and the path is opened anew with
//! nothing kept.

use std::collections::HashMap;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags, OptionalExtension};
use tracing::debug;

use crate::idle::Idle;

thread_local! {
    /// A lookup's key, built in place: most lookups are answered from what is kept, with no
    /// allocation.
    static KEY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Connections kept idle for reuse (one per concurrent lookup at most).
const IDLE: usize = 8;

/// Read-only connections to one SQLite catalog file.
pub(super) struct SqliteTokens {
    path: String,
    query: String,
    /// Idle connections, each with the [`Self::opened`] count its file was opened under.
    idle: Idle<(u64, Connection)>,
    /// How many times the path was opened for the header: a connection opened under an
    /// earlier count may read a file no longer at the path.
    opened: AtomicU64,
    /// The file, for its header, and its link count when opened.
    header: Mutex<Option<(Arc<std::fs::File>, u64)>>,
    /// Each table's last answer and the change counter it was read under.
    kept: Mutex<HashMap<String, (u32, Option<String>), foldhash::fast::RandomState>>,
    /// Rows read (not answered from `kept`).
    reads: AtomicU64,
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
            opened: AtomicU64::new(0),
            header: Mutex::new(None),
            kept: Mutex::new(HashMap::default()),
            reads: AtomicU64::new(0),
        })
    }

    /// The header's change counter, when it tells every commit apart (rollback-journal mode,
    /// the file still at `path`), and the [`Self::opened`] count of the file it was read from.
    fn change_counter(&self) -> (Option<u32>, u64) {
        let (kept, opened) = {
            let header = self.header.lock().unwrap_or_else(|p| p.into_inner());
            // Counted under the lock that reopens: the count is this file's.
            (header.clone(), self.opened.load(Ordering::Relaxed))
        };
        let current =
            kept.filter(|(file, links)| file.metadata().is_ok_and(|m| m.nlink() == *links));
        let (file, opened) = match current {
            Some((file, _)) => (file, opened),
            // First use, or the file gained or lost a name (replaced under its path, removed,
            // linked): the path's file, with nothing kept from another.
            None => {
                let file = std::fs::File::open(&self.path).and_then(|f| {
                    let links = f.metadata()?.nlink();
                    Ok((Arc::new(f), links))
                });
                let mut header = self.header.lock().unwrap_or_else(|p| p.into_inner());
                let opened = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
                self.kept.lock().unwrap_or_else(|p| p.into_inner()).clear();
                *header = file.ok();
                match header.as_ref() {
                    Some((file, _)) => (file.clone(), opened),
                    None => return (None, opened),
                }
            }
        };
        let mut bytes = [0u8; 28];
        if file.read_exact_at(&mut bytes, 0).is_err() {
            return (None, opened);
        }
        let rollback = bytes[18] == 1 && bytes[19] == 1;
        let counter =
            rollback.then(|| u32::from_be_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]));
        (counter, opened)
    }

    /// Rows read from the file so far (tests: what the header spared).
    #[cfg(test)]
    fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// The table's metadata location: `Some(None)` when there is no such table (or it is
    /// being created), `None` when this path could not read it now.
    pub(super) fn lookup(&self, binds: [&str; 3]) -> Option<Option<String>> {
        let (counter, opened) = self.change_counter();
        if let Some(counter) = counter {
            let kept = KEY.with_borrow_mut(|key| {
                key.clear();
                for (i, bind) in binds.iter().enumerate() {
                    if i > 0 {
                        key.push('\u{0}');
                    }
                    key.push_str(bind);
                }
                let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
                kept.get(key.as_str())
                    .filter(|(at, _)| *at == counter)
                    .map(|(_, location)| location.clone())
            });
            if let Some(location) = kept {
                return Some(location);
            }
        }
        let key = binds.join("\u{0}");
        let connection = loop {
            match self.idle.take() {
                Some((at, c)) if at == opened => break c,
                Some(_) => {}
                None => break self.open()?,
            }
        };
        self.reads.fetch_add(1, Ordering::Relaxed);
        match read(&connection, &self.query, binds) {
            Ok(location) => {
                self.idle.give_back((opened, connection));
                if let Some(counter) = counter {
                    let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
                    // Tables come and go: a bound far above any lake's table count.
                    if kept.len() >= 100_000 {
                        kept.clear();
                    }
                    // Not when the path was opened anew since the counter was read: that
                    // cleared what was kept, and the counter is another file's.
                    if self.opened.load(Ordering::Relaxed) == opened {
                        kept.insert(key, (counter, location.clone()));
                    }
                }
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
        let reads = tokens.reads();
        assert_eq!(
            tokens.lookup(["c", "shop", "orders"]),
            Some(Some("v1.json".into()))
        );
        assert_eq!(
            tokens.reads(),
            reads,
            "nothing committed: the header answers"
        );
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
        // A writer holding the lock with nothing committed since: the kept answer is the
        // committed state, and stands.
        writer.execute_batch("BEGIN EXCLUSIVE").expect("lock");
        assert_eq!(
            tokens.lookup(["c", "shop", "orders"]),
            Some(Some("v2.json".into()))
        );
        writer.execute_batch("COMMIT").expect("unlock");
        // A commit, then a writer holding the database's exclusive lock: the file must be
        // read, and it is not waited for — the caller goes through sqlx.
        writer
            .execute(
                "UPDATE iceberg_tables SET metadata_location = 'v3.json'",
                [],
            )
            .expect("commit");
        writer.execute_batch("BEGIN EXCLUSIVE").expect("lock");
        let started = std::time::Instant::now();
        assert_eq!(tokens.lookup(["c", "shop", "orders"]), None);
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
        writer.execute_batch("COMMIT").expect("unlock");
        assert_eq!(
            tokens.lookup(["c", "shop", "orders"]),
            Some(Some("v3.json".into()))
        );
        assert!(SqliteTokens::new("sqlite::memory:", QUERY).is_none());
    }

    #[test]
    fn a_wal_catalog_is_read_every_time() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("c.db");
        let writer = Connection::open(&path).expect("open");
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL;
                 CREATE TABLE iceberg_tables (catalog_name TEXT, table_namespace TEXT, \
                 table_name TEXT, metadata_location TEXT);
                 INSERT INTO iceberg_tables VALUES ('c', 'shop', 'orders', 'v1.json');",
            )
            .expect("schema");
        let tokens =
            SqliteTokens::new(&format!("sqlite://{}", path.display()), QUERY).expect("a file");
        for version in ["v2.json", "v3.json"] {
            writer
                .execute("UPDATE iceberg_tables SET metadata_location = ?", [version])
                .expect("commit");
            assert_eq!(
                tokens.lookup(["c", "shop", "orders"]),
                Some(Some(version.into()))
            );
        }
        assert_eq!(tokens.reads(), 2);
    }

    #[test]
    fn a_catalog_replaced_under_its_path_is_read_anew() {
        let dir = tempfile::tempdir().expect("temp dir");
        let make = |name: &str, location: &str| {
            let path = dir.path().join(name);
            let writer = Connection::open(&path).expect("open");
            writer
                .execute_batch(&format!(
                    "CREATE TABLE iceberg_tables (catalog_name TEXT, table_namespace TEXT, \
                     table_name TEXT, metadata_location TEXT);
                     INSERT INTO iceberg_tables VALUES ('c', 'shop', 'orders', '{location}');"
                ))
                .expect("schema");
            path
        };
        // Two files made alike: their change counters are equal, so only the file tells the
        // kept answer from the new one.
        let path = make("c.db", "v1.json");
        let restored = make("restored.db", "v9.json");
        let tokens =
            SqliteTokens::new(&format!("sqlite://{}", path.display()), QUERY).expect("a file");
        let lookup = || tokens.lookup(["c", "shop", "orders"]);
        assert_eq!(lookup(), Some(Some("v1.json".into())));
        assert_eq!(lookup(), Some(Some("v1.json".into())));
        let reads = tokens.reads();
        // Another name for the same file changes nothing but the link count.
        std::fs::hard_link(&path, dir.path().join("backup.db")).expect("link");
        assert_eq!(lookup(), Some(Some("v1.json".into())));
        // Replaced under its path (a restore): the old file keeps a name (backup.db).
        std::fs::rename(&restored, &path).expect("replace");
        assert_eq!(lookup(), Some(Some("v9.json".into())));
        assert!(tokens.reads() > reads, "the new file is read");
        // Removed: nothing to read here (the caller goes through sqlx).
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(lookup(), None);
    }
}
