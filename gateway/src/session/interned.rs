//! Equal settings maps shared across sessions: a kept plan is found for a statement by
//! comparing the settings it was made for with the asking session's, and a shared map makes
//! that a pointer compare instead of a walk over some forty entries (a few percent of a cached
//! answer's CPU when eight pgbench sessions, all alike, take turns).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

/// Maps kept for sharing at most; past it, maps no session holds any more are dropped, and
/// when every kept one is still held a new map is simply not shared.
const MAX: usize = 1024;

type Values = BTreeMap<String, String>;

/// The one shared map equal to `values`.
pub(super) fn interned(values: Values) -> Arc<Values> {
    static KEPT: LazyLock<Mutex<HashSet<Arc<Values>>>> = LazyLock::new(Mutex::default);
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(shared) = kept.get(&values) {
        return shared.clone();
    }
    if kept.len() >= MAX {
        kept.retain(|v| Arc::strong_count(v) > 1);
    }
    let values = Arc::new(values);
    if kept.len() < MAX {
        kept.insert(values.clone());
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_maps_are_one_allocation_and_unheld_ones_make_room() {
        let map = |v: &str| Values::from([("application_name".to_string(), v.to_string())]);
        let a = interned(map("interned-test-a"));
        assert!(Arc::ptr_eq(&a, &interned(map("interned-test-a"))));
        assert!(!Arc::ptr_eq(&a, &interned(map("interned-test-b"))));
        // Past MAX distinct maps nobody holds, a held one is still shared.
        for i in 0..MAX + 10 {
            interned(map(&format!("interned-test-{i}")));
        }
        assert!(Arc::ptr_eq(&a, &interned(map("interned-test-a"))));
    }
}
