#!/usr/bin/python3
"""Hugging Face peer for benchmarks/generate_speed.sh: GPT2LMHeadModel of the given sizes with
random weights (nothing downloaded), greedy decoding with its key/value cache, batch 1: the
prompt in one forward, then one token per forward (what `generate` does, without its logits
processors). Prints one JSON line: prompt_ms, tokens_per_s.
usage: generate_peer.py LAYERS HIDDEN HEADS POSITIONS VOCAB PROMPT_LEN NEW_TOKENS THREADS"""
import json
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

L, C, NH, P, V, prompt_len, new, threads = (int(a) for a in sys.argv[1:9])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=L, n_embd=C, n_head=NH, n_positions=P, vocab_size=V,
                                   activation_function="gelu_new")).eval()
ids = torch.arange(prompt_len).remainder(256).unsqueeze(0)
with torch.inference_mode():
    for repeat in range(2):  # the first warms up
        t0 = time.perf_counter()
        out = model(input_ids=ids, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        t1 = time.perf_counter()
        for _ in range(new - 1):
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        t2 = time.perf_counter()
print(json.dumps({"prompt_ms": (t1 - t0) * 1e3, "tokens_per_s": (new - 1) / (t2 - t1),
                  "torch": torch.__version__, "threads": torch.get_num_threads()}))
