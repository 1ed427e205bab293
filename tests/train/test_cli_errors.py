#!/usr/bin/python3
"""`trident train` / `trident preprocess` on bad input, through the command line, one case per
error class (yaml/config.h, data/data.h). Every bad config is WRITTEN IN A YAML FILE, so the
message's `FILE:LINE:COL` is checked against that file, line and column (found here by
locating the offending text, independently of trident). Each case asserts the exit code
(2 = bad usage / config / input, launch/commands.h) and the key parts of the message.
Also: --set parallel.ddp_bucket_size_mb out of range, and use_distributed_optimizer with a
data-parallel size of 1 (trains, exit 0, logs that it has nothing to shard, same losses).
usage: test_cli_errors.py TRIDENT WORKDIR"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = os.path.abspath(sys.argv[1]), tt.fresh_dir(os.path.abspath(sys.argv[2]))


def run(*args, timeout=120):
    return tt.outputs([trident, *args], timeout)


# ---- a small corpus ----
text = tt.write_corpus(os.path.join(work, "corpus.txt"), 5,
                      ["alpha", "beta", "gamma", "delta", "pipe", "rank"], 120, 3, 40)
corpus = os.path.join(work, "corpus")
rc, _, err = run("preprocess", "--input", text, "--output-prefix", corpus)
if rc:
    print(f"FAIL preprocess of the test corpus: rc={rc} {err}")
    sys.exit(1)
IDX = open(corpus + ".idx", "rb").read()
BIN = open(corpus + ".bin", "rb").read()
N_SEQS, N_ENTRIES = struct.unpack_from("<QQ", IDX, 18)
check("corpus: MMIDIDX v1, uint16, one sequence per document",
      IDX[:9] == b"MMIDIDX\0\0" and IDX[17] == 8 and N_ENTRIES == N_SEQS + 1 and N_SEQS > 2,
      repr(IDX[:34]))


def base(data_path=corpus):
    return f"""model:
  num_layers: 2
  hidden_size: 32
  num_attention_heads: 2
  seq_length: 16
training:
  micro_batch_size: 2
  global_batch_size: 4
  train_iters: 2
  lr: 1.0e-3
  eval_interval: 0
data:
  data_path: {data_path}
  split: "90,10,0"
"""


BASE = base()


def pos(text, needle, nth=1):
    """1-based (line, column) of the nth occurrence of needle in text (str or bytes)."""
    at = -1
    for _ in range(nth):
        at = text.index(needle, at + 1)
    nl = b"\n" if isinstance(text, bytes) else "\n"
    line = text.count(nl, 0, at) + 1
    return line, at - (text.rfind(nl, 0, at) + 1) + 1


def at(text, prefix):
    """1-based (line, column) just after the (only) occurrence of prefix: a value's place."""
    assert text.count(prefix) == 1, prefix
    line, col = pos(text, prefix)
    return line, col + len(prefix)


def replace(old, new, text=BASE):
    assert text.count(old) == 1, old
    return text.replace(old, new)


def write(name, text):
    return tt.write(os.path.join(work, name + ".yaml"), text)


def expect_error(name, text, where, needles, extra=(), code=2):
    """Train on `text` written to NAME.yaml: exit `code`, stderr has 'NAME.yaml:LINE:COL: ' and
    every needle (FILE in a needle stands for the config's path); no run directory is made."""
    path = write(name, text)
    run_dir = os.path.join(work, "run-" + name)
    rc, _, err = run("train", path, "--run-dir", run_dir, *extra)
    line, col = where
    want = [f"{path}:{line}:{col}: "] + [n.replace("FILE", path) for n in needles]
    missing = [w for w in want if w not in err]
    check(f"{name}: exit {code} at {line}:{col}",
          rc == code and not missing and not os.path.exists(run_dir),
          f"rc={rc} missing={missing} stderr={err.strip()[-600:]}")


# ---- config: unknown key / section ----
t = replace("  seq_length: 16\n", "  seq_length: 16\n  hiden_size: 4\n")
expect_error("unknown-key", t, pos(t, "hiden_size"),
             ["unknown key 'hiden_size' in section 'model'; allowed keys: num_layers, hidden_size,",
              "(did you mean 'hidden_size'?)"])
t = BASE + "optim:\n  lr: 1\n"
expect_error("unknown-section", t, pos(t, "optim"),
             ["unknown section 'optim'; allowed sections: model, parallel, training, data, "
              "logging, checkpoint, finetune, cluster"])

# ---- config: wrong type ----
t = replace("train_iters: 2", "train_iters: six")
expect_error("type-int-word", t, at(t, "train_iters: "),
             ["training.train_iters: expected an integer, found 'six'"])
t = replace("train_iters: 2", "train_iters: 2.5")
expect_error("type-int-fraction", t, at(t, "train_iters: "),
             ["training.train_iters: expected an integer, found '2.5'"])
t = replace("train_iters: 2", "train_iters: [1, 2]")
expect_error("type-int-list", t, at(t, "train_iters: "),
             ["training.train_iters: expected an integer, found a list"])
t = replace("lr: 1.0e-3", "lr: fast")
expect_error("type-number", t, at(t, "lr: "), ["training.lr: expected a number, found 'fast'"])
t = BASE + "parallel:\n  sequence_parallel: maybe\n"
expect_error("type-bool", t, at(t, "sequence_parallel: "),
             ["parallel.sequence_parallel: expected a boolean (true/false/yes/no), found 'maybe'"])
t = BASE + "logging: 3\n"
expect_error("type-section", t, at(t, "logging: "),
             ["section 'logging' is '3'; expected a mapping of keys"])

# ---- config: out of range / not one of the allowed values ----
t = replace("lr: 1.0e-3", "lr: -1")
expect_error("range-lr", t, at(t, "lr: "), ["training.lr: found '-1'; allowed: a number > 0"])
t = replace("num_layers: 2", "num_layers: 0")
expect_error("range-layers", t, at(t, "num_layers: "),
             ["model.num_layers: found '0'; allowed: an integer from 1 to 65536"])
t = replace("  eval_interval: 0\n", "  eval_interval: 0\n  adam_beta1: 1.0\n")
expect_error("range-beta", t, at(t, "adam_beta1: "),
             ["training.adam_beta1: found '1.0'; allowed: a number >= 0 and < 1"])
t = BASE + "parallel:\n  ddp_bucket_size_mb: -1\n"
expect_error("range-bucket-file", t, at(t, "ddp_bucket_size_mb: "),
             ["parallel.ddp_bucket_size_mb: found '-1'; allowed: a number >= 0 and <= 1000000"])
t = replace("  eval_interval: 0\n", "  eval_interval: 0\n  lr_decay_style: cosin\n")
expect_error("enum", t, at(t, "lr_decay_style: "),
             ["training.lr_decay_style: found 'cosin'; allowed: cosine, linear, constant, "
              "inverse-square-root, WSD (did you mean 'cosine'?)"])

# ---- config: missing required key (at its section, or 1:1 without the section) ----
t = replace("  lr: 1.0e-3\n", "")
expect_error("missing-lr", t, pos(t, "training:"),
             ["missing required key training.lr; add it to section 'training' (a number > 0)"])
t = BASE[:BASE.index("data:")]
expect_error("missing-data-section", t, (1, 1),
             ["missing required key data.data_path; add it to section 'data'"])

# ---- config: inconsistent values (the message also names where the other key is set) ----
t = replace("hidden_size: 32", "hidden_size: 33")
expect_error("heads", t, pos(t, "hidden_size"),
             ["model.hidden_size = 33 is not a multiple of model.num_attention_heads = 2 "
              "(set at FILE:%d:%d)" % pos(t, "num_attention_heads"),
              "hidden_size must be divisible by num_attention_heads (e.g. 32 or 34)"])
t = replace("global_batch_size: 4", "global_batch_size: 5")
expect_error("global-batch", t, pos(t, "global_batch_size"),
             ["training.global_batch_size = 5 is not a multiple of training.micro_batch_size = 2 "
              "(set at FILE:%d:%d)" % pos(t, "micro_batch_size"),
              "allowed: a multiple (e.g. 4 or 6)"])
t = replace("  seq_length: 16\n", "  seq_length: 16\n  seq_length: 32\n")
expect_error("duplicate-key", t, pos(t, "seq_length", 2),
             ["duplicate key 'seq_length' in section 'model' (first at line %d)"
              % pos(t, "seq_length")[0]])

# ---- config: malformed YAML ----
SYNTAX_HINT = "fix the YAML syntax (indent with spaces, `key: value`, lists as [a, b])"
t = replace("lr: 1.0e-3", "lr: 1.0e-3: x")
expect_error("yaml-colon", t, pos(t, ": x"),
             ["YAML syntax error: mapping values are not allowed in this context; " + SYNTAX_HINT])
t = replace("  seq_length: 16\n", " seq_length: 16\n")
expect_error("yaml-indent", t, pos(t, "seq_length"),
             ["YAML syntax error: did not find expected key", SYNTAX_HINT])
t = replace("  seq_length: 16\n", "\tseq_length: 16\n")
expect_error("yaml-tab", t, pos(t, "\t"),
             ["YAML syntax error: found a tab character that violates indentation",
              "tabs cannot indent YAML; use spaces"])
t = BASE + "---\nmodel:\n  num_layers: 3\n"
expect_error("yaml-two-documents", t, pos(t, "---"),
             ["a second YAML document; a config is exactly one document"])

# ---- config: binary garbage, control characters, bad UTF-8 ----
TEXT_HINT = "a config must be UTF-8 text without control characters"
expect_error("garbage-bytes", bytes(range(256)) * 8, (1, 1),
             ["control characters are not allowed (value 0x0); " + TEXT_HINT])
with open(trident, "rb") as f:
    expect_error("garbage-executable", f.read(4096), (1, 1),
                 ["control characters are not allowed (value 0x7F); " + TEXT_HINT])
t = replace("seq_length: 16", "seq_length: 1\x016").encode()
expect_error("control-char", t, pos(t, b"\x01"),
             ["control characters are not allowed (value 0x1); " + TEXT_HINT])
t = BASE.encode().replace(b"seq_length: 16", b"seq_length: \xff\xfe")
expect_error("bad-utf8", t, pos(t, b"\xff"),
             ["invalid leading UTF-8 octet (value 0xFF); " + TEXT_HINT])

# ---- config: empty / not a mapping ----
EMPTY = ("empty document; expected a mapping with sections model, parallel, training, data, "
         "logging, checkpoint, finetune, cluster")
expect_error("empty-file", "", (1, 1), [EMPTY])
expect_error("comments-only", "# nothing here\n\n   \n", (1, 1), [EMPTY])
expect_error("document-list", "- model\n- training\n", (1, 1),
             ["the document is a list; expected a mapping with sections model,"])
expect_error("document-scalar", "hello\n", (1, 1),
             ["the document is 'hello'; expected a mapping with sections model,"])

# ---- config: the same through the launcher (2 ranks): still exit 2 with the message ----
t = replace("hidden_size: 32", "hidden_size: 33")
expect_error("heads-nproc2", t, pos(t, "hidden_size"),
             ["is not a multiple of model.num_attention_heads = 2",
              "trident train: rank", "exit status 2"], extra=("--nproc", "2"))

# ---- --set parallel.ddp_bucket_size_mb out of range ----
good = write("good", BASE)
for v in ("-1", "1e30"):
    rc, _, err = run("train", good, "--run-dir", os.path.join(work, "run-bucket"),
                     "--set", f"parallel.ddp_bucket_size_mb={v}")
    want = f"--set parallel.ddp_bucket_size_mb: found '{v}'; allowed: a number >= 0 and <= 1000000"
    check(f"--set parallel.ddp_bucket_size_mb={v}: exit 2 naming the allowed range",
          rc == 2 and want in err, f"rc={rc} stderr={err.strip()[-400:]}")

# ---- data: written in the YAML file, so the message starts at data.data_path's key ----


def write_dataset(name, idx, bin_):
    prefix = os.path.join(work, name)
    for ext, blob in ((".idx", idx), (".bin", bin_)):
        if blob is not None:
            with open(prefix + ext, "wb") as f:
                f.write(blob)
    return prefix


def patched(blob, offset, fmt, value):
    b = bytearray(blob)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


def expect_data_error(name, idx, bin_, needles, extra=()):
    prefix = write_dataset(name, idx, bin_)
    t = base(prefix)
    needles = [n.replace("PREFIX", prefix) for n in needles]
    expect_error("data-" + name, t, pos(t, "data_path"), ["data.data_path: "] + needles,
                 extra=extra)


SIZES = 34                      # the header: magic 9, version 8, dtype 1, counts 8 + 8
POINTERS = SIZES + 4 * N_SEQS   # int32 sizes, then int64 pointers, then int64 doc_idx
DOC_IDX = POINTERS + 8 * N_SEQS
size0 = struct.unpack_from("<i", IDX, SIZES)[0]

half = len(BIN) // 2
expect_data_error("truncated-bin", IDX, BIN[:half],
                  [f"PREFIX.idx: sequence ", f"past the end of PREFIX.bin ({half} bytes; "
                   "truncated data file?)"])
expect_data_error("truncated-idx", IDX[:20], BIN,
                  ["PREFIX.idx: file is 20 bytes, shorter than the 34-byte MMIDIDX header "
                   "(truncated index?)"])
expect_data_error("wrong-magic", b"XXIDIDX\0\0" + IDX[9:], BIN,
                  ['PREFIX.idx: magic is "XXIDIDX\\x00\\x00", expected "MMIDIDX\\x00\\x00" '
                   "(not a Megatron mmap index)"])
expect_data_error("bin-as-idx", BIN[:len(IDX)], BIN,   # a data file mislabelled as an index
                  ['PREFIX.idx: magic is "', 'expected "MMIDIDX\\x00\\x00" (not a Megatron mmap index)'])
expect_data_error("wrong-version", patched(IDX, 9, "<Q", 2), BIN,
                  ["PREFIX.idx: version is 2, expected 1"])
expect_data_error("dtype-unknown", patched(IDX, 17, "<B", 9), BIN,
                  ["PREFIX.idx: dtype code is 9, expected 1..8 (1 uint8, 2 int8, 3 int16, "
                   "4 int32, 5 int64, 8 uint16)"])
expect_data_error("dtype-zero", patched(IDX, 17, "<B", 0), BIN,
                  ["PREFIX.idx: dtype code is 0, expected 1..8"])
expect_data_error("dtype-float", patched(IDX, 17, "<B", 6), BIN,
                  ["PREFIX.idx: dtype code 6 (float64) is a floating-point type; token ids must "
                   "be integers"])
expect_data_error("dtype-mislabelled", patched(IDX, 17, "<B", 1), BIN,   # uint8 for uint16 data
                  [f"PREFIX.idx: pointers[1] is {2 * size0}, expected {size0} "
                   "(pointers[0] + sizes[0] * 1 bytes)"])
n_bad = N_SEQS + 1
expect_data_error("count-vs-size", patched(IDX, 18, "<Q", n_bad), BIN,
                  [f"PREFIX.idx: file is {len(IDX)} bytes, but sequence count {n_bad} and "
                   f"document count {N_ENTRIES} imply {len(IDX) + 12} bytes"])
expect_data_error("count-overflow", patched(IDX, 18, "<Q", 1 << 62), BIN,
                  [f"PREFIX.idx: sequence count {1 << 62} and document count {N_ENTRIES} "
                   "overflow the index size"])
expect_data_error("pointer", patched(IDX, POINTERS + 8, "<q", 4), BIN,
                  [f"PREFIX.idx: pointers[1] is 4, expected {2 * size0} "
                   "(pointers[0] + sizes[0] * 2 bytes)"])
expect_data_error("pointer-first", patched(IDX, POINTERS, "<q", -8), BIN,
                  ["PREFIX.idx: pointers[0] is -8, expected 0"])
expect_data_error("size-negative", patched(IDX, SIZES + 4, "<i", -3), BIN,
                  ["PREFIX.idx: sizes[1] is -3, expected >= 0"])
expect_data_error("size-past-bin", patched(IDX, SIZES, "<i", 999999), BIN,
                  ["PREFIX.idx: sequence 0 (pointer 0, size 999999 x 2 bytes) ends at byte "
                   f"1999998, past the end of PREFIX.bin ({len(BIN)} bytes"])
expect_data_error("doc-idx-past", patched(IDX, DOC_IDX + 8, "<q", N_SEQS + 5), BIN,
                  [f"PREFIX.idx: doc_idx[1] is {N_SEQS + 5}, past the sequence count {N_SEQS}"])
expect_data_error("doc-idx-decreasing", patched(IDX, DOC_IDX + 16, "<q", 0), BIN,
                  ["PREFIX.idx: doc_idx[2] is 0, less than doc_idx[1] = 1 (must not decrease)"])
expect_data_error("doc-idx-first", patched(IDX, DOC_IDX, "<q", 1), BIN,
                  ["PREFIX.idx: doc_idx[0] is 1, expected 0"])
expect_data_error("doc-idx-last", patched(IDX, DOC_IDX + 8 * N_SEQS, "<q", N_SEQS - 1), BIN,
                  [f"PREFIX.idx: doc_idx[{N_SEQS}] (the last) is {N_SEQS - 1}, expected the "
                   f"sequence count {N_SEQS}"])
expect_data_error("bin-too-long", IDX, BIN + b"\0\0",
                  [f"PREFIX.bin: file is {len(BIN) + 2} bytes, but PREFIX.idx describes "
                   f"{len(BIN)} bytes ({len(BIN) // 2} tokens of uint16)"])
expect_data_error("token-past-vocab", IDX, patched(BIN, 0, "<H", 300),
                  ["PREFIX.bin: token 300 at position 0 (document 0, offset 0) is >= vocab_size "
                   "(vocab_size is 256)"])
expect_data_error("bin-missing", IDX, None,
                  ["PREFIX.bin: missing (the index PREFIX.idx needs its data file)"])
expect_data_error("no-dataset", None, None,
                  ["no dataset at PREFIX: neither PREFIX.idx (Megatron prefix) nor the file "
                   "PREFIX (llm.c shard) exists"])
expect_data_error("wrong-magic-nproc2", b"XXIDIDX\0\0" + IDX[9:], BIN,
                  ['magic is "XXIDIDX\\x00\\x00"', "trident train: rank", "exit status 2"],
                  extra=("--nproc", "2"))

# ---- preprocess: usage is 2; an input that cannot be read is an OS failure, 1 ----
missing = os.path.join(work, "no-such-input.txt")
rc, _, err = run("preprocess", "--input", missing, "--output-prefix", os.path.join(work, "pp"))
check("preprocess of a missing input: exit 1 naming the file",
      rc == 1 and f"cannot open input {missing}: No such file or directory" in err
      and not os.path.exists(os.path.join(work, "pp.idx")), f"rc={rc} stderr={err.strip()}")
rc, _, err = run("preprocess", "--output-prefix", os.path.join(work, "pp"))
check("preprocess without --input: exit 2", rc == 2 and "no input files" in err,
      f"rc={rc} stderr={err.strip()}")
out = os.path.join(work, "no-such-dir", "pp")
rc, _, err = run("preprocess", "--input", os.path.join(work, "corpus.txt"), "--output-prefix", out)
check("preprocess into a missing directory: exit 1 naming the file",
      rc == 1 and f"cannot create {out}.bin.tmp" in err, f"rc={rc} stderr={err.strip()}")

# ---- use_distributed_optimizer with D = 1: a logged no-op, same losses as without it ----
NO_SHARD = ("dp: use_distributed_optimizer with a data-parallel size of 1 has nothing to shard; "
            "the optimizer runs on the whole buffer")


def train_losses(name, text):
    run_dir = os.path.join(work, "run-" + name)
    rc, _, err = run("train", write(name, text), "--run-dir", run_dir, timeout=300)
    return rc, err, tt.losses(run_dir) if rc == 0 else []


rc0, err0, plain = train_losses("zero1-off", BASE)
rc1, err1, zero1 = train_losses("zero1-d1", BASE + "parallel:\n  use_distributed_optimizer: true\n")
check("use_distributed_optimizer with D = 1: exit 0 and logs the no-op",
      rc1 == 0 and NO_SHARD in err1 and len(zero1) == 2, f"rc={rc1} stderr={err1.strip()[-600:]}")
check("use_distributed_optimizer with D = 1: same losses as without it",
      rc0 == 0 and zero1 == plain and NO_SHARD not in err0, f"{plain} vs {zero1}")

tt.finish("all passed")
