#!/usr/bin/python3
"""Pipeline bubble, P=2 on 2 cores: iteration time and the bubble measured from the trace
(idle share of the stages' time in the last iteration) for M in {2, 4, 8, 16} micro-batches,
beside the theoretical (P-1)/(M+P-1). usage: benchmarks/pp_bubble.py [--iters N]"""
import sys

from bench_util import train

iters = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 6
P = 2
print(f"{'M':>3} {'ms/iter':>9} {'measured bubble':>16} {'theory':>8} {'diff (pp)':>10}")
for M in (2, 4, 8, 16):
    sets = {"model.num_layers": 4, "model.hidden_size": 256, "model.num_attention_heads": 4,
            "model.seq_length": 128, "training.micro_batch_size": 2, "training.global_batch_size": 2 * M,
            "training.train_iters": iters, "training.eval_interval": 0,
            "parallel.pipeline_model_parallel_size": P, "logging.trace": "true"}
    ms, summary = train(f"pp-bubble-m{M}", "configs/tiny.yaml", sets, nproc=P)
    theory = (P - 1) / (M + P - 1)
    measured = summary["measured_bubble"]
    print(f"{M:>3} {ms:>9.1f} {100 * measured:>15.1f}% {100 * theory:>7.1f}% {100 * (measured - theory):>+10.1f}",
          flush=True)
