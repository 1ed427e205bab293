#!/usr/bin/python3
"""PyTorch oracle for trident's hidden and attention dropout: plain-torch models written from
the math get trident's initial weights and the same micro-batches, and masks from a numpy port
of Philox 4x32-10 (checked against Random123's known answers) keyed as core/philox.h says:
element e of global sample s at site (layer, kind) is kept iff word e & 3 of Philox(counter
(e >> 2, s, layer * 16 + kind), key (seed ^ "Drop", seed >> 32)) >= p 2^32, kept ones times
1 / (1 - p). Sites: the embeddings (+ positions) (layer 0's kind 0, e = t C + c), the
attention probabilities (kind 1, e = (head T + query) T + key), the attention's output with its
bias before the residual add (kind 2) and the MLP's (kind 3). Checked in one process: iteration
1's loss (relative <= 1e-6) and every gradient (relative L2 <= 1e-5), for GPT-2 (hidden 0.1,
attention 0.2) and a Llama-like model (RMSNorm, rope, 4 heads in 2 query groups, SwiGLU,
untied output, no biases; hidden 0.15, attention 0.1). A mask of the wrong site, sample or
coordinates moves the loss by ~1e-3 and gradients by ~1e-1.
usage: test_dropout_oracle.py TRIDENT_EXE ORACLE_DUMP_EXE WORKDIR
Without torch: exit 77 (meson's SKIP), or exit 1 when TRIDENT_REQUIRE_ORACLE is set."""
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import import_torch, tensor  # noqa: E402

np, torch, F = import_torch()
trident, oracle_dump, work = sys.argv[1], sys.argv[2], tt.fresh_dir(sys.argv[3])
MASK32 = np.uint64(0xFFFFFFFF)


def philox(c0, c1, c2, c3, k0, k1):
    """Philox 4x32-10 of counters (uint64 arrays holding 32-bit values) and a key (ints)."""
    c = [np.asarray(x, dtype=np.uint64) & MASK32 for x in (c0, c1, c2, c3)]
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & MASK32,
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & MASK32]
        k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return c


# Random123's known answers for Philox 4x32-10
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
for ctr, key, want in KAT:
    got = tuple(int(w) for w in philox(*ctr, *key))
    tt.check(f"Philox 4x32-10 port: known answer for counter {ctr[0]:#x}..", got == want,
             f"{[hex(x) for x in got]}")


def keep_scale(seed, samples, site, e, p):
    """(len(samples), *e.shape) float32: 1/(1-p) where kept, else 0 (core/philox.h)."""
    p32 = float(np.float32(p))  # trident holds p as a float
    threshold = np.uint64(int(p32 * 4294967296.0))
    scale = np.float32(1.0 / (1.0 - p32))
    e = np.asarray(e, dtype=np.uint64)
    out = []
    for s in samples:
        block = e >> np.uint64(2)
        words = philox(block & MASK32, block >> np.uint64(32), np.uint64(s) & MASK32,
                       np.uint64(site), (seed & 0xFFFFFFFF) ^ 0x44726F70, seed >> 32)
        lane = (e & np.uint64(3)).astype(np.int64)
        word = np.choose(lane, words)
        out.append(np.where(word >= threshold, scale, np.float32(0)).astype(np.float32))
    return torch.from_numpy(np.stack(out))


class Masks:
    """The masks of one micro-batch (its global samples) for the model's sizes."""

    def __init__(self, seed, samples, T, C, NH, hidden, attention):
        self.seed, self.samples, self.T, self.C, self.NH = seed, samples, T, C, NH
        self.hidden, self.attention = hidden, attention
        t, c = np.meshgrid(np.arange(T), np.arange(C), indexing="ij")
        self.e_hidden = t * C + c  # (T, C)
        h, q, k = np.meshgrid(np.arange(NH), np.arange(T), np.arange(T), indexing="ij")
        self.e_att = (h * T + q) * T + k  # (NH, T, T)

    def hid(self, layer, kind):
        return keep_scale(self.seed, self.samples, layer * 16 + kind, self.e_hidden, self.hidden)

    def att(self, layer):
        return keep_scale(self.seed, self.samples, layer * 16 + 1, self.e_att, self.attention)


def gpt2_loss(P, idx, tgt, m, mk):
    B, T, C, NH = idx.shape[0], m["T"], m["C"], m["NH"]
    HS = C // NH
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = (P["wte"][idx] + P["wpe"][torch.arange(T)]) * mk.hid(0, 0)
    for l in range(m["L"]):
        p = lambda n: P[f"layers.{l}.{n}"]
        h = F.layer_norm(x, (C,), p("ln1.weight"), p("ln1.bias"), m["eps"])
        qkv = (h @ p("qkv.weight").T + p("qkv.bias")).view(B, T, NH, 3, HS)
        q, k, v = (qkv[:, :, :, i, :].transpose(1, 2) for i in range(3))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(HS)).masked_fill(~causal, float("-inf"))
        y = (att.softmax(-1) * mk.att(l)) @ v
        a = y.transpose(1, 2).reshape(B, T, C) @ p("attn_proj.weight").T + p("attn_proj.bias")
        x = x + a * mk.hid(l, 2)
        h = F.layer_norm(x, (C,), p("ln2.weight"), p("ln2.bias"), m["eps"])
        h = F.gelu(h @ p("fc.weight").T + p("fc.bias"), approximate="tanh")
        x = x + (h @ p("fc_proj.weight").T + p("fc_proj.bias")) * mk.hid(l, 3)
    x = F.layer_norm(x, (C,), P["lnf.weight"], P["lnf.bias"], m["eps"])
    logits = x @ P["wte"].T
    return F.cross_entropy(logits[..., :m["V"]].reshape(-1, m["V"]), tgt.reshape(-1))


def llama_loss(P, idx, tgt, m, mk):
    B, T, C, NH, NG = idx.shape[0], m["T"], m["C"], m["NH"], m["NG"]
    HS, R = C // NH, NH // NG
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    inv = 1.0 / (10000.0 ** (torch.arange(0, HS, 2, dtype=torch.float32) / HS))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

    def rope(t):  # rotate_half's pairs (i, i + HS/2)
        return t * cos + torch.cat([-t[..., HS // 2:], t[..., :HS // 2]], -1) * sin

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + m["eps"]) * w

    x = P["wte"][idx] * mk.hid(0, 0)
    for l in range(m["L"]):
        p = lambda n: P[f"layers.{l}.{n}"]
        qkv = (rms(x, p("ln1.weight")) @ p("qkv.weight").T).view(B, T, NG, R + 2, HS)
        q = rope(qkv[:, :, :, :R].reshape(B, T, NH, HS).transpose(1, 2))  # head g R + r
        k = rope(qkv[:, :, :, R].transpose(1, 2)).repeat_interleave(R, dim=1)
        v = qkv[:, :, :, R + 1].transpose(1, 2).repeat_interleave(R, dim=1)
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(HS)).masked_fill(~causal, float("-inf"))
        y = ((att.softmax(-1) * mk.att(l)) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + (y @ p("attn_proj.weight").T) * mk.hid(l, 2)
        fc = rms(x, p("ln2.weight")) @ p("fc.weight").T  # rows (feature, {gate, up})
        x = x + ((F.silu(fc[..., 0::2]) * fc[..., 1::2]) @ p("fc_proj.weight").T) * mk.hid(l, 3)
    logits = rms(x, P["lnf.weight"]) @ P["output_layer"].T
    return F.cross_entropy(logits[..., :m["V"]].reshape(-1, m["V"]), tgt.reshape(-1))


corpus = tt.make_corpus(trident, work, 7, ["drop", "mask", "keep", "scale", "philox", "site"],
                        200, 5, 40, end=".\n\n")
TRAIN = dict(micro_batch_size=2, global_batch_size=4, train_iters=1, lr=1e-3, seed=11)
mb, M, T = TRAIN["micro_batch_size"], TRAIN["global_batch_size"] // TRAIN["micro_batch_size"], 16
LOSS_TOL, GRAD_TOL = 1e-6, 1e-5
GPT2 = dict(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=T, vocab_size=250,
            make_vocab_size_divisible_by=64)
LLAMA = dict(GPT2, normalization="RMSNorm", position_embedding_type="rope", swiglu=True,
             ffn_hidden_size=48, num_query_groups=2, untie_embeddings_and_output_weights=True,
             add_bias_linear=False)


def check_model(name, model, loss_fn, hidden, attention):
    out = tt.fresh_dir(os.path.join(work, name))
    config = tt.write_config(os.path.join(out, "config.yaml"),
                             model=dict(model, hidden_dropout=hidden, attention_dropout=attention),
                             training=TRAIN, data=dict(data_path=corpus, split="100,0,0"))
    r = subprocess.run([oracle_dump, config, out, "1"], capture_output=True, text=True)
    if not tt.check(f"{name}: oracle_dump exits 0", r.returncode == 0, r.stderr[-1500:]):
        return
    man = json.load(open(os.path.join(out, "manifest.json")))

    def floats(f, dtype="float32"):
        return torch.from_numpy(np.fromfile(os.path.join(out, f), dtype=dtype))

    params, grads = floats("params.bin"), floats("grads.bin")
    tokens = floats("tokens.bin", "int32").long()
    P = {t["name"]: tensor(params, t).clone().requires_grad_(True) for t in man["tensors"]}
    m = dict(L=2, C=64, NH=4, NG=2, T=T, V=250, eps=1e-5)
    per, total = mb * T, 0.0
    for k in range(M):  # iteration 1's micro-batches: global samples k mb .. k mb + mb - 1
        inp = tokens[k * 2 * per:k * 2 * per + per].view(mb, T)
        tgt = tokens[k * 2 * per + per:(k + 1) * 2 * per].view(mb, T)
        mk = Masks(TRAIN["seed"], range(k * mb, (k + 1) * mb), T, m["C"], m["NH"], hidden,
                   attention)
        loss = loss_fn(P, inp, tgt, m, mk)
        (loss / M).backward()
        total += loss.item() / M
    step = man["steps"][0]
    tt.check(f"{name}: iteration 1's loss", abs(total - step["loss"]) / total <= LOSS_TOL,
             f"torch {total:.8f} trident {step['loss']:.8f}", show=True)
    worst, worst_name = 0.0, ""
    for t in man["tensors"]:
        want = P[t["name"]].grad.reshape(-1)
        got = tensor(grads, t).reshape(-1)
        rel = (got - want).norm().item() / max(want.norm().item(), 1e-30)
        if rel > worst:
            worst, worst_name = rel, t["name"]
        tt.expect(rel <= GRAD_TOL, f"{name}: gradient of {t['name']}: relative L2 {rel:.2e}")
    tt.check(f"{name}: gradients of all {len(man['tensors'])} tensors", worst <= GRAD_TOL,
             f"worst relative L2 {worst:.2e} ({worst_name})", show=True)


check_model("gpt2", GPT2, gpt2_loss, 0.1, 0.2)
check_model("llama", LLAMA, llama_loss, 0.15, 0.1)
tt.finish()
