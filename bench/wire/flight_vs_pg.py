"""Client side of bench/wire/run.sh: times a full scan over Flight SQL (ADBC, Arrow batches)
and over pgwire (psycopg, binary rows), printing rows/s and MB/s (Arrow bytes of the result)."""
import sys
import time

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg

flight_port, pg_port, sql = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

t = time.perf_counter()
with flight_sql.connect(f"grpc://127.0.0.1:{flight_port}") as conn, conn.cursor() as cur:
    cur.execute(sql)
    reader = cur.fetch_record_batch()
    rows = nbytes = 0
    for batch in reader:
        rows += batch.num_rows
        nbytes += batch.nbytes
flight_s = time.perf_counter() - t
print(f"flight rows={rows} bytes={nbytes} seconds={flight_s:.3f}")

t = time.perf_counter()
with psycopg.connect(f"host=127.0.0.1 port={pg_port} user=bench dbname=lakegate") as conn:
    with conn.cursor(binary=True) as cur:
        pg_rows = 0
        for _ in cur.stream(sql):
            pg_rows += 1
pg_s = time.perf_counter() - t
print(f"pgwire rows={pg_rows} bytes={nbytes} seconds={pg_s:.3f}")
