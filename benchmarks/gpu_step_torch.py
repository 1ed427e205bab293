#!/usr/bin/python3
"""PyTorch peer of benchmarks/gpu_step: the same GPT-2 (tied head, learned positions, pre-LN,
tanh GELU, vocabulary padded to a multiple of 128) and the same step (forward, backward,
global-norm clipping, fused AdamW) on the same GPU, bf16 autocast over fp32 master weights
(or fp32 with --precision fp32), eager or torch.compile, flash attention through
scaled_dot_product_attention.
usage: gpu_step_torch.py --micro-batch B [--mode eager|compile] [--precision bf16|fp32]
                         [--iters N] [--warmup W] [--seq T] [--peak-tflops P] [--json]
                         [--profile]
--profile: one more step under torch.profiler; the GPU kernels that took the most time
(self device time, per step) go into the output ("ops"), beside trident's per-op split.
Exit 77 when PyTorch has no CUDA device."""
import argparse
import contextlib
import json
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"SKIP: PyTorch is not importable: {e}")
    sys.exit(77)

ap = argparse.ArgumentParser()
ap.add_argument("--micro-batch", type=int, required=True)
ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
ap.add_argument("--iters", type=int, default=10)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--seq", type=int, default=1024)
ap.add_argument("--layers", type=int, default=12)
ap.add_argument("--hidden", type=int, default=768)
ap.add_argument("--heads", type=int, default=12)
ap.add_argument("--vocab", type=int, default=50257)
ap.add_argument("--peak-tflops", type=float, default=0)
ap.add_argument("--json", action="store_true")
ap.add_argument("--profile", action="store_true")
ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script only")
a = ap.parse_args()
cuda = a.device == "cuda"
if cuda and not torch.cuda.is_available():
    print("SKIP: torch.cuda.is_available() is False")
    sys.exit(77)
dev = torch.device(a.device)
B, T, L, C, NH, V = a.micro_batch, a.seq, a.layers, a.hidden, a.heads, a.vocab
Vp = (V + 127) // 128 * 128
HS = C // NH
torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as in trident's cuda-fp32
torch.backends.cudnn.allow_tf32 = False


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(C)
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.attn_proj = torch.nn.Linear(C, C)
        self.ln2 = torch.nn.LayerNorm(C)
        self.fc = torch.nn.Linear(C, 4 * C)
        self.fc_proj = torch.nn.Linear(4 * C, C)

    def forward(self, x):
        qkv = self.qkv(self.ln1(x)).view(B, T, NH, 3, HS)
        q, k, v = (qkv[:, :, :, i, :].transpose(1, 2) for i in range(3))
        if hasattr(F, "scaled_dot_product_attention"):  # flash attention (PyTorch >= 2.0)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
            s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), 1),
                              float("-inf"))
            y = s.softmax(-1) @ v
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(Vp, C)
        self.wpe = torch.nn.Embedding(T, C)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(L))
        self.lnf = torch.nn.LayerNorm(C)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02
                torch.nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                torch.nn.init.zeros_(p)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe.weight[:T]
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits[..., :V].reshape(-1, V).float(), tgt.reshape(-1))


torch.manual_seed(0)
model = GPT().to(dev)
n_params = sum(p.numel() for p in model.parameters())
adam = dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
try:  # fused AdamW (PyTorch >= 2.0 on CUDA)
    opt = torch.optim.AdamW(model.parameters(), fused=cuda, **adam)
except TypeError:
    opt = torch.optim.AdamW(model.parameters(), **adam)
fwd = torch.compile(model) if a.mode == "compile" else model
idx = torch.randint(0, V, (B, T), device=dev)
tgt = torch.randint(0, V, (B, T), device=dev)
dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32


def step():
    with torch.autocast(a.device, dtype=dtype) if a.precision == "bf16" else contextlib.nullcontext():
        loss = fwd(idx, tgt)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


ms = []
sync = torch.cuda.synchronize if cuda else (lambda: None)
for it in range(a.warmup + a.iters):
    sync()
    t0 = time.perf_counter()
    loss = step()
    sync()
    if it >= a.warmup:
        ms.append((time.perf_counter() - t0) * 1e3)
med = statistics.median(ms)
ops = None
if a.profile and cuda:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        sync()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0)
        if us > 0 and e.key and not e.key.startswith("ProfilerStep"):
            rows.append((us / 1e3, e.count, e.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows) or 1.0
    ops = [{"op": k[:120], "ms_per_iter": round(t, 3), "calls_per_iter": c,
            "share": round(t / total, 4)} for t, c, k in rows[:20]]
tok_s = B * T / (med / 1e3)
tflops = (6 * n_params + 12 * L * C * T) * tok_s / 1e12
name = torch.cuda.get_device_name() if cuda else "cpu"
peak = a.peak_tflops * 1e12 if a.peak_tflops else (
    756e12 if "H100" in name and "PCIe" in name else
    989.4e12 if any(s in name for s in ("H100", "H200")) else 312e12 if "A100" in name else 0)
out = {"impl": f"pytorch-{a.mode}", "precision": a.precision, "gpu": name, "micro_batch": B,
       "seq": T, "params": n_params, "ms_per_iter": round(med, 3), "tokens_per_s": round(tok_s, 1),
       "tflops": round(tflops, 2), "mfu": round(tflops * 1e12 / peak, 4) if peak else None,
       "peak_tflops": peak / 1e12, "loss": round(loss.item(), 4),
       "memory_gib": round(torch.cuda.max_memory_allocated() / 2**30 if cuda else 0, 2),
       "torch": torch.__version__}
if ops is not None:
    out["profiled_ms_per_iter"] = round(sum(o["ms_per_iter"] for o in ops), 3)
    out["ops"] = ops
print(json.dumps(out) if a.json else
      f"PyTorch {a.mode} {a.precision} on {name}: {med:.2f} ms/iter, {tok_s:.0f} tokens/s, "
      f"{tflops:.1f} TFLOP/s, MFU {100 * out['mfu'] if peak else float('nan'):.1f}%")
