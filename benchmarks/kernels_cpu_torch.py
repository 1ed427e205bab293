#!/usr/bin/python3
"""PyTorch peer for benchmarks/kernels_cpu.c: the same ops at GPT-2 124M sizes, best of N.
Usage: /usr/bin/python3 benchmarks/kernels_cpu_torch.py [repeats] [threads]"""
import sys
import time

import torch
import torch.nn.functional as F

repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
torch.set_num_threads(threads)
torch.manual_seed(0)
B, T, C, NH, HS, V = 4, 256, 768, 12, 64, 50304
N = B * T


def best(label, fn, flops=0.0):
    fn()
    t = 1e30
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    extra = f"  {flops / t / 1e9:7.1f} GFLOP/s" if flops else ""
    print(f"{label:<44} {t * 1e3:9.3f} ms{extra}", flush=True)


print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, best of {repeats}")


def gemm(ta, tb, M, Nn, K, what):
    a = torch.randn(K, M) if ta else torch.randn(M, K)
    b = torch.randn(Nn, K) if tb else torch.randn(K, Nn)
    c = torch.empty(M, Nn)
    a2 = a.t() if ta else a
    b2 = b.t() if tb else b
    best(f"gemm {what} {'T' if ta else 'N'}{'T' if tb else 'N'} ({M},{Nn},{K})",
         lambda: torch.mm(a2, b2, out=c), 2.0 * M * Nn * K)


gemm(0, 1, N, 3 * C, C, "qkv fwd")
gemm(0, 0, N, C, 3 * C, "qkv dx")
gemm(1, 0, 3 * C, C, N, "qkv dW")
gemm(0, 1, N, C, C, "attproj fwd")
gemm(0, 1, N, 4 * C, C, "fc fwd")
gemm(0, 1, N, C, 4 * C, "fcproj fwd")
gemm(1, 0, 4 * C, C, N, "fc dW")
gemm(0, 1, N, V, C, "head fwd")
gemm(0, 0, N, C, V, "head dx")
gemm(1, 0, V, C, N, "head dW")

# attention as nanoGPT writes it without flash attention (torch 1.13 has no SDPA)
qkv = torch.randn(B, T, 3 * C, requires_grad=True)
mask = torch.tril(torch.ones(T, T)).view(1, 1, T, T)


def attn():
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, NH, HS).transpose(1, 2)
    k = k.view(B, T, NH, HS).transpose(1, 2)
    v = v.view(B, T, NH, HS).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / HS ** 0.5)
    att = att.masked_fill(mask == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    return (att @ v).transpose(1, 2).contiguous().view(B, T, C)


dy = torch.randn(B, T, C)
att_flops = 2.0 * 2 * B * NH * T * T * HS
best("attention forward (B4 T256 NH12 HS64)", lambda: attn(), att_flops)
best("attention forward + backward", lambda: attn().backward(dy), 3 * att_flops)

x = torch.randn(N, C, requires_grad=True)
ln = torch.nn.LayerNorm(C)
dx = torch.randn(N, C)
best("layernorm forward (1024x768)", lambda: ln(x))
best("layernorm forward + backward", lambda: ln(x).backward(dx))
h = torch.randn(N, 4 * C, requires_grad=True)
dh = torch.randn(N, 4 * C)
best("gelu forward (1024x3072)", lambda: F.gelu(h, approximate="tanh"))
best("gelu forward + backward", lambda: F.gelu(h, approximate="tanh").backward(dh))
best("exact gelu forward (1024x3072)", lambda: F.gelu(h))
best("exact gelu forward + backward", lambda: F.gelu(h).backward(dh))
# GeGLU as transformers' GemmaMLP computes it: act(gate) * up, 1024 x 3072 (gate, up) pairs
g, u = torch.randn(N, 2 * C, requires_grad=True), torch.randn(N, 2 * C, requires_grad=True)
dgu = torch.randn(N, 2 * C)
best("geglu forward (1024x3072 pairs, tanh)", lambda: F.gelu(g, approximate="tanh") * u)
best("geglu forward + backward (tanh)", lambda: (F.gelu(g, approximate="tanh") * u).backward(dgu))
best("geglu forward (exact)", lambda: F.gelu(g) * u)
best("geglu forward + backward (exact)", lambda: (F.gelu(g) * u).backward(dgu))
logits = torch.randn(N, V, requires_grad=True)
targets = torch.randint(0, 50257, (N,))
best("cross-entropy forward (1024x50304)", lambda: F.cross_entropy(logits, targets))
best("cross-entropy forward + backward", lambda: F.cross_entropy(logits, targets).backward())
del logits
p = torch.zeros(124439808, requires_grad=True)
p.grad = torch.randn(124439808)
opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
best("adamw (124M params)", lambda: opt.step())
best("sumsq (124M)", lambda: p.grad.pow(2).sum())
