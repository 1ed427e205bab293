"""The torch side of the oracle tests (tests/oracle/): a plain-torch GPT-2 written from the
math, never from trident's code, and the oracle's own rules (the learning-rate schedule, the
weight-decay groups). test_oracle.py runs it in fp32; test_precision_oracle.py passes rounding
hooks that place bf16 / fp16 storage where trident's 16-bit CPU tables do; test_moe_oracle.py
runs mixtral_loss, a Llama with a mixture-of-experts MLP (Megatron-core 0.8's semantics)."""
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


def mixtral_loss(P, idx, targets, m):
    """A Llama layer (RMSNorm, rope on whole heads, grouped queries, untied output, no biases)
    with a mixture of experts for its MLP, from the math: the router's logits h Wr^T, each
    token's top-k experts (k largest logits, their softmax; or pre_softmax: the softmax over
    all experts, its k largest, not renormalised), each expert a SwiGLU MLP (fc rows
    (feature, {gate, up})) on its tokens, their outputs weighted and summed; per layer
    Megatron's switch load-balancing loss E / (N^2 k) sum_e (sum_n probs[n, e]) tokens[e] and
    the z-loss mean_n logsumexp(logits_n)^2. m: the sizes and switches (dict). Returns (the
    mean cross-entropy, sum over layers of aux_coeff lb + z_coeff z, sum over layers of lb)."""
    import torch
    import torch.nn.functional as F
    L, C, NH, NG, T, V = m["L"], m["C"], m["NH"], m["NG"], m["T"], m["V"]
    E, K, eps, pre = m["E"], m["K"], m["eps"], m["pre_softmax"]
    B, HS, R = idx.shape[0], C // NH, NH // NG
    N = B * T
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    inv = 1.0 / (m["rope_base"] ** (torch.arange(0, HS, 2, dtype=torch.float32) / HS))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

    def rope(t):  # (B, H, T, HS), rotate_half's pairs (i, i + HS/2)
        return t * cos + torch.cat([-t[..., HS // 2:], t[..., :HS // 2]], -1) * sin

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    x = P["wte"][idx]
    aux, lb_total = 0.0, 0.0
    for l in range(L):
        p = lambda n: P[f"layers.{l}.{n}"]
        qkv = (rms(x, p("ln1.weight")) @ p("qkv.weight").T).view(B, T, NG, R + 2, HS)
        q = rope(qkv[:, :, :, :R].reshape(B, T, NH, HS).transpose(1, 2))
        k = rope(qkv[:, :, :, R].transpose(1, 2)).repeat_interleave(R, dim=1)
        v = qkv[:, :, :, R + 1].transpose(1, 2).repeat_interleave(R, dim=1)
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(HS)).masked_fill(~causal, float("-inf")).softmax(-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, C) @ p("attn_proj.weight").T
        h = rms(x, p("ln2.weight")).reshape(N, C)
        logits = h @ p("router.weight").T
        probs = logits.softmax(-1)
        if pre:
            w, chosen = probs.topk(K, dim=-1)
        else:
            top, chosen = logits.topk(K, dim=-1)
            w = top.softmax(-1)
        out = torch.zeros(N, C)
        for e in range(E):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            fc = h[rows] @ p(f"experts.{e}.fc.weight").T
            act = F.silu(fc[:, 0::2]) * fc[:, 1::2]
            out = out.index_add(0, rows, (act @ p(f"experts.{e}.fc_proj.weight").T) * w[rows, slot, None])
        x = x + out.view(B, T, C)
        counts = torch.bincount(chosen.reshape(-1), minlength=E).to(probs.dtype)
        lb = (probs.sum(0) * counts).sum() * E / (N * N * K)
        z = torch.logsumexp(logits, -1).pow(2).mean()
        aux = aux + m["aux_coeff"] * lb + m["z_coeff"] * z
        lb_total += lb.item()
    logits = rms(x, P["lnf.weight"]) @ P["output_layer"].T
    return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1)), aux, lb_total
