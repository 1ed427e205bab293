#!/usr/bin/python3
"""Single-process training step, trident vs PyTorch CPU, side by side in one run.

For each shape, times forward + backward + AdamW of the same GPT-2 model (fp32, same
shapes, 2 threads) in trident (`trident train`, median ms/iter from metrics.jsonl, first
iteration dropped) and in plain PyTorch (median of timed steps after one warm-up), and prints
the ratio trident / PyTorch (target <= 0.8).
The two are timed in alternation for --rounds R rounds, so a change in the machine's load
hits both; the table gives the median of each side over all rounds and the per-round ratios.
usage: benchmarks/gpt_step.py [--iters N] [--rounds R] [--quick]
Needs a built ./build/trident and data/cache/fortunes (scripts/demo.sh makes both)."""
import json
import math
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRIDENT = os.path.join(ROOT, "build", "trident")
iters = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 5
rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 3
shapes = [
    # name, layers, hidden, heads, seq, micro-batch, vocab
    ("gpt2-124m 4x256", 12, 768, 12, 256, 4, 50257),
    ("6L-384h 8x256", 6, 384, 6, 256, 8, 50257),
]
if "--quick" in sys.argv:
    shapes = shapes[1:]
torch.set_num_threads(2)


def trident_ms(name, L, C, NH, T, B, V):
    run_dir = os.path.join(ROOT, "runs", "bench-" + name.split()[0])
    sets = {"model.num_layers": L, "model.hidden_size": C, "model.num_attention_heads": NH,
            "model.seq_length": T, "model.max_position_embeddings": T, "model.vocab_size": V,
            "training.micro_batch_size": B, "training.global_batch_size": B,
            "training.train_iters": iters + 1, "training.eval_interval": 0}
    args = [TRIDENT, "train", os.path.join(ROOT, "configs", "gpt2-124m.yaml"), "--run-dir", run_dir, "--quiet"]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2")
    subprocess.run(args, check=True, cwd=ROOT, env=env)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        ms = [json.loads(line)["ms_per_iter"] for line in f][1:]
    return statistics.median(ms)


def torch_ms(L, C, NH, T, B, V):
    Vp = (V + 127) // 128 * 128
    HS = C // NH
    g = torch.Generator().manual_seed(0)
    P = {"wte": torch.randn(Vp, C, generator=g) * 0.02, "wpe": torch.randn(T, C, generator=g) * 0.02,
         "lnf.weight": torch.ones(C), "lnf.bias": torch.zeros(C)}
    for l in range(L):
        for n, shape in [("qkv.weight", (3 * C, C)), ("attn_proj.weight", (C, C)), ("fc.weight", (4 * C, C)),
                         ("fc_proj.weight", (C, 4 * C))]:
            P[f"{l}.{n}"] = torch.randn(*shape, generator=g) * 0.02
        for n, size in [("qkv.bias", 3 * C), ("attn_proj.bias", C), ("fc.bias", 4 * C), ("fc_proj.bias", C),
                        ("ln1.bias", C), ("ln2.bias", C)]:
            P[f"{l}.{n}"] = torch.zeros(size)
        P[f"{l}.ln1.weight"] = torch.ones(C)
        P[f"{l}.ln2.weight"] = torch.ones(C)
    for p in P.values():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(P.values(), lr=1e-4)
    idx = torch.randint(0, 256, (B, T), generator=g)
    tgt = torch.randint(0, 256, (B, T), generator=g)

    def step():
        x = P["wte"][idx] + P["wpe"][:T]
        for l in range(L):
            h = F.layer_norm(x, (C,), P[f"{l}.ln1.weight"], P[f"{l}.ln1.bias"])
            qkv = (h @ P[f"{l}.qkv.weight"].T + P[f"{l}.qkv.bias"]).view(B, T, NH, 3, HS)
            q, k, v = (qkv[:, :, :, i, :].transpose(1, 2) for i in range(3))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
                else ((q @ k.transpose(-2, -1) / math.sqrt(HS)).masked_fill(
                    torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf")).softmax(-1) @ v)
            x = x + y.transpose(1, 2).reshape(B, T, C) @ P[f"{l}.attn_proj.weight"].T + P[f"{l}.attn_proj.bias"]
            h = F.layer_norm(x, (C,), P[f"{l}.ln2.weight"], P[f"{l}.ln2.bias"])
            h = F.gelu(h @ P[f"{l}.fc.weight"].T + P[f"{l}.fc.bias"], approximate="tanh")
            x = x + h @ P[f"{l}.fc_proj.weight"].T + P[f"{l}.fc_proj.bias"]
        x = F.layer_norm(x, (C,), P["lnf.weight"], P["lnf.bias"])
        loss = F.cross_entropy((x @ P["wte"].T)[..., :V].reshape(-1, V), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


print(f"{'shape':<18} {'trident ms':>11} {'PyTorch ms':>11} {'ratio':>7}  per-round ratios  (torch "
      f"{torch.__version__}, {torch.get_num_threads()} threads, OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']}, "
      f"{rounds} rounds x {iters} iterations, load {open('/proc/loadavg').read().split()[0]})")
for name, *shape in shapes:
    trs, pts = [], []
    for _ in range(rounds):
        trs.append(trident_ms(name, *shape))
        pts.append(torch_ms(*shape))
    tr, pt = statistics.median(trs), statistics.median(pts)
    per_round = " ".join(f"{a / b:.2f}" for a, b in zip(trs, pts))
    print(f"{name:<18} {tr:>11.1f} {pt:>11.1f} {tr / pt:>7.2f}  {per_round}", flush=True)
