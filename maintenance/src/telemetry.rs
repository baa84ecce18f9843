//! Query telemetry: what the query path tells the scheduler about each query (tables, the
//! Iceberg predicate, filtered/joined/grouped columns, latency), sent over a bounded channel
//! that never blocks a query (a full channel drops the event and counts it), and folded into
//! [`Heat`]: per table and per predicate, decayed over time.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use iceberg::expr::Predicate;
use tokio::sync::mpsc;

/// Predicates remembered per table (the hottest are kept).
const PREDICATES_PER_TABLE: usize = 32;

/// What a statement reads: its tables and the columns it compares, joins and groups by
/// (the same for every execution of one statement: shared).
#[derive(Debug, Clone, Default)]
pub struct Read {
    /// `(namespace, table)` of every lake table read.
    pub tables: Vec<(String, String)>,
    /// Columns compared in WHERE / HAVING.
    pub filter_columns: Vec<String>,
    /// Columns in JOIN conditions.
    pub join_columns: Vec<String>,
    /// Columns in GROUP BY.
    pub group_columns: Vec<String>,
}

/// What one query read.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Its tables and columns.
    pub read: Arc<Read>,
    /// The query's WHERE as an Iceberg predicate, when it reads one table and translates.
    pub predicate: Option<Predicate>,
}

/// An observation with its outcome.
#[derive(Debug, Clone)]
pub struct Event {
    /// What was read.
    pub observation: Observation,
    /// Wall time of the query.
    pub millis: f64,
    /// When it ran (seconds since the epoch).
    pub at: f64,
}

/// The sending side, held by the query path. Cloning is cheap.
#[derive(Clone)]
pub struct Telemetry {
    tx: mpsc::Sender<Event>,
    counters: Arc<Counters>,
}

/// Events sent and dropped.
#[derive(Debug, Default)]
pub struct Counters {
    /// Events accepted into the channel.
    pub sent: AtomicU64,
    /// Events dropped because the channel was full (or the scheduler gone).
    pub dropped: AtomicU64,
}

impl Telemetry {
    /// A channel of `capacity` events.
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            Self {
                tx,
                counters: Arc::default(),
            },
            rx,
        )
    }

    /// Sends without waiting: a full channel drops the event.
    pub fn send(&self, event: Event) {
        match self.tx.try_send(event) {
            Ok(()) => self.counters.sent.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.counters.dropped.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Sent and dropped counts.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

/// Seconds since the epoch, now.
pub fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A value that halves every `half_life` seconds.
#[derive(Debug, Clone, Copy, Default)]
struct Decayed {
    value: f64,
    at: f64,
}

impl Decayed {
    fn at(&self, now: f64, half_life: f64) -> f64 {
        let age = (now - self.at).max(0.0);
        self.value * 0.5f64.powf(age / half_life)
    }

    fn add(&mut self, weight: f64, when: f64, half_life: f64) {
        if when >= self.at {
            self.value = self.at(when, half_life) + weight;
            self.at = when;
        } else {
            // An older event (replayed history): decay it to our time.
            self.value += weight * 0.5f64.powf((self.at - when) / half_life);
        }
    }
}

#[derive(Debug, Default)]
struct TableHeat {
    reads: Decayed,
    columns: HashMap<String, Decayed>,
    predicates: Vec<(Predicate, Decayed)>,
    latency_ms: Option<f64>,
}

impl TableHeat {
    /// One read under `p` at `when`: added to its entry, or a new entry when there is room
    /// or the coldest one is colder than a single read now.
    fn add_predicate(&mut self, p: &Predicate, when: f64, hl: f64) {
        if let Some((_, d)) = self.predicates.iter_mut().find(|(q, _)| q == p) {
            d.add(1.0, when, hl);
            return;
        }
        let mut fresh = Decayed::default();
        fresh.add(1.0, when, hl);
        if self.predicates.len() < PREDICATES_PER_TABLE {
            self.predicates.push((p.clone(), fresh));
            return;
        }
        // Full: the new predicate replaces the coldest one if that is colder still (an app's
        // distinct point lookups arrive at every statement; sorting the list each time cost
        // more than planning).
        let weight = fresh.at(when, hl);
        if let Some((_, coldest)) = self
            .predicates
            .iter_mut()
            .map(|entry| (entry.1.at(when, hl), entry))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .filter(|(cold, _)| *cold < weight)
        {
            *coldest = (p.clone(), fresh);
        }
    }
}

/// How hot each table, column and predicate is.
#[derive(Debug)]
pub struct Heat {
    half_life: f64,
    tables: HashMap<String, TableHeat>,
    /// A table's key being looked up (its buffer reused).
    key: String,
}

/// One table's heat, as the planner sees it.
#[derive(Debug, Clone, Default)]
pub struct TableHeatView {
    /// Decayed reads (≈ reads in the last half-life).
    pub reads: f64,
    /// Columns by decayed weight (filters count 1, joins ½, group-bys ¼), hottest first.
    pub columns: Vec<(String, f64)>,
    /// Predicates by decayed weight, hottest first.
    pub predicates: Vec<(Predicate, f64)>,
    /// Latency EWMA of queries reading it.
    pub latency_ms: Option<f64>,
}

/// `ns.table`.
pub fn table_key(namespace: &str, table: &str) -> String {
    let mut key = String::new();
    write_table_key(&mut key, namespace, table);
    key
}

/// [`table_key`] written into `key` (a buffer reused for lookups).
fn write_table_key(key: &mut String, namespace: &str, table: &str) {
    key.clear();
    let _ = write!(key, "{namespace}.{table}");
}

/// `key`'s entry of `map`, made the first time: the key is copied into the map only then
/// (every statement of an app reads the same few tables and columns; formatting their names
/// per event cost more than the arithmetic).
fn entry_of<'m, V: Default>(map: &'m mut HashMap<String, V>, key: &str) -> &'m mut V {
    if !map.contains_key(key) {
        map.insert(key.to_string(), V::default());
    }
    map.get_mut(key)
        .expect("the entry is there: inserted just above when missing")
}

/// `name` in lower case, borrowed when it already is (every character its own lower case).
fn lowercase(name: &str) -> std::borrow::Cow<'_, str> {
    let unchanged = |c: char| {
        let mut lower = c.to_lowercase();
        lower.next() == Some(c) && lower.next().is_none()
    };
    if !name.chars().all(unchanged) {
        std::borrow::Cow::Owned(name.to_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

impl Heat {
    /// Empty, fading with `half_life`.
    pub fn new(half_life: std::time::Duration) -> Self {
        Self {
            half_life: half_life.as_secs_f64().max(1.0),
            tables: HashMap::new(),
            key: String::new(),
        }
    }

    /// Folds one event in.
    pub fn record(&mut self, event: &Event) {
        let hl = self.half_life;
        let read = &event.observation.read;
        let single = read.tables.len() == 1;
        for (ns, t) in &read.tables {
            write_table_key(&mut self.key, ns, t);
            let heat = entry_of(&mut self.tables, &self.key);
            heat.reads.add(1.0, event.at, hl);
            heat.latency_ms = Some(match heat.latency_ms {
                Some(l) => 0.8 * l + 0.2 * event.millis,
                None => event.millis,
            });
            let weighted = [
                (&read.filter_columns, 1.0),
                (&read.join_columns, 0.5),
                (&read.group_columns, 0.25),
            ];
            for (columns, w) in weighted {
                for c in columns {
                    // Column names are unqualified; with several tables they may belong to
                    // any of them, and the planner ignores names a table does not have.
                    entry_of(&mut heat.columns, &lowercase(c)).add(w, event.at, hl);
                }
            }
            if single && let Some(p) = &event.observation.predicate {
                heat.add_predicate(p, event.at, hl);
            }
        }
    }

    /// `ns.table`'s heat now.
    pub fn view(&self, key: &str) -> TableHeatView {
        let now = now_secs();
        let hl = self.half_life;
        let Some(h) = self.tables.get(key) else {
            return TableHeatView::default();
        };
        let mut columns: Vec<(String, f64)> = h
            .columns
            .iter()
            .map(|(c, d)| (c.clone(), d.at(now, hl)))
            .collect();
        columns.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut predicates: Vec<(Predicate, f64)> = h
            .predicates
            .iter()
            .map(|(p, d)| (p.clone(), d.at(now, hl)))
            .collect();
        predicates.sort_by(|a, b| b.1.total_cmp(&a.1));
        TableHeatView {
            reads: h.reads.at(now, hl),
            columns,
            predicates,
            latency_ms: h.latency_ms,
        }
    }
}

/// Drains `rx` into `heat` until every sender is gone.
pub async fn drain(mut rx: mpsc::Receiver<Event>, heat: Arc<std::sync::Mutex<Heat>>) {
    let mut events = Vec::with_capacity(DRAIN_BATCH);
    loop {
        let received = rx.recv_many(&mut events, DRAIN_BATCH).await;
        if received == 0 {
            return;
        }
        {
            let mut heat = heat.lock().unwrap_or_else(|p| p.into_inner());
            for event in events.drain(..) {
                heat.record(&event);
            }
        }
        // Under load, events gather for a moment and are recorded together: this task wakes
        // once per pause, not once per query (a sender wakes it only while it waits). A full
        // batch goes on at once: more are waiting.
        if received < DRAIN_BATCH {
            tokio::time::sleep(DRAIN_PAUSE).await;
        }
    }
}

/// Events recorded per wake of [`drain`].
const DRAIN_BATCH: usize = 1024;

/// How long [`drain`] lets events gather after recording some.
const DRAIN_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::expr::Reference;
    use iceberg::spec::Datum;

    fn event(filter: &str, at: f64) -> Event {
        Event {
            observation: Observation {
                read: Arc::new(Read {
                    tables: vec![("s".into(), "orders".into())],
                    filter_columns: vec![filter.into()],
                    join_columns: vec![],
                    group_columns: vec!["region".into()],
                }),
                predicate: Some(Reference::new(filter).equal_to(Datum::long(7))),
            },
            millis: 10.0,
            at,
        }
    }

    #[test]
    fn heat_ranks_columns_and_fades() {
        let mut heat = Heat::new(std::time::Duration::from_secs(3600));
        let now = now_secs();
        for _ in 0..3 {
            heat.record(&event("customer_id", now));
        }
        heat.record(&event("order_id", now - 3600.0));
        let v = heat.view("s.orders");
        assert_eq!(v.columns[0].0, "customer_id");
        assert!((v.columns[0].1 - 3.0).abs() < 0.01, "{:?}", v.columns);
        let order = v.columns.iter().find(|c| c.0 == "order_id").map(|c| c.1);
        assert!(order.is_some_and(|w| (w - 0.5).abs() < 0.01), "{order:?}");
        assert!((v.reads - 3.5).abs() < 0.01);
        assert_eq!(v.predicates.len(), 2);
        assert_eq!(heat.view("s.other").reads, 0.0);
    }

    #[test]
    fn a_column_written_in_another_case_is_the_same_column() {
        let mut heat = Heat::new(std::time::Duration::from_secs(3600));
        let now = now_secs();
        heat.record(&event("Customer_ID", now));
        heat.record(&event("customer_id", now));
        let v = heat.view(&table_key("s", "orders"));
        let names: Vec<&str> = v.columns.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(names, ["customer_id", "region"]);
        assert!((v.columns[0].1 - 2.0).abs() < 0.01, "{:?}", v.columns);
        assert!((v.reads - 2.0).abs() < 0.01);
    }

    #[test]
    fn a_name_is_lowered_as_to_lowercase_lowers_it() {
        assert!(matches!(
            lowercase("order_id"),
            std::borrow::Cow::Borrowed(_)
        ));
        // A title-case letter is not upper case, and still has a lower case of its own.
        for name in ["Order_ID", "\u{1c5}x", "\u{130}d", "ÄÖ"] {
            assert_eq!(lowercase(name), name.to_lowercase(), "{name}");
        }
    }

    fn lookup(id: i64, at: f64) -> Event {
        let mut e = event("order_id", at);
        e.observation.predicate = Some(Reference::new("order_id").equal_to(Datum::long(id)));
        e
    }

    #[test]
    fn distinct_lookups_keep_the_hot_predicates_and_a_bounded_list() {
        let mut heat = Heat::new(std::time::Duration::from_secs(3600));
        let now = now_secs();
        for _ in 0..5 {
            heat.record(&lookup(-1, now - 1800.0));
        }
        // An hour-old lookup is colder than any new one: the first to be replaced.
        heat.record(&lookup(-2, now - 3600.0));
        for id in 0..(PREDICATES_PER_TABLE as i64 - 3) {
            heat.record(&lookup(id, now - 60.0));
        }
        assert_eq!(
            heat.view("s.orders").predicates.len(),
            PREDICATES_PER_TABLE - 1
        );
        for id in 1000..1100 {
            heat.record(&lookup(id, now));
        }
        let v = heat.view("s.orders");
        assert_eq!(v.predicates.len(), PREDICATES_PER_TABLE);
        let text: Vec<String> = v.predicates.iter().map(|(p, _)| p.to_string()).collect();
        assert!(text[0].contains("-1"), "the hot lookup leads: {text:?}");
        assert!(!text.iter().any(|t| t.contains("-2")), "{text:?}");
        // Equal weights: the newest did not push out the ones already kept.
        assert!(!text.iter().any(|t| t.contains("1099")), "{text:?}");
    }

    #[test]
    fn a_full_channel_drops_and_counts() {
        let (t, _rx) = Telemetry::channel(1);
        t.send(event("a", 0.0));
        t.send(event("a", 0.0));
        assert_eq!(t.counters().sent.load(Ordering::Relaxed), 1);
        assert_eq!(t.counters().dropped.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn events_are_all_recorded_across_full_and_partial_batches_and_drain_ends_with_senders() {
        let (t, rx) = Telemetry::channel(10_000);
        let heat = Arc::new(std::sync::Mutex::new(Heat::new(
            std::time::Duration::from_secs(3600),
        )));
        let drained = tokio::spawn(drain(rx, heat.clone()));
        let now = now_secs();
        // More than one batch at once, then a few while drain pauses.
        for _ in 0..(DRAIN_BATCH * 2 + 10) {
            t.send(event("customer_id", now));
        }
        tokio::time::sleep(DRAIN_PAUSE / 2).await;
        for _ in 0..5 {
            t.send(event("customer_id", now));
        }
        drop(t);
        tokio::time::timeout(std::time::Duration::from_secs(5), drained)
            .await
            .expect("drain ends once every sender is gone")
            .expect("drain does not panic");
        let reads = heat.lock().expect("heat").view("s.orders").reads;
        let sent = (DRAIN_BATCH * 2 + 15) as f64;
        assert!((reads - sent).abs() < 0.5, "{reads} of {sent}");
    }
}
