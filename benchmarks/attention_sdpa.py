#!/usr/bin/python3
"""PyTorch's fused attention (scaled_dot_product_attention, causal, bf16) forward and backward
at the shapes given, on a GPU: the peer for build-gpu/benchmarks/attention_cpu B T NH HS 10
cuda (trident's flash.cu). Best of 10 timed runs after 2 warm-ups, CUDA events.
usage: attention_sdpa.py B,T,NH,HS [B,T,NH,HS ...]   (the python3 that holds torch)"""
import sys, torch
import torch.nn.functional as F
shapes = [tuple(map(int, s.split(","))) for s in sys.argv[1:]]
for B, T, NH, HS in shapes:
    torch.manual_seed(0)
    mk = lambda: torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    q, k, v = mk(), mk(), mk()
    do = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
    best_f = best_b = 1e9
    for i in range(12):
        s, m, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        s.record(); o = F.scaled_dot_product_attention(q, k, v, is_causal=True); m.record()
        o.backward(do); e.record(); torch.cuda.synchronize()
        if i >= 2:
            best_f = min(best_f, s.elapsed_time(m)); best_b = min(best_b, m.elapsed_time(e))
        q.grad = k.grad = v.grad = None
    fl = 2.0 * 2 * B * NH * T * T * HS / 2
    print(f"torch sdpa bf16 B{B} T{T} NH{NH} HS{HS}: forward {best_f:.3f} ms ({fl / best_f / 1e9:.1f} TFLOP/s), "
          f"backward {best_b:.3f} ms ({2.5 * fl / best_b / 1e9:.1f} TFLOP/s)")
