#!/usr/bin/env bash
# `trident generate` beside Hugging Face transformers on the same CPU threads (issue 16): a
# GPT-2 124M-sized model (random weights: a one-iteration checkpoint of configs/gpt2-124m.yaml
# for trident, GPT2LMHeadModel(GPT2Config(...)) for transformers), batch 1, greedy, a prompt
# of PROMPT tokens then NEW tokens with the key/value cache. Prints each side's prompt time
# and tokens/s and the ratio. transformers 4.38.2 goes into a virtual environment in the
# build folder (Debian's torch, --system-site-packages).
#
#   benchmarks/generate_speed.sh [--prompt 64] [--new 128] [--threads 2] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
prompt=64 new=128 threads=2 build=build
while [ $# -gt 0 ]; do
  case $1 in
    --prompt) prompt=$2; shift 2;;
    --new) new=$2; shift 2;;
    --threads) threads=$2; shift 2;;
    --build) build=$2; shift 2;;
    *) echo "usage: $0 [--prompt N] [--new N] [--threads N] [--build DIR]" >&2; exit 2;;
  esac
done
[ -f data/cache/fortunes.idx ] || { echo "generate_speed.sh: run scripts/demo.sh first (data/cache/fortunes)" >&2; exit 2; }
venv=$build/bench-venv
if ! "$venv/bin/python" -c "import transformers" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "transformers==4.38.2" "tokenizers<0.19" safetensors
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
OMP_NUM_THREADS=$threads "$build/trident" train configs/gpt2-124m.yaml --quiet --run-dir "$work/run" \
  --set training.train_iters=1 --set training.micro_batch_size=1 --set training.global_batch_size=1 \
  --set model.seq_length=128 --set training.eval_interval=0 --set checkpoint.save="$work/ckpt" >/dev/null
ids=$(python3 -c "print(','.join(str(i % 256) for i in range($prompt)))")
ours=$(OMP_NUM_THREADS=$threads "$build/trident" generate "$work/ckpt" --prompt-ids "$ids" \
  --max-new-tokens "$new" --temperature 0 --json)
peer=$("$venv/bin/python" benchmarks/generate_peer.py 12 768 12 1024 50257 "$prompt" "$new" "$threads")
python3 - "$ours" "$peer" "$prompt" "$new" "$threads" <<'PY'
import json, subprocess, sys
ours, peer = json.loads(sys.argv[1]), json.loads(sys.argv[2])
cpu = [l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
       if l.startswith("Model name")][0]
print(f"cpu: {cpu}; GPT-2 124M, batch 1, greedy, prompt {sys.argv[3]} tokens, {sys.argv[4]} new, "
      f"{sys.argv[5]} threads (torch {peer['torch']})")
print(f"{'':14}{'prompt ms':>12}{'tokens/s':>12}")
print(f"{'trident':14}{ours['prompt_ms']:12.1f}{ours['tokens_per_s']:12.1f}")
print(f"{'transformers':14}{peer['prompt_ms']:12.1f}{peer['tokens_per_s']:12.1f}")
print(f"ratio trident / transformers: {ours['tokens_per_s'] / peer['tokens_per_s']:.2f}x tokens/s, "
      f"{peer['prompt_ms'] / ours['prompt_ms']:.2f}x prompt speed")
PY
