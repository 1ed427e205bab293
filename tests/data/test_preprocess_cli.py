#!/usr/bin/python3
"""`trident preprocess` command line: exit codes and messages for bad usage (2) and I/O
errors (1), --help, and good runs (every spelling of --input, --document-per-file) whose
PREFIX.bin / PREFIX.idx hold exactly the expected tokens.
usage: test_preprocess_cli.py TRIDENT WORKDIR"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])


def run(*args):
    return tt.run([trident, "preprocess", *args], timeout=60)


def path(name):
    return os.path.join(work, name)


def documents(prefix):
    """The documents of a uint16 indexed dataset as byte strings, EOD stripped."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    with open(prefix + ".bin", "rb") as f:
        raw = f.read()
    tokens = struct.unpack("<%dH" % (len(raw) // 2), raw)
    assert idx[:9] == b"MMIDIDX\x00\x00" and idx[17] == 8
    n = struct.unpack_from("<Q", idx, 18)[0]
    sizes = struct.unpack_from("<%di" % n, idx, 34)
    docs, at = [], 0
    for s in sizes:
        doc = tokens[at:at + s]
        assert doc[-1] == 0 and 0 not in doc[:-1], doc
        docs.append(bytes(doc[:-1]))
        at += s
    assert at == len(tokens)
    return docs


tt.write(path("a.txt"), b"first\ndoc\n\nsecond\n")
tt.write(path("b.txt"), b"fortune one\n%\nfortune\x00 two\n%\n")
tt.write(path("c.txt"), b"no newline at the end")

# ---- bad usage: exit 2 and a message naming the problem ----
bad = [
    ([], "no input files"),
    (["--output-prefix", path("x")], "no input files"),
    (["--input", path("a.txt")], "missing --output-prefix"),
    (["--input", path("a.txt"), "--output-prefix"], "--output-prefix needs a value"),
    (["--input", path("a.txt"), "--output-prefix="], "--output-prefix is empty"),
    (["--input", "--output-prefix", path("x")], "--input needs at least one file"),
    (["--input=", "--output-prefix", path("x")], "--input= needs a file name"),
    (["--bogus", "--input", path("a.txt"), "--output-prefix", path("x")],
     "unknown option '--bogus'"),
    (["-x"], "unknown option '-x'"),
    (["--input", path("a.txt"), "--output-prefix", path("x"), "--workers", "many"],
     "--workers needs a positive integer, got 'many'"),
    (["--input", path("a.txt"), "--output-prefix", path("x"), "--workers=0"],
     "--workers needs a positive integer, got '0'"),
    (["--output-prefix", path("x"), path("a.txt")], "unexpected argument"),
    (["--input", path("a.txt"), "--output-prefix", path("x"), "--split-sentences"],
     "--split-sentences is not supported"),
]
for args, needle in bad:
    r = run(*args)
    check(f"bad usage {args[:3]}...: exit 2 with '{needle}'",
          r.returncode == 2 and needle in r.stderr and "trident preprocess" in r.stderr,
          f"rc={r.returncode} stderr={r.stderr.strip()[-300:]}")
check("bad usage writes nothing", not os.path.exists(path("x.bin")) and
      not os.path.exists(path("x.idx")) and not os.path.exists(path("x.bin.tmp")))

# ---- I/O errors: exit 1 naming the file ----
r = run("--input", path("a.txt"), path("missing.txt"), "--output-prefix", path("x"))
check("missing input: exit 1 naming it",
      r.returncode == 1 and "missing.txt" in r.stderr and "No such file" in r.stderr,
      f"rc={r.returncode} stderr={r.stderr.strip()}")
check("missing input leaves no output", not any(os.path.exists(path(n)) for n in
      ["x.bin", "x.idx", "x.bin.tmp", "x.idx.tmp"]))
r = run("--input", path("a.txt"), "--output-prefix", path("nodir/x"))
check("unwritable output: exit 1", r.returncode == 1 and "nodir/x" in r.stderr, r.stderr)

# ---- help ----
r = run("--help")
check("--help: exit 0 describing the options", r.returncode == 0 and all(
    o in r.stdout for o in ["--input", "--output-prefix", "--document-per-file", "--workers",
                            "\"%\""]), r.stdout)
r = run("--input", path("a.txt"), "-h")
check("-h anywhere", r.returncode == 0 and "usage" in r.stdout)

# ---- good runs ----
r = run("--input", path("a.txt"), path("b.txt"), "--input=" + path("c.txt"),
        "--output-prefix", path("out"), "--workers", "4", "--append-eod")
want = [b"first\ndoc\n", b"second\n", b"fortune one\n", b"fortune two\n",
        b"no newline at the end"]
ntok = sum(len(d) + 1 for d in want)
check("three inputs: exit 0", r.returncode == 0, r.stderr)
check("prints documents and tokens", f"5 documents, {ntok} tokens" in r.stdout, r.stdout)
check("documents are the expected bytes", documents(path("out")) == want,
      repr(documents(path("out"))))
check("no temporary files", not os.path.exists(path("out.bin.tmp")) and
      not os.path.exists(path("out.idx.tmp")))

r = run("--input", path("a.txt"), "--input", path("b.txt"), "--output-prefix=" + path("out"),
        "--document-per-file", "--workers=2")
check("--document-per-file: exit 0", r.returncode == 0, r.stderr)
check("--document-per-file: one document per file",
      documents(path("out")) == [b"first\ndoc\n\nsecond\n",
                                 b"fortune one\n%\nfortune two\n%\n"],
      repr(documents(path("out"))))

tt.write(path("empty.txt"), b"")
r = run("--input", path("empty.txt"), "--output-prefix", path("empty"))
check("empty input: exit 0 with a warning", r.returncode == 0 and "0 documents" in r.stdout
      and "no document" in r.stderr, r.stdout + r.stderr)
check("empty input: valid empty dataset", documents(path("empty")) == [])


# The error must not depend on --workers: a bad line among the first 4096 lines (one worker's
# first batch) then a missing second input. One worker wrote its full batch before opening the
# next input and named the bad line (exit 2); two or three were still filling their set and
# named the missing input (exit 1). The items read before a failed read are written first.
lines = [b'{"text": "document %d"}' % i for i in range(5000)]
lines[10] = b'{"text": bad'
tt.write(path("bad11.jsonl"), b"\n".join(lines) + b"\n")
for workers in (1, 2, 3):
    r = run("--input", path("bad11.jsonl"), path("missing.jsonl"), "--json-keys", "text",
            "--output-prefix", path(f"w{workers}"), "--workers", str(workers))
    check(f"--workers {workers}: a bad line before a missing input is the error (exit 2)",
          r.returncode == 2 and "bad11.jsonl:11: not valid JSON" in r.stderr
          and "missing" not in r.stderr, f"exit {r.returncode}: {r.stderr}")
check("no output after the failure", not any(n.startswith("w") and "document" in n
                                               for n in os.listdir(work)))

# Numbers Python's json reads (Megatron's preprocess_data.py uses json.loads) and jansson
# cannot hold: integers beyond int64 (a uint64 id), reals beyond double (1e400: inf), NaN,
# Infinity, -Infinity. Such a line was "not valid JSON" (dropped with --skip-bad-lines).
good = [b'{"id": 18446744073709551615, "text": "one"}', b'{"text": "two", "x": -1e400}',
        b'{"text": "three", "x": [NaN, Infinity, -Infinity, 1' + b"0" * 400 + b']}']
bad = [b'{"text": "a", "x": 01}', b'{"text": "a", "x": 1.}', b'{"text": "a", "x": +1}',
       b'{"text": "a", "x": NaNa}', b'{"text": "a", "x": 1e5.5}', b'{"text": "a", "x": -NaN}']
for line in good:
    tt.write(path("num.jsonl"), line + b"\n")
    r = run("--input", path("num.jsonl"), "--json-keys", "text", "--output-prefix", path("num"))
    check(f"Python's json reads {line[:40]!r}: one document", r.returncode == 0 and
          "1 documents" in r.stdout, f"exit {r.returncode}: {r.stderr}")
for line in bad:
    tt.write(path("num.jsonl"), line + b"\n")
    r = run("--input", path("num.jsonl"), "--json-keys", "text", "--output-prefix", path("num"))
    check(f"not a JSON number: {line!r} refused", r.returncode == 2 and
          "num.jsonl:1: not valid JSON" in r.stderr, f"exit {r.returncode}: {r.stderr}")

tt.finish()
