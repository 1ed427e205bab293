#!/usr/bin/python3
"""`trident preprocess` of Parquet files that pyarrow writes (a venv with the pyarrow wheel,
made on first use): every codec it reads (NONE, SNAPPY, GZIP, ZSTD) with the dictionary on and
off and data pages v1 and v2, DELTA_LENGTH_BYTE_ARRAY and DELTA_BYTE_ARRAY, small row groups
and pages (many of them), nulls, unicode, empty strings, a column before and after the text
one, large_string and dictionary<string> columns, an empty table:
the .bin / .idx bytes of the same documents as JSON Lines, one column and two. Then what
pyarrow can write that is refused by name (LZ4_RAW, BROTLI, a list, a struct, an int column),
and bytes flipped in the footer: exit 0 or 2, never a crash. Without the venv: SKIP (exit 77),
or FAIL when TRIDENT_REQUIRE_ORACLE is set.
usage: test_parquet_oracle.py TRIDENT WORKDIR VENV"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

PACKAGES = ["pyarrow==26.0.1", "numpy==2.4.6"]  # (pyarrow 26 needs NumPy 2; Debian's is 1.24)
trident, work, venv = sys.argv[1:4]
if os.environ.get("PARQUET_ORACLE_VENV") != venv:
    try:
        py = tt.venv_python(venv, PACKAGES, "pyarrow.parquet")
    except (SystemExit, OSError):  # (venv_python exits 1 when pip fails: no network)
        if os.environ.get("TRIDENT_REQUIRE_ORACLE"):
            print("FAIL: no pyarrow venv (TRIDENT_REQUIRE_ORACLE is set)")
            sys.exit(1)
        print("SKIP: the pyarrow venv cannot be made (pip's message above)")
        sys.exit(77)
    os.environ["PARQUET_ORACLE_VENV"] = venv
    os.execv(py, [py, os.path.abspath(sys.argv[0]), *sys.argv[1:]])

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

work = tt.fresh_dir(work)
rng = random.Random(7)
words = ["alpha", "beta", "ünïcödé", "✓", "🙂", "日本語", "", "quote\"", "back\\slash", "tab\t",
         "new\nline", "ctrl\x01"]
N = 300
texts = [None if i % 17 == 5 else "" if i % 23 == 3 else
         " ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) for i in range(N)]
texts[10] = "long " * 2000
meta = [None if i % 11 == 0 else f"meta {rng.choice(words)} {i}" for i in range(N)]


def path(name):
    return os.path.join(work, name)


def preprocess(inp, prefix, keys, *extra):
    return tt.run([trident, "preprocess", "--input", inp, "--output-prefix", prefix,
                   "--json-keys", *keys, "--skip-bad-lines", *extra], timeout=60)


with open(path("ref.jsonl"), "w") as f:
    for i in range(N):
        f.write(json.dumps({"id": i, "text": texts[i], "meta": meta[i]}, ensure_ascii=i % 2 == 0) + "\n")
refs = {}
for keys in (("text",), ("text", "meta")):
    prefix = path("ref-" + "-".join(keys))
    p = preprocess(path("ref.jsonl"), prefix, keys)
    check(f"the JSON Lines reference, keys {keys}", p.returncode == 0, p.stderr[-300:])
    refs[keys] = prefix


def same(what, inp, keys=("text", "meta"), extra=()):
    prefix = path("out")
    p = preprocess(inp, prefix, keys, *extra)
    ok = p.returncode == 0
    for k in keys:
        for ext in (".bin", ".idx"):
            a, b = f"{prefix}_{k}_document{ext}", f"{refs[keys]}_{k}_document{ext}"
            ok = ok and open(a, "rb").read() == open(b, "rb").read()
    check(what, ok, f"exit {p.returncode}: {p.stderr[-500:]}")


table = pa.table({"id": pa.array(range(N), pa.int64()), "text": pa.array(texts, pa.string()),
                  "meta": pa.array(meta, pa.string())})
small = dict(row_group_size=40, data_page_size=256, write_batch_size=8)
for codec in ("NONE", "SNAPPY", "GZIP", "ZSTD"):
    for dictionary in (True, False):
        for version in ("1.0", "2.0"):
            f = path(f"t-{codec}-{dictionary}-{version}.parquet")
            pq.write_table(table, f, compression=codec, use_dictionary=dictionary,
                           data_page_version=version, **small)
            pages = sum(1 for _ in range(pq.ParquetFile(f).metadata.num_row_groups))
            same(f"{codec}, dictionary {dictionary}, data page v{version} ({pages} row groups): "
                 "text and meta", f)
for enc in ("DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"):  # (Spark's v2 writer's encodings)
    for version in ("1.0", "2.0"):
        f = path(f"t-{enc}-{version}.parquet")
        pq.write_table(table, f, compression="ZSTD", use_dictionary=False, data_page_version=version,
                       column_encoding={"text": enc, "meta": enc}, **small)
        same(f"{enc}, data page v{version}", f)
same("SNAPPY v2 dictionary: text alone", path("t-SNAPPY-True-2.0.parquet"), keys=("text",))
same("ZSTD v1 with 3 workers", path("t-ZSTD-False-1.0.parquet"), extra=("--workers", "3"))
pq.write_table(table.cast(pa.schema([("id", pa.int64()), ("text", pa.large_string()),
                                     ("meta", pa.large_string())])), path("large.parquet"), **small)
same("large_string columns", path("large.parquet"))
pq.write_table(pa.table({"text": pa.array(texts).dictionary_encode(), "id": pa.array(range(N)),
                         "meta": pa.array(meta)}), path("categorical.parquet"), **small)
same("a dictionary<string> column (categorical), before the others", path("categorical.parquet"))
pq.write_table(table, path("one-group.parquet"))
same("defaults: one row group, one page", path("one-group.parquet"))
pq.write_table(pa.table({"text": pa.array([], pa.string())}), path("empty.parquet"))
tt.write(path("empty.jsonl"), "")
p = preprocess(path("empty.parquet"), path("empty-pq"), ("text",))
q = preprocess(path("empty.jsonl"), path("empty-json"), ("text",))
check("an empty table (a chunk of a dictionary page alone): the empty JSON Lines' files",
      p.returncode == 0 and q.returncode == 0 and
      all(open(path("empty-pq_text_document" + e), "rb").read() ==
          open(path("empty-json_text_document" + e), "rb").read() for e in (".bin", ".idx")),
      p.stderr[-300:])


def refused(what, f, needle, keys=("text",)):
    p = tt.run([trident, "preprocess", "--input", f, "--output-prefix", path("no"),
                "--json-keys", *keys], timeout=60)
    check(f"{what}: exit 2, '{needle}'", p.returncode == 2 and needle in p.stderr and f in p.stderr,
          f"exit {p.returncode}: {p.stderr[-400:]}")


for codec, name in (("LZ4", "LZ4_RAW"), ("BROTLI", "BROTLI")):
    pq.write_table(table, path(f"{codec}.parquet"), compression=codec)
    refused(f"compression {codec}", path(f"{codec}.parquet"), f"compression {name} is not supported")
pq.write_table(pa.table({"text": pa.array([["a", "b"], ["c"]], pa.list_(pa.string()))}), path("list.parquet"))
refused("a list column", path("list.parquet"), 'column "text" is a nested column')
pq.write_table(pa.table({"text": pa.array([{"a": "x"}], pa.struct([("a", pa.string())]))}), path("struct.parquet"))
refused("a struct column", path("struct.parquet"), 'column "text" is a nested column')
refused("an int64 column", path("one-group.parquet"), 'column "id" is INT64', keys=("id",))
refused("a missing column", path("one-group.parquet"), 'no column "content"', keys=("content",))
whole = open(path("t-ZSTD-True-2.0.parquet"), "rb").read()
tt.write(path("cut.parquet"), whole[:len(whole) // 2])
refused("a file cut in half", path("cut.parquet"), "no PAR1 magic")
meta_len = int.from_bytes(whole[-8:-4], "little")
crashes = []
for i in range(40):  # bytes of the footer flipped: read (a statistic's byte) or refused by name
    b = bytearray(whole)
    at = len(whole) - 8 - meta_len + rng.randrange(meta_len)
    b[at] ^= 1 << rng.randrange(8)
    tt.write(path("flipped.parquet"), bytes(b))
    p = preprocess(path("flipped.parquet"), path("flipped"), ("text",))
    if p.returncode not in (0, 2) or (p.returncode == 2 and path("flipped.parquet") not in p.stderr):
        crashes.append((at, p.returncode, p.stderr[-200:]))
check("40 footers with a bit flipped: exit 0 or 2 naming the file", not crashes, crashes[:3])
tt.finish("preprocess reads pyarrow's Parquet files as their JSON Lines")
