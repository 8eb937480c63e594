#!/usr/bin/env python3
"""Regenerates TestAssets/stores/: store files the persistence tests must quarantine.

not-a-database.sqlite  text, not SQLite at all ("file is not a database")
damaged-pages.sqlite   a valid header and schema, two b-tree pages overwritten
                       with a fixed pattern: opens, fails PRAGMA quick_check
"""
import os
import sqlite3

root = os.path.join(os.path.dirname(__file__), "..", "TestAssets", "stores")
os.makedirs(root, exist_ok=True)
with open(os.path.join(root, "not-a-database.sqlite"), "wb") as f:
    f.write(b"This is a text file, not an SQLite database.\n" * 20)

path = os.path.join(root, "damaged-pages.sqlite")
if os.path.exists(path):
    os.remove(path)
db = sqlite3.connect(path)
db.execute("PRAGMA page_size=1024")
db.execute("CREATE TABLE t(x TEXT)")
db.executemany("INSERT INTO t VALUES (?)", [("row %d " % i * 5,) for i in range(300)])
db.commit()
db.close()
data = bytearray(open(path, "rb").read())
for page in (4, 5):
    offset = (page - 1) * 1024
    data[offset + 8 : offset + 1000] = bytes((i * 37) % 256 for i in range(992))
open(path, "wb").write(data)
