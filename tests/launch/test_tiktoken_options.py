#!/usr/bin/python3
"""--tiktoken-special-tokens in `trident generate` and `trident eval` (as in preprocess): the list
reaches the TikTokenizer. A GPT-2 HF folder written here whose embedding (tied to the head) is
zero: every logit is 0, so greedy generation takes id 0, the list's first token, and the text
names it. A 256-byte tiktoken rank file; 8 special ids first.
  - generate: default list <unk> <s> </s>: id 0 reads <unk>; "<s>" "<unk>" "</s>" "<|x|>": <s>;
    the '=' spelling; the prompt's ids are its bytes + 8;
  - eval --input: runs with the list (same tokens as without it);
  - both: a list without </s>, a token given twice, more tokens than
    --tiktoken-num-special-tokens, the option without a value: exit 2 naming the problem.
usage: test_tiktoken_options.py TRIDENT WORKDIR"""
import base64
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "hf"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402
import hf_files as hff  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
S, V = 8, 272  # 8 specials + 256 byte ranks, padded to 272
hff.V = V
folder = os.path.join(work, "hf")
os.makedirs(folder)
tensors = hff.gpt2_tensors(layers=1, head=False)
tensors[0] = (tensors[0][0], tensors[0][1], tensors[0][2], [0.0] * (V * hff.C))  # wte = 0
with open(os.path.join(folder, "model.safetensors"), "wb") as f:
    f.write(hff.st_bytes(tensors))
tt.write(os.path.join(folder, "config.json"), json.dumps(dict(hff.CONFIG, n_layer=1, vocab_size=V,
                                                               bos_token_id=None, eos_token_id=None)))
ranks = os.path.join(work, "bytes.tiktoken")
tt.write(ranks, "".join(f"{base64.b64encode(bytes([b])).decode()} {b}\n" for b in range(256)))
text = os.path.join(work, "text.txt")
tt.write(text, "one two three four five six seven\n")
tik = ["--tokenizer-type", "TikTokenizer", "--tokenizer-model", ranks, "--tiktoken-pattern", "v1",
       "--tiktoken-num-special-tokens", str(S)]


def generate(*extra):
    rc, out, err = tt.outputs([trident, "generate", folder, "--json", "--prompt", "ab", "--max-new-tokens", "2",
                               "--temperature", "0", *tik, *extra], timeout=60)
    got = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    return rc, (got[0] if got else {}), err


for name, extra, first in [("default <unk> <s> </s>", [], "<unk>"),
                           ("'<s>' '<unk>' '</s>' '<|x|>'",
                            ["--tiktoken-special-tokens", "<s>", "<unk>", "</s>", "<|x|>"], "<s>"),
                           ("'=<|x|>' then '<unk>' '<s>' '</s>'",
                            ["--tiktoken-special-tokens=<|x|>", "--tiktoken-special-tokens", "<unk>", "<s>",
                             "</s>"], "<|x|>")]:
    rc, got, err = generate(*extra)
    check(f"generate, {name}: greedy id 0 reads {first}; the prompt's ids are its bytes + {S}",
          rc == 0 and got.get("generated_ids") == [0, 0] and got.get("text") == first * 2 and
          got.get("prompt_ids") == [ord("a") + S, ord("b") + S], f"exit {rc} {err[-400:]} {got}")

rc, out, err = tt.outputs([trident, "eval", folder, "--input", text, "--json", *tik], timeout=60)
plain = json.loads(out[out.index("{"):])["perplexity"]["tokens"] if rc == 0 and "{" in out else None
rc, out, err = tt.outputs([trident, "eval", folder, "--input", text, "--json", *tik,
                           "--tiktoken-special-tokens", "<s>", "<unk>", "</s>"], timeout=60)
listed = json.loads(out[out.index("{"):])["perplexity"]["tokens"] if rc == 0 and "{" in out else None
check("eval --input with --tiktoken-special-tokens runs, the same tokens as without",
      plain is not None and plain == listed, f"exit {rc} {err[-400:]} {plain} {listed}")

bad = [(["<s>", "<unk>"], "--tiktoken-special-tokens must include <unk>, <s> and </s>"),
       (["<s>", "<unk>", "</s>", "<s>"], "--tiktoken-special-tokens: '<s>' is given twice"),
       ([f"<t{i}>" for i in range(6)] + ["<s>", "<unk>", "</s>"],
        "9 special tokens (--tiktoken-special-tokens) are more than --tiktoken-num-special-tokens 8"),
       ([], "--tiktoken-special-tokens needs at least one token")]
for cmd in (["generate", folder, "--prompt", "ab", "--max-new-tokens", "1"], ["eval", folder, "--input", text]):
    for tokens, needle in bad:
        rc, out, err = tt.outputs([trident, *cmd, *tik, "--tiktoken-special-tokens", *tokens], timeout=60)
        check(f"{cmd[0]} --tiktoken-special-tokens {' '.join(tokens) or '(none)'}: exit 2, '{needle}'",
              rc == 2 and needle in err, f"exit {rc} {err[-400:]}")
tt.finish("--tiktoken-special-tokens in generate and eval")
