//! `lakegate-slt`: the differential conformance runner.
//!
//! The `.slt` files under `tests/conformance/` hold statements and the answers PostgreSQL gave
//! for the same rows (`--complete` against a PostgreSQL oracle writes them). Run against
//! lakegate, every record is one of:
//!
//! - **matched**: the same column types (by PostgreSQL type) and the same text, row for row;
//! - **refused**: a pinned engine declined the statement (an error, never an answer) — allowed
//!   for Trino, Spark and DuckDB, which routing then skips;
//! - **wrong**: an answer that differs from PostgreSQL's — always a failure;
//! - **failed**: an error where lakegate must answer (DataFusion, the planner of record, or a
//!   routed session).
//!
//! ```text
//! lakegate-slt --url postgresql://u@127.0.0.1:5433/lakegate [--engine duckdb]
//!              [--report FILE] [--complete] FILE.slt...
//! ```
//! Exit status 1 when anything is wrong or failed; `--report` appends one JSON line per
//! engine (counts, every refusal with its reason, and each record's time in milliseconds).

mod db;

use std::path::PathBuf;

use db::{PgColumn, PgDb};
use sqllogictest::{Record, Runner, TestErrorKind};

/// What one run was asked to do.
struct Args {
    url: String,
    engine: Option<String>,
    report: Option<PathBuf>,
    complete: bool,
    files: Vec<PathBuf>,
}

fn args() -> Result<Args, String> {
    let mut out = Args {
        url: String::new(),
        engine: None,
        report: None,
        complete: false,
        files: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--url" => out.url = it.next().ok_or("--url needs a value")?,
            "--engine" => out.engine = Some(it.next().ok_or("--engine needs a value")?),
            "--report" => out.report = Some(it.next().ok_or("--report needs a value")?.into()),
            "--complete" => out.complete = true,
            other if other.starts_with("--") => return Err(format!("unknown option {other}")),
            file => out.files.push(file.into()),
        }
    }
    if out.url.is_empty() || out.files.is_empty() {
        return Err(
            "usage: lakegate-slt --url URL [--engine NAME] [--report FILE] \
                    [--complete] FILE.slt..."
                .into(),
        );
    }
    Ok(out)
}

/// How one record ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Matched,
    Refused,
    Wrong,
    Failed,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Self::Matched => "matched",
            Self::Refused => "refused",
            Self::Wrong => "wrong",
            Self::Failed => "failed",
        }
    }
}

/// A record that was not matched.
struct Miss {
    outcome: Outcome,
    loc: String,
    sql: String,
    detail: String,
}

/// The counts of one run, and the records that were not matched.
#[derive(Default)]
struct Tally {
    matched: usize,
    misses: Vec<Miss>,
    /// Each counted record's place and how long it took, in milliseconds (bench/tpch prints
    /// them beside PostgreSQL's).
    times: Vec<(String, f64)>,
}

impl Tally {
    fn count(&self, outcome: Outcome) -> usize {
        if outcome == Outcome::Matched {
            return self.matched;
        }
        self.misses.iter().filter(|m| m.outcome == outcome).count()
    }

    fn total(&self) -> usize {
        self.matched + self.misses.len()
    }
}

/// Whether an error from `engine` is a refusal (a pinned engine other than the planner may
/// decline; the planner, the planner over in-memory copies and routed sessions must answer).
fn refusal_allowed(engine: Option<&str>) -> bool {
    matches!(engine, Some(e) if e != "datafusion" && e != "accelerated" && e != "auto")
}

fn one_line(s: &str) -> String {
    let s: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    s.chars().take(400).collect()
}

/// Which columns of the record being run are floats (`F`), for [`float_tolerant`].
static FLOAT_COLUMNS: std::sync::Mutex<Vec<bool>> = std::sync::Mutex::new(Vec::new());

fn set_float_columns(record: &Record<PgColumn>) {
    let floats = match record {
        Record::Query {
            expected: sqllogictest::QueryExpect::Results { types, .. },
            ..
        } => types.iter().map(|t| *t == PgColumn::Float).collect(),
        _ => Vec::new(),
    };
    *FLOAT_COLUMNS.lock().unwrap_or_else(|p| p.into_inner()) = floats;
}

/// Rows match as text, except that a float column may differ from PostgreSQL's in its last
/// digits (1e-12 relative): a float sum's last bits depend on the order of addition, which
/// PostgreSQL itself changes with its plan (parallel workers). Numeric, integer and text
/// columns, and floats converted to text, must match exactly.
fn float_tolerant(
    normalizer: sqllogictest::Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    if sqllogictest::default_validator(normalizer, actual, expected) {
        return true;
    }
    let floats = FLOAT_COLUMNS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if !floats.contains(&true) || actual.len() != expected.len() {
        return false;
    }
    actual.iter().zip(expected).all(|(row, line)| {
        let want: Vec<&str> = line.split(' ').collect();
        want.len() == row.len()
            && row
                .iter()
                .zip(&want)
                .zip(floats.iter().chain(std::iter::repeat(&false)))
                .all(|((got, want), float)| got == want || (*float && close(got, want)))
    })
}

fn close(a: &str, b: &str) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) if x.is_finite() && y.is_finite() => {
            (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        _ => false,
    }
}

async fn run_file(
    runner: &mut Runner<PgDb, impl sqllogictest::MakeConnection<Conn = PgDb>>,
    file: &PathBuf,
    engine: Option<&str>,
    tally: &mut Tally,
) -> Result<(), String> {
    let records = sqllogictest::parse_file::<PgColumn>(file)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    for record in records {
        let counted = matches!(record, Record::Query { .. } | Record::Statement { .. });
        let loc = match &record {
            Record::Query { loc, .. } | Record::Statement { loc, .. } => loc.to_string(),
            _ => String::new(),
        };
        set_float_columns(&record);
        let started = std::time::Instant::now();
        let result = runner.run_async(record).await;
        if !counted {
            continue;
        }
        tally
            .times
            .push((loc.clone(), started.elapsed().as_secs_f64() * 1000.0));
        let miss = |outcome, sql: &str, detail: String| Miss {
            outcome,
            loc: loc.clone(),
            sql: one_line(sql),
            detail,
        };
        match result {
            Ok(_) => tally.matched += 1,
            Err(e) => tally.misses.push(match e.kind() {
                TestErrorKind::QueryResultMismatch { sql, .. }
                | TestErrorKind::QueryResultColumnsMismatch { sql, .. } => {
                    miss(Outcome::Wrong, &sql, e.display(false).to_string())
                }
                // An engine declining (0A000) a statement PostgreSQL fails is a refusal too.
                TestErrorKind::ErrorMismatch { sql, err, .. }
                    if refusal_allowed(engine) && err.to_string().starts_with("0A000") =>
                {
                    miss(Outcome::Refused, &sql, one_line(&err.to_string()))
                }
                TestErrorKind::Fail { sql, err, .. } if refusal_allowed(engine) => {
                    miss(Outcome::Refused, &sql, one_line(&err.to_string()))
                }
                TestErrorKind::Fail { sql, err, .. } => {
                    miss(Outcome::Failed, &sql, one_line(&err.to_string()))
                }
                other => {
                    let text = other.to_string();
                    let sql = text.split("[SQL] ").nth(1).unwrap_or_default().to_string();
                    miss(Outcome::Failed, &sql, one_line(&text))
                }
            }),
        }
    }
    Ok(())
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One JSON line: the engine, the counts, and every record not matched.
fn report_line(engine: &str, t: &Tally) -> String {
    let misses: Vec<String> = t
        .misses
        .iter()
        .map(|m| {
            format!(
                "{{\"outcome\":{},\"loc\":{},\"sql\":{},\"detail\":{}}}",
                json_string(m.outcome.name()),
                json_string(&m.loc),
                json_string(&m.sql),
                json_string(&m.detail)
            )
        })
        .collect();
    let times: Vec<String> = t
        .times
        .iter()
        .map(|(loc, ms)| format!("{{\"loc\":{},\"ms\":{ms:.1}}}", json_string(loc)))
        .collect();
    format!(
        "{{\"engine\":{},\"records\":{},\"matched\":{},\"refused\":{},\"wrong\":{},\
         \"failed\":{},\"misses\":[{}],\"times\":[{}]}}",
        json_string(engine),
        t.total(),
        t.matched,
        t.count(Outcome::Refused),
        t.count(Outcome::Wrong),
        t.count(Outcome::Failed),
        misses.join(","),
        times.join(",")
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("lakegate-slt: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let (url, engine) = (args.url.clone(), args.engine.clone());
    let mut runner = Runner::new(move || PgDb::connect(url.clone(), engine.clone()));
    runner.with_column_validator(sqllogictest::strict_column_validator);
    runner.with_validator(float_tolerant);
    if args.complete {
        for file in &args.files {
            if let Err(e) = runner
                .update_test_file(
                    file,
                    " ",
                    sqllogictest::default_validator,
                    sqllogictest::default_normalizer,
                    sqllogictest::strict_column_validator,
                )
                .await
            {
                eprintln!("lakegate-slt: {}: {e}", file.display());
                return std::process::ExitCode::FAILURE;
            }
        }
        return std::process::ExitCode::SUCCESS;
    }
    let mut tally = Tally::default();
    for file in &args.files {
        if let Err(e) = run_file(&mut runner, file, args.engine.as_deref(), &mut tally).await {
            eprintln!("lakegate-slt: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let engine = args.engine.as_deref().unwrap_or("auto");
    for m in tally
        .misses
        .iter()
        .filter(|m| m.outcome != Outcome::Refused)
    {
        eprintln!(
            "{} [{engine}] {}: {}\n{}",
            m.outcome.name().to_uppercase(),
            m.loc,
            m.sql,
            m.detail
        );
    }
    println!(
        "engine={engine} records={} matched={} refused={} wrong={} failed={}",
        tally.total(),
        tally.matched,
        tally.count(Outcome::Refused),
        tally.count(Outcome::Wrong),
        tally.count(Outcome::Failed)
    );
    if let Some(path) = &args.report {
        use std::io::Write;
        let line = report_line(engine, &tally);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            eprintln!("lakegate-slt: {}: {e}", path.display());
        }
    }
    if tally.count(Outcome::Wrong) == 0 && tally.count(Outcome::Failed) == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
