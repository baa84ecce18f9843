"""Writes the pgbench-style `accounts` table (aid, bid, abalance, filler) with PyIceberg into
an Iceberg warehouse, and as CSV for PostgreSQL, so both peers hold the same rows."""
import os
import sys

import pyarrow as pa
import pyarrow.csv as pacsv
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

dir_, rows = os.path.abspath(sys.argv[1]), int(sys.argv[2])
os.makedirs(f"{dir_}/warehouse", exist_ok=True)
cat = SqlCatalog("lake", uri=f"sqlite:///{dir_}/catalog.db", warehouse=f"file://{dir_}/warehouse")
cat.create_namespace("public")
schema = pa.schema([
    pa.field("aid", pa.int64(), nullable=False), pa.field("bid", pa.int32()),
    pa.field("abalance", pa.int32()), pa.field("filler", pa.string()),
])
data = pa.table({
    "aid": pa.array(range(1, rows + 1), pa.int64()),
    "bid": pa.array([(i - 1) // 10000 + 1 for i in range(1, rows + 1)], pa.int32()),
    "abalance": pa.array([(i * 7919) % 100000 for i in range(1, rows + 1)], pa.int32()),
    "filler": pa.array(["x" * 84] * rows, pa.string()),
}, schema=schema)
table = cat.create_table("public.accounts", schema=Schema(
    NestedField(1, "aid", LongType(), required=True), NestedField(2, "bid", IntegerType()),
    NestedField(3, "abalance", IntegerType()), NestedField(4, "filler", StringType())))
table.append(data)
pacsv.write_csv(data, f"{dir_}/accounts.csv", pacsv.WriteOptions(include_header=False))
print(f"--catalog-uri sqlite://{dir_}/catalog.db --catalog-name lake --warehouse file://{dir_}/warehouse")
