#!/usr/bin/python3
"""`trident eval` against the same math in PyTorch with Hugging Face transformers 4.38.2 (the hf
tests' virtual environment), on folders made here with random weights (nothing downloaded):
  gpt2     a GPT2LMHeadModel beside a byte-level BPE tokenizer.json that `tokenizers` trains
           here on a generated corpus (vocabulary 350, no template);
  llama    a LlamaForCausalLM with grouped-query attention (4 heads, 2 groups) beside a Llama-2
           shaped tokenizer.json trained here (Prepend + Replace normalizer, byte fallback)
           whose TemplateProcessing post-processor adds the BOS <s>;
  mistral  a MistralForCausalLM with a sliding window of 32 of its 64 positions (v0.1's
           shape), the llama's tokenizer;
  bloom    a BloomForCausalLM (ALiBi, 6 heads, embedding LayerNorm), the gpt2 tokenizer;
  gpt2-long  a GPT2LMHeadModel of 300 positions, the gpt2 tokenizer: windows, contexts and
           continuations past one chunk of logits rows (TR_EVAL_CHUNK, 128), unscored chunks.
The reference encoder is transformers' PreTrainedTokenizerFast(tokenizer_file=...), the models
run in float32, eval mode. Checked:
  - --input of 2 files with (--context, --stride) = (C, C), (C, C/2), (C, 5), (40, 17): each file
    one stream (the llama's starting with BOS, never scored), Hugging Face's fixed-length
    windows: tokens and windows equal, nll_sum within 1e-5 relative, bytes the files' sizes;
  - --tasks (continuation and multiple-choice lines: contexts ending in spaces, a newline,
    U+00A0 (the whitespace move), unicode text, contexts + continuations longer than C (left
    truncation), NUL characters, continuations the model's own greedy tokens), with and without
    --special-tokens: each choice's token count equal, loglikelihood within 1e-4 absolute,
    greedy flags, pred, pred_norm, label equal (a flag or pred is compared where the reference
    is not within 1e-4 of a tie), and the sections' counts and ratios;
  - --data-path of an indexed dataset of the gpt2 tokenizer's ids written here (the whole of it,
    and --split 80,20,0 --split-name valid with --context 48): tokens, nll_sum within 1e-5;
  - bloom: --input (strides 64 and 7) and --tasks with --context 64; the default context is
    its 2048 positions;
  - gpt2-long: --input with (300, 300), (300, 150), (300, 41), (200, 130); --tasks with
    contexts of 60-250 tokens and continuations of 135-260 (left truncated), shared by choices;
  - mistral: the context defaults to the window (same numbers as PyTorch with strides 32, 16);
    --context past the window is refused (exit 2);
  - --input of `trident convert --from hf` of gpt2, its tokenizer given by --tokenizer-model,
    and of the folder with the same BPE as GPT2BPETokenizer files: the folder's numbers; the
    Llama folder with --nproc 2 is refused (exit 2), with --nproc 2 --data-parallel 2 (two whole
    replicas) gives the reference's numbers;
  - a continuation that is not empty but adds no token (merged into the context's last one):
    refused with FILE:LINE.
usage: test_eval_oracle.py TRIDENT WORKDIR VENV"""
import json
import os
import random
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work, venv = sys.argv[1:4]
try:
    import transformers  # noqa: F401
except ImportError:  # run again with the virtual environment's Python
    py = tt.venv_python(venv, tt.HF_PACKAGES, "transformers")
    os.execv(py, [py, os.path.abspath(__file__), *sys.argv[1:]])

import torch  # noqa: E402
from tokenizers import ByteLevelBPETokenizer, Tokenizer, models, normalizers, trainers  # noqa: E402
from transformers import (BloomConfig, BloomForCausalLM, GPT2Config, GPT2LMHeadModel,  # noqa: E402
                          LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          PreTrainedTokenizerFast)
from transformers.utils import logging as hf_logging  # noqa: E402

import oracle_env  # noqa: E402  (tests/tokenizer: the Llama-2 shaped tokenizer.json)

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
torch.set_num_threads(2)
work = tt.fresh_dir(work)
C = 64  # max_position_embeddings of both models: the default --context


def path(*names):
    return os.path.join(work, *names)


# ---- a corpus of words, punctuation and unicode ----
rng = random.Random(23)
vocab_words = ["alpha", "beta", "gamma", "delta", "pipe", "rank", "token", "cache", "query", "head",
               "the", "of", "holds", "caf\u00e9", "cr\u00e8me", "na\u00efve", "\u00fcber",
               "\u65e5\u672c", "\u8a9e", "12", "345", "Stra\u00dfe", "\u0394elta", "end"]


def sentence(n):
    s = " ".join(rng.choice(vocab_words) for _ in range(n))
    return s[0].upper() + s[1:] + rng.choice([".", "!", "?", ",", ";"])


texts = [" ".join(sentence(rng.randint(3, 12)) for _ in range(rng.randint(1, 4)))
         for _ in range(400)]
tt.write(path("train.txt"), "\n".join(texts) + "\n")
file1 = tt.write(path("one.txt"), "\n".join(texts[:30]) + "\n\n  tail \u3000 spaces\n")
file2 = tt.write(path("two.txt"), "\n".join(texts[30:40]) + " NUL \x00 in\x00it")


def randomize(model):
    with torch.no_grad():  # every tensor away from its initial value (norms 1 and 0, biases 0)
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "ln_" in name or name.endswith("norm.weight")
                    else 0.15 * torch.randn_like(p))


# ---- (a) GPT-2 with a byte-level BPE tokenizer.json ----
torch.manual_seed(31)
gpt2_dir = path("gpt2")
bpe = ByteLevelBPETokenizer()
bpe.train_from_iterator(texts, vocab_size=350, min_frequency=2, show_progress=False)
gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=C, vocab_size=384,
                                  attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)).eval()
randomize(gpt2)
gpt2.save_pretrained(gpt2_dir)
bpe.save(os.path.join(gpt2_dir, "tokenizer.json"))

# ---- (b) Llama (GQA) with a Llama-2 shaped tokenizer.json that adds BOS ----
torch.manual_seed(32)
llama_dir = path("llama")
base = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
base.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                        normalizers.Replace(" ", "\u2581")])
base.train_from_iterator(texts, trainers.BpeTrainer(
    vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=60,
    show_progress=False))
sp = oracle_env.llama2_style(json.loads(base.to_str()))
n_sp = len(sp["model"]["vocab"])
llama = LlamaForCausalLM(LlamaConfig(
    hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=C, vocab_size=(n_sp + 63) // 64 * 64,
    rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1,
    eos_token_id=2)).eval()
randomize(llama)
llama.save_pretrained(llama_dir)
tt.write(os.path.join(llama_dir, "tokenizer.json"), json.dumps(sp, ensure_ascii=False))

# ---- (c) Mistral-7B v0.1's shape: a sliding window (W) shorter than the positions (C) ----
torch.manual_seed(33)
W = 32
mistral_dir = path("mistral")
mistral = MistralForCausalLM(MistralConfig(
    hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=C, vocab_size=(n_sp + 63) // 64 * 64,
    rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=W, tie_word_embeddings=False,
    bos_token_id=1, eos_token_id=2)).eval()
randomize(mistral)
mistral.save_pretrained(mistral_dir)
tt.write(os.path.join(mistral_dir, "tokenizer.json"), json.dumps(sp, ensure_ascii=False))

encoders = {}
for name, folder in (("gpt2", gpt2_dir), ("llama", llama_dir), ("mistral", mistral_dir)):
    encoders[name] = PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"))
with_bos = encoders["llama"]("a b")["input_ids"]
check("the llama tokenizer adds BOS (1) with special tokens, not without",
      with_bos[0] == 1 and encoders["llama"]("a b", add_special_tokens=False)["input_ids"]
      == with_bos[1:], with_bos)
models_ = {"gpt2": gpt2, "llama": llama, "mistral": mistral}


def encode(name, text, special):
    return encoders[name](text, add_special_tokens=special)["input_ids"]


@torch.no_grad()
def log_probs(name, ids):
    """float64 log-softmax of the float32 logits of one window (rows: positions)."""
    logits = models_[name](torch.tensor([ids])).logits[0]
    return torch.log_softmax(logits.float(), -1).double(), logits


def ref_perplexity(name, files, context, stride):
    tokens = windows = 0
    nll = 0.0
    for f in files:
        with open(f, "rb") as fh:
            ids = encode(name, fh.read().decode("utf-8"), True)
        prev_end, n = 0, len(ids)
        for begin in range(0, n, stride):
            end = min(begin + context, n)
            lp, _ = log_probs(name, ids[begin:end])
            for j in range(max(begin + 1, prev_end), end):
                nll -= lp[j - 1 - begin, ids[j]].item()
                tokens += 1
            windows += 1
            prev_end = end
            if end == n:
                break
    return {"tokens": tokens, "windows": windows, "nll_sum": nll}


@torch.no_grad()
def recipe_nll(name, files, context, stride):
    """Hugging Face's "perplexity of fixed-length models" recipe itself: labels -100 but for the
    window's new tokens, transformers' own (shifted, mean) loss x the tokens it scored."""
    nll, tokens = 0.0, 0
    for f in files:
        with open(f, "rb") as fh:
            ids = torch.tensor([encode(name, fh.read().decode("utf-8"), True)])
        prev_end, n = 0, ids.size(1)
        for begin in range(0, n, stride):
            end = min(begin + context, n)
            inp = ids[:, begin:end]
            target = inp.clone()
            target[:, :-(end - prev_end)] = -100
            scored = int((target[:, 1:] != -100).sum())
            if scored:
                nll += models_[name](inp, labels=target).loss.item() * scored
            tokens += scored
            prev_end = end
            if end == n:
                break
    return nll, tokens


def encode_pair(name, context, continuation, special):
    """lm-eval's _encode_pair: (context ids, continuation ids)."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation, context = context[-n_spaces:] + continuation, context[:-n_spaces]
    whole = encode(name, context + continuation, special)
    ctx = encode(name, context, special)
    return ctx, whole[len(ctx):]


def ref_loglikelihood(name, context, continuation, special, context_len=C):
    """(ll, greedy, tokens, decisive): decisive = no scored position's top two logits within
    1e-4."""
    ctx, cont = encode_pair(name, context, continuation, special)
    inp = (ctx + cont)[-(context_len + 1):][:-1]
    lp, logits = log_probs(name, inp)
    lp, logits = lp[-len(cont):], logits[-len(cont):]
    target = torch.tensor(cont)
    ll = lp[torch.arange(len(cont)), target].sum().item()
    greedy = bool((logits.argmax(-1) == target).all())
    top2 = logits.topk(2, -1).values
    decisive = bool(((top2[:, 0] - top2[:, 1]) > 1e-4).all())
    return ll, greedy, len(cont), decisive


def argmax_first(values):
    return max(range(len(values)), key=lambda i: (values[i], -i))


def near_tie(values, i):
    return any(abs(values[i] - v) <= 1e-4 for k, v in enumerate(values) if k != i)


def ref_tasks(name, lines, special, context=C):
    out = []
    for n, x in lines:
        choices = x["choices"] if "choices" in x else [x["continuation"]]
        r = [ref_loglikelihood(name, x["context"], c, special, context) for c in choices]
        res = {"line": n, "loglikelihood": [v[0] for v in r], "greedy": [v[1] for v in r],
               "tokens": [v[2] for v in r], "decisive": [v[3] for v in r]}
        if "choices" in x:
            norm = [v[0] / len(c) for v, c in zip(r, choices)]
            lls = res["loglikelihood"]
            res.update(label=x["label"], pred=argmax_first(lls), pred_norm=argmax_first(norm),
                       pred_decisive=not near_tie(lls, argmax_first(lls)),
                       norm_decisive=not near_tie(norm, argmax_first(norm)))
        out.append(res)
    return out


def evaluate(what, folder, *args):
    rc, out, err = tt.outputs([trident, "eval", folder, "--json", *args], timeout=300)
    got = None
    for line in out.splitlines() if rc == 0 else []:  # (several ranks: "[r0] {...}")
        try:
            got = json.loads(line[line.index("{"):]) if "{" in line else None
        except ValueError:
            continue
        if got is not None:
            break
    check(f"{what}: exit 0 and a JSON object", isinstance(got, dict),
          f"exit {rc}: {out[-500:]!r} {err[-1500:]!r}")
    return got


def rel_close(a, b, rel):
    return isinstance(a, (int, float)) and abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def check_perplexity(name, folder, context, stride, args=None):
    """`trident eval FOLDER --input file1 file2` (with --context and --stride, or `args`)
    against ref_perplexity: tokens, windows equal, nll_sum within 1e-5. The JSON object, or
    None."""
    want = ref_perplexity(name, [file1, file2], context, stride)
    args = ["--context", str(context), "--stride", str(stride)] if args is None else args
    got = evaluate(f"{name} --input {' '.join(args)}", folder, "--input", file1, file2, *args)
    p = (got or {}).get("perplexity") or {}
    check(f"{name} --input {' '.join(args)}: context {context}, tokens ({want['tokens']}) and "
          f"windows ({want['windows']}) equal, nll_sum within 1e-5 relative",
          (got or {}).get("context") == context and p.get("tokens") == want["tokens"]
          and p.get("windows") == want["windows"] and rel_close(p.get("nll_sum"), want["nll_sum"], 1e-5),
          f"trident {(got or {}).get('context')} {p}\nreference {want}", show=True)
    return got


# ---- --input ----
sizes = os.path.getsize(file1) + os.path.getsize(file2)
gpt2_ppl = None
for name, folder in (("gpt2", gpt2_dir), ("llama", llama_dir)):
    for context, stride in ((C, C), (C, C // 2), (C, 5), (40, 17)):
        want = ref_perplexity(name, [file1, file2], context, stride)
        if stride == C // 2:
            nll, tokens = recipe_nll(name, [file1, file2], context, stride)
            check(f"{name}: (the reference = transformers' loss with labels, the recipe itself: "
                  f"--context {context} --stride {stride})",
                  tokens == want["tokens"] and rel_close(nll, want["nll_sum"], 1e-6),
                  f"{nll} {tokens} vs {want}")
        got = evaluate(f"{name} --input --context {context} --stride {stride}", folder,
                       "--input", file1, file2, "--context", str(context), "--stride", str(stride))
        if not got:
            continue
        p = got.get("perplexity") or {}
        check(f"{name} --input --context {context} --stride {stride}: tokens ({want['tokens']}), "
              f"windows ({want['windows']}) and bytes equal, nll_sum within 1e-5 relative",
              p.get("tokens") == want["tokens"] and p.get("windows") == want["windows"]
              and p.get("streams") == 2 and p.get("bytes") == sizes
              and rel_close(p.get("nll_sum"), want["nll_sum"], 1e-5),
              f"trident {p}\nreference {want}", show=True)
        if name == "gpt2" and (context, stride) == (C, C // 2):
            gpt2_ppl = p

# the sliding window bounds the default context; a longer one is refused
for stride in (W, W // 2):  # the context defaults to the window
    check_perplexity("mistral", mistral_dir, W, stride, ["--stride", str(stride)])
rc, _, err = tt.outputs([trident, "eval", mistral_dir, "--input", file1, "--context", str(W + 1)],
                        timeout=120)
check(f"mistral --context {W + 1} (past the window): exit 2 naming the window",
      rc == 2 and "window" in err, f"exit {rc}: {err[-600:]!r}")

# the import of the GPT-2 folder, its tokenizer given as an option: the folder's numbers
ck = path("gpt2-ck")
rc, _, err = tt.outputs([trident, "convert", "--from", "hf", "--input", gpt2_dir, "--output", ck],
                        timeout=300)
if check("trident convert --from hf of the gpt2 folder", rc == 0, err[-800:]) and gpt2_ppl:
    got = evaluate("the import --input", ck, "--input", file1, file2, "--stride", str(C // 2),
                   "--tokenizer-type", "HFTokenizer",
                   "--tokenizer-model", os.path.join(gpt2_dir, "tokenizer.json"))
    p = (got or {}).get("perplexity") or {}
    check("--input of the import = of the folder (tokens, windows, nll_sum 1e-6 relative)",
          p.get("tokens") == gpt2_ppl.get("tokens") and p.get("windows") == gpt2_ppl.get("windows")
          and rel_close(p.get("nll_sum"), gpt2_ppl.get("nll_sum"), 1e-6), f"{p} vs {gpt2_ppl}")

# the same BPE as GPT2BPETokenizer (vocab.json and merges.txt): plain encoding, the same numbers
if gpt2_ppl:
    vocab_json, merges_txt = bpe.save_model(tt.fresh_dir(path("gpt2-files")))
    got = evaluate("gpt2 --input with GPT2BPETokenizer", gpt2_dir, "--input", file1, file2,
                   "--stride", str(C // 2), "--tokenizer-type", "GPT2BPETokenizer",
                   "--vocab-file", vocab_json, "--merge-file", merges_txt)
    p = (got or {}).get("perplexity") or {}
    check("--input with GPT2BPETokenizer (the same BPE's vocab.json, merges.txt) = with the "
          "folder's tokenizer.json", p.get("tokens") == gpt2_ppl.get("tokens")
          and p.get("windows") == gpt2_ppl.get("windows")
          and rel_close(p.get("nll_sum"), gpt2_ppl.get("nll_sum"), 1e-6), f"{p} vs {gpt2_ppl}")
# a Llama folder split over 2 ranks by tensor parallelism (each rank's shards cut from the
# folder, GQA's groups whole): the reference's numbers within TP rounding
want = ref_perplexity("llama", [file1, file2], C, C // 2)
got = evaluate("llama --input --nproc 2 (TP)", llama_dir, "--input", file1, file2,
               "--context", str(C), "--stride", str(C // 2), "--nproc", "2")
p = (got or {}).get("perplexity") or {}
check("a Llama folder split over 2 ranks (tensor parallelism): tokens, windows equal, nll_sum "
      "within 1e-5", p.get("tokens") == want["tokens"] and p.get("windows") == want["windows"]
      and rel_close(p.get("nll_sum"), want["nll_sum"], 1e-5), f"trident {p}\nreference {want}")
# ... and two whole replicas share the work (--data-parallel 2): the numbers of one rank
got = evaluate("llama --input --nproc 2 --data-parallel 2", llama_dir, "--input", file1, file2,
               "--context", str(C), "--stride", str(C // 2), "--nproc", "2", "--data-parallel", "2")
p = (got or {}).get("perplexity") or {}
check("a Llama folder on 2 ranks with --data-parallel 2: tokens, windows equal, nll_sum within 1e-5",
      p.get("tokens") == want["tokens"] and p.get("windows") == want["windows"]
      and rel_close(p.get("nll_sum"), want["nll_sum"], 1e-5), f"trident {p}\nreference {want}")

# ---- --data-path: a Megatron indexed dataset of the gpt2 tokenizer's ids written here ----
def write_indexed(prefix, docs):
    """PREFIX.bin / .idx (MMIDIDX v1, uint16) holding each document (a list of ids) as one
    sequence, as Megatron's IndexedDatasetBuilder writes them."""
    data = b"".join(struct.pack(f"<{len(d)}H", *d) for d in docs)
    pointers = [2 * sum(len(d) for d in docs[:k]) for k in range(len(docs))]
    n = len(docs)
    idx = (b"MMIDIDX\x00\x00" + struct.pack("<QB", 1, 8) + struct.pack("<QQ", n, n + 1)
           + struct.pack(f"<{n}i", *map(len, docs)) + struct.pack(f"<{n}q", *pointers)
           + struct.pack(f"<{n + 1}q", *range(n + 1)))
    tt.write(prefix + ".bin", data)
    tt.write(prefix + ".idx", idx)
    return prefix


@torch.no_grad()
def ref_dataset(name, stream, context):
    """Sample j = stream[j*C : j*C + C + 1]: the model reads its first C tokens, C targets."""
    nll, samples = 0.0, (len(stream) - 1) // context
    for j in range(samples):
        ids = stream[j * context:j * context + context + 1]
        lp, _ = log_probs(name, ids[:-1])
        nll -= lp[torch.arange(context), torch.tensor(ids[1:])].sum().item()
    return {"tokens": samples * context, "nll_sum": nll}


docs = [encode("gpt2", t + "\n", False) for t in texts[100:200]]
data_prefix = write_indexed(path("gpt2-data"), docs)
for context, split, split_name, first in ((C, None, None, 0), (48, "80,20,0", "valid", 80)):
    extra = ["--split", split, "--split-name", split_name] if split else []
    what = f"gpt2 --data-path --context {context}{' ' + ' '.join(extra) if extra else ''}"
    want = ref_dataset("gpt2", [i for d in docs[first:] for i in d], context)
    got = evaluate(what, gpt2_dir, "--data-path", data_prefix, "--context", str(context), *extra)
    if got:
        p = got.get("perplexity") or {}
        check(f"{what}: tokens ({want['tokens']}) equal, nll_sum within 1e-5 relative",
              p.get("tokens") == want["tokens"]
              and rel_close(p.get("nll_sum"), want["nll_sum"], 1e-5),
              f"trident {p}\nreference {want}", show=True)

# ---- --tasks ----
long_ctx = " ".join(texts[40:44])  # beyond C tokens with either tokenizer
base_lines = [
    {"context": "The alpha rank", "continuation": " holds the token"},
    {"context": "Pipe cache  ", "continuation": "delta gamma."},
    {"context": "Gamma beta.\n", "continuation": "The end"},
    {"context": "Caf\u00e9\u00a0", "continuation": "cr\u00e8me \u00fcber"},
    {"context": "Na\u00efve \u65e5\u672c", "continuation": "\u8a9e Stra\u00dfe"},
    {"context": "The query head is",
     "choices": [" alpha", " \u00fcber beta", " \u65e5\u672c", " rank rank rank"], "label": 1},
    {"context": "Question: which head? Answer: ", "choices": ["yes", "no", "the query head"],
     "label": 2},
    {"context": long_ctx, "continuation": " The end of it."},
    {"context": long_ctx, "choices": [" " + texts[45], " " + texts[46][:40], " cache"], "label": 0},
    {"context": "\u0394elta 12 345", "choices": ["!", "?", " end."], "label": 0,
     "source": "ignored"},
    {"context": "Alpha\x00beta", "continuation": " gamma\x00 end"},
]


def greedy_lines(name):
    """Continuation lines whose continuation is the model's own greedy text after a context: for
    each mode (without and with the template) up to 2 whose text (the first 4, 3, 2 or 1 greedy
    tokens, decoded: whole characters) re-encodes to the argmax tokens."""
    out = []
    contexts = ["The alpha", "Cache head of", "Stra\u00dfe", "Pipe", "Gamma delta", "Query",
                "12 token", "Rank the end"]
    for special in (False, True):
        found = 0
        for context in contexts:
            ctx = encode(name, context, special)
            ids = list(ctx)
            with torch.no_grad():
                for _ in range(4):
                    ids.append(int(models_[name](torch.tensor([ids])).logits[0, -1].argmax()))
            head = encoders[name].decode(ctx, skip_special_tokens=True)
            for k in (4, 3, 2, 1):
                full = encoders[name].decode(ids[:len(ctx) + k], skip_special_tokens=True)
                text = full[len(head):] if full.startswith(head) else ""
                if text and "\ufffd" not in text and \
                        ref_loglikelihood(name, context, text, special)[1]:
                    out.append({"context": context, "continuation": text})
                    found += 1
                    break
            if found == 2:
                break
    return out


def write_tasks(name, lines):
    """NAME-tasks.jsonl of lines (a blank line after the third; ASCII and UTF-8 escapes
    alternating): (its path, [(line number, object)])."""
    body, numbered = "", []
    for i, x in enumerate(lines):
        if i == 3:
            body += "\n"  # a blank line: skipped, the numbering goes on
        body += json.dumps(x, ensure_ascii=i % 2 == 0) + "\n"
        numbered.append((body.count("\n"), x))
    return tt.write(path(f"{name}-tasks.jsonl"), body), numbered


def check_tasks(name, folder, tasks, numbered, special, context=C, args=()):
    """trident eval --tasks [ARGS] against ref_tasks: every result and the sections."""
    flag = ["--special-tokens"] if special else []
    what = f"{name} --tasks{' --special-tokens' if special else ''}"
    want = ref_tasks(name, numbered, special, context)
    too_long = [w["line"] for w in want if max(w["tokens"]) > context or min(w["tokens"]) < 1]
    check(f"{what}: (the test's lines have continuations of 1..{context} tokens)", not too_long,
          too_long)
    truncated = [w["line"] for w, (_, x) in zip(want, numbered)
                 if len(encode(name, x["context"], special)) + max(w["tokens"]) > context + 1]
    check(f"{what}: (the test has lines beyond {context} + 1 tokens: left truncation)", truncated,
          truncated)
    cont = [w for w in want if "label" not in w]
    mc = [w for w in want if "label" in w]
    check(f"{what}: (some greedy flags are true: the model's own continuations)",
          any(w["greedy"][0] for w in cont), [w["greedy"] for w in cont])
    got = evaluate(what, folder, "--tasks", tasks, *flag, *args)
    if not got:
        return
    ts = got.get("tasks") or {}
    res = ts.get("results") or []
    check(f"{what}: one result per line, the line numbers", [r.get("line") for r in res]
          == [w["line"] for w in want], [r.get("line") for r in res])
    worst, bad = 0.0, []
    for r, w in zip(res, want):
        lls = r.get("loglikelihood") or []
        if r.get("tokens") != w["tokens"] or len(lls) != len(w["loglikelihood"]):
            bad.append(f"line {w['line']}: tokens {r.get('tokens')} vs {w['tokens']}")
            continue
        worst = max([worst] + [abs(a - b) for a, b in zip(lls, w["loglikelihood"])])
        if [g for g, d in zip(r.get("greedy") or [], w["decisive"]) if d] != \
                [g for g, d in zip(w["greedy"], w["decisive"]) if d]:
            bad.append(f"line {w['line']}: greedy {r.get('greedy')} vs {w['greedy']}")
        if "label" in w and (r.get("label") != w["label"]
                             or (w["pred_decisive"] and r.get("pred") != w["pred"])
                             or (w["norm_decisive"] and r.get("pred_norm") != w["pred_norm"])):
            bad.append(f"line {w['line']}: label/pred/pred_norm {r.get('label')}/"
                       f"{r.get('pred')}/{r.get('pred_norm')} vs {w['label']}/{w['pred']}/"
                       f"{w['pred_norm']}")
    check(f"{what}: every choice's tokens, loglikelihood (1e-4), greedy, pred, pred_norm of "
          f"{len(want)} lines", not bad and worst <= 1e-4 and len(res) == len(want),
          f"max |ll diff| {worst:.2e}; {bad}", show=True)
    ntok = sum(w["tokens"][0] for w in cont)
    nll = -sum(w["loglikelihood"][0] for w in cont) / ntok
    greedy_acc = sum(w["greedy"][0] for w in cont) / len(cont)
    acc = sum(w["pred"] == w["label"] for w in mc) / len(mc)
    acc_norm = sum(w["pred_norm"] == w["label"] for w in mc) / len(mc)
    ls, ms = ts.get("loglikelihood") or {}, ts.get("multiple_choice") or {}
    check(f"{what}: the sections (requests, tokens, greedy_accuracy, nll_mean, acc, acc_norm)",
          ts.get("requests") == len(want) and ls.get("requests") == len(cont)
          and ls.get("tokens") == ntok and rel_close(ls.get("greedy_accuracy"), greedy_acc, 1e-9)
          and rel_close(ls.get("nll_mean"), nll, 1e-5) and ms.get("requests") == len(mc)
          and rel_close(ms.get("acc"), acc, 1e-9) and rel_close(ms.get("acc_norm"), acc_norm, 1e-9),
          f"trident {ls} {ms}; reference tokens {ntok} nll_mean {nll}")


for name, folder in (("gpt2", gpt2_dir), ("llama", llama_dir)):
    tasks, numbered = write_tasks(name, base_lines + greedy_lines(name))
    for special in (False, True):
        check_tasks(name, folder, tasks, numbered, special)


# ---- Bloom (ALiBi, 6 heads, embedding LayerNorm; no position table: 2048 positions) ----
torch.manual_seed(35)
bloom_dir = path("bloom")
models_["bloom"] = BloomForCausalLM(BloomConfig(hidden_size=48, n_layer=2, n_head=6, vocab_size=384,
                                                layer_norm_epsilon=1e-5)).eval()
randomize(models_["bloom"])
models_["bloom"].save_pretrained(bloom_dir)
bpe.save(os.path.join(bloom_dir, "tokenizer.json"))
encoders["bloom"] = encoders["gpt2"]
for stride in (C, 7):
    check_perplexity("bloom", bloom_dir, C, stride)
# split over 3 ranks by tensor parallelism (2 heads and their ALiBi slopes each, the vocabulary
# padded for 3 ranks)
check_perplexity("bloom", bloom_dir, C, C // 2,
                 ["--context", str(C), "--stride", str(C // 2), "--nproc", "3"])
got = evaluate("bloom --input short", bloom_dir, "--input", file2, "--limit", "1")
check("bloom: the context defaults to the 2048 positions", (got or {}).get("context") == 2048,
      (got or {}).get("context"))
tasks, numbered = write_tasks("bloom", base_lines + greedy_lines("bloom"))
check_tasks("bloom", bloom_dir, tasks, numbered, False, C, ["--context", str(C)])


# ---- past one chunk of logits rows (TR_EVAL_CHUNK 128): a GPT-2 of 300 positions ----
def text_of(name, first, at_least):
    """texts[first], texts[first + 1], ... joined until they are at least `at_least` tokens."""
    out, k = "", first
    while len(encode(name, out, False)) < at_least:
        out += (" " if out else "") + texts[k]
        k += 1
    return out


torch.manual_seed(34)
L_POS = 300
long_dir = path("gpt2-long")
models_["gpt2-long"] = GPT2LMHeadModel(GPT2Config(
    n_layer=2, n_embd=64, n_head=4, n_positions=L_POS, vocab_size=384, attn_pdrop=0.0,
    embd_pdrop=0.0, resid_pdrop=0.0)).eval()
randomize(models_["gpt2-long"])
models_["gpt2-long"].save_pretrained(long_dir)
bpe.save(os.path.join(long_dir, "tokenizer.json"))
encoders["gpt2-long"] = encoders["gpt2"]
for context, stride in ((L_POS, L_POS), (L_POS, 150), (L_POS, 41), (200, 130)):
    check_perplexity("gpt2-long", long_dir, context, stride)


def long_text(first, at_least):
    return text_of("gpt2-long", first, at_least)


long_lines = [  # contexts and continuations of more than 128 tokens, shared long contexts
    {"context": long_text(200, 250), "continuation": " " + long_text(230, 140)},
    {"context": long_text(240, 200), "continuation": " " + long_text(260, 135)},
    {"context": long_text(270, 140), "label": 1,
     "choices": [" alpha", " " + long_text(280, 150), " beta gamma", " " + texts[290]]},
    {"context": long_text(300, 60), "label": 0,
     "choices": [" " + long_text(310, 250), " " + long_text(320, 260)]},
]
long_tasks, long_numbered = write_tasks("gpt2-long", long_lines + greedy_lines("gpt2-long"))
check_tasks("gpt2-long", long_dir, long_tasks, long_numbered, False, L_POS)

# a continuation that is not empty but has no tokens of its own (the context's last token absorbs
# it: encode(context + continuation) is no longer than encode(context)): refused with FILE:LINE
empty_cont = next((("The " + w[:k], w[k:]) for w in vocab_words for k in range(1, len(w))
                   if len(encode("gpt2", "The " + w, False))
                   <= len(encode("gpt2", "The " + w[:k], False))), None)
if check("(a word whose tail adds no token to its head, with the gpt2 tokenizer)", empty_cont):
    f = tt.write(path("no-tokens.jsonl"), json.dumps(base_lines[0]) + "\n" + json.dumps(
        {"context": empty_cont[0], "continuation": empty_cont[1]}) + "\n")
    rc, out, err = tt.outputs([trident, "eval", gpt2_dir, "--tasks", f], timeout=120)
    check(f"gpt2 --tasks: context {empty_cont[0]!r}, continuation {empty_cont[1]!r} (no tokens "
          "of its own): exit 2 naming no-tokens.jsonl:2", rc == 2 and "no-tokens.jsonl:2" in err,
          f"exit {rc}: {err!r}", show=True)
tt.finish("PASSED")
