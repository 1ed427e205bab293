#!/usr/bin/python3
"""`trident preprocess` of gzip / zstd JSON Lines and of Parquet files (made by the stdlib-only
parquet_writer.py): each gives exactly the .bin / .idx bytes of the same documents as plain
JSON Lines (multi-member gzip, multi-frame zstd, a name that does not say the format, text
files on the byte-level streaming path, nulls, several columns, many row groups and pages,
dictionaries, GZIP pages); each malformed or unsupported file is exit 2 with a message naming
the file and what is wrong. Needs the zstd command (scripts/setup.sh installs it).
usage: test_preprocess_inputs.py TRIDENT WORKDIR"""
import gzip
import json
import os
import shutil
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "common"))
sys.path.insert(0, here)
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402
import parquet_writer as pw  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])


def path(name):
    return os.path.join(work, name)


def preprocess(inp, name, *extra):
    prefix = path("out-" + name)
    p = tt.run([trident, "preprocess", "--input", inp, "--output-prefix", prefix, *extra], timeout=60)
    return p, prefix


def same_output(what, inp, ref_lines, keys=("text",), extra=()):
    """inp and the JSON Lines ref_lines (the same documents) preprocess to the same bytes."""
    ref = tt.write(path(f"ref-{len(os.listdir(work))}.jsonl"), "".join(l + "\n" for l in ref_lines))
    args = ["--json-keys", *keys, *extra]
    p, out = preprocess(inp, os.path.basename(inp), *args)
    q, want = preprocess(ref, os.path.basename(ref), *args)
    ok = p.returncode == 0 and q.returncode == 0
    for k in keys:
        for ext in (".bin", ".idx"):
            a, b = f"{out}_{k}_document{ext}", f"{want}_{k}_document{ext}"
            ok = ok and os.path.exists(a) and open(a, "rb").read() == open(b, "rb").read()
    check(what, ok, f"exit {p.returncode} / {q.returncode}: {p.stderr[-600:]} {q.stderr[-300:]}")


def refused(what, inp, needle, extra=("--json-keys", "text")):
    p, _ = preprocess(inp, "refused", *extra)
    check(f"{what}: exit 2, '{needle}'", p.returncode == 2 and needle in p.stderr and inp in p.stderr,
          f"exit {p.returncode}: {p.stderr[-500:]}")


docs = ["first document", "", "ünïcödé ✓ 🙂 日本語", "quote \" backslash \\ tab \t nl \n ctrl \x01",
        "x" * 3000, "last"]
lines = [json.dumps({"id": i, "text": d}, ensure_ascii=i % 2 == 0) for i, d in enumerate(docs)]
plain = "".join(l + "\n" for l in lines).encode()

# ---- gzip and zstd JSON Lines ----
tt.write(path("one.jsonl.gz"), gzip.compress(plain))
tt.write(path("members.jsonl.gz"), b"".join(gzip.compress((l + "\n").encode()) for l in lines))
tt.write(path("no-extension"), gzip.compress(plain))
same_output("gzip, one member", path("one.jsonl.gz"), lines)
same_output("gzip, a member per line", path("members.jsonl.gz"), lines)
same_output("gzip told by its magic, not its name", path("no-extension"), lines)
zstd = shutil.which("zstd")
if check("the zstd command is installed (scripts/setup.sh)", zstd):
    def zst(data):
        return subprocess.run([zstd, "-q", "-c"], input=data, capture_output=True, check=True).stdout
    tt.write(path("one.jsonl.zst"), zst(plain))
    tt.write(path("frames.jsonl.zst"), zst(plain[:50]) + zst(plain[50:4000]) + zst(plain[4000:]))
    same_output("zstd, one frame", path("one.jsonl.zst"), lines)
    same_output("zstd, three frames cut inside lines", path("frames.jsonl.zst"), lines)
    same_output("zstd with 2 workers", path("frames.jsonl.zst"), lines, extra=("--workers", "2"))
    whole = open(path("frames.jsonl.zst"), "rb").read()
    tt.write(path("cut.jsonl.zst"), whole[:-7])
    refused("zstd cut short", path("cut.jsonl.zst"), "the zstd stream is truncated at byte")
    bad = bytearray(whole)
    bad[len(bad) // 2:len(bad) // 2 + 8] = b"\xff" * 8
    tt.write(path("corrupt.jsonl.zst"), bytes(bad))
    refused("zstd corrupt", path("corrupt.jsonl.zst"), "corrupt zstd data at byte")
gz = open(path("members.jsonl.gz"), "rb").read()
tt.write(path("cut.jsonl.gz"), gz[:-5])
refused("gzip cut short", path("cut.jsonl.gz"), "the gzip stream is truncated at byte")
tt.write(path("garbage.jsonl.gz"), gz + b"trailing garbage")
refused("gzip with trailing garbage", path("garbage.jsonl.gz"), "corrupt gzip data at byte")
bad = bytearray(gzip.compress(plain))
bad[20:30] = b"\x00" * 10
tt.write(path("corrupt.jsonl.gz"), bytes(bad))
refused("gzip corrupt", path("corrupt.jsonl.gz"), "corrupt gzip data at byte")

# a pipe (--input /dev/stdin): the first bytes read to tell the format are not lost
q, want = preprocess(tt.write(path("ref-stdin.jsonl"), plain), "ref-stdin", "--json-keys", "text")
for name, data in (("plain", plain), ("gzip", gzip.compress(plain))):
    prefix = path(f"stdin-{name}")
    p = subprocess.run([trident, "preprocess", "--input", "/dev/stdin", "--output-prefix", prefix,
                        "--json-keys", "text"], input=data, capture_output=True, timeout=60)
    check(f"{name} JSON Lines from a pipe (/dev/stdin)", p.returncode == 0 and q.returncode == 0 and all(
        open(f"{prefix}_text_document{e}", "rb").read() == open(f"{want}_text_document{e}", "rb").read()
        for e in (".bin", ".idx")), p.stderr[-300:])

# text files (no --json-keys), byte-level streaming path: a gzip file reads as its text
text = b"one\ntwo\n\nthree\n"
tt.write(path("t.txt"), text)
tt.write(path("t.txt.gz"), gzip.compress(text))
p1, o1 = preprocess(path("t.txt"), "t")
p2, o2 = preprocess(path("t.txt.gz"), "tgz")
check("a gzip text file (byte-level streaming path) reads as the text",
      p1.returncode == 0 and p2.returncode == 0 and
      all(open(o1 + e, "rb").read() == open(o2 + e, "rb").read() for e in (".bin", ".idx")),
      p2.stderr[-300:])

# ---- Parquet (parquet_writer.py) ----
texts = ["alpha", None, "", "ünïcödé ✓ 🙂", "beta \"q\" \\ \n", "alpha", "gamma", None, "alpha",
         "delta" * 50, "epsilon"]
others = [f"other {i}" if i % 3 else None for i in range(len(texts))]
ids = list(range(len(texts)))


def rows(*cols):
    return [json.dumps(dict(zip([c[0] for c in cols], vals)), ensure_ascii=False)
            for vals in zip(*[c[1] for c in cols])]


cols = [("id", ids, "int64"), ("text", texts, "string"), ("other", others, "string")]
ref = rows(("text", texts), ("other", others))
for name, kw in [("plain", {}), ("dictionary", {"dictionary": True}), ("gzip", {"codec": 2}),
                 ("dictionary-gzip", {"dictionary": True, "codec": 2}),
                 ("one-row-pages", {"rows_per_page": 1, "rows_per_group": 2})]:
    pw.write(path(f"{name}.parquet"), cols, **kw)
    same_output(f"parquet {name}: text", path(f"{name}.parquet"), ref, extra=("--skip-bad-lines",))
    same_output(f"parquet {name}: text and other", path(f"{name}.parquet"), ref,
                keys=("text", "other"), extra=("--skip-bad-lines",))
pw.write(path("required.parquet"), [("text", ["a", "b", "", "c"], "string")], optional=False)
same_output("parquet, a REQUIRED column", path("required.parquet"), rows(("text", ["a", "b", "", "c"])))
prompts, responses = ["Q: one?", "Q: ünï?", "Q: three"], ["A: 1", "A: ✓", "A: \"3\""]
pw.write(path("sft.parquet"), [("prompt", prompts, "string"), ("response", responses, "string")])
tt.write(path("sft.jsonl"), "".join(l + "\n" for l in rows(("prompt", prompts), ("response", responses))))
p, o1 = preprocess(path("sft.parquet"), "sft-pq", "--json-keys", "prompt,response")
q, o2 = preprocess(path("sft.jsonl"), "sft-json", "--json-keys", "prompt,response")
check("parquet prompt/response columns (--json-keys PROMPT,RESPONSE): the JSON Lines' ids and mask",
      p.returncode == 0 and q.returncode == 0 and
      all(open(o1 + x, "rb").read() == open(o2 + x, "rb").read()
          for x in (".bin", ".idx", "_loss_mask.bin", "_loss_mask.idx")), p.stderr[-300:])
p, _ = preprocess(path("plain.parquet"), "nulls", "--json-keys", "text")
check("a null value is JSON's null: refused without --skip-bad-lines, naming the row",
      p.returncode == 2 and 'plain.parquet:2: "text" is null' in p.stderr, p.stderr[-300:])
shutil.copy(path("plain.parquet"), path("plain.bin"))
refused("a Parquet file without --json-keys", path("plain.bin"), "is a Parquet file: name the columns",
        extra=())

good = dict(columns=cols)
broken = [
    ("a .parquet file without PAR1 first", dict(), lambda b: b"PARX" + b[4:], "no PAR1 magic"),
    ("a file cut short", dict(), lambda b: b[:-40], "no PAR1 magic"),
    ("a footer length past the file", dict(footer_len_delta=10**6), None, "its length runs past"),
    ("a footer field of an unknown type", dict(), lambda b: flip_footer(b), "unknown type"),
    ("a field of a wrong type (num_rows a string)", dict(num_rows_as_string=True), None,
     "a Thrift field of a wrong type"),
    ("row counts that disagree", dict(num_rows_delta=1), None, "do not add up"),
    ("a page size past its chunk", dict(page_size_delta=1000), None, "a page size past its column chunk"),
    ("a dictionary index past the dictionary", dict(dictionary=True, index_past_dictionary=True),
     None, "a dictionary index past the dictionary"),
    ("an empty RLE run", dict(empty_rle_run=True), None, "an empty RLE run"),
    ("a decompressed size that disagrees", dict(codec=2, uncompressed_delta=3), None,
     "GZIP data shorter than the page header says"),
    ("LZ4_RAW", dict(codec_id=7), None, "compression LZ4_RAW is not supported"),
    ("BROTLI", dict(codec_id=4), None, "compression BROTLI is not supported"),
    ("BYTE_STREAM_SPLIT", dict(encoding=9), None, "encoding BYTE_STREAM_SPLIT is not supported"),
    ("a chunk outside the file", dict(data_page_offset=10**9), None, "byte range is not inside"),
    ("a list column", dict(list_column="text"), None, 'column "text" is a nested column'),
]


def flip_footer(b):
    meta_len = int.from_bytes(b[-8:-4], "little")
    at = len(b) - 8 - meta_len
    return b[:at] + bytes([0x1D]) + b[at + 1:]  # field 1 of type 13


for what, kw, patch, needle in broken:
    f = path("broken.parquet")
    pw.write(f, **{**good, **kw})
    if patch:
        tt.write(f, patch(open(f, "rb").read()))
    refused(what, f, needle)
pw.write(path("plain.parquet"), cols)
refused("a missing column", path("plain.parquet"), 'no column "content"', extra=("--json-keys", "content"))
refused("an INT64 column", path("plain.parquet"), 'column "id" is INT64, not a string',
        extra=("--json-keys", "id"))
tt.finish("preprocess reads gzip, zstd and Parquet inputs as their JSON Lines")
