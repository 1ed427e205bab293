"""The peers of benchmarks/tokenizer_speed.sh: tokens/s of tiktoken (encode_ordinary_batch) and
Hugging Face tokenizers (encode_batch) with GPT-2's vocabulary on the texts of a JSON Lines file
(its "text" fields, read before timing), on THREADS threads; best of REPEATS runs. With a
TOKENIZER_JSON (a SentencePiece-style one: tiktoken has no such model), tokenizers alone, on
that file, with its template (encode_batch's default, as trident preprocess encodes). Prints one
JSON object. tokenizers' thread pool size comes from RAYON_NUM_THREADS, set by the caller.
usage: tokenizer_peer.py CORPUS.jsonl ENCODER_JSON VOCAB_BPE THREADS REPEATS [TOKENIZER_JSON]"""
import json
import os
import sys
import time

import tiktoken
import tokenizers
from tokenizers import ByteLevelBPETokenizer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "tokenizer"))
import oracle_env  # noqa: E402

corpus, encoder_json, vocab_bpe, threads, repeats = sys.argv[1:6]
threads, repeats = int(threads), int(repeats)
with open(corpus) as f:
    texts = [json.loads(line)["text"] for line in f]

model = sys.argv[6] if len(sys.argv) > 6 else None
tik = None if model else oracle_env.tiktoken_encoding(encoder_json)
hf = tokenizers.Tokenizer.from_file(model) if model else ByteLevelBPETokenizer(encoder_json, vocab_bpe)


def best(fn):
    times, tokens = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokens = fn()
        times.append(time.perf_counter() - t0)
    return tokens, min(times)


def run_tiktoken():
    if threads == 1:
        return sum(len(tik.encode_ordinary(t)) for t in texts)
    return sum(len(x) for x in tik.encode_ordinary_batch(texts, num_threads=threads))


def run_tokenizers():
    return sum(len(e.ids) for e in hf.encode_batch(texts))


out = {"texts": len(texts), "bytes": sum(len(t.encode()) for t in texts),
       "tiktoken_version": tiktoken.__version__, "tokenizers_version": tokenizers.__version__}
for name, fn in (("tiktoken", run_tiktoken), ("tokenizers", run_tokenizers))[1 if model else 0:]:
    tokens, seconds = best(fn)
    out[name] = {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}
print(json.dumps(out))
