#!/usr/bin/python3
"""Hugging Face transformers 4.38.2 as the oracle of Mixtral (MixtralForCausalLM: Mixtral-8x7B, -8x22B).
Two tiny MixtralForCausalLM made here from configs with random weights (nothing downloaded), 2 layers of
4 experts, 2 a token, hidden 48 of 4 heads: (a) 2 key/value heads (GQA), untied, sliding_window null,
router_aux_loss_coef 0.02; (b) 1 key/value head, tied, a sliding_window of T below
max_position_embeddings 2T (kept as model.sliding_window). The routers' weights are drawn 10x larger
than the rest, so that the gate logits are spread: the check `routing margins` measures, on every
sequence the test runs through transformers, the smallest gap between a token's 2nd and 3rd gate
logit (>= 1e-4: float32 rounding cannot flip an expert choice). Each is saved with save_pretrained
and imported with `trident convert --from hf` (num_experts, moe_router_topk, moe_router_pre_softmax
false, moe_aux_loss_coeff printed); trident's logits match transformers' within 1e-5 of the largest;
greedy `trident generate` of the folder gives transformers' tokens; `trident eval` of the folder its
nll; `trident convert --to hf --config` of the import is bit-exact to transformers' files (fp32) and
loads as MixtralForCausalLM with no missing or unexpected keys, the same config values (the expert
keys, router_aux_loss_coef among them) and logits; the model saved in bfloat16 goes HF -> trident
-> HF (--dtype bf16) bit for bit; an export in shards imports to the same checkpoint; trident's loss
of iteration 1 and every gradient (the aux and z losses' coefficients 0: transformers' balancing
loss is another formula, over every layer's tokens at once), in one process and (a) in D2xT2xP2 with
sequence parallelism, and from finetune.load of the HF folder, match transformers' on the same batch
(loss 1e-5 relative, gradients relative L2 1e-4).
usage: test_hf_mixtral_oracle.py TRIDENT HF_PROBE WORKDIR VENV [--quick]
--quick: the one-process run only."""
import copy
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import MixtralConfig, MixtralForCausalLM  # noqa: E402

L, V, T, F, C, NH, E, K = 2, 300, 32, 64, 48, 4, 4, 2  # V: byte tokens fit
HS = C // NH
margins = []  # (what, smallest gap between a token's K-th and (K+1)-th gate logit)


def route_margin(model, what, tokens):
    """The smallest gap between the K-th and (K+1)-th largest gate logit of any token of every layer
    when model runs tokens, recorded in margins."""
    gaps = []
    hooks = [layer.block_sparse_moe.gate.register_forward_hook(
        lambda mod, inp, out: gaps.append((lambda s: (s[:, K - 1] - s[:, K]).min().item())(
            out.detach().float().sort(-1, descending=True).values))) for layer in model.model.layers]
    with torch.no_grad():
        model(tokens)
    for h in hooks:
        h.remove()
    margins.append((what, min(gaps)))


def mixtral_grad(G, name, NG):
    """transformers' gradient of trident tensor `name` in trident's layout: the router's gate, each
    expert's w1 / w3 as fc's (feature, {gate, up}) rows and w2 as fc_proj; the rest a Llama's."""
    parts = name.split(".")
    if len(parts) > 2 and parts[2] in ("router", "experts"):
        h = f"model.layers.{parts[1]}.block_sparse_moe."
        if parts[2] == "router":
            return G[h + "gate.weight"]
        w = lambda i: G[f"{h}experts.{parts[3]}.w{i}.weight"]  # noqa: E731
        return torch.stack([w(1), w(3)], 1).reshape(-1, C) if parts[4] == "fc" else w(2)
    return hff.llama_grad(G, name, NH, NG, HS, C)


def logits_check(cfg, name, model):
    """hff.logits_check within 1e-5 of the largest logit, the routing margin of its tokens recorded"""
    route_margin(model, f"{name} logits", torch.randint(0, V, (3, T), generator=torch.Generator().manual_seed(1)))
    hff.logits_check(probe, cfg, work, name, model, T, V, 1e-5)


def bf16_check(name, model, cfg):
    """model saved in bfloat16, imported and exported --dtype bf16: the same tensors bit for bit"""
    src = os.path.join(work, name + "-bf16-hf")
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(src)
    ck, back = os.path.join(work, name + "-bf16-ck"), os.path.join(work, name + "-bf16-back")
    rc, _, err = tt.outputs([trident, "convert", "--from", "hf", "--input", src, "--output", ck], timeout=300)
    rc2, _, err2 = tt.outputs([trident, "convert", "--to", "hf", "--input", ck, "--output", back, "--config",
                               cfg, "--dtype", "bf16"], timeout=300) if rc == 0 else (1, "", "")
    a = load_file(os.path.join(src, "model.safetensors"))
    b = load_file(os.path.join(back, "model.safetensors")) if rc2 == 0 else {}
    tt.check(f"{name}: HF -> trident -> HF is bit-exact in bfloat16 ({len(a)} tensors)",
             set(a) == set(b) and all(a[k].dtype == torch.bfloat16 and torch.equal(a[k], b[k]) for k in a),
             f"exit {rc}/{rc2}: {err}{err2}; keys only on one side {sorted(set(a) ^ set(b))}")


prefix = tt.make_corpus(trident, work, 23, ["expert", "router", "gate", "mixture", "token", "sparse"], 300, 5, 50)
session = hff.Session(trident, work)
torch.manual_seed(23)
# (name, key/value heads, tied, sliding_window, max_position_embeddings, aux coefficient, wide layouts)
for name, NG, tied, window, positions, aux, wide in (
        ("mixtral-gqa-untied", 2, False, None, T, 0.02, True),
        ("mixtral-mqa-tied-window", 1, True, T, 2 * T, 0.001, False)):
    model = MixtralForCausalLM(MixtralConfig(
        vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L, num_attention_heads=NH,
        num_key_value_heads=NG, max_position_embeddings=positions, rms_norm_eps=1e-5, rope_theta=1e6,
        sliding_window=window, tie_word_embeddings=tied, num_local_experts=E, num_experts_per_tok=K,
        router_aux_loss_coef=aux)).eval()
    hff.randomize(model, lambda n: "norm" in n)
    with torch.no_grad():  # the routers 10x: spread gate logits (route_margin)
        for layer in model.model.layers:
            layer.block_sparse_moe.gate.weight.mul_(10.0)
    src, ck, out = hff.oracle_import(trident, work, name, model)
    want = [f"num_experts: {E}", f"moe_router_topk: {K}", "moe_router_pre_softmax: false",
            f"moe_aux_loss_coeff: {aux}", f"num_query_groups: {NG}", "swiglu: true",
            f"untie_embeddings_and_output_weights: {'false' if tied else 'true'}"] + \
        ([f"sliding_window: {window}"] if window else [])
    tt.check(f"{name}: trident convert prints the experts' keys (aux coefficient {aux} recorded)",
             all(w in out for w in want) and ("sliding_window" in out) == bool(window), out)
    keys = dict(normalization="RMSNorm", position_embedding_type="rope", swiglu=True, ffn_hidden_size=F,
                num_query_groups=NG, untie_embeddings_and_output_weights=not tied, add_bias_linear=False,
                layernorm_epsilon=1e-5, rotary_base=1e6, num_attention_heads=NH, hidden_size=C,
                max_position_embeddings=positions, num_experts=E, moe_router_topk=K, moe_aux_loss_coeff=aux,
                **({"sliding_window": window} if window else {}))
    cfg = hff.oracle_config(work, name, L, T, V, keys, prefix, ck)
    logits_check(cfg, name, model)
    hff.generate_check(trident, name, model, (("the HF folder", src, []),))
    hff.eval_check(trident, src, work, name, model, "the router sends each token to two experts; " * 3, T)
    hff.roundtrip_check(trident, src, ck, cfg, work, name, model, T, V,
                        ("num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "sliding_window",
                         "num_key_value_heads", "intermediate_size", "rope_theta", "rms_norm_eps",
                         "tie_word_embeddings", "max_position_embeddings"),
                        ("model.layers.1.block_sparse_moe.gate.weight",
                         f"model.layers.1.block_sparse_moe.experts.{E - 1}.w3.weight"))
    session.shards_check(f"{name}: exported in shards, imported, the same checkpoint", ck, name, "40KB")
    bf16_check(name, model, cfg)
    # the gradients: the balancing and z losses off (transformers' is another formula)
    grad_cfg = hff.oracle_config(work, name + "-grads", L, T, V, {**keys, "moe_aux_loss_coeff": 0.0}, prefix, ck)
    hf_loss, G = hff.batch_grads(probe, grad_cfg, work, name, model, T, V)
    batch = torch.from_numpy(np.fromfile(os.path.join(work, name + "-batch.bin"), dtype=np.int32).astype(np.int64))
    route_margin(model, f"{name} batch", batch.view(4, 2, 2, T)[:, 0].reshape(8, T))
    G = {k: (g if g is not None else torch.zeros_like(dict(model.named_parameters())[k])) for k, g in G.items()}
    layouts = [("1", 1, 1, 1, ())] + ([("D2xT2xP2-sp", 8, 2, 2, ("parallel.sequence_parallel=true",))]
                                      if wide and not quick else [])
    hff.grads_check(trident, grad_cfg, work, name, layouts, hf_loss, lambda t: mixtral_grad(G, t, NG),
                    (2 if tied else 3) + L * (5 + 2 * E), " with the routers and every expert's",
                    ("layers.0.router.weight", f"layers.1.experts.{E - 1}.fc.weight"))
    # finetune.load of the HF folder itself (imported by the run) trains the same first step
    ft_cfg = tt.write(os.path.join(work, name + "-finetune.yaml"), open(grad_cfg).read().replace(
        f'checkpoint:\n  load: "{ck}"\n', f'finetune:\n  load: "{src}"\n'))
    hff.grads_check(trident, ft_cfg, work, name, [("finetune.load", 1, 1, 1, ())], hf_loss,
                    lambda t: mixtral_grad(G, t, NG), (2 if tied else 3) + L * (5 + 2 * E))
worst = min(margins, key=lambda m: m[1])
tt.check(f"routing margins: every token's 2nd-largest gate logit at least 1e-4 above its 3rd "
         f"({len(margins)} runs)", worst[1] >= 1e-4, f"smallest {worst[1]:.2e} in {worst[0]}", show=True)
tt.finish("PASSED")
