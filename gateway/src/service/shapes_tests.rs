//! A text answered from its shape gets what parsing and lifting it gives; what could differ is
//! not taken.

use std::cell::Cell;

use super::*;
use crate::service::parse::Parser;

/// Parsing and lifting as the gateway does without the memo.
fn parsed_and_lifted(parser: &Parser, sql: &str) -> Option<(Statement, Vec<Lifted>)> {
    let mut statements = parser.parse(sql).ok()?;
    assert_eq!(statements.len(), 1, "{sql}");
    lakegate_sql::lift::lift(&statements.pop()?)
}

/// `template` interned (as the gateway interns a learned shape's template).
fn interned(template: &Statement) -> super::Interned {
    crate::service::weight::Statements::default().intern(template)
}

/// Learns `sql`'s shape as the gateway does after running it.
fn learn(parser: &Parser, sql: &str) {
    let (template, values) = parsed_and_lifted(parser, sql).expect("liftable");
    parser.learn_shape(sql, &template, &values, &interned);
}

#[test]
fn number_tokens_are_digit_runs_touching_no_other_token() {
    let sql = "SELECT a1, t.c2, 1.5, .5, 1e5, 0x1F, 1_000, \"x3\", 'x 12', 7, é8 \
               FROM t WHERE id=42 -- 9";
    let masked = mask(sql).expect("tokens");
    let tokens: Vec<&str> = masked.tokens.iter().map(|t| &sql[t.clone()]).collect();
    assert_eq!(tokens, ["12", "7", "42", "9"]);
    assert_eq!(
        masked.key,
        "SELECT a1, t.c2, 1.5, .5, 1e5, 0x1F, 1_000, \"x3\", 'x \0', \0, é8 FROM t WHERE id=\0 -- \0"
    );
    assert_eq!(mask("SELECT * FROM t WHERE id = $1 AND x = 2"), None);
    assert_eq!(mask("SELECT * FROM t"), None);
}

#[test]
fn a_text_of_a_learned_shape_gets_what_parsing_and_lifting_it_gives() {
    let parser = Parser::new(64);
    let shapes = [
        "SELECT id, qty FROM conf.sales WHERE id = 17",
        "SELECT * FROM shop.orders WHERE customer_id = 12 ORDER BY event_ts DESC LIMIT 20",
        "SELECT count(*) FROM t WHERE 20 < qty AND id IN (3, 5, 7) OR id BETWEEN 100 AND 200",
        "SELECT a FROM t WHERE NOT (a = 1 OR b <> 2) AND c = 'x 5' /* 6 */ AND d = ANY(ARRAY[8, 9])",
        "SELECT a FROM t WHERE a IN (SELECT b FROM u WHERE c = 10) AND d >= 11",
        "SELECT a, 3 FROM t WHERE a = 4 GROUP BY 1 ORDER BY 1 LIMIT 5 OFFSET 6",
    ];
    for sql in shapes {
        learn(&parser, sql);
    }
    // Each with other values, both types, leading zeros: as parsed and lifted.
    let texts = [
        "SELECT id, qty FROM conf.sales WHERE id = 18",
        "SELECT id, qty FROM conf.sales WHERE id = 0018",
        "SELECT id, qty FROM conf.sales WHERE id = 2147483647",
        "SELECT * FROM shop.orders WHERE customer_id = 1999 ORDER BY event_ts DESC LIMIT 20",
        "SELECT count(*) FROM t WHERE 0 < qty AND id IN (30, 5, 70) OR id BETWEEN 1 AND 2",
        "SELECT a FROM t WHERE NOT (a = 100 OR b <> 200) AND c = 'x 5' /* 6 */ AND d = ANY(ARRAY[88, 99])",
        "SELECT a FROM t WHERE a IN (SELECT b FROM u WHERE c = 1) AND d >= 0",
        "SELECT a, 3 FROM t WHERE a = 44 GROUP BY 1 ORDER BY 1 LIMIT 5 OFFSET 6",
    ];
    for sql in texts {
        let (template, values) = parser.lifted(sql).unwrap_or_else(|| panic!("{sql}"));
        let (expected, expected_values) = parsed_and_lifted(&parser, sql).expect("lifts");
        assert_eq!(*template.statement(), expected, "{sql}");
        assert_eq!(values, expected_values, "{sql}");
    }
    let (_, values) = parser
        .lifted("SELECT count(*) FROM t WHERE 0 < qty AND id IN (30, 5, 70) OR id BETWEEN 1 AND 2")
        .expect("learned");
    assert_eq!(
        values,
        [0, 30, 5, 70, 1, 2].map(Lifted::Int4),
        "parameters in the order lifting numbers them"
    );
}

#[test]
fn what_is_not_lifted_must_be_as_learned() {
    let parser = Parser::new(64);
    learn(
        &parser,
        "SELECT a, 3 FROM t WHERE a = 4 AND c = 'x 5' ORDER BY 1 LIMIT 5 -- 6",
    );
    for other in [
        // Another select-list literal, ORDER BY position, LIMIT, string, comment.
        "SELECT a, 30 FROM t WHERE a = 4 AND c = 'x 5' ORDER BY 1 LIMIT 5 -- 6",
        "SELECT a, 3 FROM t WHERE a = 4 AND c = 'x 5' ORDER BY 2 LIMIT 5 -- 6",
        "SELECT a, 3 FROM t WHERE a = 4 AND c = 'x 5' ORDER BY 1 LIMIT 50 -- 6",
        "SELECT a, 3 FROM t WHERE a = 4 AND c = 'x 55' ORDER BY 1 LIMIT 5 -- 6",
        "SELECT a, 3 FROM t WHERE a = 4 AND c = 'x 5' ORDER BY 1 LIMIT 5 -- 7",
        // A bigint where an integer was learned, and a numeric.
        "SELECT a, 3 FROM t WHERE a = 2147483648 AND c = 'x 5' ORDER BY 1 LIMIT 5 -- 6",
        "SELECT a, 3 FROM t WHERE a = 99999999999999999999 AND c = 'x 5' ORDER BY 1 LIMIT 5 -- 6",
    ] {
        assert!(parser.lifted(other).is_none(), "{other}");
    }
    assert!(
        parser
            .lifted("SELECT a, 3 FROM t WHERE a = 400 AND c = 'x 5' ORDER BY 1 LIMIT 5 -- 6")
            .is_some()
    );
    // The bigint variant is a shape of its own once learned.
    let big = "SELECT a, 3 FROM t WHERE a = 2147483648 AND c = 'x 5' ORDER BY 1 LIMIT 5 -- 6";
    learn(&parser, big);
    let (_, values) = parser
        .lifted("SELECT a, 3 FROM t WHERE a = 9000000000 AND c = 'x 5' ORDER BY 1 LIMIT 5 -- 6")
        .expect("learned");
    assert_eq!(values, [Lifted::Int8(9_000_000_000)]);
}

#[test]
fn texts_that_read_no_lake_table_are_not_learned() {
    let parser = Parser::new(64);
    for sql in [
        "SELECT x FROM (VALUES (1), (2)) AS v(x) WHERE x = 1",
        "SELECT a FROM generate_series(1, 10) AS g(a) WHERE a = 3",
    ] {
        let (template, values) = parsed_and_lifted(&parser, sql).expect("liftable");
        parser.learn_shape(sql, &template, &values, &interned);
        assert!(parser.lifted(sql).is_none(), "{sql}");
    }
    let stats = parser.shape_stats();
    assert_eq!(stats[2], ("shapes_learned", 0));
    assert_eq!(stats[3], ("shapes_refused", 2), "both were tried");
}

/// A parser whose lifting depends on a value (no rewrite of the gateway's does: this stands
/// in for one that would) is caught by the probe, and the shape is not probed again.
#[test]
fn a_shape_whose_template_depends_on_a_value_is_refused_once() {
    let parser = Parser::new(64);
    let calls = Cell::new(0);
    let fake = |text: &str| {
        calls.set(calls.get() + 1);
        // "Rewrites" `a = 0`: the probe's values differ, so its template does too.
        let (mut template, values) = parsed_and_lifted(&parser, text)?;
        if text.contains("a = 0") {
            template = parser.parse("SELECT 0").ok()?.remove(0);
        }
        Some((template, values))
    };
    let shapes = Shapes::default();
    let sql = "SELECT b FROM t WHERE a = 0";
    let (template, values) = fake(sql).expect("lifts");
    shapes.learn(sql, &template, &values, &fake, &interned);
    assert!(shapes.find("SELECT b FROM t WHERE a = 1").is_none());
    let probes = calls.get();
    shapes.learn(sql, &template, &values, &fake, &interned);
    shapes.learn(
        "SELECT b FROM t WHERE a = 5",
        &template,
        &values,
        &fake,
        &interned,
    );
    assert_eq!(calls.get(), probes, "a refused shape is not probed again");
    assert_eq!(shapes.stats()[3], ("shapes_refused", 1));
}

#[test]
fn a_text_varying_what_is_not_lifted_stops_being_learned() {
    let parser = Parser::new(64);
    for limit in 1..=MAX_VARIANTS + 2 {
        learn(
            &parser,
            &format!("SELECT * FROM t WHERE id = 1 LIMIT {limit}"),
        );
    }
    assert!(
        parser
            .lifted("SELECT * FROM t WHERE id = 2 LIMIT 1")
            .is_none()
    );
    let stats = parser.shape_stats();
    assert_eq!(stats[2], ("shapes_learned", MAX_VARIANTS as u64));
    assert_eq!(stats[3], ("shapes_refused", 1));
}

#[test]
fn negated_literals_are_read_with_their_sign_and_subtractions_stay_as_written() {
    let parser = Parser::new(64);
    learn(
        &parser,
        "SELECT * FROM t WHERE a = -5 AND b IN (-1, 2) AND c > 10-3 AND d BETWEEN -2147483648 AND 7",
    );
    let texts = [
        "SELECT * FROM t WHERE a = -6 AND b IN (-10, 20) AND c > 10-3 AND d BETWEEN -2147483648 AND 8",
        "SELECT * FROM t WHERE a = -0 AND b IN (-1, 0) AND c > 10-3 AND d BETWEEN -2 AND 7",
    ];
    for sql in texts {
        let (template, values) = parser.lifted(sql).unwrap_or_else(|| panic!("{sql}"));
        let (expected, expected_values) = parsed_and_lifted(&parser, sql).expect("lifts");
        assert_eq!(*template.statement(), expected, "{sql}");
        assert_eq!(values, expected_values, "{sql}");
    }
    let (_, values) = parser.lifted(texts[0]).expect("learned");
    assert_eq!(
        values,
        [-6, -10, 20, i32::MIN, 8].map(Lifted::Int4),
        "the sign is the value's"
    );
    for other in [
        // The subtraction is not lifted: its digits must be as learned.
        "SELECT * FROM t WHERE a = -5 AND b IN (-1, 2) AND c > 10-4 AND d BETWEEN -2147483648 AND 7",
        // A bigint where an integer was learned.
        "SELECT * FROM t WHERE a = -2147483649 AND b IN (-1, 2) AND c > 10-3 AND d BETWEEN -2 AND 7",
    ] {
        assert!(parser.lifted(other).is_none(), "{other}");
    }
    // Without the sign the text is of another shape (not learned).
    assert!(
        parser
            .lifted(
                "SELECT * FROM t WHERE a = 5 AND b IN (-1, 2) AND c > 10-3 AND d BETWEEN -2 AND 7"
            )
            .is_none()
    );
}
