"""Hugging Face folders written by hand for `trident convert`'s tests (no PyTorch; they run
in the sanitizer build too): a small safetensors writer and reader, a tiny GPT-2's tensors and
config.json, and `trident convert` run with its refusal check, an export's round trips in
shards and in BF16 (Session.shards_check, bf16_check); at the end, the transformers oracles'
helpers (oracle_start, randomize, oracle_import, family_lines, oracle_config, gather_grads,
worst_grad, llama_grad, window_nll, logits_check, eval_check, generate_check, roundtrip_check,
batch_grads, train_grads, grads_check, lora_merge_check: numpy, torch and transformers imported
inside them).

    import hf_files as hff
    s = hff.Session(trident, work)
    d = s.hf_folder("name", hff.gpt2_tensors())
    rc, out, err = s.convert("--from", "hf", "--input", d, "--output", ck)
"""
import json
import os
import random
import re
import shutil
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

L, C, NH, P, V = 2, 32, 4, 16, 50


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def to_bf16(bits):
    """Round-to-nearest-even of a float32's bits to bfloat16 (no NaNs here)."""
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    if dtype == "BF16":
        return struct.pack(f"<{len(values)}H", *(to_bf16(f32_bits(v)) for v in values))
    if dtype == "I64":
        return struct.pack(f"<{len(values)}q", *(int(v) for v in values))
    if dtype == "F64":
        return struct.pack(f"<{len(values)}d", *values)
    if dtype == "BOOL":
        return struct.pack(f"<{len(values)}?", *(bool(v) for v in values))
    raise ValueError(dtype)


def st_bytes(tensors, header_edit=None, meta=True):
    """tensors: list of (name, dtype, shape, values); returns the file's bytes."""
    header, data = {}, b""
    if meta:
        header["__metadata__"] = {"format": "pt"}
    for name, dtype, shape, values in tensors:
        raw = encode(values, dtype)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if header_edit:
        header = header_edit(header)
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def st_read(path):
    """{name: (dtype, shape, raw bytes)} of a safetensors file."""
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


rng = random.Random(16)


def rand(n, scale=0.5):
    # values exact in float16 so the F16 file holds the same numbers
    return [round(rng.uniform(-scale, scale) * 1024) / 1024 for _ in range(n)]


def gpt2_tensors(prefix="transformer.", dtype="F32", buffers=True, head=True, layers=L):
    t = [(f"{prefix}wte.weight", dtype, (V, C), rand(V * C)),
         (f"{prefix}wpe.weight", dtype, (P, C), rand(P * C))]
    for i in range(layers):
        h = f"{prefix}h.{i}."
        t += [(h + "ln_1.weight", dtype, (C,), rand(C, 2)), (h + "ln_1.bias", dtype, (C,), rand(C)),
              (h + "attn.c_attn.weight", dtype, (C, 3 * C), rand(C * 3 * C)),
              (h + "attn.c_attn.bias", dtype, (3 * C,), rand(3 * C)),
              (h + "attn.c_proj.weight", dtype, (C, C), rand(C * C)),
              (h + "attn.c_proj.bias", dtype, (C,), rand(C)),
              (h + "ln_2.weight", dtype, (C,), rand(C, 2)), (h + "ln_2.bias", dtype, (C,), rand(C)),
              (h + "mlp.c_fc.weight", dtype, (C, 4 * C), rand(C * 4 * C)),
              (h + "mlp.c_fc.bias", dtype, (4 * C,), rand(4 * C)),
              (h + "mlp.c_proj.weight", dtype, (4 * C, C), rand(4 * C * C)),
              (h + "mlp.c_proj.bias", dtype, (C,), rand(C))]
        if buffers:
            t.append((h + "attn.bias", dtype, (1, 1, P, P), [1.0] * (P * P)))
    t += [(f"{prefix}ln_f.weight", dtype, (C,), rand(C, 2)), (f"{prefix}ln_f.bias", dtype, (C,), rand(C))]
    if head:
        t.append(("lm_head.weight", dtype, (V, C), t[0][3]))
    return t


CONFIG = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
          "n_layer": L, "n_embd": C, "n_head": NH, "n_positions": P, "vocab_size": V,
          "layer_norm_epsilon": 1e-05, "n_inner": None, "bos_token_id": V - 1, "eos_token_id": V - 1}


def llama_tensors(C, L, NH, NKV, F, V, head=True):
    """A LlamaForCausalLM's tensors (F32, from rand): hidden C, L layers, NH heads, NKV key/value
    heads, FFN F, vocabulary V, lm_head.weight unless tied (head False)."""
    HS = C // NH
    t = [("model.embed_tokens.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        h = f"model.layers.{i}."
        t += [(h + "input_layernorm.weight", "F32", (C,), rand(C, 2)),
              (h + "self_attn.q_proj.weight", "F32", (C, C), rand(C * C)),
              (h + "self_attn.k_proj.weight", "F32", (NKV * HS, C), rand(NKV * HS * C)),
              (h + "self_attn.v_proj.weight", "F32", (NKV * HS, C), rand(NKV * HS * C)),
              (h + "self_attn.o_proj.weight", "F32", (C, C), rand(C * C)),
              (h + "post_attention_layernorm.weight", "F32", (C,), rand(C, 2)),
              (h + "mlp.gate_proj.weight", "F32", (F, C), rand(F * C)),
              (h + "mlp.up_proj.weight", "F32", (F, C), rand(F * C)),
              (h + "mlp.down_proj.weight", "F32", (C, F), rand(F * C))]
    t.append(("model.norm.weight", "F32", (C,), rand(C, 2)))
    return t + ([("lm_head.weight", "F32", (V, C), rand(V * C))] if head else [])


def same_checkpoint(a, b):
    """Two checkpoints' release folders hold the same files with the same bytes."""
    ra, rb = os.path.join(a, "release"), os.path.join(b, "release")
    return os.path.isdir(ra) and os.path.isdir(rb) and sorted(os.listdir(ra)) == sorted(os.listdir(rb)) and all(
        open(os.path.join(ra, f), "rb").read() == open(os.path.join(rb, f), "rb").read() for f in os.listdir(ra))


class Session:
    """HF folders under WORK and `trident convert` runs of one test; `keep`: outputs a wrong
    acceptance in refused() must not remove (a checkpoint later checks read)."""

    def __init__(self, trident, work):
        self.trident, self.work, self.keep = trident, work, set()

    def hf_folder(self, name, tensors, config=None, raw=None):
        d = tt.fresh_dir(os.path.join(self.work, name))
        tt.write(os.path.join(d, "config.json"), json.dumps(config if config is not None else CONFIG))
        tt.write(os.path.join(d, "model.safetensors"), raw if raw is not None else st_bytes(tensors))
        return d

    def convert(self, *args):
        return tt.outputs([self.trident, "convert", *args], timeout=120)

    def refused(self, what, args, out, cause, names=None):
        """`trident convert ARGS` must exit 2 naming `names` (default: nothing) and `cause`, with
        nothing at `out` and no temporary folder beside it."""
        rc, so, se = self.convert(*args)
        ok = rc == 2 and cause in se and all(n in se for n in (names or [])) and not os.path.exists(out)
        ok = ok and not leftovers(os.path.dirname(out))
        tt.check(f"refused: {what}", ok, f"exit {rc}, stderr {se.strip()!r}, output exists: {os.path.exists(out)}")
        if os.path.isdir(out) and out not in self.keep:  # a wrong acceptance must not fail the checks after it
            shutil.rmtree(out)

    def manifest_refused(self, family, ck, edits, cause):
        """For each (what, old, new) of edits: a copy of checkpoint ck (WORK/ck-NAME-bad, NAME
        the family lowered) whose manifest has old replaced by new is refused by the export (to
        WORK/NAME-out) naming the manifest and `cause`: "a FAMILY checkpoint whose manifest says
        WHAT"."""
        text = open(os.path.join(ck, "release", "manifest.txt")).read()
        name = family.lower().replace("-", "")
        ck_bad = os.path.join(self.work, f"ck-{name}-bad")
        out = os.path.join(self.work, f"{name}-out")
        for what, old, new in edits:
            shutil.rmtree(ck_bad, ignore_errors=True)
            shutil.copytree(ck, ck_bad)
            mpath = os.path.join(ck_bad, "release", "manifest.txt")
            tt.write(mpath, text.replace(old, new))
            self.refused(f"a {family} checkpoint whose manifest says {what}",
                         ["--to", "hf", "--input", ck_bad, "--output", out], out, cause, [mpath])

    def resume_refused(self, family, what, model, ck, cause):
        """`trident train` of model section `model` from checkpoint ck (one iteration on an llm.c
        shard of 400 tokens below V, WORK/tokens.bin) must fail naming `cause`, the difference
        from the checkpoint: one check, "a run from the FAMILY import with WHAT names the
        difference"."""
        shard = os.path.join(self.work, "tokens.bin")
        with open(shard, "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, 400, *([0] * 253)) +
                    struct.pack("<400H", *(i % V for i in range(400))))
        cfg = tt.write_config(os.path.join(self.work, "resume.yaml"), model=model,
                              training=dict(micro_batch_size=1, global_batch_size=1, train_iters=1, lr=1e-3),
                              data=dict(data_path=shard), checkpoint=dict(load=ck))
        rc, so, se = tt.outputs([self.trident, "train", cfg, "--run-dir", os.path.join(self.work, "resume-run")],
                                timeout=120)
        tt.check(f"a run from the {family} import with {what} names the difference", rc != 0 and cause in se,
                 f"exit {rc} {se[-600:]}")

    def shards_check(self, text, ck, name, max_size, *extra):
        """Checkpoint ck exported (--to hf, with extra) in shards of max_size to WORK/NAME-shards
        and imported again to WORK/ck-NAME-shards: one check, `text`, that more than 2 shards
        give the same checkpoint. The shards' folder."""
        shards = os.path.join(self.work, name + "-shards")
        rc, so, se = self.convert("--to", "hf", "--input", ck, "--output", shards, *extra, "--max-shard-size", max_size)
        n_shards = len([f for f in os.listdir(shards) if f.startswith("model-")]) if rc == 0 else 0
        ck_s = os.path.join(self.work, "ck-" + name + "-shards")
        rc2, so2, se2 = self.convert("--from", "hf", "--input", shards, "--output", ck_s) if rc == 0 else (1, "", "")
        tt.check(text, rc2 == 0 and n_shards > 2 and same_checkpoint(ck, ck_s),
                 f"exit {rc}/{rc2} ({n_shards} shards): {se}{se2}")
        return shards

    def bf16_check(self, text, ck, name):
        """Checkpoint ck exported in BF16 to WORK/NAME-bf16, imported (WORK/ck-NAME-bf16) and
        exported in BF16 again (WORK/NAME-bf16-back): one check, `text`, that the two exports'
        tensors are the same bytes and the second's config.json has torch_dtype bfloat16."""
        bf16 = os.path.join(self.work, name + "-bf16")
        rc, so, se = self.convert("--to", "hf", "--input", ck, "--output", bf16, "--dtype", "bf16")
        ck_b = os.path.join(self.work, "ck-" + name + "-bf16")
        rc2, so2, se2 = self.convert("--from", "hf", "--input", bf16, "--output", ck_b) if rc == 0 else (1, "", "")
        back = os.path.join(self.work, name + "-bf16-back")
        rc3, so3, se3 = self.convert("--to", "hf", "--input", ck_b, "--output", back, "--dtype", "bf16") \
            if rc2 == 0 else (1, "", "")
        tt.check(text, rc3 == 0 and st_read(os.path.join(bf16, "model.safetensors")) == st_read(os.path.join(back, "model.safetensors"))
                 and json.load(open(os.path.join(back, "config.json"))).get("torch_dtype") == "bfloat16",
                 f"exit {rc}/{rc2}/{rc3}: {se}{se2}{se3}")


def plan_count_check(trident, config, release, less=0, why=""):
    """configs/CONFIG: `trident plan` counts `release` parameters (transformers' count; less `less`
    that trident does not hold, for the reason `why`): one layer and the rest by the per-layer
    difference (of one pipeline stage), exact whatever digits the JSON prints, and the whole
    config's count to the 9 digits it prints."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", config)
    layers = int(re.search(r"(?m)^\s+num_layers:\s*(\d+)", open(path).read()).group(1))
    counts, err = [], ""
    for n in (1, 2, None):
        rc, so, se = tt.outputs([trident, "plan", path, "--json"] +
                                (["--set", f"model.num_layers={n}", "--set",
                                  "parallel.pipeline_model_parallel_size=1"] if n else []))
        counts.append(json.loads(so)["parameters"] if rc == 0 else None)
        err += se
    one, two, whole = counts
    total = one + (layers - 1) * (two - one) if None not in (one, two) else None
    tt.check(f"configs/{config}: trident plan counts transformers' {release:,} parameters" +
             (f" less {less:,} ({why})" if less else ""),
             total == release - less and whole is not None and f"{whole:.9g}" == f"{release - less:.9g}",
             f"1 layer {one}, 2 layers {two} -> {layers} layers {total}; the whole config {whole}; {err}")


def leftovers(parent):
    return [n for n in os.listdir(parent) if ".tmp-" in n]


# ---------------------------------------------------------------- the transformers oracles' helpers
# (numpy and torch imported by each: the convert tests above run without them)

def oracle_start(argv, packages=None):
    """The start of a transformers oracle run as `SCRIPT TRIDENT HF_PROBE WORKDIR VENV [--quick]`:
    the script runs again under VENV's Python (made by tt.venv_python with packages, else
    tt.HF_PACKAGES) unless transformers imports; then transformers' logging quiet, torch on 2 threads, WORKDIR made fresh.
    (trident, hf_probe, workdir, quick)."""
    trident, probe, work, venv = argv[1:5]
    try:
        import transformers  # noqa: F401
    except ImportError:
        py = tt.venv_python(venv, packages or tt.HF_PACKAGES, "transformers")
        os.execv(py, [py, os.path.abspath(argv[0]), *argv[1:]])
    import torch
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(2)
    return trident, probe, tt.fresh_dir(work), "--quick" in argv[5:]


def randomize(model, is_norm):
    """Every parameter of model away from its initial value (norm weights 1, the rest 0 or
    small): a norm's weight (is_norm(name)) 1 + 0.2 N(0, 1), every other 0.1 N(0, 1), from torch's
    global generator."""
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if is_norm(name) else 0.1 * torch.randn_like(p))


def oracle_import(trident, work, name, model):
    """transformers' model saved with save_pretrained to WORK/NAME-hf and imported with `trident
    convert --from hf` into WORK/NAME-ck: one check; the run ends at its failure. (the folder, the
    checkpoint, convert's stdout)."""
    src = os.path.join(work, name + "-hf")
    model.save_pretrained(src)
    ck = os.path.join(work, name + "-ck")
    rc, out, err = tt.outputs([trident, "convert", "--from", "hf", "--input", src, "--output", ck],
                              timeout=300)
    if not tt.check(f"trident convert --from hf {name}", rc == 0, err):
        tt.finish()
    return src, ck, out


def family_lines(ck):
    """The 'family ...' lines of checkpoint ck's release manifest."""
    return [ln for ln in open(os.path.join(ck, "release", "manifest.txt")).read().splitlines()
            if ln.startswith("family ")]


def oracle_config(work, name, L, T, V, keys, prefix, ck):
    """WORK/NAME.yaml: trident's config of an oracle's model (L layers, T positions and tokens a
    sequence, V tokens, then `keys`, which may override those), one iteration of 8 sequences in
    micro-batches of 2 on the corpus `prefix`, loading checkpoint ck. Its path."""
    return tt.write_config(os.path.join(work, name + ".yaml"),
        model={**dict(num_layers=L, seq_length=T, max_position_embeddings=T, vocab_size=V), **keys},
        training=dict(micro_batch_size=2, global_batch_size=8, train_iters=1, lr=1.0e-3, lr_warmup_iters=0,
                      weight_decay=0.01, clip_grad=1.0, seed=3),
        data=dict(data_path=prefix, split="95,5,0"),
        checkpoint=dict(load=ck),
        parallel=dict(comm_timeout_s=120))


def gather_grads(d):
    """Whole tensors by name from every rank's dump of --dump-grads in folder d (shards placed,
    ZeRO-1's unowned parts NaN)."""
    import numpy as np
    full = {}
    for fn in sorted(f for f in os.listdir(d) if f.endswith(".json")):
        meta = json.load(open(os.path.join(d, fn)))
        flat = np.fromfile(os.path.join(d, fn[:-5] + ".bin"), dtype=np.float32)
        owned = np.zeros(flat.shape, dtype=bool)
        for off, cnt in meta["owned"]:
            owned[off:off + cnt] = True
        flat = np.where(owned, flat, np.nan)
        for t in meta["tensors"]:
            part = flat[t["offset"]:t["offset"] + t["rows"] * t["cols"]].reshape(t["rows"], t["cols"])
            whole = full.setdefault(t["name"], np.full((t["full_rows"], t["full_cols"]), np.nan))
            r, c = (meta["tp_rank"] * t["rows"], 0) if t["split_dim"] == 0 else (0, meta["tp_rank"] * t["cols"]) \
                if t["split_dim"] == 1 else (0, 0)
            view = whole[r:r + t["rows"], c:c + t["cols"]]
            view[~np.isnan(part)] = part[~np.isnan(part)]
    return full


def worst_grad(grads, want_of):
    """grads: gather_grads'; want_of(name): transformers' gradient of trident tensor name in
    trident's layout (numpy). (worst relative L2 over the tensors, its name, the names whose
    rows up to want's are NaN or misshapen)."""
    import numpy as np
    worst, worst_name, bad = 0.0, "", []
    for tname, g in grads.items():
        want = want_of(tname)
        got = g[:want.shape[0]]
        if np.isnan(got).any() or got.shape != want.shape:
            bad.append(tname)
            continue
        rel_g = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
        if rel_g > worst:
            worst, worst_name = rel_g, tname
    return worst, worst_name, bad


def llama_grad(G, name, NH, NG, HS, C):
    """transformers' gradient (G: {parameter: grad}) of trident tensor `name` of a Llama, Qwen2,
    Mistral or Gemma (their names), in trident's layout (torch)."""
    import torch
    top = {"wte": "model.embed_tokens.weight", "output_layer": "lm_head.weight", "lnf.weight": "model.norm.weight"}
    if name in top:
        g = G[top[name]]
        return g.view(-1, 1) if g.dim() == 1 else g
    layer, rest = name.split(".", 2)[1:]
    h = f"model.layers.{layer}."
    simple = {"ln1.weight": "input_layernorm.weight", "ln2.weight": "post_attention_layernorm.weight",
              "attn_proj.weight": "self_attn.o_proj.weight", "fc_proj.weight": "mlp.down_proj.weight"}
    if rest in simple:
        g = G[h + simple[rest]]
        return g.view(-1, 1) if g.dim() == 1 else g
    if rest in ("qkv.weight", "qkv.bias"):  # rows (group, {q_0 .. q_R-1, k, v}, d); Qwen2's biases too
        R, kind, cols = NH // NG, rest[4:], C if rest == "qkv.weight" else 1
        q = G[h + "self_attn.q_proj." + kind].view(NG, R, HS, cols)
        k = G[h + "self_attn.k_proj." + kind].view(NG, 1, HS, cols)
        v = G[h + "self_attn.v_proj." + kind].view(NG, 1, HS, cols)
        return torch.cat([q, k, v], 1).reshape(-1, cols)
    if rest == "fc.weight":  # rows (feature, {gate, up})
        return torch.stack([G[h + "mlp.gate_proj.weight"], G[h + "mlp.up_proj.weight"]], 1).reshape(-1, C)
    raise KeyError(name)


def window_nll(model, ids, T):
    """transformers' model's summed nll of token ids in windows of T at stride T // 2, each token
    scored once with the most context it gets (trident eval --context T --stride T/2): (nll, tokens)."""
    import torch
    import torch.nn.functional as F
    nll, n_tok, prev_end = 0.0, 0, 0
    with torch.no_grad():
        for begin in range(0, len(ids), T // 2):
            end = min(begin + T, len(ids))
            lp = F.log_softmax(model(torch.tensor([ids[begin:end]])).logits[0].double(), -1)
            for j in range(max(begin + 1, prev_end), end):
                nll -= lp[j - 1 - begin, ids[j]].item()
                n_tok += 1
            prev_end = end
            if end == len(ids):
                break
    return nll, n_tok


def logits_check(probe, cfg, work, name, model, T, V, tol=1e-4):
    """hf_probe logits-config of trident config cfg on 3 x T random tokens (seed 1; WORK/tokens.bin,
    WORK/NAME-logits.bin) against transformers' model's logits: two checks (the probe ran; max |diff|
    / max |logit| <= tol)."""
    import subprocess
    import numpy as np
    import torch
    tokens = torch.randint(0, V, (3, T), generator=torch.Generator().manual_seed(1))
    tokens.numpy().astype(np.int32).tofile(os.path.join(work, "tokens.bin"))
    lfile = os.path.join(work, name + "-logits.bin")
    rc = subprocess.run([probe, "logits-config", cfg, os.path.join(work, "tokens.bin"), "3", lfile]).returncode
    if tt.check(f"{name}: hf_probe logits-config", rc == 0):
        ours = torch.from_numpy(np.fromfile(lfile, dtype=np.float32).reshape(3, T, V))
        with torch.no_grad():
            ref = model(tokens).logits
        rel = ((ours - ref).abs().max() / ref.abs().max()).item()
        tt.check(f"{name}: logits of 3 x {T} tokens after import", rel <= tol,
                 f"max |diff| / max |logit| = {rel:.2e}", show=True)


def eval_check(trident, src, work, name, model, text, T):
    """trident eval of the HF folder src on text (WORK/eval.txt; byte tokens, windows of T, stride
    T // 2) against window_nll of transformers' model: one check (the same tokens, nll within 1e-5)."""
    text_file = os.path.join(work, "eval.txt")
    tt.write(text_file, text)
    ids = list(text.encode())
    nll, n_tok = window_nll(model, ids, T)
    rc, so, se = tt.outputs([trident, "eval", src, "--input", text_file, "--context", str(T), "--stride",
                             str(T // 2), "--json"], timeout=120)
    got = (json.loads(so[so.index("{"):]).get("perplexity") or {}) if rc == 0 and "{" in so else {}
    rel = abs(got.get("nll_sum", float("inf")) - nll) / nll
    tt.check(f"{name}: trident eval of the HF folder ({n_tok} tokens in windows of {T}, stride {T // 2}) "
             f"= transformers' nll", got.get("tokens") == n_tok and rel <= 1e-5,
             f"exit {rc} {se[-300:]}\ntrident {got}\ntransformers tokens {n_tok} nll_sum {nll:.6f}; "
             f"relative {rel:.1e}", show=True)


def generate_check(trident, name, model, places, prompt=(5, 17, 200, 3, 42), n=12):
    """transformers' greedy generate of n tokens after prompt on model against `trident generate`
    of each (what, folder, extra arguments) of places: one check each."""
    import torch
    with torch.no_grad():
        theirs = model.generate(torch.tensor([list(prompt)]), max_new_tokens=n, do_sample=False,
                                pad_token_id=0)[0, len(prompt):].tolist()
    for what, where, extra in places:
        rc, so, se = tt.outputs([trident, "generate", where, *extra, "--prompt-ids", ",".join(map(str, prompt)),
                                 "--max-new-tokens", str(n), "--temperature", "0", "--json"], timeout=120)
        ours = json.loads(so)["generated_ids"] if rc == 0 else None
        tt.check(f"{name}: greedy trident generate of {what} = transformers' generate ({n} tokens: {theirs})",
                 ours == theirs, f"exit {rc} {se[-300:]}\ntrident      {ours}\ntransformers {theirs}")


def roundtrip_check(trident, src, ck, cfg, work, name, model, T, V, same_keys, must=()):
    """`trident convert --to hf --config cfg` of checkpoint ck into WORK/NAME-back against
    transformers' save_pretrained folder src: it runs; its tensors are src's bit for bit (the
    names of `must` among them); it loads as model's class with no missing or unexpected keys,
    the config values of same_keys equal and the same logits on 2 x T tokens: three checks."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    back = os.path.join(work, name + "-back")
    rc, _, err = tt.outputs([trident, "convert", "--to", "hf", "--input", ck, "--output", back, "--config", cfg],
                            timeout=300)
    if not tt.check(f"{name}: trident convert --to hf --config", rc == 0, err):
        return
    a, b = load_file(os.path.join(src, "model.safetensors")), load_file(os.path.join(back, "model.safetensors"))
    named = "".join(", " + m for m in must) + (" included" if must else "")
    tt.check(f"{name}: HF -> trident -> HF is bit-exact (fp32{named})",
             set(a) == set(b) and all(m in b for m in must) and all(torch.equal(a[k], b[k]) for k in a),
             f"keys only on one side: {sorted(set(a) ^ set(b))}; differing: "
             f"{[k for k in a if k in b and not torch.equal(a[k], b[k])]}")
    loaded, info = AutoModelForCausalLM.from_pretrained(back, output_loading_info=True)
    probe_tokens = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(probe_tokens).logits
        diff = ((loaded.eval()(probe_tokens).logits - ref).abs().max()).item()
    kind = type(model).__name__
    same_cfg = all(getattr(loaded.config, k) == getattr(model.config, k) for k in same_keys)
    tt.check(f"{name}: the export loads as {type(loaded).__name__} with no missing or unexpected keys, the "
             f"same config values, the same logits",
             type(loaded).__name__ == kind and not info["missing_keys"] and not info["unexpected_keys"]
             and same_cfg and diff == 0, f"{info}; config {loaded.config}; max |logit diff| {diff:.2e}")


def batch_grads(probe, cfg, work, name, model, T, V):
    """transformers' loss of trident's first batch of config cfg (hf_probe batch: 8 x T tokens,
    WORK/NAME-batch.bin) on model, and its gradients after backward: (loss, {parameter: grad})."""
    import subprocess
    import numpy as np
    import torch
    import torch.nn.functional as F
    batch_file = os.path.join(work, name + "-batch.bin")
    subprocess.run([probe, "batch", cfg, batch_file], check=True)
    batch = torch.from_numpy(np.fromfile(batch_file, dtype=np.int32).astype(np.int64)).view(4, 2, 2, T)
    inputs, targets = batch[:, 0].reshape(8, T), batch[:, 1].reshape(8, T)
    model.zero_grad()
    hf_loss = F.cross_entropy(model(inputs).logits.reshape(-1, V), targets.reshape(-1))
    hf_loss.backward()
    return hf_loss, {n: p.grad for n, p in model.named_parameters()}


def train_grads(trident, cfg, work, name, lname, world, tp, pp, extra, hf_loss):
    """One iteration of trident train of cfg in layout lname (world ranks, TP tp, PP pp, extra
    settings; WORK/NAME-LNAME) with its gradients dumped: the train check and, when it ran, the
    loss check against hf_loss. gather_grads of the dump, or None when train failed."""
    run = os.path.join(work, f"{name}-{lname}")
    r = tt.run(tt.train_cmd(trident, cfg, run, world, tp, pp, list(extra),
                            flags=["--quiet", "--dump-grads", os.path.join(run, "grads")]), timeout=600)
    if not tt.check(f"{name} {lname}: trident train from the import", r.returncode == 0,
                    f"exit {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-2500:]}"):
        return None
    loss = tt.losses(run)[0]
    rel_loss = abs(loss - hf_loss.item()) / hf_loss.item()
    tt.check(f"{name} {lname}: loss of iteration 1", rel_loss <= 1e-5,
             f"trident {loss:.7f} transformers {hf_loss.item():.7f} relative {rel_loss:.1e}", show=True)
    return gather_grads(os.path.join(run, "grads"))


def grads_check(trident, cfg, work, name, layouts, hf_loss, want_of, n_tensors, what="", must=()):
    """train_grads of each (lname, world, tp, pp, extra) of layouts against transformers' gradients
    (want_of(trident name): torch, trident's layout): one check of each layout that trained, that
    every gradient is within relative L2 1e-4, n_tensors of them, the names of must among them
    (`what`: the check's words after the count)."""
    for lname, world, tp, pp, extra in layouts:
        grads = train_grads(trident, cfg, work, name, lname, world, tp, pp, extra, hf_loss)
        if grads is None:
            continue
        worst, worst_name, bad = worst_grad(grads, lambda tname: want_of(tname).detach().double().numpy())
        tt.check(f"{name} {lname}: every gradient ({len(grads)} tensors{what})",
                 not bad and worst <= 1e-4 and len(grads) == n_tensors and all(m in grads for m in must),
                 f"worst relative L2 {worst:.2e} ({worst_name}); missing, NaN or misshapen: {bad}; "
                 f"{len(grads)} of {n_tensors}", show=True)


def lora_merge_check(trident, work, name, cfg, ck, src, L, modules, family):
    """A LoRA run of cfg's model from checkpoint ck (rank 2, alpha 4, every target, two
    iterations), exported --adapters-only and --merge-lora: adapter_config.json's r and alpha, the
    adapters exactly at model.layers.N.M for each M of modules (the family's PEFT names), and W
    (src's model.safetensors) + (4 / 2) B A the --merge-lora export's tensor within 1e-6 (so
    lora_B's rows are in the family's order), with B A moved off 0."""
    from safetensors.torch import load_file
    run_cfg = tt.write(os.path.join(work, name + "-lora.yaml"),
                       open(cfg).read().replace(f'  load: "{ck}"\n', f'  save: "{ck}-lora"\n')
                       .replace("  train_iters: 1\n", "  train_iters: 2\n") +  # (lr 0 at the last)
                       f'finetune:\n  load: "{ck}"\n'
                       "  lora: {rank: 2, alpha: 4.0, target_modules: [qkv, proj, fc1, fc2]}\n")
    r = tt.run(tt.train_cmd(trident, run_cfg, os.path.join(work, name + "-lora-run"), flags=["--quiet"]),
               timeout=300)
    if not tt.check(f"{name}: a LoRA run from the import", r.returncode == 0, r.stderr[-1500:]):
        return
    outs = {}
    for how in ("adapters-only", "merge-lora"):
        outs[how] = os.path.join(work, f"{name}-{how}")
        rc, _, err = tt.outputs([trident, "convert", "--to", "hf", "--config", run_cfg, "--input", ck + "-lora",
                                 "--output", outs[how], "--" + how], timeout=300)
        tt.check(f"{name}: convert --to hf --{how}", rc == 0, err)
    if not all(os.path.exists(os.path.join(d, f)) for d, f in ((outs["adapters-only"], "adapter_config.json"),
                                                                (outs["merge-lora"], "model.safetensors"))):
        return
    acfg = json.load(open(os.path.join(outs["adapters-only"], "adapter_config.json")))
    targets = sorted({m.split(".")[-1] for m in modules})
    tt.check(f"{name}: adapter_config.json targets {family}'s {', '.join(targets)}, r 2, lora_alpha 4",
             sorted(acfg.get("target_modules") or []) == targets and acfg.get("r") == 2 and
             acfg.get("lora_alpha") == 4, str(acfg))
    a = load_file(os.path.join(outs["adapters-only"], "adapter_model.safetensors"))
    base, merged = load_file(os.path.join(src, "model.safetensors")), \
        load_file(os.path.join(outs["merge-lora"], "model.safetensors"))
    want = {f"model.layers.{i}.{m}" for i in range(L) for m in modules}
    got = {k[len("base_model.model."):-len(".lora_A.weight")] for k in a if k.endswith(".lora_A.weight")}
    worst, moved = 0.0, 0.0
    for mod in sorted(got & want):
        A, B = a[f"base_model.model.{mod}.lora_A.weight"], a[f"base_model.model.{mod}.lora_B.weight"]
        W = base[mod + ".weight"]
        worst = max(worst, ((W + 2.0 * B @ A) - merged[mod + ".weight"]).abs().max().item())
        moved = max(moved, (B @ A).abs().max().item())
    tt.check(f"{name}: --adapters-only's {len(got)} adapters under {family}'s names: W + (4 / 2) B A is "
             f"the --merge-lora export's tensor within 1e-6", got == want and len(a) == 2 * len(want)
             and worst <= 1e-6 and moved > 1e-6,
             f"names {sorted(got ^ want)}; max |W + 2 BA - merged| {worst:.1e}; max |BA| {moved:.1e}", show=True)
