#!/usr/bin/python3
"""PyTorch oracle for trident's mixture of experts: a plain-torch Mixtral-like model
(gpt_reference.py's mixtral_loss, written from the math with Megatron-core 0.8's semantics:
RMSNorm, rope, grouped queries, SwiGLU experts, top-k routing, the switch load-balancing and z
losses) gets trident's initial weights and the same micro-batches; in one process:
  - the LM loss of iteration 1 (relative difference <= 1e-6; trident reports the LM loss alone);
  - load_balancing_loss (Megatron's logged value: without its coefficient, summed over layers,
    averaged over the micro-batches) (<= 1e-6);
  - the gradient of every tensor after iteration 1, the router's and every expert's included,
    of the objective mean over micro-batches of (LM + sum over layers of aux_coeff lb +
    z_coeff z) (relative L2 <= 1e-5);
for E = 4, k = 2 (renormalised top-2, aux 1e-2, z 1e-3) and E = 4, k = 1 with the softmax
before top-k (not renormalised; aux 0.1, z 1e-2).
usage: test_moe_oracle.py TRIDENT_EXE ORACLE_DUMP_EXE WORKDIR
Without torch: exit 77 (meson's SKIP), or exit 1 when TRIDENT_REQUIRE_ORACLE is set."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import import_torch, mixtral_loss, tensor  # noqa: E402

np, torch, F = import_torch()
trident, oracle_dump, work = sys.argv[1], sys.argv[2], tt.fresh_dir(sys.argv[3])
words = ["expert", "router", "token", "gate", "balance", "layer", "rope", "query", "group"]
corpus = tt.make_corpus(trident, work, 5, words, 200, 5, 40, end=".\n\n")
MODEL = dict(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2,
             seq_length=16, vocab_size=250, make_vocab_size_divisible_by=64,
             normalization="RMSNorm", position_embedding_type="rope", swiglu=True,
             ffn_hidden_size=48, untie_embeddings_and_output_weights=True,
             add_bias_linear=False, num_experts=4)
TRAIN = dict(micro_batch_size=2, global_batch_size=4, train_iters=1, lr=1e-3, seed=3)
config = tt.write_config(os.path.join(work, "moe.yaml"), model=MODEL, training=TRAIN,
                         data=dict(data_path=corpus, split="100,0,0"))
mb, M, T = TRAIN["micro_batch_size"], TRAIN["global_batch_size"] // TRAIN["micro_batch_size"], 16
LOSS_TOL, LB_TOL, GRAD_TOL = 1e-6, 1e-6, 1e-5


def check_variant(name, K, pre, aux_coeff, z_coeff):
    out = tt.fresh_dir(os.path.join(work, name))
    sets = [f"model.moe_router_topk={K}", f"model.moe_router_pre_softmax={'true' if pre else 'false'}",
            f"model.moe_aux_loss_coeff={aux_coeff}", f"model.moe_z_loss_coeff={z_coeff}"]
    args = [oracle_dump, config, out, "1"]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True)
    if not tt.check(f"{name}: oracle_dump exits 0", r.returncode == 0, r.stderr[-1500:]):
        return
    man = json.load(open(os.path.join(out, "manifest.json")))

    def floats(f, dtype="float32"):
        return torch.from_numpy(np.fromfile(os.path.join(out, f), dtype=dtype))

    params, grads, tokens = floats("params.bin"), floats("grads.bin"), floats("tokens.bin", "int32").long()
    P = {t["name"]: tensor(params, t).clone().requires_grad_(True) for t in man["tensors"]}
    m = dict(L=2, C=64, NH=4, NG=2, T=T, V=250, E=4, K=K, eps=1e-5, pre_softmax=pre,
             rope_base=10000.0, aux_coeff=aux_coeff, z_coeff=z_coeff)
    per, lm, lb = mb * T, 0.0, 0.0
    for k in range(M):  # iteration 1's micro-batches: (inputs, targets) each
        inp = tokens[k * 2 * per:k * 2 * per + per].view(mb, T)
        tgt = tokens[k * 2 * per + per:(k + 1) * 2 * per].view(mb, T)
        loss, aux, lbk = mixtral_loss(P, inp, tgt, m)
        ((loss + aux) / M).backward()
        lm, lb = lm + loss.item() / M, lb + lbk / M
    step = man["steps"][0]
    tt.check(f"{name}: iteration 1's LM loss", abs(lm - step["loss"]) / lm <= LOSS_TOL,
             f"torch {lm:.8f} trident {step['loss']:.8f}", show=True)
    got_lb = step.get("load_balancing_loss", float("nan"))
    tt.check(f"{name}: load_balancing_loss", abs(lb - got_lb) / lb <= LB_TOL,
             f"torch {lb:.8f} trident {got_lb:.8f}", show=True)
    worst, worst_name, router = 0.0, "", 0
    for t in man["tensors"]:
        want = P[t["name"]].grad
        if want is None:  # an expert no token chose: no gradient
            want = torch.zeros(t["rows"] * t["cols"])
        got = tensor(grads, t).reshape(-1)
        rel = (got - want.reshape(-1)).norm().item() / max(want.norm().item(), 1e-30)
        router += "router" in t["name"]
        if rel > worst:
            worst, worst_name = rel, t["name"]
        tt.expect(rel <= GRAD_TOL, f"{name}: gradient of {t['name']}: relative L2 {rel:.2e}")
    tt.check(f"{name}: gradients of all {len(man['tensors'])} tensors ({router} routers, "
             f"{sum('experts' in t['name'] for t in man['tensors'])} expert tensors)",
             worst <= GRAD_TOL and router == 2, f"worst relative L2 {worst:.2e} ({worst_name})",
             show=True)


check_variant("top-2", 2, False, 0.01, 0.001)
check_variant("top-1-pre-softmax", 1, True, 0.1, 0.01)
tt.finish()
