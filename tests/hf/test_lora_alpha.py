#!/usr/bin/python3
"""A LoRA checkpoint records the alpha its adapters were trained with (the manifest's lora line:
rank, alpha, target modules), and `trident convert --to hf` exports with it (torch-free; both
builds). A tiny Bloom base and a LoRA run of rank 2, alpha 4 on it, then:
  - the manifest's lora line says rank 2, alpha 4 and the four targets;
  - --adapters-only writes lora_alpha 4, and without --config (the manifest's family and lora
    lines alone) the same files; a run's finetune.lora.dropout 0.05 goes out as lora_dropout 0.05
    and an import of those adapters prints dropout: 0.05 in its finetune section; --merge-lora writes W + (4 / 2) B A (checked against the
    adapters and the base's own export, element by element);
  - a config with alpha 8 (or rank 4, or other target modules) is refused at export, exit
    non-zero naming both values, nothing written; and at resume (checkpoint.load) likewise;
  - `trident eval` and `trident generate` of the LoRA checkpoint with the run's config (the
    adapters merged into finetune.load's base on load) give the --merge-lora export's nll and
    tokens, on 1 and 3 tensor-parallel ranks; without --config, or with a contradicting or
    LoRA-less one, exit 2 naming what is missing;
  - a checkpoint written before the lora line (the line removed) exports with the config's
    alpha and a warning saying so, and without --config is refused asking for it; a damaged lora
    line is refused naming the manifest.
usage: test_lora_alpha.py TRIDENT WORKDIR"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])


def path(name):
    return os.path.join(work, name)


def st_read(p):
    """{name: (shape, [floats])} of an F32 safetensors file."""
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        raw = b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
        out[k] = (v["shape"], struct.unpack(f"<{len(raw) // 4}f", raw))
    return out


corpus = tt.make_corpus(trident, work, 3, ["save", "load", "tensor", "shard"], 100, 3, 30)
model = dict(num_layers=2, hidden_size=12, num_attention_heads=3, seq_length=8, max_position_embeddings=8,
             vocab_size=200, make_vocab_size_divisible_by=16, position_embedding_type="alibi",
             embedding_layernorm=True)
training = dict(micro_batch_size=2, global_batch_size=4, train_iters=2, lr=1e-2, lr_warmup_iters=1, seed=5)
data = dict(data_path=corpus, split="95,5,0")
base_cfg = tt.write_config(path("base.yaml"), model=model, training=training, data=data,
                           checkpoint=dict(save=path("base")))
p = tt.run(tt.train_cmd(trident, base_cfg, path("base-run"), flags=["--quiet"]), timeout=120)
check("the base: 2 steps of a tiny Bloom saved, exit 0", p.returncode == 0, p.stderr[-800:])


def lora_config(name, alpha=4.0, rank=2, targets=("qkv", "proj", "fc1", "fc2"), dropout=0.0, **ckpt):
    lora = "{" + f"rank: {rank}, alpha: {alpha}, dropout: {dropout}, target_modules: [{', '.join(targets)}]" + "}"
    text = open(base_cfg).read().replace(f'save: "{path("base")}"', f'save: "{path("lora")}"')
    text += "".join(f'  {k}: "{v}"\n' for k, v in ckpt.items())
    text += f'finetune:\n  load: "{path("base")}"\n  lora: {lora}\n'
    return tt.write(path(name + ".yaml"), text)


run_cfg = lora_config("lora")
p = tt.run(tt.train_cmd(trident, run_cfg, path("lora-run"), flags=["--quiet"]), timeout=120)
check("the LoRA run (rank 2, alpha 4): exit 0", p.returncode == 0, p.stderr[-800:])
manifest = path("lora/iter_0000002/manifest.txt")
lines = open(manifest).read().splitlines() if os.path.exists(manifest) else []
check("its manifest records rank 2, alpha 4 and the target modules",
      "lora rank 2 alpha 4 targets qkv,proj,fc1,fc2" in lines, "\n".join(lines[:7]), show=True)


def export(cfg, out, how):
    return tt.run([trident, "convert", "--to", "hf", "--config", cfg, "--input", path("lora"), "--output",
                   path(out), how], timeout=60)


# ---- the checkpoint's alpha at export
p = export(run_cfg, "adapters", "--adapters-only")
acfg = json.load(open(path("adapters/adapter_config.json"))) if p.returncode == 0 else {}
check("--adapters-only: lora_alpha 4, r 2", acfg.get("lora_alpha") == 4 and acfg.get("r") == 2,
      f"{acfg} {p.stderr[-400:]}")
p = tt.run([trident, "convert", "--to", "hf", "--input", path("lora"), "--output", path("adapters-nocfg"),
            "--adapters-only"], timeout=60)
same = p.returncode == 0 and all(open(path(f"adapters/{f}"), "rb").read() == open(path(f"adapters-nocfg/{f}"), "rb").read()
                                 for f in ("adapter_config.json", "adapter_model.safetensors"))
check("--adapters-only without --config (the manifest's lines): the same files as with it", same,
      p.stderr[-400:])
p = export(base_cfg, "base-hf", "--merge-lora")  # a config without LoRA: refused as before
check("--merge-lora with a config without finetune.lora: refused", p.returncode != 0, p.stderr[-300:])
p = tt.run([trident, "convert", "--to", "hf", "--config", base_cfg, "--input", path("base"), "--output",
            path("base-hf")], timeout=60)
check("the base's own export: exit 0", p.returncode == 0, p.stderr[-300:])
check("--adapters-only of a run without dropout: lora_dropout 0", acfg.get("lora_dropout") == 0, f"{acfg}")
# finetune.lora.dropout goes out as PEFT's lora_dropout and comes back in the printed finetune section
p = export(lora_config("drop", dropout=0.05), "adapters-drop", "--adapters-only")
dcfg = json.load(open(path("adapters-drop/adapter_config.json"))) if p.returncode == 0 else {}
check("--adapters-only with finetune.lora.dropout 0.05: lora_dropout 0.05", dcfg.get("lora_dropout") == 0.05,
      f"{dcfg} {p.stderr[-400:]}")
p = tt.run([trident, "convert", "--from", "hf", "--input", path("base-hf"), "--adapters", path("adapters-drop"),
            "--output", path("ck-drop")], timeout=60)
check("... imported back (convert --from hf --adapters): the printed finetune section has dropout: 0.05",
      p.returncode == 0 and "    dropout: 0.05\n" in p.stdout, p.stdout[-600:] + p.stderr[-400:])
# the manifest's lora line keeps it ("dropout P", written when P > 0), so an export of the
# checkpoint without --config writes it back
dmf = path("ck-drop/release/manifest.txt")
dlines = open(dmf).read().splitlines() if os.path.exists(dmf) else []
check("... its manifest's lora line ends 'dropout 0.05'",
      any(l.startswith("lora rank ") and l.endswith(" dropout 0.05") for l in dlines), "\n".join(dlines[:7]))
# the base's config.json dropout rates go into both manifests, the adapters' and base/'s (one run's)
rcfg = json.load(open(path("base-hf/config.json")))
rcfg.update(hidden_dropout=0.1, attention_dropout=0.05)
rbase = tt.fresh_dir(path("base-hf-rates"))
for f in os.listdir(path("base-hf")):
    tt.write(os.path.join(rbase, f), json.dumps(rcfg) if f == "config.json" else open(path(f"base-hf/{f}"), "rb").read())
p = tt.run([trident, "convert", "--from", "hf", "--input", rbase, "--adapters", path("adapters-drop"),
            "--output", path("ck-rates")], timeout=60)
rlines = [open(path(f"ck-rates/{d}release/manifest.txt")).read().splitlines() if p.returncode == 0 else []
          for d in ("", "base/")]
check("... a base of hidden_dropout 0.1, attention_dropout 0.05: both manifests record them",
      all("dropout hidden_dropout 0.1 attention_dropout 0.05" in x for x in rlines), p.stderr[-400:])
p = tt.run([trident, "convert", "--to", "hf", "--input", path("ck-drop"), "--output", path("adapters-drop-nocfg"),
            "--adapters-only"], timeout=60)
ncfg = json.load(open(path("adapters-drop-nocfg/adapter_config.json"))) if p.returncode == 0 else {}
check("... exported again without --config: lora_dropout 0.05", ncfg.get("lora_dropout") == 0.05,
      f"{ncfg} {p.stderr[-400:]}")
p = export(run_cfg, "merged", "--merge-lora")
check("--merge-lora with the run's config: exit 0", p.returncode == 0, p.stderr[-400:])
if p.returncode == 0:
    a, base, merged = (st_read(path(f)) for f in ("adapters/adapter_model.safetensors",
                                                    "base-hf/model.safetensors", "merged/model.safetensors"))
    worst, wrong, checked = 0.0, 0.0, 0
    for k in a:
        if ".lora_A." not in k:
            continue
        mod = k.replace("base_model.model.", "").replace(".lora_A.weight", ".weight")
        (r, cin), A = a[k]
        (cout, _), B = a[k.replace("lora_A", "lora_B")]
        W, M = base[mod][1], merged[mod][1]
        for i in range(cout):
            for j in range(cin):
                ba = sum(B[i * r + t] * A[t * cin + j] for t in range(r))
                worst = max(worst, abs(W[i * cin + j] + 4 / 2 * ba - M[i * cin + j]))
                wrong = max(wrong, abs(W[i * cin + j] + 8 / 2 * ba - M[i * cin + j]))
        checked += 1
    check("--merge-lora: every target W + (alpha 4 / rank 2) B A, within 1e-6",
          checked == 8 and worst <= 1e-6 and wrong > 1e-4,
          f"{checked} projections, max |W + 2 BA - merged| {worst:.1e} (with alpha 8: {wrong:.1e})", show=True)

# ---- eval and generate of the LoRA checkpoint with the run's config: merged on load
text_file = tt.write(path("eval.txt"), open(path("corpus.txt")).read()[:1500])


def evaluated(*args):
    p = tt.run([trident, "eval", *args, "--input", text_file, "--json"], timeout=120)
    lines = [x[x.index("{"):] for x in p.stdout.splitlines() if "{" in x]
    return (json.loads(lines[0])["perplexity"]["nll_sum"] if p.returncode == 0 and lines else
            f"exit {p.returncode}: {p.stderr[-400:]}")


merged_nll = evaluated(path("merged"))
for n in (1, 3):
    got = evaluated(path("lora"), "--config", run_cfg, *(["--nproc", str(n)] if n > 1 else []))
    check(f"eval of the LoRA checkpoint with --config on {n} tensor-parallel rank(s) = eval of the "
          f"--merge-lora export ({got} vs {merged_nll})", isinstance(got, float) and isinstance(merged_nll, float)
          and abs(got - merged_nll) <= 1e-6 * abs(merged_nll), show=n == 1)


def greedy(*args):
    p = tt.run([trident, "generate", *args, "--prompt-ids", "5,17,33", "--max-new-tokens", "5",
                "--temperature", "0", "--json"], timeout=120)
    return json.loads(p.stdout)["generated_ids"] if p.returncode == 0 else f"exit {p.returncode}: {p.stderr[-300:]}"


g_lora, g_merged = greedy(path("lora"), "--config", run_cfg), greedy(path("merged"))
check(f"generate of the LoRA checkpoint with --config = of the merged export ({g_lora})",
      isinstance(g_lora, list) and len(g_lora) == 5 and g_lora == g_merged, f"{g_lora} vs {g_merged}")
p = tt.run([trident, "eval", path("lora"), "--input", text_file], timeout=60)
check("eval of the LoRA checkpoint without --config: exit 2 asking for the run's config",
      p.returncode == 2 and "--config" in p.stderr and "LoRA" in p.stderr, p.stderr[-300:])
p = tt.run([trident, "eval", path("lora"), "--config", lora_config("alpha8", alpha=8.0), "--input", text_file],
           timeout=60)
check("eval of the LoRA checkpoint with an alpha 8 config: refused naming both values",
      p.returncode == 2 and "finetune.lora.alpha 8" in p.stderr and "checkpoint's: 4" in p.stderr, p.stderr[-400:])
p = tt.run([trident, "eval", path("lora"), "--config", base_cfg, "--input", text_file], timeout=60)
check("eval of the LoRA checkpoint with a config without finetune.lora: exit 2 naming it",
      p.returncode == 2 and "finetune.lora.rank" in p.stderr, p.stderr[-300:])

# ---- a config that contradicts the checkpoint: refused at export and at resume, naming both
for what, cfg, named in [("alpha 8", lora_config("alpha8", alpha=8.0), ["finetune.lora.alpha 8", "checkpoint's: 4"]),
                         ("rank 4", lora_config("rank4", rank=4), ["finetune.lora.rank 4", "checkpoint's: 2"]),
                         ("target_modules [qkv]", lora_config("qkv", targets=("qkv",)),
                          ["target_modules [qkv]", "checkpoint's: [qkv,proj,fc1,fc2]"])]:
    for how in ("--adapters-only", "--merge-lora"):
        out = "bad-" + what.split()[0] + how
        p = export(cfg, out, how)
        check(f"export {how} with {what}: exit non-zero naming both values, nothing written",
              p.returncode not in (0, -6, -11) and all(n in p.stderr for n in named) and
              not os.path.exists(path(out)), p.stderr[-500:], show=how == "--merge-lora" and what == "alpha 8")
p = tt.run(tt.train_cmd(trident, lora_config("resume8", alpha=8.0, load=path("lora")), path("resume8"),
                        sets=["training.train_iters=4"]), timeout=120)
check("resuming the LoRA run with alpha 8: refused naming both values",
      p.returncode in (1, 2) and "finetune.lora.alpha 8" in p.stderr and "checkpoint's: 4" in p.stderr,
      p.stderr[-600:], show=True)

# ---- a checkpoint written before the lora line: the config's alpha, with a warning
text = open(manifest).read()
tt.write(manifest, "".join(line + "\n" for line in lines if not line.startswith("lora ")))
p = export(lora_config("old8", alpha=8.0), "old8", "--adapters-only")
acfg = json.load(open(path("old8/adapter_config.json"))) if p.returncode == 0 else {}
check("no lora line (an older checkpoint): exported with the config's alpha 8, warning that it is unchecked",
      acfg.get("lora_alpha") == 8 and "no lora line" in p.stderr + p.stdout and "8" in p.stderr + p.stdout,
      f"{acfg} {p.stderr[-400:]}", show=True)
p = tt.run([trident, "convert", "--to", "hf", "--input", path("lora"), "--output", path("old-nocfg"),
            "--adapters-only"], timeout=60)
check("no lora line and no --config: --adapters-only refused asking for the run's config, nothing written",
      p.returncode == 2 and "no lora line" in p.stderr and "--config" in p.stderr
      and not os.path.exists(path("old-nocfg")), p.stderr[-400:])
tt.write(manifest, text.replace("lora rank 2 alpha 4 ", "lora rank 2 alpha -4 "))
p = export(run_cfg, "damaged", "--adapters-only")
check("a damaged lora line: exit non-zero naming the manifest's line",
      p.returncode not in (0, -6, -11) and "manifest.txt:" in p.stderr and "lora line" in p.stderr,
      p.stderr[-400:])
for bad in (" dropout 1", " dropout -0.1", " dropout nan", " dropout", " dropout 0.1 x", " dropou 0.1"):
    tt.write(manifest, text.replace("targets qkv,proj,fc1,fc2\n", "targets qkv,proj,fc1,fc2" + bad + "\n"))
    p = export(run_cfg, "damaged", "--adapters-only")
    check(f"a lora line ending '{bad.strip()}': exit non-zero naming the manifest's line",
          p.returncode not in (0, -6, -11) and "manifest.txt:" in p.stderr and "dropout P" in p.stderr,
          p.stderr[-400:])
tt.write(manifest, text)
tt.finish("lora-alpha: all checks passed")
