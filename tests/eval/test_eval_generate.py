#!/usr/bin/python3
"""`trident eval --tasks` generation requests (lm-evaluation-harness's generate_until) against
transformers 4.38.2's greedy `generate` (the hf tests' virtual environment), with the harness's
rules written out here: the context encoded as it is and left-truncated to context -
max_gen_toks ids, greedy tokens until the tokenizer's EOS, max_gen_toks, or the first token
after which the decoded text holds a stop string (the harness's stopping criteria), the text
cut before each stop string in turn (s.split(term)[0]); exact_match of both stripped.
Models made here with random weights (nothing downloaded):
  gpt2     a GPT2LMHeadModel beside a byte-level BPE tokenizer.json trained here (its EOS
           <|endoftext|>, which a random model never picks);
  gpt2-eos the same model whose tokenizer_config.json names as EOS a token the model does
           generate: generation stops before it, as transformers' does;
  llama    a LlamaForCausalLM (GQA) with a Llama-2 shaped tokenizer.json (BOS with
           --special-tokens), a sentencepiece-style decoder.
Requests: stop strings taken from the reference's own text (so they fire), none, several (the
first in the text cuts), one never met, max_gen_toks 1 and 5, a context longer than the
context window (left truncation), targets right and wrong. Each request's text is compared
where every greedy step of the reference has a margin over the runner-up of more than 1e-4
(else skipped, counted). Also --nproc 2 (tensor parallel) gives the same texts.
usage: test_eval_generate.py TRIDENT WORKDIR VENV"""
import json
import os
import random
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
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,  # noqa: E402
                          PreTrainedTokenizerFast)
from transformers.utils import logging as hf_logging  # noqa: E402

import oracle_env  # noqa: E402  (tests/tokenizer: the Llama-2 shaped tokenizer.json)

hf_logging.set_verbosity_error()
torch.set_num_threads(2)
work = tt.fresh_dir(work)
C = 64


def path(*names):
    return os.path.join(work, *names)


rng = random.Random(41)
words = ["alpha", "beta", "gamma", "pipe", "rank", "token", "cache", "the", "of", "caf\u00e9",
         "\u65e5\u672c", "12", "345", "end", "query", "head"]
texts = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))) + rng.choice([".", "!", "?"])
         for _ in range(300)]


def randomize(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "ln_" in name or name.endswith("norm.weight")
                    else 0.3 * torch.randn_like(p))


torch.manual_seed(51)
bpe = ByteLevelBPETokenizer()
bpe.train_from_iterator(texts, vocab_size=300, min_frequency=2, show_progress=False,
                        special_tokens=["<|endoftext|>"])
gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=C, vocab_size=320,
                                  attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)).eval()
randomize(gpt2)
gpt2_dir = path("gpt2")
gpt2.save_pretrained(gpt2_dir)
bpe.save(os.path.join(gpt2_dir, "tokenizer.json"))
tt.write(os.path.join(gpt2_dir, "tokenizer_config.json"), json.dumps({"eos_token": "<|endoftext|>"}))

torch.manual_seed(52)
base = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
base.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
base.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=260, special_tokens=["<unk>", "<s>", "</s>"],
                                                    limit_alphabet=60, show_progress=False))
sp = oracle_env.llama2_style(json.loads(base.to_str()))
llama = LlamaForCausalLM(LlamaConfig(
    hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=C, vocab_size=(len(sp["model"]["vocab"]) + 63) // 64 * 64, rms_norm_eps=1e-6,
    tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)).eval()
randomize(llama)
llama_dir = path("llama")
llama.save_pretrained(llama_dir)
tt.write(os.path.join(llama_dir, "tokenizer.json"), json.dumps(sp, ensure_ascii=False))


generated = {}  # (model, context, most, special) -> transformers' greedy generation


def reference(model, tok, eos, context, until, most, special):
    """The harness's generate_until with transformers' greedy generate: (text, tokens, sure)."""
    ids = tok(context, add_special_tokens=special)["input_ids"][-(C - most):]
    key = (id(model), context, most, special, eos)
    if key not in generated:
        generated[key] = generate(model, ids, eos, most)
    gen, margins = generated[key]
    return cut_text(tok, gen, margins, eos, until)


def generate(model, ids, eos, most):
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         max_new_tokens=min(most, C - len(ids)), do_sample=False, num_beams=1,
                         eos_token_id=eos, pad_token_id=eos, output_scores=True,
                         return_dict_in_generate=True)
    gen = out.sequences[0, len(ids):].tolist()
    margins = []
    for step in out.scores:
        top = torch.topk(step[0].double(), 2).values
        margins.append(float(top[0] - top[1]))
    return gen, margins


def cut_text(tok, gen, margins, eos, until):
    if eos in gen:
        gen = gen[:gen.index(eos)]
    # generation stops at the first token after which the decoded text holds a stop string
    # (the harness's stopping criteria, which look at the text's tail)
    needed = len(gen)
    for k in range(1, len(gen) + 1):
        if any(u in tok.decode(gen[:k]) for u in until):
            needed = k
            break
    gen = gen[:needed]
    text = tok.decode(gen, skip_special_tokens=False)
    cut = text
    for term in until:
        cut = cut.split(term)[0]
    sure = all(m > 1e-4 for m in margins[:needed + 1])  # the steps that decided it (+1: EOS)
    return cut, text, sure


def requests_for(model, tok, eos, special, n):
    """n generation lines: stop strings cut from the reference's own free text."""
    lines = []
    r = random.Random(7 + n)
    for i in range(n):
        ctx = " ".join(r.choice(words) for _ in range(r.randint(2, 12)))
        if i == 0:
            ctx = " ".join(texts[:12])  # longer than the context: left truncation
        most = [1, 5, 20, 40][i % 4]
        _, free, _ = reference(model, tok, eos, ctx, [], most, special)
        until = []
        if i % 3 != 2 and len(free) > 4:
            a = r.randint(1, max(1, len(free) - 3))
            until = [free[a:a + r.randint(1, 3)]]
            if i % 3 == 1:
                until = ["\u2603never", until[0], free[max(0, a - 2):a + 1]]
        line = {"context": ctx, "until": until, "max_gen_toks": most}
        if i % 2 == 0:
            line["target"] = " " + reference(model, tok, eos, ctx, until, most, special)[0] + "\n"
        elif i % 5 == 1:
            line["target"] = "no such text"
        lines.append(line)
    return lines


def run_eval(folder, tasks, *args):
    rc, out, err = tt.outputs([trident, "eval", folder, "--json", "--tasks", tasks, *args], timeout=300)
    got = None
    for line in out.splitlines() if rc == 0 else []:
        if "{" in line:
            try:
                got = json.loads(line[line.index("{"):])
                break
            except ValueError:
                continue
    check(f"{folder.split('/')[-1]} {' '.join(args)}: exit 0 and a JSON object", isinstance(got, dict),
          f"exit {rc}: {out[-500:]!r} {err[-1500:]!r}")
    return got or {}


def check_model(name, folder, model, tok, eos, special, n, extra=()):
    lines = requests_for(model, tok, eos, special, n)
    tasks = tt.write(path(f"{name}-gen.jsonl"), "".join(json.dumps(x) + "\n" for x in lines))
    flags = ["--special-tokens"] if special else []
    got = run_eval(folder, tasks, *flags, *extra)
    results = (got.get("tasks") or {}).get("results") or []
    check(f"{name}: one result per line", len(results) == len(lines), len(results))
    compared = skipped = exact = with_target = 0
    for line, res in zip(lines, results):
        want, _, sure = reference(model, tok, eos, line["context"], line["until"], line["max_gen_toks"], special)
        if "target" in line:
            with_target += 1
            exact += line["target"].strip() == want.strip()
        if not sure:
            skipped += 1
            continue
        compared += 1
        check(f"{name} line {res.get('line')}: the reference's text", res.get("generated") == want,
              f"{res.get('generated')!r} vs {want!r} (until {line['until']}, max {line['max_gen_toks']})")
        if "target" in line:
            check(f"{name} line {res.get('line')}: exact_match",
                  res.get("exact_match") == (line["target"].strip() == want.strip()), res)
    summary = (got.get("tasks") or {}).get("generate_until") or {}
    check(f"{name}: the summary counts", summary.get("requests") == len(lines) and
          summary.get("with_target") == with_target, summary)
    check(f"{name}: compared {compared} requests ({skipped} near a tie skipped)", compared >= n - 3,
          f"{compared} of {n}")
    return lines, results


enc_gpt2 = PreTrainedTokenizerFast(tokenizer_file=os.path.join(gpt2_dir, "tokenizer.json"))
eos_gpt2 = enc_gpt2.convert_tokens_to_ids("<|endoftext|>")
lines, base_results = check_model("gpt2", gpt2_dir, gpt2, enc_gpt2, eos_gpt2, False, 12)
got_tp = run_eval(gpt2_dir, tt.write(path("gpt2-tp.jsonl"), "".join(json.dumps(x) + "\n" for x in lines)),
                  "--nproc", "2")
check("gpt2 --nproc 2 (tensor parallel): the same texts",
      [r.get("generated") for r in (got_tp.get("tasks") or {}).get("results", [])]
      == [r.get("generated") for r in base_results])

# EOS the model does generate: a greedy token of a free generation whose token is plain ASCII
# letters (its tokenizer_config.json names it by its text)
ctx = "alpha beta the"
ctx_ids = enc_gpt2(ctx)["input_ids"]
free = gpt2.generate(torch.tensor([ctx_ids]), max_new_tokens=24, do_sample=False,
                     pad_token_id=eos_gpt2)[0, len(ctx_ids):].tolist()
at = next((k for k, t in enumerate(free) if k > 0 and (enc_gpt2.convert_ids_to_tokens(t) or "").isalpha()
           and enc_gpt2.convert_ids_to_tokens(t).isascii()), None)
check("a free generation holds a token of ASCII letters after its first", at is not None,
      enc_gpt2.convert_ids_to_tokens(free))
if at is not None:
    stop_id = free[at]
    stop_token = enc_gpt2.convert_ids_to_tokens(stop_id)
    eos_dir = path("gpt2-eos")
    os.makedirs(eos_dir)
    for f in os.listdir(gpt2_dir):
        if f != "tokenizer_config.json":
            os.link(os.path.join(gpt2_dir, f), os.path.join(eos_dir, f))
    tt.write(os.path.join(eos_dir, "tokenizer_config.json"), json.dumps({"eos_token": stop_token}))
    eos_tasks = tt.write(path("eos.jsonl"), json.dumps({"context": ctx, "until": [], "max_gen_toks": 24}) + "\n")
    got = run_eval(eos_dir, eos_tasks)
    res = ((got.get("tasks") or {}).get("results") or [{}])[0]
    want = enc_gpt2.decode(free[:at])
    check(f"an EOS the model generates ({stop_token!r}, step {at + 1}): generation stops before it",
          res.get("generated") == want and res.get("generated_tokens") == at, (res, want))

enc_llama = PreTrainedTokenizerFast(tokenizer_file=os.path.join(llama_dir, "tokenizer.json"))
check_model("llama", llama_dir, llama, enc_llama, 2, True, 8)
tt.finish("eval-generate: all checks passed")
