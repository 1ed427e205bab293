#!/usr/bin/python3
"""`trident preprocess` writes the bytes Megatron-LM's tools/preprocess_data.py writes: the
.bin/.idx of a JSON Lines corpus equal, byte for byte, those of a small Python reference that
follows Megatron's Encoder.encode (sentences = a string or a list of strings; a sentence
without ids adds no sequence; --append-eod adds the EOD to the last sequence of a document
with ids) and its IndexedDatasetBuilder / _IndexWriter (MMIDIDX header, version 1, dtype code,
sequence and document counts, int32 sizes, int64 pointers, int64 document indices starting
at 0), with `tokenizers` as the tokenizer. For GPT2BPETokenizer (GPT-2's files) and
HFTokenizer (a Llama-3-style tokenizer.json with its BOS template; and one with an id past
65500, so int32 tokens), two keys, --workers 1 and 4 (the same bytes). Also: bad lines are
named FILE:LINE and stop the run (exit 2) or are skipped and counted.
usage: test_preprocess_megatron.py TRIDENT WORKDIR VENV"""
import json
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, HERE)
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402
import oracle_env  # noqa: E402
import torture  # noqa: E402
from megatron_ref import megatron_encode, megatron_files  # noqa: E402

trident, work, venv = sys.argv[1], sys.argv[2], sys.argv[3]
oracle_env.enter(venv)
from tokenizers import ByteLevelBPETokenizer, Tokenizer  # noqa: E402

tt.fresh_dir(work)
encoder_json, vocab_bpe = oracle_env.gpt2_files(venv)


def path(name):
    return os.path.join(work, name)


# ---- the corpus: fortunes as documents, plus sentences lists, empty texts, torture text ----
rng = random.Random(18)
records = []
for f in oracle_env.fortune_files()[:5]:
    with open(f, "rb") as fh:
        for doc in fh.read().decode("utf-8", "replace").split("\n%\n"):
            records.append({"text": doc, "title": os.path.basename(f)})
tdir = path("torture")
for p in torture.write_corpus(tdir, seed=5, long_line_bytes=1 << 18):
    with open(p, "rb") as fh:
        text = fh.read().decode("utf-8", "replace")
    records.append({"title": os.path.basename(p), "text": text, "extra": [1, 2]})
base = list(records)
for _ in range(300):
    r = rng.choice(base)
    words = r["text"].split(" ")
    cut = sorted(rng.sample(range(len(words) + 1), 2))
    records.append({"text": [" ".join(words[:cut[0]]), "", " ".join(words[cut[0]:cut[1]]), "\u0000 nul"],
                    "title": ""})
records += [{"text": "", "title": "empty"}, {"text": [], "title": []}, {"text": ["", ""], "title": "x"},
            {"title": "<|endoftext|> <|begin_of_text|>", "text": "a<|endoftext|>b"}]
rng.shuffle(records)
lines = [json.dumps(r, ensure_ascii=rng.random() < 0.5) for r in records]
corpus = tt.write(path("corpus.jsonl"), "\n".join(lines[:len(lines) // 2]) + "\n")
corpus2 = tt.write(path("corpus2.jsonl"), "\n".join(lines[len(lines) // 2:]) + "\n")
print(f"corpus: {len(lines)} JSON lines, {os.path.getsize(corpus) + os.path.getsize(corpus2)} bytes")

# ---- tokenizers ----
gpt2 = ByteLevelBPETokenizer(encoder_json, vocab_bpe)
llama = oracle_env.llama3_style(json.loads(gpt2.to_str()))
os.makedirs(path("llama"))
tt.write(path("llama/tokenizer.json"), json.dumps(llama))
tt.write(path("llama/tokenizer_config.json"), json.dumps({"eos_token": "<|end_of_text|>"}))
big = dict(llama, added_tokens=llama["added_tokens"] + [oracle_env.added_token(70000, "<|big|>")])
tt.write(path("big.json"), json.dumps(big))

cases = [
    ("gpt2", ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", encoder_json, "--merge-file", vocab_bpe],
     lambda s: gpt2.encode(s).ids, 50256, 50257),
    ("llama3-style", ["--tokenizer-type", "HFTokenizer", "--tokenizer-model", path("llama/tokenizer.json")],
     (lambda t: lambda s: t.encode(s).ids)(Tokenizer.from_file(path("llama/tokenizer.json"))), 50258, 50259),
    ("int32", ["--tokenizer-type", "HFTokenizer", "--tokenizer-model", path("big.json")],
     (lambda t: lambda s: t.encode(s).ids)(Tokenizer.from_file(path("big.json"))), 50256, 70001),
]
keys = ["text", "title"]
for name, flags, tokenize, eod, vocab_size in cases:
    docs = megatron_encode(lines, keys, tokenize, eod, append_eod=True)
    outputs = {}
    for workers in (1, 4):
        prefix = path(f"{name}-w{workers}")
        rc, out, err = tt.outputs([trident, "preprocess", "--input", corpus, corpus2, "--json-keys", *keys,
                                   "--append-eod", "--workers", str(workers), "--output-prefix", prefix, *flags],
                                  timeout=300)
        if not check(f"{name}, --workers {workers}: exit 0", rc == 0, err):
            continue
        for key in keys:
            with open(f"{prefix}_{key}_document.bin", "rb") as f:
                b = f.read()
            with open(f"{prefix}_{key}_document.idx", "rb") as f:
                i = f.read()
            outputs[(workers, key)] = (b, i)
    for key in keys:
        ref_bin, ref_idx = megatron_files(docs, key, vocab_size)
        got = outputs.get((1, key))
        ok_bin, ok_idx = got is not None and got[0] == ref_bin, got is not None and got[1] == ref_idx
        check(f"{name} key {key}: .bin byte-identical to Megatron's ({len(ref_bin)} bytes, "
              f"{'uint16' if vocab_size < 65500 else 'int32'})", ok_bin,
              f"sizes {len(got[0]) if got else None} vs {len(ref_bin)}")
        check(f"{name} key {key}: .idx byte-identical to Megatron's ({len(ref_idx)} bytes)", ok_idx,
              f"sizes {len(got[1]) if got else None} vs {len(ref_idx)}; header {got[1][:34].hex() if got else None} "
              f"vs {ref_idx[:34].hex()}")
        check(f"{name} key {key}: --workers 4 writes the same bytes as --workers 1",
              got is not None and outputs.get((4, key)) == got)

# ---- without --append-eod: no EOD anywhere ----
docs = megatron_encode(lines[:len(lines) // 2], ["text"], lambda s: gpt2.encode(s).ids, 50256, append_eod=False)
prefix = path("noeod")
rc, out, err = tt.outputs([trident, "preprocess", "--input", corpus, "--output-prefix", prefix,
                           *cases[0][1]], timeout=300)
got = open(prefix + "_text_document.bin", "rb").read() if rc == 0 else None
check("without --append-eod (and the default key text for .jsonl): Megatron's bytes",
      got == megatron_files(docs, "text", 50257)[0], err)

# ---- bad lines ----
bad = tt.write(path("bad.jsonl"), '{"text": "fine"}\n\n{"text": "cut\n[1, 2]\n{"title": "no text"}\n'
               '{"text": 5}\n{"text": ["a", null]}\n{"text": "\\ud800"}\n{"text": "last"}\n')
rc, out, err = tt.outputs([trident, "preprocess", "--input", bad, "--output-prefix", path("bad"), *cases[0][1]])
check("a malformed line: exit 2 naming FILE:LINE", rc == 2 and f"{bad}:3: not valid JSON" in err, err)
check("... and no output left behind", not any(n.startswith("bad_") for n in os.listdir(work)), os.listdir(work))
rc, out, err = tt.outputs([trident, "preprocess", "--input", bad, "--output-prefix", path("bad"),
                           "--skip-bad-lines", *cases[0][1]])
expected = [f"{bad}:3: not valid JSON", f"{bad}:4: the line is a list", f'{bad}:5: no key "text"',
            f'{bad}:6: "text" is a number', f'{bad}:7: "text"[1] is null', f"{bad}:8: not valid JSON"]
check("--skip-bad-lines: exit 0, each skipped line named, 6 bad and 1 blank counted",
      rc == 0 and all(e in err for e in expected) and "6 bad lines skipped, 1 blank line" in err, err)
idx = open(path("bad_text_document.idx"), "rb").read()
check("... the two good lines are the two documents", struct.unpack_from("<Q", idx, 26)[0] == 3, idx[:34].hex())

tt.finish("preprocess: Megatron's bytes")
