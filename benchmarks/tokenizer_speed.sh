#!/usr/bin/env bash
# Tokenizer speed (issue 18): `trident preprocess --tokenizer-type GPT2BPETokenizer` beside
# tiktoken (encode_ordinary_batch) and Hugging Face tokenizers (encode_batch) with GPT-2's
# vocabulary on the same corpus (the fortunes, one JSON line per fortune, repeated REPEAT
# times) and the same number of threads (1, then 2). trident's time is the whole command
# (reading and parsing JSON, tokenizing, writing .bin/.idx); the peers' is encoding alone, the
# texts already in memory. Best of 3. Prints tokens/s and the ratios. The peers and GPT-2's
# files come into the build folder's tokenizer venv (tests/tokenizer/oracle_env.py).
# --tokenizer llama2: instead a SentencePiece-style BPE in Llama-2's shape (characters, byte
# fallback, <s> template), trained here by tokenizers on the same corpus (vocabulary 32000, as
# Llama-2's), trident's HFTokenizer beside tokenizers alone (tiktoken has no such model).
# --tokenizer qwen2: a byte-level BPE in Qwen2's shape (NFC normalizer, Qwen2's split regex,
# ByteLevel, <|endoftext|> <|im_start|> <|im_end|> added; oracle_env.train_qwen2_style) of
# 50000 ids trained here on the same corpus, beside tokenizers alone.
#
#   benchmarks/tokenizer_speed.sh [--build DIR] [--repeat 4] [--tokenizer gpt2|llama2|qwen2]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build repeat=4 kind=gpt2
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2;;
    --repeat) repeat=$2; shift 2;;
    --tokenizer) kind=$2; shift 2;;
    *) echo "usage: $0 [--build DIR] [--repeat N] [--tokenizer gpt2|llama2|qwen2]" >&2; exit 2;;
  esac
done
case $kind in gpt2|llama2|qwen2) ;; *) echo "--tokenizer: gpt2, llama2 or qwen2" >&2; exit 2;; esac
venv=$(realpath "$build")/tests/tokenizer/tokenizer-venv
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# the venv and GPT-2's files, as the tests make them
/usr/bin/python3 - "$venv" "$work" <<'PY'
import os, sys
sys.path.insert(0, "tests/tokenizer")
import oracle_env
if os.environ.get("TOKENIZER_ORACLE_VENV") != sys.argv[1]:
    oracle_env.tt.venv_python(sys.argv[1], oracle_env.PACKAGES, "tokenizers, tiktoken")
PY
py=$venv/bin/python
files=$("$py" -c "import sys; sys.path.insert(0, 'tests/tokenizer'); import oracle_env; print(*oracle_env.gpt2_files('$venv'))")
enc=${files% *} bpe=${files#* }
python3 - "$work/corpus.jsonl" "$repeat" <<'PY'
import json, sys
sys.path.insert(0, "tests/tokenizer")
import oracle_env
docs = []
for f in oracle_env.fortune_files():
    docs += [d for d in open(f, "rb").read().decode("utf-8", "replace").split("\n%\n") if d.strip()]
with open(sys.argv[1], "w") as out:
    for _ in range(int(sys.argv[2])):
        for d in docs:
            out.write(json.dumps({"text": d}) + "\n")
PY
tokflags=(--tokenizer-type GPT2BPETokenizer --vocab-file "$enc" --merge-file "$bpe")
model=
if [ "$kind" = llama2 ]; then
  model=$work/llama2.json
  "$py" - "$work/corpus.jsonl" "$model" <<'PY'
import json, sys
sys.path.insert(0, "tests/tokenizer")
import oracle_env
from tokenizers import Tokenizer, models, normalizers, trainers
texts = [json.loads(line)["text"] for line in open(sys.argv[1])]
t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
t.normalizer = normalizers.Sequence([normalizers.Prepend(oracle_env.SP), normalizers.Replace(" ", oracle_env.SP)])
t.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=32000 - 259, special_tokens=["<unk>", "<s>", "</s>"],
                                                 limit_alphabet=200, show_progress=False))
with open(sys.argv[2], "w") as f:
    json.dump(oracle_env.llama2_style(json.loads(t.to_str())), f)
PY
  tokflags=(--tokenizer-type HFTokenizer --tokenizer-model "$model")
elif [ "$kind" = qwen2 ]; then
  model=$work/qwen2.json
  "$py" - "$work/corpus.jsonl" "$model" <<'PY'
import json, sys
sys.path.insert(0, "tests/tokenizer")
import oracle_env
texts = [json.loads(line)["text"] for line in open(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    json.dump(oracle_env.train_qwen2_style(texts, 50000), f)
PY
  tokflags=(--tokenizer-type HFTokenizer --tokenizer-model "$model")
fi
for threads in 1 2; do
  best=
  for _ in 1 2 3; do
    s=$(date +%s.%N)
    "$build/trident" preprocess --input "$work/corpus.jsonl" --output-prefix "$work/out" \
      "${tokflags[@]}" --workers "$threads" \
      --append-eod --log-interval 0 > "$work/pp.txt"
    e=$(date +%s.%N)
    t=$(python3 -c "print($e - $s)")
    best=$(python3 -c "print(min(float('$t'), float('${best:-1e9}')))")
  done
  tokens=$(sed -E 's/.* documents, ([0-9]+) tokens.*/\1/' "$work/pp.txt")
  peer=$(RAYON_NUM_THREADS=$threads "$py" benchmarks/tokenizer_peer.py "$work/corpus.jsonl" "$enc" "$bpe" "$threads" 3 $model)
  python3 - "$threads" "$tokens" "$best" "$peer" "$kind" <<'PY'
import json, subprocess, sys
threads, tokens, seconds, peer = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4])
vocab = {"gpt2": "GPT-2 vocabulary", "llama2": "Llama-2-style SentencePiece BPE, 32000 ids",
         "qwen2": "Qwen2-style byte-level BPE with NFC, 50000 ids"}[sys.argv[5]]
cpu = [l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
       if l.startswith("Model name")][0]
docs = peer["texts"]
ours = (tokens - docs) / seconds  # without the EOD ids the peers do not make
print(f"cpu: {cpu}; {threads} thread(s); {docs} texts, {peer['bytes'] / 1e6:.1f} MB, {vocab} "
      f"(tiktoken {peer['tiktoken_version']}, tokenizers {peer['tokenizers_version']})")
print(f"  trident preprocess  {ours / 1e6:7.2f} M tokens/s  ({tokens - docs} tokens, {seconds:.2f} s, whole command)")
for name in ("tiktoken", "tokenizers"):
    if name not in peer:
        continue
    p = peer[name]
    same = "same tokens" if p["tokens"] == tokens - docs else f"{p['tokens']} tokens (differs!)"
    print(f"  {name:18}  {p['tokens_per_s'] / 1e6:7.2f} M tokens/s  ({same}, {p['seconds']:.2f} s)   "
          f"ratio trident / {name}: {ours / p['tokens_per_s']:.2f}x")
PY
done
