#!/usr/bin/python3
"""PyTorch oracle for trident's single-process numerics.

A plain-torch GPT-2 (no trident code) gets trident's initial weights through a file and the
same token batches, then must match:
  - the loss of iteration 1 (relative difference <= 1e-5),
  - the gradient of every parameter tensor after iteration 1 (relative L2 <= 1e-4),
  - the losses of 10 AdamW iterations with clipping and the LR schedule (<= 1e-4).
usage: test_oracle.py TRIDENT_EXE ORACLE_DUMP_EXE WORKDIR
Exit 77 (meson's SKIP) when torch cannot be imported."""
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except Exception as exc:  # pragma: no cover
    print(f"SKIP: PyTorch is not importable with {sys.executable}: {exc}")
    sys.exit(77)

torch.set_num_threads(2)
trident, oracle_dump, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)

# --- a small corpus and config ---------------------------------------------------------
words = ["the", "pipeline", "tensor", "data", "model", "loss", "gradient", "layer", "rank",
         "stage", "batch", "token", "head", "norm", "adam", "trains", "falls", "quickly"]
corpus = tt.make_corpus(trident, work, 7, words, 300, 5, 60, end=".\n\n")
config = tt.write_config(os.path.join(work, "oracle.yaml"),
    model=dict(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32,
               max_position_embeddings=40, vocab_size=250, make_vocab_size_divisible_by=64),
    training=dict(micro_batch_size=2, global_batch_size=6, train_iters=10, lr=3.0e-3,
                  min_lr=3.0e-4, lr_warmup_iters=3, weight_decay=0.1, clip_grad=0.5, seed=42),
    data=dict(data_path=corpus, split="90,10,0"))
ITERS = 10
subprocess.run([oracle_dump, config, work, str(ITERS)], check=True)

man = json.load(open(os.path.join(work, "manifest.json")))
params_flat = torch.from_numpy(__import__("numpy").fromfile(os.path.join(work, "params.bin"), dtype="float32"))
grads_flat = torch.from_numpy(__import__("numpy").fromfile(os.path.join(work, "grads.bin"), dtype="float32"))
tokens = torch.from_numpy(__import__("numpy").fromfile(os.path.join(work, "tokens.bin"), dtype="int32")).long()

L, C, NH, T = man["num_layers"], man["hidden_size"], man["num_heads"], man["seq_length"]
V, Vp, HS = man["vocab_size"], man["padded_vocab_size"], C // man["num_heads"]
mb, M, eps_ln = man["micro_batch_size"], man["micro_batches"], man["layernorm_epsilon"]

# --- the plain-torch model ----------------------------------------------------------------
P = {}
for t in man["tensors"]:
    shape = (t["rows"], t["cols"]) if t["cols"] > 1 else (t["rows"],)
    n = t["rows"] * t["cols"]
    P[t["name"]] = params_flat[t["offset"]:t["offset"] + n].reshape(shape).clone().requires_grad_(True)


def gpt_loss(P, idx, targets):
    B = idx.shape[0]
    pos = torch.arange(T)
    x = P["wte"][idx] + P["wpe"][pos]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = lambda n: P[f"layers.{l}.{n}"]
        h = F.layer_norm(x, (C,), p("ln1.weight"), p("ln1.bias"), eps_ln)
        qkv = h @ p("qkv.weight").T + p("qkv.bias")          # (B, T, NH*3*HS), rows (head, qkv, d)
        qkv = qkv.view(B, T, NH, 3, HS)
        q, k, v = (qkv[:, :, :, i, :].transpose(1, 2) for i in range(3))  # (B, NH, T, HS)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn_proj.weight").T + p("attn_proj.bias")
        h = F.layer_norm(x, (C,), p("ln2.weight"), p("ln2.bias"), eps_ln)
        h = F.gelu(h @ p("fc.weight").T + p("fc.bias"), approximate="tanh")
        x = x + h @ p("fc_proj.weight").T + p("fc_proj.bias")
    x = F.layer_norm(x, (C,), P["lnf.weight"], P["lnf.bias"], eps_ln)
    logits = x @ P["wte"].T
    return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def batches(it):
    """(inputs, targets) of each micro-batch of iteration it (1-based)."""
    per = mb * T
    base = (it - 1) * M * 2 * per
    for m in range(M):
        off = base + m * 2 * per
        yield tokens[off:off + per].view(mb, T), tokens[off + per:off + 2 * per].view(mb, T)


def forward_backward(it):
    for p in P.values():
        p.grad = None
    total = 0.0
    for inp, tgt in batches(it):
        loss = gpt_loss(P, inp, tgt)
        (loss / M).backward()
        total += loss.item()
    return total / M


loss1 = forward_backward(1)
ref1 = man["steps"][0]["loss"]
tt.check("iteration 1 loss", abs(loss1 - ref1) / abs(loss1) <= 1e-5,
         f"torch {loss1:.8f} trident {ref1:.8f} rel {abs(loss1 - ref1) / abs(loss1):.2e}", show=True)
worst = 0.0
for t in man["tensors"]:
    n = t["rows"] * t["cols"]
    g_tr = grads_flat[t["offset"]:t["offset"] + n]
    g_pt = P[t["name"]].grad.reshape(-1)
    rel = (g_tr - g_pt).norm().item() / max(g_pt.norm().item(), 1e-30)
    worst = max(worst, rel)
    if rel > 1e-4:
        tt.check(f"gradient of {t['name']}", False, f"relative L2 {rel:.2e}")
tt.check("gradients of all tensors", worst <= 1e-4,
         f"{len(man['tensors'])} tensors, worst relative L2 {worst:.2e}", show=True)

# --- 10 AdamW iterations, same schedule and clipping ---------------------------------------
decay = [P[t["name"]] for t in man["tensors"] if t["weight_decay"]]
no_decay = [P[t["name"]] for t in man["tensors"] if not t["weight_decay"]]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": man["weight_decay"]},
                         {"params": no_decay, "weight_decay": 0.0}],
                        lr=1.0, betas=(man["beta1"], man["beta2"]), eps=man["eps"])
worst = 0.0
for it in range(1, ITERS + 1):
    step = man["steps"][it - 1]
    loss = loss1 if it == 1 else forward_backward(it)
    norm = torch.nn.utils.clip_grad_norm_(list(P.values()), man["clip_grad"]).item()
    for group in opt.param_groups:
        group["lr"] = step["lr"]
    opt.step()
    rel = abs(loss - step["loss"]) / abs(loss)
    worst = max(worst, rel)
    print(f"     iteration {it:2d}: torch loss {loss:.7f} trident {step['loss']:.7f} rel {rel:.1e}"
          f" | grad norm torch {norm:.6f} trident {step['grad_norm']:.6f}")
tt.check(f"losses over {ITERS} AdamW iterations", worst <= 1e-4,
         f"worst relative difference {worst:.2e}", show=True)
tt.finish()
