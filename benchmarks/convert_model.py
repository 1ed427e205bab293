#!/usr/bin/python3
"""Writes a GPT-2 folder as transformers' save_pretrained lays it out (config.json,
model.safetensors with GPT2LMHeadModel's names, sorted, F32, __metadata__ format pt) with
random weights, without torch: the input of benchmarks/convert_speed.sh.
usage: convert_model.py DIR N_LAYER N_EMBD N_HEAD N_POSITIONS VOCAB"""
import json
import os
import struct
import sys

import numpy as np

out, L, C, NH, P, V = sys.argv[1], *map(int, sys.argv[2:7])
shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (P, C),
          "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
for i in range(L):
    h = f"transformer.h.{i}."
    shapes.update({h + "ln_1.weight": (C,), h + "ln_1.bias": (C,), h + "attn.c_attn.weight": (C, 3 * C),
                   h + "attn.c_attn.bias": (3 * C,), h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
                   h + "ln_2.weight": (C,), h + "ln_2.bias": (C,), h + "mlp.c_fc.weight": (C, 4 * C),
                   h + "mlp.c_fc.bias": (4 * C,), h + "mlp.c_proj.weight": (4 * C, C), h + "mlp.c_proj.bias": (C,)})
header, at = {"__metadata__": {"format": "pt"}}, 0
for name in sorted(shapes):
    n = int(np.prod(shapes[name])) * 4
    header[name] = {"dtype": "F32", "shape": list(shapes[name]), "data_offsets": [at, at + n]}
    at += n
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for name in sorted(shapes):
        f.write((0.02 * rng.standard_normal(shapes[name], dtype=np.float32)).tobytes())
json.dump({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
           "n_layer": L, "n_embd": C, "n_head": NH, "n_positions": P, "vocab_size": V, "n_inner": None,
           "layer_norm_epsilon": 1e-05, "bos_token_id": V - 1, "eos_token_id": V - 1, "torch_dtype": "float32"},
          open(os.path.join(out, "config.json"), "w"), indent=2)
