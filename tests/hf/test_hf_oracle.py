#!/usr/bin/python3
"""Hugging Face transformers as the oracle of `trident convert` (issue 16). A GPT-2 made here
from a GPT2Config with random weights (nothing downloaded), saved by save_pretrained:
  - HF -> trident: the logits of the imported checkpoint match transformers' (relative 1e-4);
    the loss of iteration 1 and every gradient after import into DP2xTP2xPP2 (and again with
    sequence parallelism and ZeRO-1) match transformers' on the same batch (loss 1e-5,
    gradients relative L2 1e-4); checkpoints transformers wrote in bf16 and in shards, and
    GPT2Model-style files (no 'transformer.' prefix, attn.bias buffers), import too;
  - trident -> HF: after 20 iterations in DP2xTP2xPP2 the export loads with
    AutoModelForCausalLM.from_pretrained with no missing, unexpected or mismatched keys and
    gives trident's logits (1e-4); greedy generate gives trident generate --temperature 0's
    tokens; a sharded export loads to the same logits; a bf16 export is within bf16 rounding;
  - HF -> trident -> HF is bit-exact in fp32.
usage: test_hf_oracle.py TRIDENT HF_PROBE WORKDIR VENV
The virtual environment (Debian's python3 with its site packages, so its torch 1.13, and
transformers 4.38.2 from PyPI) is made on the first run and kept."""
import copy
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, venv = sys.argv[1:5]
try:
    import transformers  # noqa: F401
except ImportError:  # run again with the virtual environment's Python
    py = tt.venv_python(venv, tt.HF_PACKAGES, "transformers")
    os.execv(py, [py, os.path.abspath(__file__), *sys.argv[1:]])

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
torch.set_num_threads(2)
work = tt.fresh_dir(work)
L, C, NH, P, V, T = 4, 64, 4, 64, 300, 32  # V: byte tokens fit, and TP pads it (to 512)
HS = C // NH


def convert(*args):
    rc, out, err = tt.outputs([trident, "convert", *args], timeout=300)
    if not tt.check(f"trident convert {' '.join(args[:2])} -> {os.path.basename(args[args.index('--output') + 1])}",
                    rc == 0, err):
        tt.finish()
    return out


def trident_logits(ckpt, tokens):
    """(B, T, V) logits of the latest checkpoint of ckpt (hf_probe: the forward pass)."""
    B, n = tokens.shape
    tokens.numpy().astype(np.int32).tofile(os.path.join(work, "tokens.bin"))
    out = os.path.join(work, "logits.bin")
    subprocess.run([probe, "logits", ckpt, os.path.join(work, "tokens.bin"), str(B), str(n), out], check=True)
    return torch.from_numpy(np.fromfile(out, dtype=np.float32).reshape(B, n, -1))


def relative(a, b):
    """max |a - b| / max |b|"""
    return ((a - b).abs().max() / b.abs().max()).item()


# ---------------------------------------------------------------- the model
torch.manual_seed(16)
config = GPT2Config(n_layer=L, n_embd=C, n_head=NH, n_positions=P, vocab_size=V,
                    attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
model = GPT2LMHeadModel(config).eval()
with torch.no_grad():  # every tensor away from its initial value (LayerNorm 1 and 0, biases 0)
    for name, p in model.named_parameters():
        p.copy_(1.0 + 0.2 * torch.randn_like(p) if name.endswith("ln_1.weight") or name.endswith("ln_2.weight")
                or name.endswith("ln_f.weight") else 0.1 * torch.randn_like(p))
src = os.path.join(work, "hf")
model.save_pretrained(src)
ck = os.path.join(work, "ck")
convert("--from", "hf", "--input", src, "--output", ck)
tokens = torch.randint(0, V, (3, P), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    ref = model(tokens).logits
rel = relative(trident_logits(ck, tokens), ref)
tt.check("HF -> trident: logits of 3 x 64 tokens", rel <= 1e-4, f"max |diff| / max |logit| = {rel:.2e}", show=True)

# ---------------------------------------------------------------- round trip
back = os.path.join(work, "hf-back")
convert("--to", "hf", "--input", ck, "--output", back)
a, b = load_file(os.path.join(src, "model.safetensors")), load_file(os.path.join(back, "model.safetensors"))
tt.check("HF -> trident -> HF is bit-exact (fp32)", set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a),
         f"keys only on one side: {sorted(set(a) ^ set(b))}; differing: {[k for k in a if k in b and not torch.equal(a[k], b[k])]}",
         show=False)

# ---------------------------------------------------------------- other files transformers writes
shards = os.path.join(work, "hf-bf16-shards")
copy.deepcopy(model).to(torch.bfloat16).save_pretrained(shards, max_shard_size="300KB")
n_files = len([f for f in os.listdir(shards) if f.endswith(".safetensors")])
ck_bf16 = os.path.join(work, "ck-bf16")
convert("--from", "hf", "--input", shards, "--output", ck_bf16)
with torch.no_grad():
    ref16 = GPT2LMHeadModel.from_pretrained(shards, torch_dtype=torch.float32).eval()(tokens).logits
rel = relative(trident_logits(ck_bf16, tokens), ref16)
tt.check(f"import of transformers' bf16 checkpoint in {n_files} shards", n_files >= 2 and rel <= 1e-4,
         f"{n_files} shards, relative {rel:.2e}", show=True)

bare = tt.fresh_dir(os.path.join(work, "hf-bare"))
state = {k[len("transformer."):]: v.contiguous() for k, v in model.state_dict().items() if k.startswith("transformer.")}
for i in range(L):  # the buffers of older GPT-2 checkpoints (the hub's gpt2)
    state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(P, P)).view(1, 1, P, P)
    state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
save_file(state, os.path.join(bare, "model.safetensors"), metadata={"format": "pt"})
config.save_pretrained(bare)
ck_bare = os.path.join(work, "ck-bare")
convert("--from", "hf", "--input", bare, "--output", ck_bare)
manifest = lambda d: open(os.path.join(d, "release", "manifest.txt")).read()  # noqa: E731
tt.check("import of GPT2Model names with attn.bias buffers = the import of save_pretrained's file",
         manifest(ck_bare) == manifest(ck))

# ---------------------------------------------------------------- training from the import
prefix = tt.make_corpus(trident, work, 16, ["hugging", "face", "tensor", "safe", "pipeline", "token", "convert"],
                        300, 5, 50)
cfg = tt.write_config(os.path.join(work, "train.yaml"),
    model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=T, max_position_embeddings=P,
               vocab_size=V),
    training=dict(micro_batch_size=2, global_batch_size=8, train_iters=1, lr=1.0e-3, lr_warmup_iters=0,
                  weight_decay=0.01, clip_grad=1.0, seed=3),
    data=dict(data_path=prefix, split="95,5,0"),
    checkpoint=dict(load=ck),
    parallel=dict(comm_timeout_s=120))
batch_file = os.path.join(work, "batch.bin")
subprocess.run([probe, "batch", cfg, batch_file], check=True)
batch = torch.from_numpy(np.fromfile(batch_file, dtype=np.int32).astype(np.int64)).view(4, 2, 2, T)  # (mb, in/tgt, B, T)
inputs, targets = batch[:, 0].reshape(8, T), batch[:, 1].reshape(8, T)
model.zero_grad()
logits = model(inputs).logits
hf_loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
hf_loss.backward()
G = {n: p.grad for n, p in model.named_parameters()}


def hf_grad_as_trident(name):
    """transformers' gradient of trident tensor `name`, in trident's layout (rows, cols)."""
    if name in ("wte", "wpe"):
        return G[f"transformer.{name}.weight"]
    if name.startswith("lnf."):
        return G[f"transformer.ln_f.{name[4:]}"].view(-1, 1)
    layer, rest = name.split(".", 2)[1:]
    h = f"transformer.h.{layer}."
    simple = {"ln1.weight": "ln_1.weight", "ln1.bias": "ln_1.bias", "ln2.weight": "ln_2.weight",
              "ln2.bias": "ln_2.bias", "attn_proj.bias": "attn.c_proj.bias", "fc.bias": "mlp.c_fc.bias",
              "fc_proj.bias": "mlp.c_proj.bias"}
    conv = {"attn_proj.weight": "attn.c_proj.weight", "fc.weight": "mlp.c_fc.weight",
            "fc_proj.weight": "mlp.c_proj.weight"}
    if rest in simple:
        return G[h + simple[rest]].view(-1, 1)
    if rest in conv:
        return G[h + conv[rest]].t()
    if rest == "qkv.weight":  # [in, (q|k|v, head, d)] -> rows (head, q|k|v, d)
        return G[h + "attn.c_attn.weight"].t().reshape(3, NH, HS, C).permute(1, 0, 2, 3).reshape(3 * C, C)
    if rest == "qkv.bias":
        return G[h + "attn.c_attn.bias"].reshape(3, NH, HS).permute(1, 0, 2).reshape(3 * C, 1)
    raise KeyError(name)


def train_3d(name, iters, extra=(), flags=()):
    out = os.path.join(work, name)
    r = tt.run(tt.train_cmd(trident, cfg, out, 8, 2, 2, [f"training.train_iters={iters}", *extra],
                            flags=["--quiet", *flags]), timeout=600)
    if not tt.check(f"{name}: trident train D2xT2xP2 from the import", r.returncode == 0,
                    f"exit {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-2500:]}"):
        tt.finish()
    return out


for name, extra in [("grads-3d", ()),
                    ("grads-3d-sp-zero1", ("parallel.sequence_parallel=true", "parallel.use_distributed_optimizer=true"))]:
    out = train_3d(name, 1, extra, ["--dump-grads", os.path.join(work, name, "grads")])
    loss = tt.losses(out)[0]
    rel_loss = abs(loss - hf_loss.item()) / hf_loss.item()
    tt.check(f"{name}: loss of iteration 1", rel_loss <= 1e-5,
             f"trident {loss:.7f} transformers {hf_loss.item():.7f} relative {rel_loss:.1e}", show=True)
    grads = hff.gather_grads(os.path.join(out, "grads"))
    worst, worst_name, bad = 0.0, "", []
    for tname, g in grads.items():
        want = hf_grad_as_trident(tname).detach().double().numpy()
        got = g[:want.shape[0]]
        if np.isnan(got).any() or (tname == "wte" and np.abs(g[V:]).max() != 0):
            bad.append(tname)
            continue
        rel_g = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
        if rel_g > worst:
            worst, worst_name = rel_g, tname
    tt.check(f"{name}: every gradient ({len(grads)} tensors, the vocabulary padding's zero)",
             not bad and worst <= 1e-4 and len(grads) == 4 + 12 * L,
             f"worst relative L2 {worst:.2e} ({worst_name}); missing or NaN: {bad}", show=True)

# ---------------------------------------------------------------- trident -> HF after training
out = train_3d("train-20", 20, [f"checkpoint.save={os.path.join(work, 'ck20')}", "training.lr=3.0e-3"])
ck20 = os.path.join(work, "ck20")
exp = os.path.join(work, "hf-20")
convert("--to", "hf", "--input", ck20, "--output", exp)
m20, info = AutoModelForCausalLM.from_pretrained(exp, output_loading_info=True)
m20.eval()
tt.check("trident -> HF: from_pretrained with no missing, unexpected or mismatched keys",
         not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")), info)
with torch.no_grad():
    ref20 = m20(tokens).logits
tl20 = trident_logits(ck20, tokens)
rel = relative(tl20, ref20)
tt.check("trident -> HF after 20 iterations in D2xT2xP2: logits", rel <= 1e-4,
         f"max |diff| / max |logit| = {rel:.2e}", show=True)

prompt = [int(x) for x in tokens[0, :5]]
rc, so, se = tt.outputs([trident, "generate", ck20, "--prompt-ids", ",".join(map(str, prompt)),
                         "--max-new-tokens", "24", "--temperature", "0", "--json"], timeout=120)
ours = json.loads(so)["generated_ids"] if rc == 0 else None
with torch.no_grad():
    theirs = m20.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False,
                          pad_token_id=0)[0, len(prompt):].tolist()
tt.check("greedy: transformers' generate = trident generate --temperature 0 (24 tokens)", ours == theirs,
         f"exit {rc} {se[-300:]}\ntrident      {ours}\ntransformers {theirs}")

sharded = os.path.join(work, "hf-20-sharded")
convert("--to", "hf", "--input", ck20, "--output", sharded, "--max-shard-size", "250KB")
ms, info = AutoModelForCausalLM.from_pretrained(sharded, output_loading_info=True)
with torch.no_grad():
    same = torch.equal(ms.eval()(tokens).logits, ref20)
tt.check("a sharded export loads (index and shards) to the same logits",
         same and os.path.exists(os.path.join(sharded, "model.safetensors.index.json"))
         and not any(info[k] for k in ("missing_keys", "unexpected_keys")), info)
bf = os.path.join(work, "hf-20-bf16")
convert("--to", "hf", "--input", ck20, "--output", bf, "--dtype", "bf16")
mb = AutoModelForCausalLM.from_pretrained(bf, torch_dtype="auto").eval()
with torch.no_grad():
    rel = relative(mb(tokens).logits.float(), ref20)
tt.check("a bf16 export loads as bfloat16 within bf16 rounding of the fp32 logits",
         mb.dtype == torch.bfloat16 and rel <= 3e-2, f"dtype {mb.dtype}, relative {rel:.2e}", show=True)
tt.finish("hf-oracle: all checks passed")
