#!/usr/bin/python3
"""Hugging Face peer for benchmarks/eval_speed.sh: the perplexity of a file's bytes (one id a
byte) under the transformers model of HF_DIR, in Hugging Face's strided-window recipe (each
window a fresh forward of up to CONTEXT ids, STRIDE apart, scoring the ids past the previous
window; the exact token-weighted mean). Prints one JSON line: tokens, nll_mean, seconds.
usage: eval_peer.py HF_DIR FILE CONTEXT STRIDE THREADS"""
import json
import sys
import time

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

folder, path, context, stride, threads = sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:6])
torch.set_num_threads(threads)
model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
ids = torch.tensor(list(open(path, "rb").read()), dtype=torch.long)
n = len(ids)
with torch.inference_mode():
    t0 = time.perf_counter()
    nll, tokens, prev_end = 0.0, 0, 0
    for begin in range(0, n, stride):
        end = min(begin + context, n)
        first = max(begin + 1, prev_end)
        if first < end:
            logits = model(ids[begin:end - 1].unsqueeze(0)).logits[0].double()
            logp = F.log_softmax(logits, -1)
            targets = ids[first:end]
            nll -= logp[first - begin - 1:end - begin - 1].gather(1, targets.unsqueeze(1)).sum().item()
            tokens += end - first
        prev_end = end
        if end == n:
            break
    seconds = time.perf_counter() - t0
print(json.dumps({"tokens": tokens, "nll_mean": nll / tokens, "seconds": seconds,
                  "torch": torch.__version__}))
