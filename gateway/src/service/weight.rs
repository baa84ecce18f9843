//! What the per-statement caches hold in memory, as they charge it against their byte bounds
//! (`[cache] max_bytes` for results; fixed bounds for descriptions and statements), and the
//! interner that lets every key of one statement share its syntax tree.
//!
//! A cached entry is more than its Arrow bytes: its key holds the statement's syntax tree (a
//! few kilobytes for a point lookup), the parameters, the session's strings and every table's
//! metadata location; its result holds a schema whose fields carry Parquet metadata. Charged
//! only the Arrow bytes, a cached point lookup held 14 KB of heap where 0.6 KB was charged
//! (measured: 100 MB more RSS after 7,300 distinct lookups; 256 MiB of charge was 6 GB). The
//! estimates here are calibrated by `gateway/tests/cache_weight.rs`, which counts the real
//! allocations and fails when a charge falls below them.

use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion::scalar::ScalarValue;
use datafusion::sql::sqlparser::ast::Statement;
use lakegate_engines::engine::Described;

/// Heap bytes of a syntax tree per byte of its SQL text (sqlparser's nodes carry spans and
/// wide enums; measured about 55 by the calibration test).
const TREE_BYTES_PER_CHAR: u64 = 64;
/// A syntax tree's allocations besides those that grow with its text: the boxed query and its
/// select are large structs (`SELECT 1` holds 9.2 KB, measured).
const TREE_BYTES: u64 = 9 * 1024 + 512;
/// A cache entry's own bookkeeping in moka (its node, the access-order queue; the interner's
/// entry for its tree) and the `Arc`s around key and value.
pub(crate) const ENTRY_BYTES: u64 = 1024;
/// A schema's allocations besides its fields (the `Arc`, the field list, the metadata map).
const SCHEMA_BYTES: u64 = 128;
/// A field's allocation (the `Arc<Field>` and the map of its metadata) besides its strings.
const FIELD_BYTES: u64 = 16 + size_of::<arrow::datatypes::Field>() as u64 + 192;
/// A `String` or map entry's allocation overhead (rounding, the allocator's header).
const STRING_BYTES: u64 = size_of::<String>() as u64 + 16;

/// The heap a syntax tree holds, estimated from its text.
pub(crate) fn statement(statement: &Statement) -> u64 {
    TREE_BYTES + statement.to_string().len() as u64 * TREE_BYTES_PER_CHAR
}

/// The heap `statements` parsed from `sql` hold (the text kept beside them), estimated
/// without printing them.
pub(crate) fn parsed(sql: &str, statements: usize) -> u64 {
    ENTRY_BYTES
        + string(sql)
        + statements as u64 * TREE_BYTES
        + sql.len() as u64 * TREE_BYTES_PER_CHAR
}

/// The heap a schema holds.
pub(crate) fn schema(schema: &Schema) -> u64 {
    let fields: u64 = schema
        .fields()
        .iter()
        .map(|f| {
            FIELD_BYTES
                + string(f.name())
                + f.metadata()
                    .iter()
                    .map(|(k, v)| string(k) + string(v))
                    .sum::<u64>()
        })
        .sum();
    SCHEMA_BYTES + fields
}

/// The heap a string holds, with its allocation's overhead.
pub(crate) fn string(s: &str) -> u64 {
    s.len() as u64 + STRING_BYTES
}

/// The heap a parameter value holds.
pub(crate) fn scalar(value: &ScalarValue) -> u64 {
    size_of::<ScalarValue>() as u64 + value.size() as u64
}

/// The heap a description holds (its schema, parameter types and constructs' names).
pub(crate) fn described(d: &Described) -> u64 {
    schema(&d.schema)
        + (d.param_types.len() * size_of::<Option<arrow::datatypes::DataType>>()) as u64
        + d.constructs.iter().map(|c| string(c) + 32).sum::<u64>()
        + d.features.len() as u64 * 32
}

/// Syntax trees shared by the cache keys of one statement: a prepared statement executed with
/// 50,000 different parameters keeps one tree, not 50,000 copies. Bounded by the estimated
/// bytes of the trees it keeps; a tree it dropped lives on in the keys that hold it.
pub(crate) struct Statements {
    /// Each tree, with its estimated heap ([`statement`], printed once per tree). Hashed with
    /// foldhash, seeded per process: a lookup hashes a whole tree, node by node, and SipHash
    /// costs more per node.
    trees: moka::sync::Cache<Arc<Statement>, Interned, foldhash::fast::RandomState>,
}

/// An interned syntax tree and its hash, computed once: a key holding it hashes in constant
/// time, and two keys of one statement compare by pointer before they compare trees.
#[derive(Debug, Clone)]
pub(crate) struct Tree {
    statement: Arc<Statement>,
    hash: u64,
}

impl Tree {
    pub(crate) fn new(statement: Arc<Statement>) -> Self {
        use std::hash::BuildHasher;
        // Seeded per process, as a HashMap's own hasher is: clients choose the statements.
        static KEYS: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
        let hash = KEYS.get_or_init(Default::default).hash_one(&*statement);
        Self { statement, hash }
    }
}

impl PartialEq for Tree {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && (Arc::ptr_eq(&self.statement, &other.statement) || self.statement == other.statement)
    }
}

impl Eq for Tree {}

impl std::hash::Hash for Tree {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A statement interned ([`Statements::intern`]): its tree and the tree's estimated heap. A
/// frontend that plans a statement again and again (the extended protocol's Parse, then every
/// Execute) interns it once: planning *this* statement (the same object, found by its address,
/// which the tree it holds keeps alive) skips hashing its tree.
#[derive(Debug, Clone)]
pub struct Interned {
    tree: Tree,
    bytes: u64,
}

impl Interned {
    /// What runs: the interned statement (equal to the one interned).
    pub fn statement(&self) -> &Statement {
        &self.tree.statement
    }

    /// The interned tree.
    pub(crate) fn tree(&self) -> &Tree {
        &self.tree
    }

    /// The tree's estimated heap.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Itself, when `statement` is this one's own.
    pub(crate) fn of(&self, statement: &Statement) -> Option<&Self> {
        std::ptr::eq(self.statement(), statement).then_some(self)
    }
}

/// Bytes of syntax trees the interner keeps, at most.
const INTERNED_BYTES: u64 = 16 << 20;

impl Default for Statements {
    fn default() -> Self {
        Self {
            trees: moka::sync::Cache::builder()
                .max_capacity(INTERNED_BYTES)
                .weigher(|_: &Arc<Statement>, interned: &Interned| {
                    u32::try_from(interned.bytes).unwrap_or(u32::MAX)
                })
                .build_with_hasher(foldhash::fast::RandomState::default()),
        }
    }
}

impl Statements {
    /// The shared tree equal to `statement` (kept from now on when it is new), and its
    /// estimated heap.
    pub(crate) fn intern(&self, statement: &Statement) -> Interned {
        if let Some(hit) = self.trees.get(statement) {
            return hit;
        }
        let tree = Arc::new(statement.clone());
        let interned = Interned {
            tree: Tree::new(tree.clone()),
            bytes: self::statement(&tree),
        };
        self.trees.insert(tree, interned.clone());
        interned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::service::plan_tests::parse;

    #[test]
    fn an_interned_statement_lends_its_tree_only_to_itself() {
        let statements = Statements::default();
        let sql = "SELECT * FROM shop.orders WHERE order_id = $1";
        let interned = statements.intern(&parse(sql));
        let own = interned
            .of(interned.statement())
            .expect("its own statement");
        assert_eq!(own.tree(), statements.intern(&parse(sql)).tree());
        // An equal statement elsewhere (an inner statement, another message's) is hashed
        // itself: the address decides, so a tree is never lent to a statement it is not.
        assert!(interned.of(&parse(sql)).is_none());
        let other = parse("SELECT * FROM shop.orders WHERE customer_id = $1");
        assert!(interned.of(&other).is_none());
    }
}
