"""Writes engines/src/verified.rs: for DuckDB, Trino and Spark, the constructs (functions,
aggregates, casts, operators, clauses: see engines/src/constructs.rs) of every statement of the
differential suite that engine answered with PostgreSQL's answer. An engine answers only
statements made of constructs on its list; the rest go to an engine that is verified for them.

    python tests/conformance/verified.py REPORTS_DIR GATEWAY_URL

REPORTS_DIR holds `lakegate-slt --engine E --report REPORTS_DIR/E.jsonl tests/conformance/*.slt`
runs (duckdb, trino, spark) against a lakegate started with LAKEGATE_UNVERIFIED_CONSTRUCTS=1 in
its environment (its engines then answer whatever they are given), and GATEWAY_URL is that
lakegate: each statement's constructs are read from its EXPLAIN ROUTE. A construct that appears
only in statements an engine answered wrongly stays off its list; a wrong answer made only of
listed constructs is printed as a conflict (name its shape apart in constructs.rs).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ["duckdb", "trino", "spark"]

# Constructs an engine answers differently depending on the data, not on how the statement is
# written: the suite found a wrong answer made only of constructs it had answered right
# elsewhere (on other rows). They stay off that engine's list, whatever passes.
FLOAT_ORDER = r"^(op:(=|<>|!=|<|<=|>|>=|IS DISTINCT FROM|IS NOT DISTINCT FROM):float" \
    r"|agg:(min|max)\(float\)|window:(min|max)\(float\)|(order_by|group_by|join_on|distinct|window_by):float)"
DATA_DEPENDENT = {
    "duckdb": [
        (r":float:nan$", "DuckDB's Iceberg scan skips files by column bounds that leave NaN out "
                         "when a float is compared with NaN"),
    ],
    "trino": [
        (FLOAT_ORDER, "Trino compares, orders, groups and joins NaN as IEEE 754 does (NaN is "
                      "neither equal to itself nor greater than a number); PostgreSQL orders it "
                      "above every number"),
        (r"^split_part\(", "Trino's split_part past the last field is NULL, PostgreSQL's ''"),
        (r"^(greatest|least)\(", "Trino's greatest/least with a NULL argument is NULL; "
                                  "PostgreSQL skips NULLs"),
    ],
}


def records(path: Path):
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(("query", "statement")):
            kind = "query" if line.startswith("query") else "statement"
            sql = []
            i += 1
            while i < len(lines) and lines[i].strip() and lines[i] != "----":
                sql.append(lines[i].strip())
                i += 1
            yield kind, " ".join(sql)
        i += 1


def one_line(s: str) -> str:
    return " ".join(s.split())


def main(reports_dir: Path, url: str) -> None:
    reports = {}
    for f in reports_dir.glob("*.jsonl"):
        r = json.loads(f.read_text().splitlines()[-1])
        reports[r["engine"]] = r
    constructs: dict[str, set[str] | None] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for path in sorted((ROOT / "tests" / "conformance").glob("*.slt")):
            for kind, sql in records(path):
                if kind == "statement":
                    conn.execute(sql)
                    continue
                try:
                    rows = dict(conn.execute("EXPLAIN ROUTE " + sql).fetchall())
                except psycopg.Error:
                    constructs[one_line(sql)] = None
                    continue
                if "constructs" not in rows:  # answered by the planner or the catalog mirror
                    constructs[one_line(sql)] = None
                    continue
                constructs[one_line(sql)] = {c for c in rows["constructs"].split(", ") if c}
    out = ["//! What the differential suite verified each engine answers as PostgreSQL does, by",
           "//! construct ([`crate::constructs`]). Written by `tests/conformance/verified.py` from a",
           "//! run of the suite (`tests/conformance/*.slt`) on every engine; do not edit by hand.",
           "//! A statement made of anything else is refused by that engine (routing moves on).",
           ""]
    for engine in ENGINES:
        r = reports[engine]
        misses = {one_line(m["sql"]): m["outcome"] for m in r["misses"]}
        right: set[str] = set()
        for sql, cs in constructs.items():
            if cs is None:
                continue
            if sql not in misses:
                right |= cs
        for pattern, why in DATA_DEPENDENT.get(engine, []):
            dropped = sorted(c for c in right if re.search(pattern, c))
            right -= set(dropped)
            if dropped:
                print(f"{engine}: off the list ({why}): {dropped}", file=sys.stderr)
        for sql, outcome in misses.items():
            cs = constructs.get(sql)
            if outcome == "wrong" and cs is not None and cs <= right:
                print(f"conflict [{engine}]: every construct of a wrong answer is verified: "
                      f"{sql}\n  {sorted(cs)}", file=sys.stderr)
        out.append(f"/// {engine.capitalize()}: {len(right)} constructs.")
        out.append(f"pub const {engine.upper()}: &[&str] = &[")
        out += [f"    {json.dumps(c)}," for c in sorted(right)]
        out.append("];")
        out.append("")
        print(f"{engine}: {len(right)} verified", file=sys.stderr)
    (ROOT / "engines" / "src" / "verified.rs").write_text("\n".join(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
