#!/usr/bin/python3
"""Markdown table of a sweep's results.csv (the points that ran), with the planner's
prediction and the ratio measured / predicted, and the best layout.
usage: benchmarks/sweep_table.py runs/sweep-tiny-8ranks/results.csv"""
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
ran = [r for r in rows if r["status"] == "ok"]
print(f"{len(rows)} points: {len(ran)} ran, {sum(r['status'] == 'skipped' for r in rows)} skipped, "
      f"{sum(r['status'] == 'failed' for r in rows)} failed\n")
print("| dp | tp | pp | micro-batch | ms/iter | tokens/s | peak MiB (max rank) | bubble | final loss | predicted ms | measured/predicted |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in ran:
    mb = r.get("training.micro_batch_size", "")
    print(f"| {r['dp']} | {r['tp']} | {r['pp']} | {mb} | {float(r['median_ms_per_iter']):.1f} | "
          f"{float(r['tokens_per_s']):.0f} | {float(r['peak_rss_mb_max_rank']):.0f} | "
          f"{100 * float(r['measured_bubble'] or 0):.1f}% | {float(r['final_loss']):.4f} | "
          f"{float(r['predicted_ms_per_iter'] or 0):.1f} | {float(r['measured_over_predicted'] or 0):.2f} |")
best = max(ran, key=lambda r: float(r["tokens_per_s"]))
print(f"\nBest layout: dp {best['dp']} x tp {best['tp']} x pp {best['pp']}, micro-batch "
      f"{best.get('training.micro_batch_size', '')}: {float(best['tokens_per_s']):.0f} tokens/s.")
