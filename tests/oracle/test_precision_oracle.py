#!/usr/bin/python3
"""PyTorch oracle for training.precision bf16 and fp16 on the CPU backend (issue 19, item 2).

trident's CPU backend emulates 16-bit storage (kernels.h: tr_kernels_cpu_rounded): every op
reads its GEMM operands and the parameters it applies rounded to the format, computes in fp32
and rounds the outputs it keeps. The reference here is a plain-torch GPT-2 that rounds at the
same places (x.to(bfloat16 | float16).float(): round to nearest even, fp16 overflowing to inf),
with fp32 master weights and AdamW, from trident's initial weights and token batches:
  - bf16: 10 AdamW iterations, losses within 1e-3 (relative) of trident's, and the fp32 run's
    losses differ from both by more than the bf16 ones do (the rounding is really there);
  - fp16 with dynamic loss scaling (Megatron's rule: hysteresis 2, window 3) from a scale
    built to overflow (2^20: some gradients pass 65504 until it is ~2^16): the
    same scale every iteration and the same skipped iterations as the reference, losses within
    1e-3; a skipped iteration advances neither Adam's step count nor the learning rate
    (Megatron steps its scheduler after successful updates only);
  - fp16 with hysteresis 1: PyTorch's GradScaler rule (halve on overflow, double after
    growth_interval clean steps; torch 1.13's GradScaler is CUDA-only and disables itself on a
    CPU, so its update rule is replicated here), same scales and skips;
  - a static loss_scale: never changes, overflowed steps still skipped.
usage: test_precision_oracle.py TRIDENT_EXE ORACLE_DUMP_EXE WORKDIR"""
import json
import math
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import decays, gpt_loss as reference_loss, import_torch, lr_at as reference_lr, tensor  # noqa: E402

np, torch, F = import_torch()
trident, oracle_dump, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
words = ["the", "pipeline", "tensor", "data", "model", "loss", "gradient", "layer", "rank",
         "stage", "batch", "token", "head", "norm", "adam", "trains", "falls", "quickly"]
corpus = tt.make_corpus(trident, work, 7, words, 300, 5, 60, end=".\n\n")
MODEL = dict(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32,
             max_position_embeddings=40, vocab_size=250, make_vocab_size_divisible_by=64)
TRAIN = dict(micro_batch_size=2, global_batch_size=6, train_iters=12, lr=3.0e-3, min_lr=3.0e-4,
             lr_warmup_iters=3, weight_decay=0.1, clip_grad=2.0, seed=42)
config = tt.write_config(os.path.join(work, "precision.yaml"), model=MODEL, training=TRAIN,
                         data=dict(data_path=corpus, split="90,10,0"))
L, C, NH, T = MODEL["num_layers"], MODEL["hidden_size"], MODEL["num_attention_heads"], MODEL["seq_length"]
V, HS = MODEL["vocab_size"], C // NH
mb, M = TRAIN["micro_batch_size"], TRAIN["global_batch_size"] // TRAIN["micro_batch_size"]
EPS_LN = 1e-5


def dump(name, iters, sets):
    d = tt.fresh_dir(os.path.join(work, name))
    args = [oracle_dump, config, d, str(iters)]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if not tt.check(f"{name}: trident runs {iters} iterations ({' '.join(sets) or 'fp32'})", r.returncode == 0,
                    f"exit {r.returncode}: {r.stderr[-1500:]}"):
        tt.finish()
    man = json.load(open(os.path.join(d, "manifest.json")))
    flat = torch.from_numpy(np.fromfile(os.path.join(d, "params.bin"), dtype=np.float32))
    tokens = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.bin"), dtype=np.int32)).long()
    return man, flat, tokens


def make_round(dtype):
    if dtype is None:
        return lambda x: x, lambda x: x

    class Q(torch.autograd.Function):
        """A kept output: rounded forward, its gradient rounded backward."""
        @staticmethod
        def forward(ctx, x):
            return x.to(dtype).float()

        @staticmethod
        def backward(ctx, g):
            return g.to(dtype).float()

    class W(torch.autograd.Function):
        """A parameter read by an op (the compute copy): rounded forward, gradient as is."""
        @staticmethod
        def forward(ctx, x):
            return x.to(dtype).float()

        @staticmethod
        def backward(ctx, g):
            return g
    return Q.apply, W.apply


def gpt_loss(P, idx, targets, q, w):
    """GPT-2 (gpt_reference.py) with trident's rounding points."""
    return reference_loss(P, idx, targets, L, C, NH, T, V, EPS_LN, q, w)


def lr_at(it):
    return reference_lr(it, TRAIN)


class Scaler:
    """Megatron's DynamicGradScaler (hysteresis 1 = PyTorch GradScaler's rule), or static."""
    def __init__(self, initial, window, hysteresis, min_scale=1.0, static=False):
        self.scale, self.window, self.hyst, self.min = initial, window, hysteresis, min_scale
        self.left, self.growth, self.static = hysteresis, 0, static

    def update(self, overflow):
        if self.static:
            return
        if overflow:
            self.growth = 0
            self.left -= 1
            if self.left <= 0:
                self.scale = max(self.scale * 0.5, self.min)
        else:
            self.growth += 1
            if self.growth == self.window:
                self.growth, self.left = 0, self.hyst
                self.scale *= 2.0


def reference(man, flat, tokens, iters, dtype, scaler=None):
    """(losses, scales, skipped flags) of the torch run."""
    names = [t["name"] for t in man["tensors"]]
    P = {t["name"]: tensor(flat, t).clone().requires_grad_(True) for t in man["tensors"]}
    q, w = make_round(dtype)
    opt = torch.optim.AdamW([{"params": [P[n] for n in names if decays(n)], "weight_decay": TRAIN["weight_decay"]},
                             {"params": [P[n] for n in names if not decays(n)], "weight_decay": 0.0}],
                            lr=1.0, betas=(0.9, 0.999), eps=1e-8)
    per = mb * T
    losses, scales, skips = [], [], []
    steps = 0   # optimizer steps taken: a skipped iteration advances neither Adam nor the LR
    for it in range(1, iters + 1):
        for p in P.values():
            p.grad = None
        S = scaler.scale if scaler else 1.0
        total = 0.0
        for m in range(M):
            off = (it - 1) * M * 2 * per + m * 2 * per
            inp, tgt = tokens[off:off + per].view(mb, T), tokens[off + per:off + 2 * per].view(mb, T)
            loss = gpt_loss(P, inp, tgt, q, w)
            (loss * (S / M)).backward()
            total += loss.item()
            if dtype is not None:   # gradients kept in 16 bits: each micro-batch's sum rounded
                for p in P.values():
                    p.grad = p.grad.to(dtype).float()
        grads = [p.grad for p in P.values()]
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
        overflow = not math.isfinite(norm)
        losses.append(total / M)
        scales.append(S)
        skips.append(overflow)
        if scaler:
            scaler.update(overflow)
        if overflow:
            continue
        norm /= S
        factor = min(1.0, TRAIN["clip_grad"] / (norm + 1e-6)) if TRAIN["clip_grad"] > 0 else 1.0
        for g in grads:
            g.mul_(factor / S)
        steps += 1
        for group in opt.param_groups:
            group["lr"] = lr_at(steps)
        opt.step()
    return losses, scales, skips


def compare(label, man, ref, tol=1e-3):
    losses, scales, skips = ref
    got = [s["loss"] for s in man["steps"]]
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, losses))
    tt.check(f"{label}: losses of {len(got)} iterations within {tol:g} of the reference (worst {worst:.1e})",
             worst <= tol, f"trident {got}\ntorch   {losses}", show=True)
    return got


ITERS = TRAIN["train_iters"]
# fp32 and bf16
man32, flat, tokens = dump("fp32", ITERS, [])
manb, flatb, tokensb = dump("bf16", ITERS, ["training.precision=bf16"])
tt.check("bf16 starts from the same weights and batches as fp32", torch.equal(flat, flatb) and torch.equal(tokens, tokensb))
refb = reference(manb, flatb, tokensb, ITERS, torch.bfloat16)
gotb = compare("bf16", manb, refb)
got32 = [s["loss"] for s in man32["steps"]]
d_ref = max(abs(a - b) / abs(b) for a, b in zip(gotb, refb[0]))
d_32 = max(abs(a - b) / abs(b) for a, b in zip(gotb, got32))
tt.check(f"bf16 is really rounded: fp32's losses differ from it by {d_32:.1e}, the reference by {d_ref:.1e}",
         d_32 > 3 * d_ref, show=True)
tt.check("bf16 reports no loss scale and no skipped iteration",
         all(s["loss_scale"] == 1 and s["skipped_iterations"] == 0 for s in manb["steps"]))

# fp16, dynamic: Megatron's hysteresis 2, a short window, a scale built to overflow
for label, hyst in (("fp16 Megatron (hysteresis 2)", 2), ("fp16 GradScaler rule (hysteresis 1)", 1)):
    sets = ["training.precision=fp16", f"training.initial_loss_scale={2 ** 20}", "training.loss_scale_window=3",
            f"training.hysteresis={hyst}"]
    man, fl, tk = dump(f"fp16-h{hyst}", ITERS, sets)
    ref = reference(man, fl, tk, ITERS, torch.float16, Scaler(2.0 ** 20, 3, hyst))
    scales = [2.0 ** round(math.log2(s["loss_scale"])) for s in man["steps"]]  # 9 digits in JSON
    skipped = [s["skipped_iterations"] for s in man["steps"]]
    ref_skipped = [sum(ref[2][:i + 1]) for i in range(ITERS)]
    tt.check(f"{label}: the loss scale of every iteration is the reference's ({', '.join(f'2^{int(math.log2(s))}' for s in scales)})",
             scales == ref[1], f"trident {scales}\ntorch   {ref[1]}", show=True)
    tt.check(f"{label}: the same iterations skipped ({skipped[-1]} of {ITERS}: "
             f"{[i + 1 for i in range(ITERS) if ref[2][i]]}), some but not all",
             skipped == ref_skipped and 0 < skipped[-1] < ITERS, f"trident {skipped}\ntorch   {ref_skipped}", show=True)
    compare(label, man, ref)

# a static scale: constant, overflowed steps skipped
man, fl, tk = dump("fp16-static", 4, ["training.precision=fp16", f"training.loss_scale={2 ** 30}"])
tt.check("fp16 with a static loss_scale 2^30: every iteration at 2^30, every one overflowed and skipped",
         all(abs(s["loss_scale"] / 2.0 ** 30 - 1) < 1e-8 for s in man["steps"]) and
         [s["skipped_iterations"] for s in man["steps"]] == [1, 2, 3, 4], str(man["steps"]))

# the scaler's state travels in checkpoints: a run resumed at iteration 6 goes on bit for bit
fp16 = ["training.precision=fp16", f"training.initial_loss_scale={2 ** 20}", "training.loss_scale_window=3",
        "training.eval_interval=0", "logging.log_interval=1"]
ck = os.path.join(work, "fp16-ck")
whole = tt.run(tt.train_cmd(trident, config, tt.fresh_dir(os.path.join(work, "fp16-whole")), sets=fp16,
                            flags=["--quiet"]), timeout=120)
first = tt.run(tt.train_cmd(trident, config, tt.fresh_dir(os.path.join(work, "fp16-first")),
                            sets=fp16 + ["training.train_iters=6", f"training.lr_decay_iters={ITERS}",
                                         f"checkpoint.save={tt.fresh_dir(ck)}"], flags=["--quiet"]), timeout=120)
resumed = tt.run(tt.train_cmd(trident, config, tt.fresh_dir(os.path.join(work, "fp16-resumed")),
                              sets=fp16 + [f"checkpoint.load={ck}"], flags=["--quiet"]), timeout=120)


def metrics(name):
    path = os.path.join(work, name, "metrics.jsonl")
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []


a, b = metrics("fp16-whole"), metrics("fp16-resumed")
tail_a = [(m["iteration"], m["loss"], m.get("loss_scale"), m.get("skipped_iterations")) for m in a if m["iteration"] > 6]
tail_b = [(m["iteration"], m["loss"], m.get("loss_scale"), m.get("skipped_iterations")) for m in b]
tt.check(f"fp16 resumed from iteration 6: iterations 7-{ITERS} bit-identical to the whole run, loss scale and "
         f"skipped count included (scale {tail_b[0][2] if tail_b else '?'}, {tail_b[0][3] if tail_b else '?'} skipped)",
         whole.returncode == 0 and first.returncode == 0 and resumed.returncode == 0 and tail_a and tail_a == tail_b,
         f"exit {whole.returncode}/{first.returncode}/{resumed.returncode} {resumed.stderr[-500:]}\nwhole   {tail_a}\nresumed {tail_b}",
         show=True)

# resumed with a shorter loss_scale_window than the checkpoint's clean-step count (5 of a window
# of 3): the scale doubles at the first clean step, as from a count of 2; it once never grew again
def resumed_with_growth(n):
    edited = os.path.join(work, f"fp16-ck-growth{n}")
    shutil.rmtree(edited, ignore_errors=True)
    shutil.copytree(ck, edited)
    man_path = os.path.join(edited, "iter_0000006", "manifest.txt")
    text = open(man_path).read()
    open(man_path, "w").write(re.sub(r"^(loss_scaler scale \S+ growth )\d+", rf"\g<1>{n}", text, flags=re.M))
    name = f"fp16-resumed-growth{n}"
    r = tt.run(tt.train_cmd(trident, config, tt.fresh_dir(os.path.join(work, name)),
                            sets=fp16 + [f"checkpoint.load={edited}"], flags=["--quiet"]), timeout=120)
    return r, [(m["iteration"], m["loss"], m.get("loss_scale")) for m in metrics(name)]


r5, g5 = resumed_with_growth(5)
r2, g2 = resumed_with_growth(2)
grew = bool(g2) and any(s[2] > g2[0][2] for s in g2)
tt.check("fp16 resumed with 5 clean steps counted against a window of 3: the run of a count of 2, bit for bit "
         f"(its scale grows: {grew})", r5.returncode == 0 and r2.returncode == 0 and grew and g5 == g2,
         f"exit {r5.returncode}/{r2.returncode} {r5.stderr[-300:]}\ncount 5 {g5}\ncount 2 {g2}", show=True)

# a damaged loss_scaler line in a manifest: refused on load, naming the file and the line
bad_ck = os.path.join(work, "fp16-ck-bad")
shutil.rmtree(bad_ck, ignore_errors=True)
shutil.copytree(ck, bad_ck)
for bad_line in ("loss_scaler scale -1 growth 0 hysteresis_left 2 skipped 1",
                 "loss_scaler scale 65536 growth 0 hysteresis_left 2 skipped 99",
                 "loss_scaler scale 65536 growth 0"):
    man_path = os.path.join(bad_ck, "iter_0000006", "manifest.txt")
    text = open(man_path).read()
    open(man_path, "w").write(re.sub(r"^loss_scaler .*$", bad_line, text, flags=re.M))
    r = tt.run(tt.train_cmd(trident, config, tt.fresh_dir(os.path.join(work, "fp16-bad")),
                            sets=fp16 + [f"checkpoint.load={bad_ck}"], flags=["--quiet"]), timeout=120)
    tt.check(f"a manifest with '{bad_line}': refused, naming manifest.txt and the loss_scaler line",
             r.returncode != 0 and "manifest.txt" in r.stderr and "loss_scaler" in r.stderr,
             f"exit {r.returncode}: {r.stderr[-500:]}")

# bad settings: located errors, exit 2
for sets, needle in ((["training.precision=fp16", "training.min_loss_scale=8", "training.initial_loss_scale=4"],
                      "min_loss_scale"),
                     (["training.precision=fp16", "training.device=cuda"], "fp16"),
                     (["training.precision=fp8"], "precision"),
                     (["training.loss_scale_window=0"], "loss_scale_window"),
                     (["training.initial_loss_scale=0.5"], "initial_loss_scale")):
    r = tt.run(tt.train_cmd(trident, config, os.path.join(work, "bad"), sets=sets + ["training.train_iters=1"],
                            flags=["--quiet"]), timeout=60)
    tt.check(f"{' '.join(sets)}: exit 2 naming {needle}", r.returncode == 2 and needle in r.stderr,
             f"exit {r.returncode}: {r.stderr[-500:]}")
tt.finish()
