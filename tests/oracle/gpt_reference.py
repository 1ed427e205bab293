"""The torch side of the oracle tests (tests/oracle/): a plain-torch GPT-2 written from the
math, never from trident's code, and the oracle's own rules (the learning-rate schedule, the
weight-decay groups). test_oracle.py runs it in fp32; test_precision_oracle.py passes rounding
hooks that place bf16 / fp16 storage where trident's 16-bit CPU tables do."""
import math
import os
import sys


def import_torch():
    """(numpy, torch, torch.nn.functional); without torch: SKIP (exit 77), or FAIL (exit 1)
    when TRIDENT_REQUIRE_ORACLE is set (scripts/test.sh sets it: scripts/setup.sh installs
    python3-torch)."""
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
    except Exception as exc:  # pragma: no cover
        why = f"no oracle: PyTorch is not importable with {sys.executable}: {exc}"
        if os.environ.get("TRIDENT_REQUIRE_ORACLE"):
            print(f"FAIL: {why} (TRIDENT_REQUIRE_ORACLE is set; scripts/setup.sh installs python3-torch)")
            sys.exit(1)
        print(f"SKIP: {why}")
        sys.exit(77)
    torch.set_num_threads(2)
    return np, torch, F


def tensor(flat, t):
    """Tensor t of a manifest ({offset, rows, cols}) as a view of the flat buffer."""
    shape = (t["rows"], t["cols"]) if t["cols"] > 1 else (t["rows"],)
    return flat[t["offset"]:t["offset"] + t["rows"] * t["cols"]].reshape(shape)


def lr_at(it, train):
    """Megatron's schedule: linear warm-up to lr over lr_warmup_iters, then cosine decay to
    min_lr at lr_decay_iters (default train_iters)."""
    lr, lo, warm = train["lr"], train["min_lr"], train["lr_warmup_iters"]
    decay = train.get("lr_decay_iters", train["train_iters"])
    if it <= warm:
        return lr * it / warm
    ratio = (it - warm) / (decay - warm)
    return lo + 0.5 * (1 + math.cos(math.pi * ratio)) * (lr - lo)


def is_layernorm(name):
    return name.split(".")[-2] in ("ln1", "ln2", "lnf") if "." in name else False


def decays(name):
    """Weight decay on weight matrices and embeddings; not on biases or LayerNorm parameters."""
    return not name.endswith(".bias") and not is_layernorm(name)


def gpt_loss(P, idx, targets, L, C, NH, T, V, eps, q=None, w=None):
    """Mean cross-entropy of GPT-2 with parameters P (trident's tensor names) on idx (B, T).
    q: applied to each output trident keeps (an activation, its gradient on the way back);
    w: to each parameter an op reads. None: fp32 throughout. The rounding points are
    trident's with TP 1 (model/gpt_forward.c over tp/linear.c): a GEMM, then its bias; the
    row-parallel GEMM accumulates onto the residual (beta 1), then the bias."""
    import torch
    import torch.nn.functional as F
    q = q or (lambda x: x)
    w = w or (lambda x: x)
    B, HS = idx.shape[0], C // NH
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = q(q(w(P["wte"])[idx]) + w(P["wpe"])[torch.arange(T)])        # embedding, position
    for l in range(L):
        p = lambda n: P[f"layers.{l}.{n}"]
        h = q(F.layer_norm(x, (C,), w(p("ln1.weight")), w(p("ln1.bias")), eps))
        qkv = q(q(h @ w(p("qkv.weight")).T) + w(p("qkv.bias")))          # (B, T, NH*3*HS), rows (head, qkv, d)
        qkv = qkv.view(B, T, NH, 3, HS)
        qq, kk, vv = (qkv[:, :, :, i, :].transpose(1, 2) for i in range(3))  # (B, NH, T, HS)
        att = ((qq @ kk.transpose(-2, -1)) / math.sqrt(HS)).masked_fill(~causal, float("-inf")).softmax(-1)
        y = q((att @ vv).transpose(1, 2).reshape(B, T, C))
        x = q(q(x + y @ w(p("attn_proj.weight")).T) + w(p("attn_proj.bias")))
        h = q(F.layer_norm(x, (C,), w(p("ln2.weight")), w(p("ln2.bias")), eps))
        h = q(F.gelu(q(q(h @ w(p("fc.weight")).T) + w(p("fc.bias"))), approximate="tanh"))
        x = q(q(x + h @ w(p("fc_proj.weight")).T) + w(p("fc_proj.bias")))
    x = q(F.layer_norm(x, (C,), w(P["lnf.weight"]), w(P["lnf.bias"]), eps))
    logits = q(x @ w(P["wte"]).T)
    return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
