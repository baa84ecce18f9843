"""The freshness contract: a commit by another writer is visible to the very next query on
every open connection, with no restart and no TTL. Uses its own tables so the shared
expectations of other tests stay valid."""
import pytest
import psycopg
import pyarrow as pa

import warehouse as wh

TICKS = pa.schema([pa.field("tick", pa.int64(), nullable=False)])


def ticks(first: int, count: int) -> pa.Table:
    return pa.table({"tick": pa.array(range(first, first + count), pa.int64())}, schema=TICKS)


def test_commit_is_visible_to_the_next_query_on_open_connections(gateway, lake_dir):
    cat = wh.catalog(str(lake_dir))
    table = cat.create_table("public.ticks", schema=wh.Schema(
        wh.NestedField(1, "tick", wh.LongType(), required=True)))
    table.append(ticks(1, 10))
    a = psycopg.connect(gateway.dsn, autocommit=True)
    b = psycopg.connect(gateway.dsn, autocommit=True)
    try:
        assert a.execute("SELECT count(*) FROM ticks").fetchone() == (10,)
        assert b.execute("SELECT max(tick) FROM ticks").fetchone() == (10,)
        for round_ in range(3):
            cat.load_table("public.ticks").append(ticks(11 + round_ * 5, 5))
            truth = len(cat.load_table("public.ticks").scan().to_arrow())
            assert a.execute("SELECT count(*) FROM ticks").fetchone() == (truth,)
            assert b.execute("SELECT max(tick) FROM ticks").fetchone() == (10 + (round_ + 1) * 5,)
    finally:
        a.close()
        b.close()


def test_new_table_appears_without_restart(gateway, lake_dir):
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")  # connection open before the table exists
        cat = wh.catalog(str(lake_dir))
        t = cat.create_table("sales.targets", schema=wh.Schema(
            wh.NestedField(1, "region_id", wh.IntegerType(), required=True)))
        t.append(pa.table({"region_id": pa.array([7], pa.int32())},
                          schema=pa.schema([pa.field("region_id", pa.int32(), nullable=False)])))
        assert conn.execute("SELECT region_id FROM sales.targets").fetchall() == [(7,)]
        names = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'sales' ORDER BY 1")]
        assert names == ["regions", "targets"]


PROBE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("score", pa.float64()),
                   pa.field("label", pa.string())])


def probe_rows(first: int, count: int) -> list[tuple]:
    """Rows whose float column holds NaN and NULL, and whose string column has NULLs."""
    rows = []
    for i in range(first, first + count):
        score = float("nan") if i % 17 == 0 else None if i % 13 == 0 else (i % 50) / 10
        rows.append((i, score, None if i % 11 == 0 else f"l{i % 9}"))
    return rows


def probe_table(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows))
    return pa.table({"id": pa.array(cols[0], pa.int64()), "score": pa.array(cols[1], pa.float64()),
                     "label": pa.array(cols[2], pa.string())}, schema=PROBE)


def pg_gt(x, y) -> bool | None:
    """PostgreSQL's float `>`: NULL is unknown, NaN is greater than every number."""
    if x is None:
        return None
    if x != x:
        return True
    return x > y


# (SQL filter, the same predicate in Python as PostgreSQL evaluates it)
PROBE_FILTERS = [
    ("id = 7", lambda r: r[0] == 7),
    ("id BETWEEN 95 AND 130", lambda r: 95 <= r[0] <= 130),
    ("id > 390", lambda r: r[0] > 390),
    ("id < 1", lambda r: r[0] < 1),
    ("id IN (3, 250, 399, 5000)", lambda r: r[0] in (3, 250, 399, 5000)),
    ("score > 4", lambda r: pg_gt(r[1], 4) is True),
    ("score < 0.001", lambda r: r[1] is not None and r[1] == r[1] and r[1] < 0.001),
    ("score IS NULL", lambda r: r[1] is None),
    ("label = 'l3'", lambda r: r[2] == "l3"),
    ("label IS NULL AND id > 200", lambda r: r[2] is None and r[0] > 200),
    ("label > 'l7' OR id = 1", lambda r: (r[2] is not None and r[2] > "l7") or r[0] == 1),
    ("NOT (id < 380)", lambda r: not r[0] < 380),
]


def create_probe(cat, name: str, files: int, rows: int) -> list[tuple]:
    """A probe table of `files` appends of `rows` rows each (ids in disjoint ranges); its rows."""
    table = cat.create_table(name, schema=wh.Schema(
        wh.NestedField(1, "id", wh.LongType(), required=True),
        wh.NestedField(2, "score", wh.DoubleType(), required=False),
        wh.NestedField(3, "label", wh.StringType(), required=False)))
    written: list[tuple] = []
    for c in range(files):
        batch = probe_rows(c * rows, rows)
        table.append(probe_table(batch))
        written += batch
    return written


def test_filtered_reads_over_many_commits_give_every_matching_row(gateway, lake_dir):
    """The embedded engines keep each snapshot's data files and skip those whose column bounds
    prove no row matches; every filter must still give PostgreSQL's answer, on each commit,
    after a delete rewrote files, and for a float column (NaN is not in its bounds)."""
    cat = wh.catalog(str(lake_dir))
    rows = create_probe(cat, "public.probe", files=8, rows=50)  # one file per commit, ids in disjoint ranges
    conns = {e: psycopg.connect(gateway.dsn, autocommit=True, options=f"-c lakegate.engine={e}")
             for e in ("datafusion", "duckdb")}

    def check(when: str) -> None:
        for sql, keep in PROBE_FILTERS:
            want = [r for r in rows if keep(r)]
            truth = (len(want), sum(r[0] for r in want) if want else None)
            for engine, conn in conns.items():
                got = conn.execute(f"SELECT count(*), sum(id) FROM probe WHERE {sql}").fetchone()
                assert got == truth, f"{engine}, {when}: WHERE {sql}"

    try:
        check("after 8 appends")
        table = cat.load_table("public.probe")
        table.delete("id >= 100 and id < 160")  # rewrites two files, drops one
        rows = [r for r in rows if not 100 <= r[0] < 160]
        check("after a delete")
        table.append(probe_table(probe_rows(1000, 5)))
        rows += probe_rows(1000, 5)
        check("after one more append")
    finally:
        for conn in conns.values():
            conn.close()


def token_lookups(gw) -> float:
    from test_observe import get, metric
    return metric(get(gw, "/metrics")[1], "lakegate_catalog_tokens", stat="lookups")


def plans(gw, stat: str) -> float:
    from test_observe import get, metric
    return metric(get(gw, "/metrics")[1], "lakegate_cache", stat=stat)


def test_a_statement_asks_the_catalog_once_and_a_prepared_one_sees_later_commits(gateway, lake_dir):
    """psycopg sends each statement as Parse/Bind/Describe/Execute/Sync: the Execute reuses the
    versions its Parse resolved (one catalog lookup, not two). A statement prepared before a
    commit and executed after it (Bind/Execute in a later batch) still reads the new snapshot."""
    cat = wh.catalog(str(lake_dir))
    table = cat.create_table("public.batch_ticks", schema=wh.Schema(
        wh.NestedField(1, "tick", wh.LongType(), required=True)))
    table.append(ticks(1, 10))
    # prepare_threshold=None: psycopg never prepares on its own, so every statement is a Parse
    # and an Execute in one batch (main asked the catalog twice for each).
    with psycopg.connect(gateway.dsn, autocommit=True, prepare_threshold=None) as conn:
        conn.execute("SELECT count(*) FROM batch_ticks").fetchone()
        before = token_lookups(gateway)
        reused = plans(gateway, "plans_reused")
        runs = 20
        for i in range(runs):
            assert conn.execute("SELECT count(*) FROM batch_ticks WHERE tick > %s",
                                (i,)).fetchone() == (max(0, 10 - i),)
        lookups = token_lookups(gateway) - before
        # One per statement; a little slack for the gateway's own background reads.
        assert runs <= lookups < runs + 5, lookups
        # The plan is made once: every later Parse and Execute reuses it (steps 7-8 only).
        assert plans(gateway, "plans_reused") - reused >= 2 * runs - 1
        q = "SELECT count(*), max(tick) FROM batch_ticks"
        assert conn.execute(q, prepare=True).fetchone() == (10, 10)
        for round_ in range(3):
            cat.load_table("public.batch_ticks").append(ticks(11 + round_ * 5, 5))
            expect = 10 + (round_ + 1) * 5
            assert conn.execute(q, prepare=True).fetchone() == (expect, expect)
        # In one pipeline (one Sync): each statement still answers at a version current when
        # it was sent, and the commit before the pipeline is seen by all of them.
        cat.load_table("public.batch_ticks").append(ticks(26, 5))
        with conn.pipeline():
            cursors = [conn.execute("SELECT count(*) FROM batch_ticks") for _ in range(3)]
        assert [c.fetchone() for c in cursors] == [(30,)] * 3


def test_a_repeated_parse_describes_the_table_as_it_is_now(gateway, lake_dir):
    """psycopg (prepare_threshold=None) sends every execution as Parse/Describe/Execute: a Parse
    of a plan kept at the table's current version answers the description it was last given,
    without planning again. A commit that adds a column is described anew (the new column in
    cursor.description, and in the rows); so is another session's table of the same name, and
    a session whose search path names another schema's table of that name."""
    cat = wh.catalog(str(lake_dir))
    table = cat.create_table("public.described", schema=wh.Schema(
        wh.NestedField(1, "tick", wh.LongType(), required=True)))
    table.append(pa.table({"tick": pa.array([1, 2, 3], pa.int64())},
                          schema=pa.schema([pa.field("tick", pa.int64(), nullable=False)])))
    cat.create_namespace_if_not_exists("other")
    other = cat.create_table("other.described", schema=wh.Schema(
        wh.NestedField(1, "tick", wh.LongType(), required=True),
        wh.NestedField(2, "ratio", wh.DoubleType(), required=False)))
    other.append(pa.table({"tick": pa.array([7], pa.int64()),
                           "ratio": pa.array([0.5], pa.float64())},
                          schema=pa.schema([pa.field("tick", pa.int64(), nullable=False),
                                            pa.field("ratio", pa.float64())])))
    q = "SELECT * FROM described WHERE tick > %s ORDER BY tick"
    with psycopg.connect(gateway.dsn, autocommit=True, prepare_threshold=None) as conn:
        def names_and_rows(value):
            cur = conn.execute(q, (value,))
            return [d.name for d in cur.description], cur.fetchall()

        assert names_and_rows(0) == (["tick"], [(1,), (2,), (3,)])
        reused = plans(gateway, "plans_reused")
        for i in range(5):
            assert names_and_rows(i % 3) == (["tick"], [(t,) for t in range(i % 3 + 1, 4)])
        # Each Parse and each Execute reused the kept plan.
        assert plans(gateway, "plans_reused") - reused >= 10
        cat.load_table("public.described").update_schema().add_column(
            "note", wh.StringType()).commit()
        cat.load_table("public.described").append(pa.table(
            {"tick": pa.array([4], pa.int64()), "note": pa.array(["four"])},
            schema=pa.schema([pa.field("tick", pa.int64(), nullable=False),
                              pa.field("note", pa.string())])))
        assert names_and_rows(2) == (["tick", "note"], [(3, None), (4, "four")])
        assert names_and_rows(3) == (["tick", "note"], [(4, "four")])
        conn.execute("SET search_path TO other")
        assert names_and_rows(0) == (["tick", "ratio"], [(7, 0.5)])
        conn.execute("RESET search_path")
        assert names_and_rows(3) == (["tick", "note"], [(4, "four")])


def test_lookups_sent_as_text_share_one_plan_and_answer_each_value(gateway, lake_dir):
    """An app that binds on the client (psycopg's ClientCursor, psycopg2, PHP's PDO) sends each
    lookup as new text over the simple protocol. The integer literals in its filters are lifted
    out as typed parameters (sql/src/lift.rs), so later lookups reuse the plan kept for the
    first: each still answers for its own value (int4 and int8 literals, IN, BETWEEN, NOT, a
    commit between two lookups), and the query log shows each statement as it was sent."""
    cat = wh.catalog(str(lake_dir))
    table = cat.create_table("public.lifted_ticks", schema=wh.Schema(
        wh.NestedField(1, "tick", wh.LongType(), required=True)))
    table.append(ticks(1, 50))
    q = "SELECT tick FROM lifted_ticks WHERE tick = %s"
    with psycopg.connect(gateway.dsn, autocommit=True,
                         cursor_factory=psycopg.ClientCursor) as conn:
        assert conn.execute(q, (1,)).fetchall() == [(1,)]
        assert conn.execute(q, (2,)).fetchall() == [(2,)]
        reused = plans(gateway, "plans_reused")
        unparsed = plans(gateway, "shape_hits")
        for i in range(3, 23):
            assert conn.execute(q, (i,)).fetchall() == [(i,)]
        assert plans(gateway, "plans_reused") - reused >= 20
        # Texts of a shape seen before are not even parsed (gateway/src/service/shapes.rs).
        assert plans(gateway, "shape_hits") - unparsed >= 20
        assert conn.execute(q, (2147483648,)).fetchall() == []  # a bigint: another shape
        # Such a text in a failed transaction is refused as any statement is.
        conn.autocommit = False
        with pytest.raises(psycopg.errors.UndefinedColumn):
            conn.execute("SELECT nope FROM lifted_ticks")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            conn.execute(q, (3,))
        conn.rollback()
        conn.autocommit = True
        # A session whose search path starts with a system schema reads unqualified names from
        # the catalog: its texts are parsed, not taken from a shape learned elsewhere.
        conn.execute("SET search_path TO pg_catalog, public")
        unparsed = plans(gateway, "shape_hits")
        try:
            conn.execute(q, (4,))
        except psycopg.Error:
            pass
        assert plans(gateway, "shape_hits") == unparsed
        conn.execute("RESET search_path")
        assert conn.execute(q, (51,)).fetchall() == []
        count = "SELECT count(*) FROM lifted_ticks WHERE "
        for where, want in (("tick < 3000000000", 50), ("tick > 9223372036854775806", 0),
                            ("tick IN (3, 4, 99) OR tick BETWEEN 40 AND 45", 8),
                            ("NOT (tick >= 10) AND 2 < tick", 7), ("tick <> 0050", 49)):
            assert conn.execute(count + where).fetchone() == (want,), where
        # A commit between two lookups of one plan: the next one reads it.
        table.append(ticks(51, 10))
        assert conn.execute(q, (55,)).fetchall() == [(55,)]
        logged = [r[0] for r in conn.execute(
            "SELECT query FROM lakegate.queries WHERE query LIKE '%lifted_ticks WHERE tick = %'"
            " AND query NOT LIKE '%lakegate.queries%' ORDER BY query_id").fetchall()]
    assert logged[-1] == "SELECT tick FROM lifted_ticks WHERE tick = 55", logged[-3:]
    assert not any("$" in text for text in logged), logged
    # Values in the text over the extended protocol (pgJDBC's Statement; psycopg preparing a
    # statement without parameters): Parse describes the lifted template, Execute runs it.
    # Those texts are of the shape learned above: not parsed at their Parse either.
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        reused = plans(gateway, "plans_reused")
        unparsed = plans(gateway, "shape_hits")
        for i in range(30, 40):
            cur = conn.execute(f"SELECT tick FROM lifted_ticks WHERE tick = {i}", prepare=True)
            assert [d.name for d in cur.description] == ["tick"]
            assert cur.fetchall() == [(i,)]
        assert plans(gateway, "plans_reused") - reused >= 10
        assert plans(gateway, "shape_hits") - unparsed >= 10
        # Prepared once, executed after a commit: the template's plan reads the new rows.
        conn.execute("SELECT count(*) FROM lifted_ticks WHERE tick > 40", prepare=True)
        table.append(ticks(61, 5))
        assert conn.execute("SELECT count(*) FROM lifted_ticks WHERE tick > 40",
                            prepare=True).fetchone() == (25,)
        assert conn.execute("SELECT count(*) FROM lifted_ticks WHERE tick > 64",
                            prepare=True).fetchone() == (1,)


def test_negative_lookups_sent_as_text_share_one_plan_and_answer_each_value(gateway, lake_dir):
    """A negative integer in a filter is lifted too (PostgreSQL folds the sign into the constant
    and types it by the negative value): lookups of negative values share one plan and skip
    parsing, and each answers for its own value, at the integer and bigint bounds too."""
    cat = wh.catalog(str(lake_dir))
    table = cat.create_table("public.signed_ticks", schema=wh.Schema(
        wh.NestedField(1, "tick", wh.LongType(), required=True)))
    table.append(ticks(-30, 61))
    q = "SELECT tick FROM signed_ticks WHERE tick = %s"
    with psycopg.connect(gateway.dsn, autocommit=True,
                         cursor_factory=psycopg.ClientCursor) as conn:
        assert conn.execute(q, (-1,)).fetchall() == [(-1,)]
        assert conn.execute(q, (-2,)).fetchall() == [(-2,)]
        reused = plans(gateway, "plans_reused")
        unparsed = plans(gateway, "shape_hits")
        for i in range(-3, -23, -1):
            assert conn.execute(q, (i,)).fetchall() == [(i,)]
        assert plans(gateway, "plans_reused") - reused >= 20
        assert plans(gateway, "shape_hits") - unparsed >= 20
        # The same text written by hand, with and without a space after the sign.
        for sql, want in (("SELECT tick FROM signed_ticks WHERE tick = -7", [(-7,)]),
                          ("SELECT tick FROM signed_ticks WHERE tick = - 8", [(-8,)]),
                          ("SELECT tick FROM signed_ticks WHERE tick = -0", [(0,)]),
                          ("SELECT tick FROM signed_ticks WHERE tick = 7", [(7,)])):
            assert conn.execute(sql).fetchall() == want, sql
        count = "SELECT count(*) FROM signed_ticks WHERE "
        for where, want in (("tick < -20", 10), ("tick BETWEEN -5 AND 5", 11),
                            ("tick IN (-3, 3, -99)", 2), ("tick = -2147483648", 0),
                            ("tick > -2147483649", 61), ("tick >= -9223372036854775808", 61),
                            ("tick > 10-40", 60), ("NOT (tick >= -10) AND -29 < tick", 18)):
            assert conn.execute(count + where).fetchone() == (want,), where


def decoded(conn) -> tuple[int, int]:
    stats = dict(conn.execute("SELECT name, value FROM lakegate.cache_stats").fetchall())
    return stats["decoded_file_hits"], stats["decoded_file_misses"]


def test_small_files_kept_decoded_answer_as_the_files_do(gateway, lake_dir):
    """DataFusion keeps small data files decoded by path ([storage.cache] decoded_bytes): a
    later scan of the same file reads it from memory. Every answer must stay the files' own:
    under other filters than the first read's, after a column is added and one renamed (the
    same files read under a new schema), and after a delete rewrote files."""
    cat = wh.catalog(str(lake_dir))
    rows = create_probe(cat, "public.kept_files", files=6, rows=40)  # one small file per commit
    conn = psycopg.connect(gateway.dsn, autocommit=True,
                           options="-c lakegate.engine=datafusion")
    try:
        def check(column: str, when: str) -> None:
            hits, _ = decoded(conn)
            for sql, keep in PROBE_FILTERS:
                want = [r for r in rows if keep(r)]
                truth = (len(want), sum(r[0] for r in want) if want else None,
                         len([r for r in want if r[2] is not None]))
                where = sql.replace("label", column)
                got = conn.execute(f"SELECT count(*), sum(id), count({column}) FROM kept_files "
                                   f"WHERE {where}").fetchone()
                assert got == truth, f"{when}: WHERE {where}"
            assert decoded(conn)[0] > hits, f"{when}: no file came from memory"

        first_hits, first_misses = decoded(conn)
        check("label", "six appends")
        hits, misses = decoded(conn)
        # Each file was decoded at most once per projection the filters need ({id, label} and
        # {id, score, label}); a file a filter's bounds skipped may never be.
        assert misses - first_misses <= 12 and hits > first_hits

        # The next snapshot reads under the new schema (iceberg-rust reads a snapshot with the
        # schema it was written under): the kept files' columns are named anew.
        cat.load_table("public.kept_files").update_schema().add_column(
            "extra", wh.LongType()).commit()
        with cat.load_table("public.kept_files").update_schema() as update:
            update.rename_column("label", "tag")
        more = probe_rows(1000, 5)
        evolved = pa.schema([*PROBE.remove(2), pa.field("tag", pa.string()),
                             pa.field("extra", pa.int64())])
        cat.load_table("public.kept_files").append(pa.Table.from_pylist(
            [{"id": i, "score": sc, "tag": t, "extra": i} for i, sc, t in more], schema=evolved))
        rows += more
        check("tag", "a column added and one renamed")
        assert conn.execute("SELECT count(extra), sum(extra), count(*) FROM kept_files"
                            ).fetchone() == (5, sum(r[0] for r in more), len(rows))

        cat.load_table("public.kept_files").delete("id >= 50 and id < 90")
        rows = [r for r in rows if not 50 <= r[0] < 90]
        check("tag", "after a delete")
    finally:
        conn.close()
