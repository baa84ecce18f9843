//! Lookups sent as text, answered without parsing them: the lifted template of every text that
//! differs from one seen before only in the digits of its number literals.
//!
//! A driver over the simple protocol (psycopg2, PHP's PDO, every `psql -c`) sends `… WHERE
//! order_id = 42`, then `… = 43`. [`lakegate_sql::lift`] already makes both run as one template
//! with the value as a parameter, so they share a plan; but each text was still parsed (about a
//! quarter of such a lookup's CPU) and lifted. Here a text is *masked*: every number token
//! (a maximal run of ASCII digits touching no identifier, parameter, decimal point or exponent)
//! becomes a marker, and the masked text keys the template lifted from the first text of that
//! shape, with which token gives each parameter and the tokens that must stay as they were
//! (`LIMIT 20`, a digit in a string or a comment, anything not lifted).
//!
//! **Exactness.** A text is answered from a shape only when it equals the text the shape was
//! learned from in every byte but the digits of its lifted tokens, and each of those tokens
//! is a literal of the same type (`integer` or `bigint`, as PostgreSQL types it) as when it was
//! learned. sqlparser reads any run of digits in a number's place as the same kind of token,
//! and no rewrite the parser applies branches on a number's value; that is checked, not
//! assumed, when a shape is learned: a *probe* text, the learned text with a distinct new
//! value in each lifted token, must parse and lift to the very same template, with the probe
//! values as its parameters in the same order. The tokenizer knows nothing of quoting: a
//! "token" inside a string, a comment or a quoted name is never lifted, so it is kept verbatim
//! and must match exactly. What fails the probe is never kept (its shape is remembered as
//! refused, so it is not probed again).
//!
//! A shape is learned only from a single `SELECT` that reads a lake table (lifting refuses the
//! catalog and `lakegate.*`), so nothing the catalog mirror would answer is taken from here.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::sql::sqlparser::ast::Statement;
use lakegate_sql::lift::Lifted;

use super::weight::Interned;

/// Bytes of shapes kept (each holds a template: a few kilobytes).
const SHAPES_BYTES: u64 = 8 << 20;

/// Variants of one masked text kept (`LIMIT 10`, `LIMIT 20`, ...); past it the text's shape
/// is refused (a client varying what is not lifted gains nothing from probing each one).
const MAX_VARIANTS: usize = 8;

/// Texts longer than this are not masked (as the parser does not keep them).
const MAX_SQL: usize = 64 << 10;

/// Number tokens per text, at most (lifting takes at most 256 values).
const MAX_TOKENS: usize = 1024;

/// Marks a number token in a masked text (PostgreSQL refuses a NUL in a query's text).
const MARK: char = '\0';

/// A text with its number tokens marked.
#[derive(Debug, PartialEq, Eq)]
struct Masked {
    key: String,
    tokens: Vec<Range<usize>>,
}

/// Whether a byte joins a run of digits to a larger token (an identifier, `$1`, `1.5`, `1e5`,
/// `0x1F`, `1_000`, a multi-byte character).
fn joins(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'.') || !b.is_ascii()
}

/// `sql` masked; `None` when it has no number token, names a parameter (`$`: lifting leaves
/// it as written), or is past the length or token bounds.
fn mask(sql: &str) -> Option<Masked> {
    if sql.len() > MAX_SQL || sql.contains('$') {
        return None;
    }
    let bytes = sql.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let alone =
            (start == 0 || !joins(bytes[start - 1])) && (i == bytes.len() || !joins(bytes[i]));
        if alone {
            tokens.push(start..i);
        }
    }
    if tokens.is_empty() || tokens.len() > MAX_TOKENS {
        return None;
    }
    let mut key = String::with_capacity(sql.len());
    let mut last = 0;
    for t in &tokens {
        key.push_str(&sql[last..t.start]);
        key.push(MARK);
        last = t.end;
    }
    key.push_str(&sql[last..]);
    Some(Masked { key, tokens })
}

/// Whether the token at `token` of `sql` is directly negated (a `-` right before it, kept in
/// the masked text: every text of the shape has it there).
fn negated(sql: &str, token: &Range<usize>) -> bool {
    token.start > 0 && sql.as_bytes().get(token.start - 1) == Some(&b'-')
}

/// The value of the number token at `token` of `sql`, negated by a `-` right before it, as
/// PostgreSQL types it (`None`: a `numeric`). Whether the lifter takes the sign as the
/// literal's is proven by the shape's probe, not assumed (`10-5` is a subtraction).
fn class(sql: &str, token: &Range<usize>) -> Option<Lifted> {
    lakegate_sql::lift::integer(sql.get(token.clone())?, negated(sql, token))
}

/// Whether two lifted values are of one type.
fn same_class(a: Lifted, b: Lifted) -> bool {
    matches!(
        (a, b),
        (Lifted::Int4(_), Lifted::Int4(_)) | (Lifted::Int8(_), Lifted::Int8(_))
    )
}

/// One learned text's template and where its parameters come from.
#[derive(Debug)]
struct Shape {
    /// Interned: planning it finds its kept plan without hashing it ([`Interned`]).
    template: Interned,
    /// For `$1, $2, …`: the token that gives the value, and the value it was learned with
    /// (its type is the parameter's).
    params: Vec<(usize, Lifted)>,
    /// The tokens that are not lifted, as they were (they must be so again).
    fixed: Vec<(usize, Box<str>)>,
}

impl Shape {
    /// The parameters of `sql` (masked as `tokens`), when it is of this shape.
    fn values(&self, sql: &str, tokens: &[Range<usize>]) -> Option<Vec<Lifted>> {
        for (t, digits) in &self.fixed {
            if sql.get(tokens.get(*t)?.clone())? != &**digits {
                return None;
            }
        }
        self.params
            .iter()
            .map(|&(t, learned)| {
                let v = class(sql, tokens.get(t)?)?;
                same_class(v, learned).then_some(v)
            })
            .collect()
    }
}

/// What is known of one masked text.
#[derive(Debug)]
enum Known {
    /// Its learned variants.
    Shapes(Vec<Arc<Shape>>),
    /// A probe failed, or it had too many variants: it is parsed every time.
    Refused,
}

/// A probe value for token `n`, of `like`'s type, negative when the token is negated: distinct
/// per token, unlike any the text is likely to hold.
fn probe_value(n: usize, like: Lifted, negative: bool) -> Lifted {
    let sign = if negative { -1 } else { 1 };
    match like {
        Lifted::Int4(_) => Lifted::Int4(sign * (1_000_000_007 + n as i32)),
        Lifted::Int8(_) => Lifted::Int8(i64::from(sign) * (7_000_000_007 + n as i64)),
    }
}

/// The digits written for `v` (its sign is the text's own `-`).
fn digits(v: Lifted) -> String {
    match v {
        Lifted::Int4(v) => v.unsigned_abs().to_string(),
        Lifted::Int8(v) => v.unsigned_abs().to_string(),
    }
}

/// `sql` with the tokens in `replaced` written as the given values.
fn rewritten(sql: &str, tokens: &[Range<usize>], replaced: &[(usize, Lifted)]) -> String {
    let mut out = String::with_capacity(sql.len() + 16 * replaced.len());
    let mut last = 0;
    for (n, t) in tokens.iter().enumerate() {
        if let Some((_, v)) = replaced.iter().find(|(m, _)| *m == n) {
            out.push_str(&sql[last..t.start]);
            out.push_str(&digits(*v));
            last = t.end;
        }
    }
    out.push_str(&sql[last..]);
    out
}

/// Parses and lifts one text as the gateway does (the template and its values; `None` when it
/// is not one liftable statement).
pub(crate) type ParseLifted<'a> = &'a dyn Fn(&str) -> Option<(Statement, Vec<Lifted>)>;

/// Interns a learned shape's template (called only when a shape is learned).
pub(crate) type Intern<'a> = &'a dyn Fn(&Statement) -> Interned;

/// The learned shapes, by masked text.
pub(crate) struct Shapes {
    known: moka::sync::Cache<Arc<str>, Arc<Known>, foldhash::fast::RandomState>,
    hits: AtomicU64,
    learned: AtomicU64,
    refused: AtomicU64,
}

impl Default for Shapes {
    fn default() -> Self {
        Self {
            known: moka::sync::Cache::builder()
                .max_capacity(SHAPES_BYTES)
                .weigher(|key: &Arc<str>, known: &Arc<Known>| {
                    // Each variant holds a template about as large as a parsed text's tree.
                    let bytes = match known.as_ref() {
                        Known::Shapes(s) => super::weight::parsed(key, 1) * s.len() as u64,
                        Known::Refused => super::weight::ENTRY_BYTES + key.len() as u64,
                    };
                    u32::try_from(bytes).unwrap_or(u32::MAX)
                })
                .build_with_hasher(foldhash::fast::RandomState::default()),
            hits: AtomicU64::new(0),
            learned: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }
}

impl Shapes {
    /// The lifted template of `sql` and its values, when a text of its shape was learned.
    pub(crate) fn find(&self, sql: &str) -> Option<(Interned, Vec<Lifted>)> {
        let masked = mask(sql)?;
        let known = self.known.get(masked.key.as_str())?;
        let Known::Shapes(shapes) = known.as_ref() else {
            return None;
        };
        shapes.iter().find_map(|shape| {
            let values = shape.values(sql, &masked.tokens)?;
            Some((shape.template.clone(), values))
        })
    }

    /// Counts a text answered from its shape.
    pub(crate) fn count_hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Learns the shape of `sql`, which parsed and lifted to `template` with `values`,
    /// checking it with a probe text parsed and lifted by `parse` (see the module docs).
    pub(crate) fn learn(
        &self,
        sql: &str,
        template: &Statement,
        values: &[Lifted],
        parse: ParseLifted<'_>,
        intern: Intern<'_>,
    ) {
        let Some(masked) = mask(sql) else {
            return;
        };
        let variants = match self.known.get(masked.key.as_str()).as_deref() {
            Some(Known::Refused) => return,
            Some(Known::Shapes(shapes)) => {
                if shapes
                    .iter()
                    .any(|s| s.values(sql, &masked.tokens).is_some())
                {
                    return;
                }
                shapes.clone()
            }
            None => Vec::new(),
        };
        let known = match (variants.len() < MAX_VARIANTS)
            .then(|| probe(sql, &masked.tokens, template, values, parse, intern))
            .flatten()
        {
            Some(shape) => {
                self.learned.fetch_add(1, Ordering::Relaxed);
                let mut variants = variants;
                variants.push(Arc::new(shape));
                Known::Shapes(variants)
            }
            None => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(sql, "text shape refused: parsed every time");
                Known::Refused
            }
        };
        self.known.insert(Arc::from(masked.key), Arc::new(known));
    }

    /// `(name, value)` counters for `lakegate.cache_stats`.
    pub(crate) fn stats(&self) -> [(&'static str, u64); 4] {
        self.known.run_pending_tasks();
        [
            ("shape_texts", self.known.entry_count()),
            ("shape_hits", self.hits.load(Ordering::Relaxed)),
            ("shapes_learned", self.learned.load(Ordering::Relaxed)),
            ("shapes_refused", self.refused.load(Ordering::Relaxed)),
        ]
    }
}

/// The shape of `sql`, proven by probes: which token gives each parameter, found by writing a
/// distinct value of its type into every integer token; then the text with only those tokens
/// changed must parse and lift to `template`, with the probe values as its parameters.
fn probe(
    sql: &str,
    tokens: &[Range<usize>],
    template: &Statement,
    values: &[Lifted],
    parse: ParseLifted<'_>,
    intern: Intern<'_>,
) -> Option<Shape> {
    let written: Vec<Option<Lifted>> = tokens.iter().map(|t| class(sql, t)).collect();
    let everywhere: Vec<(usize, Lifted)> = written
        .iter()
        .enumerate()
        .filter_map(|(n, v)| Some((n, probe_value(n, (*v)?, negated(sql, &tokens[n])))))
        .collect();
    // Which token each parameter comes from.
    let (_, found) = parse(&rewritten(sql, tokens, &everywhere))?;
    if found.len() != values.len() {
        return None;
    }
    let params: Vec<(usize, Lifted)> = found
        .iter()
        .zip(values)
        .map(|(f, &v)| {
            let &(n, _) = everywhere.iter().find(|(_, p)| p == f)?;
            // The learned text's value is that token's, of the same type.
            (written[n] == Some(v)).then_some((n, v))
        })
        .collect::<Option<_>>()?;
    // Only the lifted tokens changed: the same template, the probe values in the same order.
    let lifted: Vec<(usize, Lifted)> = params
        .iter()
        .map(|&(n, v)| (n, probe_value(n, v, negated(sql, &tokens[n]))))
        .collect();
    let (again, probed) = parse(&rewritten(sql, tokens, &lifted))?;
    let expected: Vec<Lifted> = lifted.iter().map(|&(_, v)| v).collect();
    if again != *template || probed != expected {
        return None;
    }
    let fixed = (0..tokens.len())
        .filter(|n| !params.iter().any(|(m, _)| m == n))
        .map(|n| (n, Box::from(&sql[tokens[n].clone()])))
        .collect();
    Some(Shape {
        template: intern(template),
        params,
        fixed,
    })
}

#[cfg(test)]
#[path = "shapes_tests.rs"]
mod tests;
