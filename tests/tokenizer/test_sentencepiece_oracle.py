#!/usr/bin/python3
"""sentencepiece's own tokenizer.model (Megatron's Llama2Tokenizer and GPTSentencePieceTokenizer)
against the sentencepiece library (PyPI 0.2.0, in a venv of its own): tiny BPE models trained
here (a Llama-2-shaped one: identity normalizer, add_dummy_prefix, spaces kept, byte fallback,
unk 0 / bos 1 / eos 2, user-defined and control symbols; one that removes extra spaces and has
no byte fallback, so unknown characters become one unk a run; one without the dummy prefix),
then for each: the ids of many texts (torture texts, spaces, U+2581, digits, non-ASCII,
invalid UTF-8 as bytes) equal sentencepiece's encode, decoding random ids equals its decode,
Llama2Tokenizer's template is [bos_id] + ids. `trident preprocess` with either type writes the
.bin/.idx Megatron's tools/preprocess_data.py writes with Megatron's classes
(megatron/training/tokenizer/tokenizer.py: _Llama2Tokenizer.tokenize is [bos_id] +
encode(text), _GPTSentencePieceTokenizer.tokenize is encode_as_ids(text), eod = eos_id(),
vocab_size = get_piece_size()). Refused with exit 2 naming the file and the field: a UNIGRAM
model, an nmt_nfkc normalizer, broken protobuf bytes.
usage: test_sentencepiece_oracle.py TOK_ENCODE TRIDENT WORKDIR VENV"""
import io
import json
import os
import random
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, HERE)
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402
import torture  # noqa: E402
from megatron_ref import megatron_encode, megatron_files  # noqa: E402

tok_encode, trident, work, venv = sys.argv[1:5]
if os.environ.get("SPM_ORACLE_VENV") != venv:
    py = tt.venv_python(venv, ["sentencepiece==0.2.0"], "sentencepiece")
    os.environ["SPM_ORACLE_VENV"] = venv
    os.execv(py, [py, os.path.abspath(sys.argv[0]), *sys.argv[1:]])
import sentencepiece as spm  # noqa: E402

tt.fresh_dir(work)
rng = random.Random(48)


def path(name):
    return os.path.join(work, name)


# ---- a small training text: words, digits, runs of spaces, non-ASCII ----
WORDS = ["hello", "world", "the", "cat", "naïve", "café", "日本語", "テキスト", "12345", "3.14159",
         "don't", "Ωmega", "  spaced  out ", "tab\there", "emoji 😀 ok", "x▁y", "<s>", "</s>",
         "<sep>", "a  b   c", "Straße", "ﬁne", "中文字符", "été", "2024-11-30"]
train_text = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) for _ in range(400)]
tt.write(path("corpus.txt"), "\n".join(train_text) + "\n")


def train(name, **kw):
    args = dict(input=path("corpus.txt"), model_prefix=path(name), model_type="bpe",
                vocab_size=420, character_coverage=1.0, byte_fallback=True,
                normalization_rule_name="identity", minloglevel=2, num_threads=1)
    args.update(kw)
    spm.SentencePieceTrainer.train(**args)
    return path(name + ".model")


models = {
    "llama2-shaped": train("llama2", add_dummy_prefix=True, remove_extra_whitespaces=False,
                           user_defined_symbols=["<sep>", "▁x"], control_symbols=["<ctl>"],
                           allow_whitespace_only_pieces=True, split_digits=True,
                           unk_id=0, bos_id=1, eos_id=2),
    "no-fallback": train("nofb", vocab_size=150, byte_fallback=False, character_coverage=0.98,
                         remove_extra_whitespaces=True),
    "no-dummy-prefix": train("nodummy", vocab_size=400, add_dummy_prefix=False,
                             remove_extra_whitespaces=False),
}

# ---- the texts ----
texts = ["", " ", "  ", "hello", " hello", "hello ", "  hello  world  ", "naïve café 日本語",
         "😀😀 ok", "unknownß chars ǅ ǈ ꙮ", "<sep>x<sep>", "x▁y ▁x", "▁", "▁▁ a ▁", "12 345 6789",
         "tab\t\tnew\nline\r\n", "\x00nul", "a" * 60, "hello world " * 30, "<s>hello</s>", "<ctl>",
         " <sep> ", "ﬁ ﬂ ｆｕｌｌ"] + rng.sample(train_text, 60)
for _ in range(150):
    texts.append("".join(rng.choice("ab ▁日😀ßxy<>sep\t0123") for _ in range(rng.randint(0, 30))))
inputs = [t.encode() for t in texts]
for p in torture.write_corpus(path("torture"), seed=11, long_line_bytes=1 << 15):
    with open(p, "rb") as f:
        inputs.append(f.read())  # (some hold invalid UTF-8: sentencepiece takes bytes too)
inputs += [b"a\xffb", b"\xe2\x96", b"\xf0\x9f\x98 x", b"\xc0\xaf", b"\xed\xa0\x80z"]
files = []
for i, b in enumerate(inputs):
    files.append(path(f"text{i}.txt"))
    with open(files[-1], "wb") as f:
        f.write(b)


def run_tool(args):
    p = subprocess.run([tok_encode, *args], capture_output=True, timeout=300)
    return p.returncode, io.BytesIO(p.stdout), p.stderr.decode(errors="replace")


def read_ids(out):
    n, = struct.unpack("<q", out.read(8))
    return list(struct.unpack(f"<{n}i", out.read(4 * n)))


for name, model in models.items():
    sp = spm.SentencePieceProcessor(model_file=model)
    for kind, special in (("GPTSentencePieceTokenizer", []), ("Llama2Tokenizer", ["--special"])):
        rc, out, err = run_tool([kind, "-", "-", model, *special, *files])
        if not check(f"{name}, {kind}: tok_encode exit 0", rc == 0, err):
            continue
        bad = []
        for b in inputs:
            want = sp.encode(b)
            if special:
                want = [sp.bos_id()] + want  # _Llama2Tokenizer.tokenize(s, bos=True)
            got = read_ids(out)
            if got != want:
                bad.append((b[:80], got[:20], want[:20]))
        check(f"{name}, {kind}: the ids of {len(inputs)} texts equal sentencepiece's "
              f"{'[bos_id] + encode' if special else 'encode'}", not bad, bad[:3])
    # decoding: random ids, runs of byte pieces (valid UTF-8 and not), control and unk pieces
    V = sp.get_piece_size()
    byte_ids = [i for i in range(V) if sp.is_byte(i)]
    seqs = [[], [sp.bos_id()], [sp.unk_id()], [sp.piece_to_id("▁")], [sp.bos_id(), sp.piece_to_id("▁")]]
    seqs += [[rng.randrange(V) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    if byte_ids:
        seqs += [[rng.choice(byte_ids + [rng.randrange(V)]) for _ in range(rng.randint(1, 8))]
                 for _ in range(100)]
        seqs += [[sp.piece_to_id("<0x%02X>" % c) for c in s.encode()] for s in ["é", "日本", "😀", "a😀b"]]
    seqs += [sp.encode(b) for b in inputs[:80]]
    id_files = []
    for i, s in enumerate(seqs):
        id_files.append(path(f"ids{i}.bin"))
        with open(id_files[-1], "wb") as f:
            f.write(struct.pack(f"<{len(s)}i", *s))
    rc, out, err = run_tool(["GPTSentencePieceTokenizer", "-", "-", model, "--decode", *id_files])
    bad = []
    for s in seqs:
        n, = struct.unpack("<q", out.read(8)) if rc == 0 else (0,)
        got = out.read(n)
        if got != sp.decode(s).encode():
            bad.append((s, got, sp.decode(s)))
    check(f"{name}: decoding {len(seqs)} id lists equals sentencepiece's decode", rc == 0 and not bad,
          err + repr(bad[:3]))

# ---- preprocess: Megatron's bytes with Megatron's classes' logic ----
records = [{"text": t} for t in texts] + [{"text": [t, "", t[:5]]} for t in texts[:40]]
records += [{"text": b.decode("utf-8", "replace")} for b in inputs[-40:]]
lines = [json.dumps(r, ensure_ascii=rng.random() < 0.5) for r in records]
corpus = tt.write(path("corpus.jsonl"), "\n".join(lines) + "\n")
for name in ("llama2-shaped", "no-fallback"):
    model = models[name]
    sp = spm.SentencePieceProcessor(model_file=model)
    megatron = {"Llama2Tokenizer": lambda s: [sp.bos_id()] + sp.encode(s),
                "GPTSentencePieceTokenizer": lambda s: sp.encode_as_ids(s)}
    for kind, tokenize in megatron.items():
        docs = megatron_encode(lines, ["text"], tokenize, sp.eos_id(), append_eod=True)
        ref_bin, ref_idx = megatron_files(docs, "text", sp.get_piece_size())
        for workers in (1, 3):
            prefix = path(f"{name}-{kind}-w{workers}")
            rc, _, err = tt.outputs([trident, "preprocess", "--input", corpus, "--append-eod",
                                     "--workers", str(workers), "--output-prefix", prefix,
                                     "--tokenizer-type", kind, "--tokenizer-model", model], timeout=300)
            got = [open(f"{prefix}_text_document.{x}", "rb").read() for x in ("bin", "idx")] if rc == 0 else None
            check(f"preprocess {name}, {kind}, --workers {workers}: .bin and .idx byte-identical to "
                  f"Megatron's ({len(ref_bin)} + {len(ref_idx)} bytes)",
                  got == [ref_bin, ref_idx], err)

# ---- refusals: exit 2 naming the file and the field ----
unigram = train("unigram", model_type="unigram", vocab_size=90, byte_fallback=False)
nfkc = train("nfkc", normalization_rule_name="nmt_nfkc")
with open(models["llama2-shaped"], "rb") as f:
    good = f.read()
broken = {"truncated": good[:len(good) // 2], "bad-length": good[:1] + b"\xff\xff\xff\xff\x0f" + good[6:]}
for k, b in broken.items():
    with open(path(f"{k}.model"), "wb") as f:
        f.write(b)
refusals = [(unigram, "trainer_spec.model_type: UNIGRAM"), (nfkc, "normalizer_spec.name: 'nmt_nfkc'"),
            (path("truncated.model"), "past the end of its message"),
            (path("bad-length.model"), "past the end of its message")]
for model, says in refusals:
    for kind in ("Llama2Tokenizer", "GPTSentencePieceTokenizer"):
        rc, _, err = tt.outputs([trident, "preprocess", "--input", corpus, "--output-prefix", path("refused"),
                                 "--tokenizer-type", kind, "--tokenizer-model", model])
        check(f"{os.path.basename(model)}, {kind}: exit 2 naming the file and '{says}'",
              rc == 2 and model in err and says in err, err.strip())
rc, _, err = tt.outputs([trident, "preprocess", "--input", corpus, "--output-prefix", path("refused"),
                         "--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", path("missing.model")])
check("a missing tokenizer.model: exit 1 naming it", rc == 1 and "missing.model" in err, err.strip())
tt.finish("sentencepiece's tokenizer.model: sentencepiece's ids and Megatron's bytes")
