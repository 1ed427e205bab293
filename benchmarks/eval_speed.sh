#!/usr/bin/env bash
# `trident eval --input` beside Hugging Face transformers on the same CPU threads: a GPT-2
# 124M-sized model (random weights: a one-iteration checkpoint of configs/gpt2-124m.yaml, and
# its `trident convert --to hf` export for transformers, so both score with the same weights),
# the perplexity of BYTES bytes of the demo corpus's fortunes (one id a byte) in windows of CONTEXT tokens
# STRIDE apart (Hugging Face's recipe; benchmarks/eval_peer.py is transformers' side). Prints
# each side's tokens scored per second, the ratio, and both nll per token (the same weights:
# they agree to rounding). transformers 4.38.2 goes into a virtual environment in the build
# folder (Debian's torch, --system-site-packages).
#
#   benchmarks/eval_speed.sh [--bytes 4096] [--context 1024] [--stride 512] [--threads 2] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
bytes=4096 context=1024 stride=512 threads=2 build=build
while [ $# -gt 0 ]; do
  case $1 in
    --bytes) bytes=$2; shift 2;;
    --context) context=$2; shift 2;;
    --stride) stride=$2; shift 2;;
    --threads) threads=$2; shift 2;;
    --build) build=$2; shift 2;;
    *) echo "usage: $0 [--bytes N] [--context N] [--stride N] [--threads N] [--build DIR]" >&2; exit 2;;
  esac
done
ls /usr/share/games/fortunes/computers >/dev/null || { echo "eval_speed.sh: run scripts/setup.sh first (fortunes)" >&2; exit 2; }
venv=$build/bench-venv
if ! "$venv/bin/python" -c "import transformers" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "transformers==4.38.2" "tokenizers<0.19" safetensors
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cat /usr/share/games/fortunes/computers /usr/share/games/fortunes/literature > "$work/all.txt"
head -c "$bytes" "$work/all.txt" > "$work/text.txt"
"$build/trident" preprocess --input "$work/text.txt" --output-prefix "$work/text" >/dev/null
OMP_NUM_THREADS=$threads "$build/trident" train configs/gpt2-124m.yaml --quiet --run-dir "$work/run" \
  --set data.data_path="$work/text" --set data.split=1,0,0 --set training.train_iters=1 --set training.micro_batch_size=1 --set training.global_batch_size=1 \
  --set model.seq_length=128 --set training.eval_interval=0 --set checkpoint.save="$work/ckpt" >/dev/null
"$build/trident" convert --to hf --input "$work/ckpt" --output "$work/hf" >/dev/null
t0=$(date +%s.%N)
ours=$(OMP_NUM_THREADS=$threads "$build/trident" eval "$work/ckpt" --input "$work/text.txt" \
  --context "$context" --stride "$stride" --json 2>"$work/ours.err")
t1=$(date +%s.%N)
peer=$("$venv/bin/python" benchmarks/eval_peer.py "$work/hf" "$work/text.txt" "$context" "$stride" "$threads")
python3 - "$ours" "$peer" "$(grep -o 'evaluated in [0-9.]* s' "$work/ours.err" | grep -o '[0-9.]*')" \
  "$bytes" "$context" "$stride" "$threads" <<'PY'
import json, subprocess, sys
ours, peer, ours_s = json.loads(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3])
b, c, s, t = sys.argv[4:8]
cpu = [l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
       if l.startswith("Model name")][0]
p = ours["perplexity"]
print(f"cpu: {cpu}; GPT-2 124M, {b} bytes, context {c}, stride {s}, {t} threads (torch {peer['torch']})")
print(f"{'':14}{'tokens':>8}{'seconds':>10}{'tokens/s':>10}{'nll/token':>12}")
print(f"{'trident':14}{p['tokens']:8d}{ours_s:10.2f}{p['tokens'] / ours_s:10.1f}{p['nll_mean']:12.6f}")
print(f"{'transformers':14}{peer['tokens']:8d}{peer['seconds']:10.2f}{peer['tokens'] / peer['seconds']:10.1f}"
      f"{peer['nll_mean']:12.6f}")
print(f"ratio trident / transformers: {peer['seconds'] / ours_s:.2f}x tokens/s; nll relative difference "
      f"{abs(p['nll_mean'] - peer['nll_mean']) / peer['nll_mean']:.1e}")
PY
