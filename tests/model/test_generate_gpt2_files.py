#!/usr/bin/python3
"""`trident generate` and `trident eval` with an HF folder's slow GPT-2 tokenizer files
(vocab.json + merges.txt, no tokenizer.json: facebook/opt-*, older GPT-2 saves). A tiny GPT-2
folder written by hand (tests/hf/hf_files.py, 320 ids) with a BPE vocabulary in OPT's shape
(<s> 0, <pad> 1, </s> 2, <unk> 3, the 256 bytes, merges spelling a few words):
  - generate takes the files unasked (said on stderr); the prompt ids are what transformers'
    GPT2Tokenizer(text)["input_ids"] gives, without tokenizer_config.json and with OPT's
    ("add_bos_token": true, bos_token an AddedToken </s>: id 2 first), and the JSON text is
    tokenizer.decode of the generated ids;
  - eval --input scores the stream tokenizer(text) gives (BOS included: one token more);
  - tokenizer.json wins when both are there; --tokenizer-type ByteLevel still gives bytes;
  - a tokenizer_config.json that is not JSON, an add_bos_token that is not a boolean, a
    bos_token outside the vocabulary or null, add_prefix_space true: exit 2 naming the file
    and the key.
The oracle (transformers 4.38.2 in VENV) when VENV is given (the release build); the ids are
also checked against the fixture's hand-made spelling, so the sanitizer build checks them too.
usage: test_generate_gpt2_files.py TRIDENT WORKDIR [VENV]"""
import json
import os
import shutil
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "common"))
sys.path.insert(0, os.path.join(here, "..", "hf"))
import hf_files as hff  # noqa: E402
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
venv = sys.argv[3] if len(sys.argv) > 3 else None
P = 32
words = ["alpha", "beta", "gamma", "delta"]
bc = tt.gpt2_byte_char

vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
for b in range(256):
    vocab[bc(b)] = 4 + b
merges = []
for w in words:  # "Ġword" built left to right
    cur = bc(32)
    for ch in w:
        if cur + ch not in vocab:
            merges.append(f"{cur} {ch}")
            vocab[cur + ch] = len(vocab)
        cur += ch
V = len(vocab)  # every id the model makes has a token (GPT2Tokenizer.decode needs one)

hff.V, hff.P = V, P
config = dict(hff.CONFIG, vocab_size=V, n_positions=P, bos_token_id=None, eos_token_id=None)
sess = hff.Session(trident, work)
base = sess.hf_folder("opt-files", hff.gpt2_tensors(), config=config)
tt.write(os.path.join(base, "vocab.json"), json.dumps(vocab, ensure_ascii=False))
tt.write(os.path.join(base, "merges.txt"), "#version: 0.2\n" + "\n".join(merges) + "\n")
added = {"__type": "AddedToken", "content": "</s>", "lstrip": False, "normalized": True,
         "rstrip": False, "single_word": False}
opt_config = {"add_bos_token": True, "add_prefix_space": False, "bos_token": added, "eos_token": added,
              "errors": "replace", "model_max_length": 1000000000000000019884624838656,
              "pad_token": "<pad>", "tokenizer_class": "GPT2Tokenizer", "unk_token": "<unk>"}


def folder(name, tok_config=None, extra=None):
    """A copy of the base folder with tokenizer_config.json (a dict, or raw text) and files."""
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(base, d)
    if tok_config is not None:
        text = tok_config if isinstance(tok_config, str) else json.dumps(tok_config)
        tt.write(os.path.join(d, "tokenizer_config.json"), text)
    for fname, text in (extra or {}).items():
        tt.write(os.path.join(d, fname), text)
    return d


def generate(d, *args):
    """`trident generate D --json` greedy, 6 tokens: (exit, JSON object or None, stderr)."""
    r = tt.run([trident, "generate", d, "--json", "--temperature", "0", "--max-new-tokens", "6", *args],
               timeout=60)
    out = json.loads(r.stdout[r.stdout.index("{"):]) if r.returncode == 0 and "{" in r.stdout else None
    return r.returncode, out, r.stderr


ORACLE = """import json, sys
from transformers import GPT2Tokenizer
jobs, out = json.load(open(sys.argv[1])), []
for d, text, gen in jobs:
    t = GPT2Tokenizer.from_pretrained(d)
    out.append([t(text)["input_ids"], t.decode(gen, clean_up_tokenization_spaces=False)])
print(json.dumps(out))
"""


def oracle(jobs):
    """[(input_ids, decoded text)] of GPT2Tokenizer.from_pretrained(folder) for each (folder,
    text, generated ids); None without VENV."""
    if not venv:
        return None
    py = tt.venv_python(venv, tt.HF_PACKAGES, "transformers")
    path = tt.write(os.path.join(work, "oracle-jobs.json"), json.dumps(jobs))
    r = subprocess.run([py, "-c", ORACLE, path], capture_output=True, text=True, timeout=300)
    if not check("the GPT2Tokenizer oracle runs", r.returncode == 0, r.stderr[-1500:]):
        tt.finish()
    return json.loads(r.stdout)


prompt = "alpha beta gamma delta"
spelled = [vocab[bc(ord(c))] for c in "alpha"] + [vocab[bc(32) + w] for w in words[1:]]
plain, opt = folder("plain"), folder("opt", opt_config)
runs = {}
for name, d, want in (("no tokenizer_config.json", plain, spelled), ("OPT's tokenizer_config.json", opt,
                                                                       [2] + spelled)):
    rc, got, err = generate(d, "--prompt", prompt)
    runs[name] = (d, got)
    ok = rc == 0 and got["prompt_ids"] == want and "vocab.json + merges.txt" in err
    check(f"{name}: generate encodes with vocab.json + merges.txt (said on stderr), the prompt ids as "
          f"spelled", ok, f"exit {rc}: {got} {err[-600:]}")
    if not ok:
        tt.finish()
check("OPT's tokenizer_config.json is named on stderr", "tokenizer_config.json" in err, err)

want = oracle([[d, prompt, got["generated_ids"]] for d, got in runs.values()])
if want is not None:
    for (name, (d, got)), (ids, text) in zip(runs.items(), want):
        check(f"{name}: prompt ids = GPT2Tokenizer(text)['input_ids']", got["prompt_ids"] == ids,
              f"{got['prompt_ids']} vs {ids}")
        check(f"{name}: text = GPT2Tokenizer.decode(generated ids)", got["text"] == text,
              f"{got['text']!r} vs {text!r}")
else:
    print("(no VENV: the ids checked against the fixture's spelling only; the release build runs the oracle)")

# eval --input: the stream as tokenizer(text) gives it, BOS included
text_file = tt.write(os.path.join(work, "text.txt"), " ".join(words * 3))
n_ids = 5 + 11  # "alpha" as 5 bytes, then 11 words of one token each
for name, d, n in (("without BOS", plain, n_ids), ("with OPT's BOS", opt, n_ids + 1)):
    r = tt.run([trident, "eval", d, "--input", text_file, "--context", str(P), "--json"], timeout=60)
    res = json.loads(r.stdout[r.stdout.index("{"):]) if r.returncode == 0 and "{" in r.stdout else {}
    tokens = res.get("perplexity", {}).get("tokens")
    check(f"eval --input {name}: {n} ids, {n - 1} scored", tokens == n - 1, f"exit {r.returncode}: "
          f"{r.stdout[-800:]} {r.stderr[-600:]}")

# tokenizer.json wins; --tokenizer-type ByteLevel gives bytes
byte_tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": True},
            "post_processor": None, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "vocab": vocab, "merges": []}}  # no merges: the prompt's bytes
both = folder("both", opt_config, {"tokenizer.json": json.dumps(byte_tok, ensure_ascii=False)})
rc, got, err = generate(both, "--prompt", prompt)
check("tokenizer.json beside vocab.json + merges.txt wins (bytes, no BOS)",
      rc == 0 and got["prompt_ids"] == [4 + b for b in prompt.encode()] and "tokenizer.json" in err
      and "vocab.json" not in err, f"exit {rc}: {got} {err[-600:]}")
rc, got, err = generate(opt, "--prompt", prompt, "--tokenizer-type", "ByteLevel")
check("--tokenizer-type ByteLevel: bytes", rc == 0 and got["prompt_ids"] == list(prompt.encode()),
      f"exit {rc}: {got} {err[-600:]}")

# bad tokenizer_config.json: exit 2 naming the file and the key
bad = [("not JSON", "{\"add_bos_token\": tru", None),
       ("not an object", "[1]", "the file"),
       ("add_bos_token not a boolean", dict(opt_config, add_bos_token="yes"), "add_bos_token"),
       ("bos_token outside the vocabulary", dict(opt_config, bos_token="<bos>"), "bos_token '<bos>'"),
       ("bos_token an AddedToken without content", dict(opt_config, bos_token={"lstrip": False}), "bos_token"),
       ("bos_token null", dict(opt_config, bos_token=None), "bos_token: null"),
       ("bos_token absent: <|endoftext|>, not in this vocabulary",
        {k: v for k, v in opt_config.items() if k != "bos_token"}, "bos_token '<|endoftext|>'"),
       ("add_prefix_space true", dict(opt_config, add_prefix_space=True), "add_prefix_space")]
for i, (what, cfg, key) in enumerate(bad):
    d = folder(f"bad{i}", cfg)
    r = tt.run([trident, "generate", d, "--prompt", "alpha", "--max-new-tokens", "1"], timeout=60)
    path = os.path.join(d, "tokenizer_config.json")
    check(f"tokenizer_config.json {what}: exit 2 naming the file{' and ' + key if key else ''}",
          r.returncode == 2 and path in r.stderr and (key is None or key in r.stderr)
          and "Traceback" not in r.stderr, f"exit {r.returncode}: {r.stderr[-600:]}")
r = tt.run([trident, "eval", folder("bad-eval", dict(opt_config, bos_token="<bos>")), "--input", text_file],
           timeout=60)
check("eval refuses the same (exit 2 naming bos_token)", r.returncode == 2 and "bos_token" in r.stderr,
      r.stderr[-600:])
# add_bos_token false: no BOS (a bad bos_token is not looked up)
rc, got, err = generate(folder("nobos", dict(opt_config, add_bos_token=False, bos_token="<bos>")), "--prompt", prompt)
check("add_bos_token false: no BOS", rc == 0 and got["prompt_ids"] == spelled, f"exit {rc}: {got} {err[-600:]}")
tt.finish()
