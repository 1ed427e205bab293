#!/usr/bin/env bash
# Tokenizer speed (issue 18): `trident preprocess --tokenizer-type GPT2BPETokenizer` beside
# tiktoken (encode_ordinary_batch) and Hugging Face tokenizers (encode_batch) with GPT-2's
# vocabulary on the same corpus (the fortunes, one JSON line per fortune, repeated REPEAT
# times) and the same number of threads (1, then 2). trident's time is the whole command
# (reading and parsing JSON, tokenizing, writing .bin/.idx); the peers' is encoding alone, the
# texts already in memory. Best of 3. Prints tokens/s and the ratios. The peers and GPT-2's
# files come into the build folder's tokenizer venv (tests/tokenizer/oracle_env.py).
#
#   benchmarks/tokenizer_speed.sh [--build DIR] [--repeat 4]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build repeat=4
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2;;
    --repeat) repeat=$2; shift 2;;
    *) echo "usage: $0 [--build DIR] [--repeat N]" >&2; exit 2;;
  esac
done
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
for threads in 1 2; do
  best=
  for _ in 1 2 3; do
    s=$(date +%s.%N)
    "$build/trident" preprocess --input "$work/corpus.jsonl" --output-prefix "$work/out" \
      --tokenizer-type GPT2BPETokenizer --vocab-file "$enc" --merge-file "$bpe" --workers "$threads" \
      --append-eod --log-interval 0 > "$work/pp.txt"
    e=$(date +%s.%N)
    t=$(python3 -c "print($e - $s)")
    best=$(python3 -c "print(min(float('$t'), float('${best:-1e9}')))")
  done
  tokens=$(sed -E 's/.* documents, ([0-9]+) tokens.*/\1/' "$work/pp.txt")
  peer=$(RAYON_NUM_THREADS=$threads "$py" benchmarks/tokenizer_peer.py "$work/corpus.jsonl" "$enc" "$bpe" "$threads" 3)
  python3 - "$threads" "$tokens" "$best" "$peer" <<'PY'
import json, subprocess, sys
threads, tokens, seconds, peer = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4])
cpu = [l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
       if l.startswith("Model name")][0]
docs = peer["texts"]
ours = (tokens - docs) / seconds  # without the EOD ids the peers do not make
print(f"cpu: {cpu}; {threads} thread(s); {docs} texts, {peer['bytes'] / 1e6:.1f} MB, GPT-2 vocabulary "
      f"(tiktoken {peer['tiktoken_version']}, tokenizers {peer['tokenizers_version']})")
print(f"  trident preprocess  {ours / 1e6:7.2f} M tokens/s  ({tokens - docs} tokens, {seconds:.2f} s, whole command)")
for name in ("tiktoken", "tokenizers"):
    p = peer[name]
    same = "same tokens" if p["tokens"] == tokens - docs else f"{p['tokens']} tokens (differs!)"
    print(f"  {name:18}  {p['tokens_per_s'] / 1e6:7.2f} M tokens/s  ({same}, {p['seconds']:.2f} s)   "
          f"ratio trident / {name}: {ours / p['tokens_per_s']:.2f}x")
PY
done
