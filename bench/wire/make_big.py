"""Writes `public.big` (N rows: id bigint, v double, s text) with PyIceberg for the wire benchmark."""
import os
import sys

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog

dir_, rows = os.path.abspath(sys.argv[1]), int(sys.argv[2])
os.makedirs(f"{dir_}/warehouse", exist_ok=True)
cat = SqlCatalog("lake", uri=f"sqlite:///{dir_}/catalog.db", warehouse=f"file://{dir_}/warehouse")
cat.create_namespace("public")
schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.float64()), pa.field("s", pa.string())])
table = cat.create_table("public.big", schema=schema)
chunk = 2_000_000
for start in range(0, rows, chunk):
    ids = pa.array(range(start, min(rows, start + chunk)), pa.int64())
    v = pc.multiply(pc.cast(ids, pa.float64()), 0.5)
    s = pc.binary_join_element_wise(pa.scalar("row-"), pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), "")
    table.append(pa.table({"id": ids, "v": v, "s": s}, schema=schema))
print(f"--catalog-uri sqlite://{dir_}/catalog.db --catalog-name lake --warehouse file://{dir_}/warehouse")
