//! The snapshots queries are reading right now through this gateway. Every statement an engine
//! runs holds its tables' snapshots from its start until its last row (a cursor until it is
//! closed); expiry never removes a held snapshot, so a long scan or an open cursor on a snapshot
//! that has since aged out keeps its files until it is done. The next cycle after the reader
//! lets go expires it as usual.
//!
//! A snapshot is held only once its statement is planned; a snapshot current when a statement
//! resolved it cannot be past retention by then unless `keep_snapshots` is 1 and
//! `snapshot_min_age` is zero.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Held snapshots: `ns.table` → snapshot id → readers.
#[derive(Debug, Default)]
pub struct Readers {
    held: Mutex<HashMap<String, HashMap<i64, usize>>>,
}

/// A statement's hold on its snapshots, released when dropped.
#[derive(Debug)]
pub struct ReadGuard {
    readers: Arc<Readers>,
    held: Vec<(String, i64)>,
}

impl Readers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<i64, usize>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds each `(ns.table, snapshot id)` until the guard is dropped.
    pub fn hold(self: &Arc<Self>, snapshots: Vec<(String, i64)>) -> ReadGuard {
        if snapshots.is_empty() {
            return ReadGuard {
                readers: self.clone(),
                held: snapshots,
            };
        }
        let mut held = self.lock();
        for (table, id) in &snapshots {
            *held
                .entry(table.clone())
                .or_default()
                .entry(*id)
                .or_default() += 1;
        }
        ReadGuard {
            readers: self.clone(),
            held: snapshots,
        }
    }

    /// The snapshots of `table` (`ns.table`) being read now.
    pub fn of(&self, table: &str) -> HashSet<i64> {
        self.lock()
            .get(table)
            .map(|s| s.keys().copied().collect())
            .unwrap_or_default()
    }
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let mut held = self.readers.lock();
        for (table, id) in &self.held {
            if let Some(snapshots) = held.get_mut(table) {
                if let Some(n) = snapshots.get_mut(id) {
                    *n -= 1;
                    if *n == 0 {
                        snapshots.remove(id);
                    }
                }
                if snapshots.is_empty() {
                    held.remove(table);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_held_while_any_reader_holds_it() {
        let readers = Arc::new(Readers::default());
        let a = readers.hold(vec![("s.t".into(), 1), ("s.u".into(), 7)]);
        let b = readers.hold(vec![("s.t".into(), 1), ("s.t".into(), 2)]);
        assert_eq!(readers.of("s.t"), HashSet::from([1, 2]));
        drop(a);
        assert_eq!(readers.of("s.t"), HashSet::from([1, 2]), "b still reads 1");
        assert!(readers.of("s.u").is_empty());
        drop(b);
        assert!(readers.of("s.t").is_empty());
        assert!(readers.lock().is_empty(), "nothing left behind");
    }
}
