//! Idle connections kept for reuse, at most a fixed number: the token lookups' catalog
//! connections (sqlx and in-place SQLite) and DuckDB's.

use std::sync::Mutex;

/// Up to `max` idle items; one given back beyond that is dropped.
pub(crate) struct Idle<T> {
    items: Mutex<Vec<T>>,
    max: usize,
}

impl<T> Idle<T> {
    /// Empty, keeping at most `max`.
    pub(crate) fn new(max: usize) -> Self {
        Self::with(Vec::new(), max)
    }

    /// Holding `items` already, keeping at most `max`.
    pub(crate) fn with(items: Vec<T>, max: usize) -> Self {
        Self {
            items: Mutex::new(items),
            max,
        }
    }

    /// An idle item, if one is kept.
    pub(crate) fn take(&self) -> Option<T> {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    /// Keeps `item` for the next [`Self::take`] (dropped when `max` are kept already).
    pub(crate) fn give_back(&self, item: T) {
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        if items.len() < self.max {
            items.push(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_at_most_max_and_gives_back_the_latest() {
        let idle = Idle::new(2);
        assert_eq!(idle.take(), None::<u8>);
        for i in 1..=3 {
            idle.give_back(i);
        }
        assert_eq!(idle.take(), Some(2));
        assert_eq!(idle.take(), Some(1));
        assert_eq!(idle.take(), None);
    }
}
