#!/usr/bin/python3
"""peft 0.7.1 + transformers 4.38.2 as the oracle of LoRA fine-tuning (issue 20, items 2-3).
A GPT-2 made here with random weights (nothing downloaded) is imported (trident convert
--from hf) as the frozen base (finetune.load); trident's initial adapters (Philox, B = 0) are
written in PEFT's format (hf_probe lora-init) and loaded by peft onto the same model:
  - 5 AdamW steps (clipping, weight decay) on the same batches: every iteration's loss
    (relative 1e-5) and every adapter gradient of every iteration (relative L2 1e-4), in one
    process and in DP2xTP2xPP2 with sequence parallelism;
  - trident convert --to hf --merge-lora: transformers' logits of the merged model = trident's
    model with adapters (1e-4); --adapters-only: peft loads adapter_config.json +
    adapter_model.safetensors onto the base with the same logits, and peft's own model after
    its 5 steps gives them too;
  - a GQA Llama, a 6-head Bloom, a GPT-NeoX (Pythia's switches), a Falcon-40B-shaped Falcon
    (8 heads in 2 key/value groups), a Phi, a GQA StableLM with q/k/v biases and a Gemma (heads of
    32 in a hidden size of 64, GeGLU) imported from transformers, LoRA-trained in TP2, and a
    Falcon-7B-shaped one (one norm, multi_query, 5 heads) and a multi-query GPT-BigCode in DP2, a GPT-J
    (rotary_dim 4 of a head of 16) in TP2, an MPT (6 heads, no biases) in TP2, an OPT (learned positions
    at embed_positions' row t + 2, ReLU, biases, tied) in TP2: their --adapters-only export
    in peft (Llama, OPT: q/k/v_proj and Llama's gate/up_proj from the fused layers' adapters) and their
    --merge-lora export in transformers give trident's logits.
usage: test_lora_oracle.py TRIDENT HF_PROBE WORKDIR VENV
The virtual environment is test_hf_oracle.py's (transformers 4.38.2 over Debian's torch 1.13);
peft 0.7.1 and accelerate 0.25.0 are added to it without dependencies (pip would otherwise
replace Debian's torch 1.13.0a0, which it reads as older than peft's torch>=1.13)."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

trident, probe, work, venv = sys.argv[1:5]
try:
    import peft  # noqa: F401
except ImportError:  # run again with the virtual environment's Python
    py = tt.peft_python(venv)
    os.execv(py, [py, os.path.abspath(__file__), *sys.argv[1:]])

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from peft import PeftModel  # noqa: E402
from transformers import (BloomConfig, BloomForCausalLM, FalconConfig, FalconForCausalLM, GPT2Config,  # noqa: E402
                          GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM)
from transformers import PhiConfig, PhiForCausalLM, StableLmConfig, StableLmForCausalLM  # noqa: E402
from transformers import GemmaConfig, GemmaForCausalLM, GPTBigCodeConfig, GPTBigCodeForCausalLM  # noqa: E402
from transformers import GPTJConfig, GPTJForCausalLM  # noqa: E402
from transformers import MptConfig, MptForCausalLM, OPTConfig, OPTForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
torch.set_num_threads(2)
work = tt.fresh_dir(work)
L, C, NH, T, V, R, ALPHA, ITERS = 2, 64, 4, 32, 300, 4, 8.0, 5
HS = C // NH
LR, WD, CLIP, B1, B2, EPS = 1.0e-2, 0.01, 1.0, 0.9, 0.999, 1e-8


def path(name):
    return os.path.join(work, name)


def convert(*args):
    rc, out, err = tt.outputs([trident, "convert", *args], timeout=300)
    if not tt.check(f"trident convert {' '.join(a for a in args if a.startswith('--'))}", rc == 0, err):
        tt.finish()
    return out


# ---------------------------------------------------------------- the base and the data
torch.manual_seed(20)
config = GPT2Config(n_layer=L, n_embd=C, n_head=NH, n_positions=T, vocab_size=V,
                    attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
base = GPT2LMHeadModel(config)
with torch.no_grad():  # every tensor away from its initial value
    for name, p in base.named_parameters():
        p.copy_(1.0 + 0.2 * torch.randn_like(p) if ".ln_" in name or "ln_f" in name else 0.1 * torch.randn_like(p))
src = path("hf-base")
base.save_pretrained(src)
ck = path("base")
convert("--from", "hf", "--input", src, "--output", ck)
prefix = tt.make_corpus(trident, work, 20, ["low", "rank", "adapter", "frozen", "base", "merge", "peft"],
                        300, 5, 50)
cfg = tt.write_config(path("lora.yaml"),
    model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=T, max_position_embeddings=T,
               vocab_size=V),
    training=dict(micro_batch_size=2, global_batch_size=8, train_iters=ITERS, lr=LR, lr_warmup_iters=0,
                  lr_decay_style="constant", weight_decay=WD, clip_grad=CLIP, adam_beta1=B1, adam_beta2=B2,
                  adam_eps=EPS, seed=3),
    data=dict(data_path=prefix, split="95,5,0"),
    parallel=dict(comm_timeout_s=120),
    finetune=dict(load=ck, lora=dict(rank=R, alpha=ALPHA, target_modules=["qkv", "proj", "fc1", "fc2"])))
adapter0 = path("adapter-init")
subprocess.run([probe, "lora-init", cfg, adapter0], check=True)
batch_file = path("batch.bin")  # the samples of iterations 1..5 in order
subprocess.run([probe, "batch", cfg, batch_file, f"training.global_batch_size={8 * ITERS}",
                "training.train_iters=1"], check=True)
batch = torch.from_numpy(np.fromfile(batch_file, dtype=np.int32).astype(np.int64)).view(4 * ITERS, 2, 2, T)


# ---------------------------------------------------------------- peft's 5 steps
def hf_name(tname):
    """trident adapter name -> peft parameter name"""
    layer, mod, ab = tname.split(".")[1], tname.split(".")[2], tname.split(".")[3][-1]
    hf = {"qkv": "attn.c_attn", "attn_proj": "attn.c_proj", "fc": "mlp.c_fc", "fc_proj": "mlp.c_proj"}[mod]
    return f"base_model.model.transformer.h.{layer}.{hf}.lora_{ab}.default.weight"


def as_trident(tname, g):
    """peft's tensor of trident adapter tname in trident's layout (qkv's B rows (h, qkv, d))"""
    if ".qkv.lora_B" in tname:
        return g.reshape(3, NH, HS, R).permute(1, 0, 2, 3).reshape(3 * C, R)
    return g


model = PeftModel.from_pretrained(GPT2LMHeadModel.from_pretrained(src), adapter0, is_trainable=True)
trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
tt.check("peft: the adapters alone are trainable (4 targets x A, B x 2 layers)",
         len(trainable) == 16 and all("lora_" in n for n, _ in trainable), [n for n, _ in trainable])
opt = torch.optim.AdamW([p for _, p in trainable], lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)
hf_losses, hf_grads = [], []
for it in range(ITERS):
    mb = batch[4 * it:4 * it + 4]
    inputs, targets = mb[:, 0].reshape(8, T), mb[:, 1].reshape(8, T)
    opt.zero_grad()
    loss = F.cross_entropy(model(inputs).logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    hf_losses.append(loss.item())
    hf_grads.append({n: p.grad.detach().clone() for n, p in trainable})
    torch.nn.utils.clip_grad_norm_([p for _, p in trainable], CLIP)
    opt.step()


def gather_grads(d):
    """Whole tensors by name from every rank's dump (shards placed)."""
    full = {}
    for fn in sorted(f for f in os.listdir(d) if f.endswith(".json")):
        meta = json.load(open(os.path.join(d, fn)))
        flat = np.fromfile(os.path.join(d, fn[:-5] + ".bin"), dtype=np.float32)
        for t in meta["tensors"]:
            part = flat[t["offset"]:t["offset"] + t["rows"] * t["cols"]].reshape(t["rows"], t["cols"])
            whole = full.setdefault(t["name"], np.full((t["full_rows"], t["full_cols"]), np.nan))
            r, c = (meta["tp_rank"] * t["rows"], 0) if t["split_dim"] == 0 else (0, meta["tp_rank"] * t["cols"]) \
                if t["split_dim"] == 1 else (0, 0)
            whole[r:r + t["rows"], c:c + t["cols"]] = part
    return full


# ---------------------------------------------------------------- trident, against peft
for name, world, tp, pp, extra in [("one", 1, None, None, ()),
                                   ("d2t2p2-sp", 8, 2, 2, ("parallel.sequence_parallel=true",))]:
    out = path(name)
    sets = [*extra, f"checkpoint.save={path(name + '-ckpt')}"]
    r = tt.run(tt.train_cmd(trident, cfg, out, world, tp, pp, sets,
                            flags=["--quiet", "--dump-grads", path(name + "-grads"), "--dump-grads-iters",
                                   str(ITERS)]), timeout=300)
    if not tt.check(f"{name}: trident train exit 0", r.returncode == 0, f"{r.stdout[-1500:]}\n{r.stderr[-2500:]}"):
        tt.finish()
    losses = tt.losses(out)
    rel = max(abs(a - b) / b for a, b in zip(losses, hf_losses))
    tt.check(f"{name}: the loss of each of {ITERS} iterations = peft's", len(losses) == ITERS and rel <= 1e-5,
             f"worst relative {rel:.1e}; trident {losses}; peft {hf_losses}", show=True)
    worst, where, n_tensors = 0.0, "", set()
    for it in range(ITERS):
        d = path(name + "-grads") + ("" if it == 0 else f"/iter_{it + 1}")
        grads = gather_grads(d)
        n_tensors.add(len(grads))
        for tname, g in grads.items():
            want = as_trident(tname, hf_grads[it][hf_name(tname)]).double().numpy()
            err = np.linalg.norm(g - want) / max(np.linalg.norm(want), 1e-8)
            if np.isnan(g).any() or err > worst:
                worst, where = (np.inf if np.isnan(g).any() else err), f"{tname} iteration {it + 1}"
    tt.check(f"{name}: every adapter gradient of every iteration = peft's (16 tensors x {ITERS})",
             n_tensors == {16} and worst <= 1e-4, f"worst relative L2 {worst:.2e} ({where})", show=True)

# ---------------------------------------------------------------- exports
tokens = batch[:2, 0].reshape(4, T)
tokens.numpy().astype(np.int32).tofile(path("tokens.bin"))
ck_lora = path("d2t2p2-sp-ckpt")
cfg_trained = tt.write_config(path("lora-trained.yaml"),
    model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=T, max_position_embeddings=T,
               vocab_size=V),
    training=dict(micro_batch_size=2, global_batch_size=8, train_iters=1, lr=1e-3),
    data=dict(data_path=prefix),
    checkpoint=dict(load=ck_lora),
    finetune=dict(load=ck, lora=dict(rank=R, alpha=ALPHA)))
subprocess.run([probe, "logits-config", cfg_trained, path("tokens.bin"), "4", path("logits.bin")], check=True)
ours = torch.from_numpy(np.fromfile(path("logits.bin"), dtype=np.float32).reshape(4, T, V))


def relative(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


model.eval()
with torch.no_grad():
    rel = relative(ours, model(tokens).logits)
tt.check("trident's model after 5 iterations in D2xT2xP2 = peft's after its 5 steps (logits)", rel <= 1e-4,
         f"max |diff| / max |logit| = {rel:.2e}", show=True)
merged = path("hf-merged")
convert("--to", "hf", "--config", cfg_trained, "--input", ck_lora, "--output", merged, "--merge-lora")
with torch.no_grad():
    rel = relative(GPT2LMHeadModel.from_pretrained(merged).eval()(tokens).logits, ours)
tt.check("--merge-lora: transformers' logits of the merged model = trident's with adapters", rel <= 1e-4,
         f"max |diff| / max |logit| = {rel:.2e}", show=True)
adapters = path("hf-adapters")
convert("--to", "hf", "--config", cfg_trained, "--input", ck_lora, "--output", adapters, "--adapters-only")
loaded = PeftModel.from_pretrained(GPT2LMHeadModel.from_pretrained(src), adapters).eval()
with torch.no_grad():
    rel = relative(loaded(tokens).logits, ours)
tt.check("--adapters-only: peft loads the adapter onto the base with trident's logits", rel <= 1e-4
         and sorted(os.listdir(adapters)) == ["adapter_config.json", "adapter_model.safetensors"],
         f"max |diff| / max |logit| = {rel:.2e}; files {sorted(os.listdir(adapters))}", show=True)

# a config of other target_modules than the run's: refused, where the export dropped the
# other adapters silently before (found fuzzing T_LORA's inputs by hand); the manifest's lora
# line names both lists
other = tt.write_config(path("lora-other.yaml"),
    model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=T,
               max_position_embeddings=T, vocab_size=V),
    training=dict(micro_batch_size=2, global_batch_size=8, train_iters=1, lr=1e-3),
    data=dict(data_path=prefix),
    finetune=dict(load=ck, lora=dict(rank=R, alpha=ALPHA, target_modules=["qkv"])))
for mode in ("--adapters-only", "--merge-lora"):
    out = path("hf-other")
    rc, _, err = tt.outputs([trident, "convert", "--to", "hf", "--config", other, "--input",
                             ck_lora, "--output", out, mode], timeout=120)
    tt.check(f"{mode} with a config of other target_modules: non-zero exit naming both lists",
             rc != 0 and "finetune.lora.target_modules [qkv] (the checkpoint's: [qkv,proj,fc1,fc2])"
             in err and not os.path.exists(out), f"rc={rc} {err[-800:]}")


def mix64(x):
    m = (1 << 64) - 1
    x ^= x >> 30
    x = (x * 0xbf58476d1ce4e5b9) & m
    x ^= x >> 27
    x = (x * 0x94d049bb133111eb) & m
    return x ^ (x >> 31)


# adapters finite but so large that W + (alpha / r) B A overflows (checksums recomputed, as a
# run whose adapters blew up would have saved them): --merge-lora wrote infinite weights into
# model.safetensors without a word (found fuzzing T_LORA's harness oracle by hand)
huge = path("lora-huge")
shutil.copytree(ck_lora, huge)
tracker = int(open(os.path.join(huge, "latest_checkpointed_iteration.txt")).read())
it_dir = os.path.join(huge, f"iter_{tracker:07d}")
manifest = open(os.path.join(it_dir, "manifest.txt")).read().split("\n")
for ab in "AB":
    name = f"layers.0.attn_proj.lora_{ab}"
    i = next(k for k, ln in enumerate(manifest) if ln.startswith(f"tensor {name} "))
    rows, cols = map(int, manifest[i].split()[2:4])
    words = np.fromfile(os.path.join(it_dir, name), dtype=np.uint32)
    words[:rows * cols] = np.float32(3e38).view(np.uint32)
    words.tofile(os.path.join(it_dir, name))
    n = rows * cols
    sums = [sum(mix64(mix64(j) ^ int(w)) for j, w in enumerate(words[a * n:(a + 1) * n])) & ((1 << 64) - 1)
            for a in range(3)]
    manifest[i] = f"tensor {name} {rows} {cols} " + " ".join(f"{x:016x}" for x in sums)
open(os.path.join(it_dir, "manifest.txt"), "w").write("\n".join(manifest))
out = path("hf-huge")
rc, _, err = tt.outputs([trident, "convert", "--to", "hf", "--config", cfg_trained, "--input", huge,
                         "--output", out, "--merge-lora"], timeout=120)
tt.check("--merge-lora of adapters too large to merge: non-zero exit naming them, no output",
         rc != 0 and "merging layers.0.attn_proj.lora_A and layers.0.attn_proj.lora_B" in err
         and "too large" in err and not os.path.exists(out), f"rc={rc} {err[-800:]}")

# ---------------------------------------------------------------- Llama (GQA) and Bloom exports
def randomize(m):
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in n or "ln_f" in n or ".ln_" in n
                    else 0.1 * torch.randn_like(p))


torch.manual_seed(21)
llama = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=L, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=T, vocab_size=V,
                                     rms_norm_eps=1e-6, tie_word_embeddings=False))
bloom = BloomForCausalLM(BloomConfig(hidden_size=48, n_layer=L, n_head=6, vocab_size=V, layer_norm_epsilon=1e-5))
neox = GPTNeoXForCausalLM(GPTNeoXConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=L,
                                        num_attention_heads=4, max_position_embeddings=T, vocab_size=V,
                                        rotary_pct=0.25, hidden_act="gelu", use_parallel_residual=True))
# Falcon-40B's layer (ln_attn, ln_mlp, 8 heads in 2 key/value groups, no biases) in TP2; Falcon-7B's
# (one input_layernorm, one key/value head: TP must divide the groups) in DP2
falcon40 = FalconForCausalLM(FalconConfig(hidden_size=64, num_hidden_layers=L, num_attention_heads=8, num_kv_heads=2,
                                          new_decoder_architecture=True, bias=False, max_position_embeddings=T,
                                          vocab_size=V))
falcon7 = FalconForCausalLM(FalconConfig(hidden_size=40, num_hidden_layers=L, num_attention_heads=5,
                                         new_decoder_architecture=False, multi_query=True, parallel_attn=True,
                                         bias=False, max_position_embeddings=T, vocab_size=V))
# Phi-2's layer (one input_layernorm, q/k/v_proj of 4 heads in 2 key/value groups, rotary over 0.4 of
# a head of 16 (6 dimensions), lm_head.bias) in TP2
phi = PhiForCausalLM(PhiConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=L, num_attention_heads=4,
                               num_key_value_heads=2, partial_rotary_factor=0.4, max_position_embeddings=T,
                               vocab_size=V))
# StableLM's layer (LayerNorm with SwiGLU, q/k/v_proj with biases of 4 heads in 2 key/value groups,
# rotary over a quarter of a head of 16) in TP2: the Llama's adapter names
stablelm = StableLmForCausalLM(StableLmConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=L,
                                              num_attention_heads=4, num_key_value_heads=2, use_qkv_bias=True,
                                              partial_rotary_factor=0.25, max_position_embeddings=T, vocab_size=V))
# Gemma's layer (4 heads of head_dim 32 in a hidden size of 64: kv_channels, 2 key/value groups,
# GeGLU, norms of 1 + weight, the embedding times 8, tied) in TP2: the Llama's adapter names, q/k/v
# split by the head size
gemma = GemmaForCausalLM(GemmaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=L, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=32, max_position_embeddings=T, vocab_size=V))
# GPT-BigCode's layer (StarCoder's multi_query: 4 query heads, one key/value head; nn.Linear, so
# GPT-2's names without fan_in_fan_out, c_attn's rows trident's) in DP2
bigcode = GPTBigCodeForCausalLM(GPTBigCodeConfig(n_embd=64, n_layer=L, n_head=4, n_positions=T, vocab_size=V,
                                                 multi_query=True))
# GPT-J's layer (one ln_1, q/k/v_proj and out_proj without biases, fc_in / fc_out with them,
# rotary_dim 4 of a head of 16 in interleaved pairs, lm_head.bias) in TP2: q/k/v_proj cut from the
# fused qkv's adapter, q's and k's rotary rows permuted back to GPT-J's order
gptj = GPTJForCausalLM(GPTJConfig(n_embd=64, n_layer=L, n_head=4, rotary_dim=4, n_positions=T, vocab_size=V))
# MPT's layer (norms without biases, no linear biases, ALiBi of 6 heads, the exact GELU, tied) in TP2:
# Wqkv's lora_B rows ({q, k, v}, head, d) as GPT-2's c_attn's, nn.Linear
mpt = MptForCausalLM(MptConfig(d_model=48, n_layers=L, n_heads=6, max_seq_len=T, vocab_size=V))
# OPT's layer (self_attn_layer_norm, q/k/v_proj and out_proj, fc1 / fc2 of ffn_dim 96 with ReLU,
# embed_positions' 2 offset rows, biases, tied) in TP2: q/k/v_proj cut from the fused qkv's adapter
opt = OPTForCausalLM(OPTConfig(hidden_size=64, num_hidden_layers=L, num_attention_heads=4, ffn_dim=96,
                               max_position_embeddings=T, vocab_size=V))
FALCON_KEYS = dict(normalization="LayerNorm", position_embedding_type="rope", add_bias_linear=False,
                   parallel_residual=True, gelu_approximate="none", max_position_embeddings=T)
FAMILIES = [("llama-gqa", llama, LlamaForCausalLM,
             dict(normalization="RMSNorm", position_embedding_type="rope", swiglu=True, ffn_hidden_size=96,
                  num_query_groups=2, untie_embeddings_and_output_weights=True, add_bias_linear=False,
                  layernorm_epsilon=1e-6, num_attention_heads=4, hidden_size=64, max_position_embeddings=T)),
            ("bloom", bloom, BloomForCausalLM,
             dict(position_embedding_type="alibi", embedding_layernorm=True, num_attention_heads=6, hidden_size=48,
                  max_position_embeddings=2048)),
            ("neox", neox, GPTNeoXForCausalLM,
             dict(normalization="LayerNorm", position_embedding_type="rope", rotary_percent=0.25, ffn_hidden_size=160,
                  untie_embeddings_and_output_weights=True, parallel_residual=True, gelu_approximate="none",
                  num_attention_heads=4, hidden_size=64, max_position_embeddings=T)),
            ("falcon-40b-gqa", falcon40, FalconForCausalLM,
             dict(FALCON_KEYS, num_attention_heads=8, num_query_groups=2, hidden_size=64)),
            ("falcon-7b-shared-norm-mq", falcon7, FalconForCausalLM,
             dict(FALCON_KEYS, num_attention_heads=5, num_query_groups=1, hidden_size=40, parallel_shared_norm=True)),
            ("phi-gqa", phi, PhiForCausalLM,
             dict(normalization="LayerNorm", position_embedding_type="rope", rotary_percent=0.375, ffn_hidden_size=160,
                  num_query_groups=2, untie_embeddings_and_output_weights=True, output_layer_bias=True,
                  parallel_residual=True, parallel_shared_norm=True, num_attention_heads=4, hidden_size=64,
                  max_position_embeddings=T)),
            ("stablelm-gqa", stablelm, StableLmForCausalLM,
             dict(normalization="LayerNorm", position_embedding_type="rope", rotary_percent=0.25, swiglu=True,
                  ffn_hidden_size=96, num_query_groups=2, untie_embeddings_and_output_weights=True,
                  add_bias_linear=False, add_qkv_bias=True, num_attention_heads=4, hidden_size=64,
                  max_position_embeddings=T)),
            ("gemma-head-32-gqa", gemma, GemmaForCausalLM,
             dict(normalization="RMSNorm", position_embedding_type="rope", geglu=True, gelu_approximate="none",
                  ffn_hidden_size=96, num_query_groups=2, kv_channels=32, apply_layernorm_1p=True,
                  embedding_multiplier=8.0, add_bias_linear=False, layernorm_epsilon=1e-6, num_attention_heads=4,
                  hidden_size=64, max_position_embeddings=T)),
            ("bigcode-multi-query", bigcode, GPTBigCodeForCausalLM,
             dict(normalization="LayerNorm", position_embedding_type="learned_absolute", num_query_groups=1,
                  num_attention_heads=4, hidden_size=64, max_position_embeddings=T)),
            ("gptj-rot4", gptj, GPTJForCausalLM,
             dict(normalization="LayerNorm", position_embedding_type="rope", rotary_percent=0.25,
                  untie_embeddings_and_output_weights=True, output_layer_bias=True, add_bias_linear=False,
                  add_mlp_bias=True, parallel_residual=True, parallel_shared_norm=True, num_attention_heads=4,
                  hidden_size=64, max_position_embeddings=T)),
            ("mpt-6h", mpt, MptForCausalLM,
             dict(normalization="LayerNorm", position_embedding_type="alibi", add_bias_linear=False,
                  layernorm_bias=False, gelu_approximate="none", num_attention_heads=6, hidden_size=48,
                  max_position_embeddings=T)),
            ("opt-relu", opt, OPTForCausalLM,
             dict(normalization="LayerNorm", position_embedding_type="learned_absolute", ffn_hidden_size=96,
                  relu=True, num_attention_heads=4, hidden_size=64, max_position_embeddings=T))]
for fname, fmodel, cls, keys in FAMILIES:
    randomize(fmodel)
    fsrc, fck = path(fname + "-hf"), path(fname + "-base")
    fmodel.save_pretrained(fsrc)
    convert("--from", "hf", "--input", fsrc, "--output", fck)
    fcfg = tt.write_config(path(fname + ".yaml"),
        model={**dict(num_layers=L, seq_length=T, vocab_size=V), **keys},
        training=dict(micro_batch_size=2, global_batch_size=8, train_iters=3, lr=2.0e-2, lr_warmup_iters=0,
                      lr_decay_style="constant", seed=3),
        data=dict(data_path=prefix, split="95,5,0"),
        parallel=dict(comm_timeout_s=120),
        checkpoint=dict(save=path(fname + "-lora")),
        finetune=dict(load=fck, lora=dict(rank=R, alpha=ALPHA)))
    tp = 1 if keys.get("num_query_groups") == 1 else 2
    r = tt.run(tt.train_cmd(trident, fcfg, path(fname + "-run"), 2, tp, 1, flags=["--quiet"]), timeout=300)
    if not tt.check(f"{fname}: LoRA training in {'TP2' if tp == 2 else 'DP2'} exit 0", r.returncode == 0,
                    r.stderr[-2000:]):
        continue
    trained = tt.write_config(path(fname + "-trained.yaml"),
        model={**dict(num_layers=L, seq_length=T, vocab_size=V), **keys},
        training=dict(micro_batch_size=2, global_batch_size=8, train_iters=1, lr=1e-3),
        data=dict(data_path=prefix), checkpoint=dict(load=path(fname + "-lora")),
        finetune=dict(load=fck, lora=dict(rank=R, alpha=ALPHA)))
    subprocess.run([probe, "logits-config", trained, path("tokens.bin"), "4", path("flogits.bin")], check=True)
    fours = torch.from_numpy(np.fromfile(path("flogits.bin"), dtype=np.float32).reshape(4, T, V))
    with torch.no_grad():
        moved = relative(fours, fmodel.eval()(tokens).logits)
    fad, fmerged = path(fname + "-adapters"), path(fname + "-merged")
    convert("--to", "hf", "--config", trained, "--input", path(fname + "-lora"), "--output", fad, "--adapters-only")
    convert("--to", "hf", "--config", trained, "--input", path(fname + "-lora"), "--output", fmerged, "--merge-lora")
    with torch.no_grad():
        rel_a = relative(PeftModel.from_pretrained(cls.from_pretrained(fsrc), fad).eval()(tokens).logits, fours)
        rel_m = relative(cls.from_pretrained(fmerged).eval()(tokens).logits, fours)
    tt.check(f"{fname}: --adapters-only in peft and --merge-lora in transformers give trident's logits "
             f"(the adapters moved them by {moved:.1e})", rel_a <= 1e-4 and rel_m <= 1e-4 and moved > 1e-3,
             f"adapters {rel_a:.2e}, merged {rel_m:.2e}", show=True)

rc, so, se = tt.outputs([trident, "convert", "--to", "hf", "--input", ck_lora, "--output", path("x"),
                         "--merge-lora"])
tt.check("--merge-lora without --config: exit 2 naming --config", rc == 2 and "--config" in se, se)
tt.finish("lora-oracle: all checks passed")
