"""The benchmark's variants for scripts/gpu_check.py's bench step (Python's standard library
only): trident's step again at the benchmark's micro-batch with settings changed, one run an
entry (NAME=VALUE, or NAME=VALUE,NAME=VALUE set at once), each row's ms/iter, tokens/s, MFU
and speed beside the default's and torch.compile's (the same run's figures), so the report
says which settings meet issue 24's targets. Then, where two or more entries were faster than
the default by at least COMBINE_GAIN, one more run with all of them at once (each entry
goes in, fastest first, unless a faster one set one of its names: fused and fused with 64 rows
are rivals, not parts): the step the next defaults would give, measured in the same call. An
entry COMBINE (no '=') runs it there, before the entries after it (the switches back, whose
rows say what each change is worth), so a budget that runs out first loses those instead; and
those run only while `keep` seconds (the kernels step's, after the benchmark) are left over."""
import json
import os

COMBINE_GAIN = 0.01  # an entry this much faster than the default joins the combined run
MIN_LEFT = 45        # seconds a run needs


def settings(entry):
    """{NAME: VALUE} of an entry's ','-separated settings (those without '=' skipped)."""
    out = {}
    for s in [x for x in entry.split(",") if "=" in x]:
        k, v = s.split("=", 1)
        out.setdefault(k.strip(), v.strip())
    return out


def run(c, b, first="", keep=0):
    """c: gpu_check's Check; b: benchmarks/gpu_step.sh's JSON; first: an entry run before the
    --variants list; keep: seconds the entries after COMBINE leave for the steps after.
    Sets c.results['bench_variants'] to the Markdown table."""
    rows = b.get("rows", [])
    row = next((r for r in rows if r.get("impl") == "trident"), {})
    comp = next((r for r in rows if r.get("impl") == "pytorch-compile" and r.get("tokens_per_s")), {})
    if not c.a.variants or not row.get("micro_batch") or not row.get("ms_per_iter"):
        return
    base_ms, mfu0 = row["ms_per_iter"], row.get("mfu")
    exe = os.path.join(c.a.build, "benchmarks", "gpu_step")

    def line(label, ms, tok):
        mfu = f"{100 * mfu0 * base_ms / ms:.1f}%" if mfu0 else "n/a"
        vs_c = f"{tok / comp['tokens_per_s']:.2f}x" if comp and tok else "n/a"
        return f"| {label} | {ms:.2f} | {tok:.0f} | {mfu} | {vs_c} | {base_ms / ms:.2f}x |"

    lines = ["| trident with | ms/iter | tokens/s | MFU | vs torch.compile | vs the default |",
             "|---|---:|---:|---:|---:|---:|", line("(the default)", base_ms, row.get("tokens_per_s", 0))]
    entries = [x for x in ([first] if first else []) + c.a.variants.split(";") if "=" in x or x == "COMBINE"]
    if "COMBINE" not in entries:
        entries.append("COMBINE")
    faster, past_combine = [], False

    def one(entry, label=None, reserve=0):
        if c.left() < MIN_LEFT + reserve:
            lines.append(f"| {label or entry} | not run: the time budget ran out | | | | |")
            return None
        env = dict(c.env, **settings(entry))
        rc, out = c.run("bench-variants", [exe, "--json", "--micro-batch", str(row["micro_batch"]),
                                           "--iters", "10"], timeout=min(120, c.left() - 10), env=env)
        text, r = c.last_output(out), None
        i = text.find('{"')
        try:
            r = json.JSONDecoder().raw_decode(text[i:])[0] if rc == 0 and i >= 0 else None
        except ValueError:
            r = None
        if not r or not r.get("ms_per_iter"):
            lines.append(f"| {label or entry} | failed (exit {rc}) | | | | |")
            return None
        label = label or entry
        if r.get("gemm_choices") or r.get("gemm_choices_refused"):  # (the recorded ones used)
            label += f" ({r.get('gemm_choices', 0)} plans recorded, {r.get('gemm_choices_refused', 0)} refused)"
        if r.get("cudnn_attention") or r.get("cudnn_attention_refused"):  # (whether cuDNN ran)
            label += (f" (cuDNN ran {r.get('cudnn_attention', 0)} attention calls, "
                      f"fell back on {r.get('cudnn_attention_refused', 0)})")
        lines.append(line(label, r["ms_per_iter"], r.get("tokens_per_s", 0)))
        c.results["bench_variants"] = "\n".join(lines)
        c.write()  # (each row kept as it comes: the device's time may end before the last)
        return r["ms_per_iter"]

    for e in entries:
        if e != "COMBINE":
            ms = one(e, reserve=keep if past_combine else 0)
            if ms and ms < (1 - COMBINE_GAIN) * base_ms:
                faster.append((ms, e))
            continue
        if len(faster) >= 2:
            merged, parts = {}, 0
            for _, f in sorted(faster):
                if not any(k in merged for k in settings(f)):
                    merged.update(settings(f))
                    parts += 1
            both = ",".join(f"{k}={v}" for k, v in merged.items())
            if parts >= 2:
                one(both, "all the faster ones at once: " + both)
        past_combine = True
    c.results["bench_variants"] = "\n".join(lines)
