//! The per-query metrics' handles each thread used last. Counting a finished query looks up
//! three labelled metrics; a lookup hashes its labels and takes the metric family's lock, a
//! cost paid per statement (a cache hit's 1.4%, measured by `perf` on bench/serving). A thread
//! serving a connection sees the same labels statement after statement (one group, engine,
//! shape and outcome), so it keeps the handles of its last label set and compares labels
//! instead; another set looks them up and becomes the kept one.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec};

use crate::service::Frontend;

/// Numbers each set of metrics, so that a thread never uses another registry's handles.
static NEXT: AtomicU64 = AtomicU64::new(1);

/// A new metrics set's number.
pub(super) fn next_id() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A finished query's labels.
#[derive(PartialEq, Eq)]
pub(super) struct Labels<'a> {
    pub frontend: Frontend,
    pub group: &'a str,
    pub engine: &'a str,
    pub shape: &'static str,
    pub cache: &'static str,
    pub outcome: &'static str,
}

/// The labelled metrics a finished query counts in.
pub(super) struct Families<'a> {
    pub id: u64,
    pub queries: &'a IntCounterVec,
    pub latency: &'a HistogramVec,
    pub rows: &'a IntCounterVec,
}

/// The handles for one label set of one metrics set.
pub(super) struct Handles {
    id: u64,
    frontend: Frontend,
    group: String,
    engine: String,
    shape: &'static str,
    cache: &'static str,
    outcome: &'static str,
    pub queries: IntCounter,
    pub latency: Histogram,
    pub rows: IntCounter,
}

impl Handles {
    fn labels(&self) -> Labels<'_> {
        Labels {
            frontend: self.frontend,
            group: &self.group,
            engine: &self.engine,
            shape: self.shape,
            cache: self.cache,
            outcome: self.outcome,
        }
    }

    fn new(families: &Families<'_>, l: &Labels<'_>) -> Self {
        let frontend = l.frontend.name();
        Self {
            id: families.id,
            frontend: l.frontend,
            group: l.group.to_string(),
            engine: l.engine.to_string(),
            shape: l.shape,
            cache: l.cache,
            outcome: l.outcome,
            queries: families
                .queries
                .with_label_values(&[frontend, l.group, l.engine, l.shape, l.cache, l.outcome]),
            latency: families
                .latency
                .with_label_values(&[l.group, l.engine, l.shape]),
            rows: families.rows.with_label_values(&[frontend, l.group]),
        }
    }
}

thread_local! {
    static LAST: RefCell<Option<Handles>> = const { RefCell::new(None) };
}

/// Calls `count` with the handles for `labels`: this thread's last ones when they are for the
/// same labels of the same metrics set, else looked up (and kept).
pub(super) fn with(families: &Families<'_>, labels: &Labels<'_>, count: impl FnOnce(&Handles)) {
    LAST.with(|last| {
        let Ok(mut last) = last.try_borrow_mut() else {
            // Re-entered (cannot happen: `count` only counts); looked up, not kept.
            return count(&Handles::new(families, labels));
        };
        let kept = last
            .as_ref()
            .is_some_and(|h| h.id == families.id && h.labels() == *labels);
        if !kept {
            *last = Some(Handles::new(families, labels));
        }
        if let Some(handles) = last.as_ref() {
            count(handles);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{HistogramOpts, Opts};

    struct Set {
        id: u64,
        queries: IntCounterVec,
        latency: HistogramVec,
        rows: IntCounterVec,
    }

    impl Set {
        fn new() -> Self {
            let q = ["frontend", "group", "engine", "shape", "cache", "outcome"];
            Self {
                id: next_id(),
                queries: IntCounterVec::new(Opts::new("q", "q"), &q).expect("queries"),
                latency: HistogramVec::new(HistogramOpts::new("l", "l"), &q[1..4])
                    .expect("latency"),
                rows: IntCounterVec::new(Opts::new("r", "r"), &q[..2]).expect("rows"),
            }
        }

        fn count(&self, group: &str, rows: u64) {
            let families = Families {
                id: self.id,
                queries: &self.queries,
                latency: &self.latency,
                rows: &self.rows,
            };
            let labels = Labels {
                frontend: Frontend::Pg,
                group,
                engine: "none",
                shape: "point",
                cache: "hit",
                outcome: "ok",
            };
            with(&families, &labels, |h| {
                h.queries.inc();
                h.latency.observe(0.001);
                h.rows.inc_by(rows);
            });
        }

        fn queries(&self, group: &str) -> u64 {
            self.queries
                .with_label_values(&["pg", group, "none", "point", "hit", "ok"])
                .get()
        }

        fn rows(&self, group: &str) -> u64 {
            self.rows.with_label_values(&["pg", group]).get()
        }
    }

    #[test]
    fn each_query_counts_under_its_own_labels_in_its_own_metrics() {
        let (a, b) = (Set::new(), Set::new());
        a.count("bi", 2);
        a.count("bi", 3);
        b.count("bi", 5);
        a.count("apps", 7);
        a.count("bi", 1);
        assert_eq!((a.queries("bi"), a.rows("bi")), (3, 6));
        assert_eq!((a.queries("apps"), a.rows("apps")), (1, 7));
        assert_eq!((b.queries("bi"), b.rows("bi")), (1, 5));
        assert_eq!(b.queries("apps"), 0);
        let seen = a
            .latency
            .with_label_values(&["bi", "none", "point"])
            .get_sample_count();
        assert_eq!(seen, 3);
    }
}
