#!/usr/bin/python3
"""tiktoken rank files (TikTokenizer, Llama3Tokenizer) against the tiktoken wheel (PyPI, in the
tokenizer tests' venv): token ids, decoding, and `trident preprocess` against Megatron's bytes.

The rank files are made here from GPT-2's vocabulary (oracle_env.gpt2_files): GPT-2's ids as
tiktoken ranks (r50k's table, 50256 tokens) written as tiktoken's "base64 rank" lines, and the
same tokens as Megatron's JSON list (the 256 bytes first, in byte order, then the others in
GPT-2's order). The references:
  Llama3Tokenizer  Meta's llama3 Tokenizer.encode written out: tiktoken.Encoding with Llama-3's
                   pattern, the ranks and Meta's 256 special tokens after them, the text cut in
                   pieces of 400,000 characters and runs of over 25,000 (non-)spaces, each piece
                   encoded with allowed_special="all"; add_special: <|begin_of_text|> first;
                   with a Llama 3.0 params.json beside the file, Llama 3.0's names
  TikTokenizer     Megatron's CustomTikTokenizer: the ranks shifted by num_special_tokens, the
                   v1 / v2 pattern, tokenize = encode_ordinary (special tokens are text);
                   1000 specials <unk> <s> </s> <SPECIAL_3>... on the text file, 10 given ones
                   on the JSON file
Texts: the torture files but the 10 MB line, 40 fortune files, ~300 generated ones (special
tokens, contractions in both cases, digit runs, whitespace runs, CRLF, unicode letters and
marks), and a 456,000-character text with a 30,000-letter word, 26,000 spaces and a 400,000-letter
word (Meta's cuts).
usage: test_tiktoken_oracle.py TOK_ENCODE TRIDENT WORKDIR VENV"""
import base64
import json
import os
import random
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, HERE)
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402
import oracle_env  # noqa: E402
import torture  # noqa: E402
from megatron_ref import megatron_encode, megatron_files  # noqa: E402

tok_encode, trident, work, venv = sys.argv[1:5]
oracle_env.enter(venv)
import tiktoken  # noqa: E402

tt.fresh_dir(work)


def path(name):
    return os.path.join(work, name)


V1 = r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
V2 = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
      r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
      r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
META_NAMED = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
              "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
              "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>",
              "<|python_tag|>", "<|image|>"]
META_SPECIALS = META_NAMED + [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(META_NAMED))]
# Llama 3.0's (Meta's llama3 repository): trident's names when params.json beside the file has no
# use_scaled_rope
META30_NAMED = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
                "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
META30_SPECIALS = META30_NAMED + [f"<|reserved_special_token_{i}|>" for i in range(5, 256 - 5)]

# ---- the rank files ----
encoder_json, _ = oracle_env.gpt2_files(venv)
byte_of = {tt.gpt2_byte_char(b): b for b in range(256)}
with open(encoder_json) as f:
    ranks = {bytes(byte_of[c] for c in tok): i for tok, i in json.load(f).items() if tok != "<|endoftext|>"}
N = len(ranks)
by_rank = sorted(ranks, key=ranks.get)
tiktoken_file = path("gpt2.tiktoken")
with open(tiktoken_file, "w") as f:
    f.writelines(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items())
json_order = [bytes([b]) for b in range(256)] + [t for t in by_rank if len(t) > 1]
json_ranks = {t: i for i, t in enumerate(json_order)}
json_file = path("megatron.json")
with open(json_file, "w") as f:
    json.dump([{"rank": i, "token_bytes": base64.b64encode(t).decode(), "token_str": t.decode("utf-8", "replace")}
               for i, t in enumerate(json_order)], f)

# ---- the texts ----
rng = random.Random(49)
files = [p for p in torture.write_corpus(path("torture")) if not p.endswith("long-line.txt")]
files += oracle_env.fortune_files()[:40]
pieces = (["'s", "'S", "'t", "'RE", "'ve", "'M", "'ll", "'D", "don't", "DON'T", "I'm", "x'LL"]
          + META_SPECIALS[:14] + ["<|reserved_special_token_4|>", "<|reserved_special_token_5|>",
                                  "<|reserved_special_token_250|>", "<|begin_of_text", "<unk>", "<s>", "</s>",
                                  "<SPECIAL_7>", "<mask>"]
          + ["1", "12", "123", "1234", "12345678", "3.14", "\u0663\u0664\u0665\u0666", "\u00b2\u00b3", "\u2165"]
          + [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028", "\x1c", "\x85"]
          + ["hello", "World", "HeLLo", "\u00c9cole", "na\u00efve", "e\u0301",
             "\u0928\u092e\u0938\u094d\u0924\u0947", "\u4e2d\u6587", "\u3053\u3093", "\ud55c\uad6d",
             "\u05e9\u05dc\u05d5\u05dd", "\U0001f600", "\U0001f44d\U0001f3fd", "\u01c5ungla", "\u02b0ello",
             "ABC", "/path/to", "a/b\n", "!!", "...", "<|", "|>", "\u0130stanbul", "\u017fs"])
gen = [rng.choice(pieces) for _ in range(len(pieces))]  # each piece once more, alone below
for k in range(300):
    n = rng.randint(1, 25)
    gen.append("".join(rng.choice(pieces) + rng.choice(["", "", " ", "  ", "\n"]) for _ in range(n)))
gen += pieces
gen.append("the" * 10000 + " " * 26000 + "x" + "hello" * 80000 + " tail" + "<|eot_id|>" + " end")
for k, text in enumerate(gen):
    p = path(f"gen-{k}.txt")
    with open(p, "wb") as f:
        f.write(text.encode("utf-8", "surrogatepass"))
    files.append(p)
texts = []
for p in files:
    with open(p, "rb") as f:
        texts.append(f.read().decode("utf-8", "replace"))
print(f"{len(files)} texts, {sum(len(t) for t in texts)} characters")


def records(args, width):
    p = subprocess.run([tok_encode] + args, capture_output=True, timeout=600)
    if p.returncode:
        return None, p.stderr.decode(errors="replace")
    out, at, res = p.stdout, 0, []
    while at < len(out):
        n = struct.unpack_from("<q", out, at)[0]
        res.append(out[at + 8:at + 8 + width * n])
        at += 8 + width * n
    return res, ""


def trident_ids(kind, model, opts, special=False):
    res, err = records([kind, "-", "-", model] + opts + (["--special"] if special else []) + files, 4)
    return (res and [list(struct.unpack("<%di" % (len(r) // 4), r)) for r in res]), err


def compare(name, mine, err, theirs):
    if mine is None:
        check(f"{name}: tok_encode runs", False, err)
        return
    bad = [f"{os.path.basename(f)}: {len(a)} vs {len(b)} ids, first difference at "
           f"{next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))}"
           for f, a, b in zip(files, mine, theirs) if a != b]
    check(f"{name}: identical ids on {len(files)} texts ({sum(map(len, theirs))} tokens)", not bad,
          "\n     ".join(bad[:5]))


def check_decode(name, kind, model, opts, enc, n_ids):
    seqs = [[rng.randrange(n_ids) for _ in range(rng.randint(0, 40))] for _ in range(200)]
    seqs += [[rng.randrange(n_ids - 300, n_ids)] for _ in range(20)] + [[0, 1, 2], list(range(250, 260))]
    names = []
    for k, ids in enumerate(seqs):
        names.append(path(f"decode-{k}.bin"))
        with open(names[-1], "wb") as f:
            f.write(struct.pack("<%di" % len(ids), *ids))
    res, err = records([kind, "-", "-", model] + opts + ["--decode"] + names, 1)
    bad = [(s, r) for s, r in zip(seqs, res or []) if r != enc.decode_bytes(s)]
    check(f"{name}: decoding {len(seqs)} id lists (special ids too) = tiktoken's decode_bytes",
          res is not None and not bad, err + repr(bad[:2]))


# ---- Llama3Tokenizer: Meta's encode ----
def meta_pieces(s):
    """Meta's cuts: 400,000 characters, then runs of over 25,000 (non-)spaces."""
    for i in range(0, len(s), 400000):
        chunk, start, run, space = s[i:i + 400000], 0, 0, s[i:i + 1].isspace()
        for j, c in enumerate(chunk):
            if c.isspace() != space:
                space, run = c.isspace(), 1
            else:
                run += 1
                if run > 25000:
                    yield chunk[start:j]
                    start, run = j, 1
        yield chunk[start:]


meta = tiktoken.Encoding("llama3-gpt2", pat_str=oracle_env.LLAMA3_PATTERN, mergeable_ranks=ranks,
                         special_tokens={t: N + i for i, t in enumerate(META_SPECIALS)})


def meta_encode(s, enc=None):
    return [i for piece in meta_pieces(s) for i in (enc or meta).encode(piece, allowed_special="all", disallowed_special=())]


theirs = [meta_encode(t) for t in texts]
mine, err = trident_ids("Llama3Tokenizer", tiktoken_file, [])
compare("Llama3Tokenizer", mine, err, theirs)
big = texts[-1]
# 16 pieces in the first 400,000 characters (a cut in the "the"s, one in the spaces, 13 in the
# "hello"s), 3 after
check("the long text is cut where Meta cuts it (19 pieces), and that changes its ids",
      len(list(meta_pieces(big))) == 19 and theirs[-1] != meta.encode(big, allowed_special="all"))
mine, err = trident_ids("Llama3Tokenizer", tiktoken_file, [], special=True)
compare("Llama3Tokenizer with add_special (<|begin_of_text|> first)", mine, err, [[N] + t for t in theirs])
check_decode("Llama3Tokenizer", "Llama3Tokenizer", tiktoken_file, [], meta, N + 256)
dir30 = path("llama3.0")
os.makedirs(dir30)
model30 = os.path.join(dir30, "tokenizer.model")
shutil.copy(tiktoken_file, model30)
with open(os.path.join(dir30, "params.json"), "w") as f:  # Llama 3.0 8B's, no use_scaled_rope
    json.dump({"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "vocab_size": 128256,
               "multiple_of": 1024, "ffn_dim_multiplier": 1.3, "norm_eps": 1e-05, "rope_theta": 500000.0}, f)
meta30 = tiktoken.Encoding("llama3.0-gpt2", pat_str=oracle_env.LLAMA3_PATTERN, mergeable_ranks=ranks,
                         special_tokens={t: N + i for i, t in enumerate(META30_SPECIALS)})
theirs30 = [meta_encode(t, meta30) for t in texts]
check("Llama 3.0's names change the ids of some texts", theirs30 != theirs)
mine, err = trident_ids("Llama3Tokenizer", model30, [])
compare("Llama3Tokenizer, Llama 3.0's params.json beside", mine, err, theirs30)
check_decode("Llama3Tokenizer, Llama 3.0's params.json beside", "Llama3Tokenizer", model30, [], meta30, N + 256)

# ---- TikTokenizer: Megatron's CustomTikTokenizer ----
def megatron(rank_table, pattern, specials, num, vocab_size=None):
    """CustomTikTokenizer's Encoding (vocab_size: Megatron's --vocab-size, the first
    vocab_size - num ranks kept)."""
    if vocab_size:
        rank_table = {t: r for t, r in rank_table.items() if r < vocab_size - num}
    specials = specials + [f"<SPECIAL_{i}>" for i in range(len(specials), num)]
    return tiktoken.Encoding("megatron", pat_str=pattern, mergeable_ranks={t: r + num for t, r in rank_table.items()},
                             special_tokens={t: i for i, t in enumerate(specials)})


cases = [("text file, v1, 1000 specials", tiktoken_file, ranks, V1, "v1", None, 1000),
         ("text file, v2, 1000 specials, --vocab-size 31000", tiktoken_file, ranks, V2, "v2", None, 1000, 31000),
         ("text file, v2, 1000 specials", tiktoken_file, ranks, V2, "v2", None, 1000),
         ("JSON file, v2, 10 given specials", json_file, json_ranks, V2, "v2",
          ["<s>", "<mask>", "</s>", "<unk>"], 10),
         ("JSON file, v1, 3 specials", json_file, json_ranks, V1, "v1", None, 3)]
for name, model, table, pattern, pname, specials, num, *cut in cases:
    enc = megatron(table, pattern, specials or ["<unk>", "<s>", "</s>"], num, *cut)
    opts = ["--tiktoken-pattern", pname] + (["--tiktoken-num-special-tokens", str(num)] if num != 1000 else [])
    opts += ["--tiktoken-vocab-size", str(cut[0])] if cut else []
    opts += ["--tiktoken-special-tokens", ",".join(specials)] if specials else []
    mine, err = trident_ids("TikTokenizer", model, opts)
    compare(f"TikTokenizer, {name}", mine, err, [enc.encode_ordinary(t) for t in texts])
    mine_sp, err = trident_ids("TikTokenizer", model, opts, special=True)
    check(f"TikTokenizer, {name}: add_special adds nothing", mine_sp is not None and mine_sp == mine, err)
    check_decode(f"TikTokenizer, {name}", "TikTokenizer", model, opts, enc, cut[0] if cut else num + N)

# ---- preprocess: Megatron's bytes with CustomTikTokenizer's logic ----
recs = [{"text": t} for t in texts[:150] if len(t) < 100000] + [{"text": [t, "", t[:5]]} for t in gen[:30]]
lines = [json.dumps(r, ensure_ascii=rng.random() < 0.5) for r in recs]
corpus = tt.write(path("corpus.jsonl"), "\n".join(lines) + "\n")
specials = ["<s>", "<mask>", "</s>", "<unk>"]
enc = megatron(json_ranks, V2, specials, 10)
docs = megatron_encode(lines, ["text"], enc.encode_ordinary, 2, append_eod=True)
ref_bin, ref_idx = megatron_files(docs, "text", 10 + N)
prefix = path("tik")
rc, _, err = tt.outputs([trident, "preprocess", "--input", corpus, "--append-eod", "--workers", "2",
                         "--output-prefix", prefix, "--tokenizer-type", "TikTokenizer", "--tokenizer-model",
                         json_file, "--tiktoken-pattern", "v2", "--tiktoken-num-special-tokens", "10",
                         "--tiktoken-special-tokens", *specials], timeout=300)
got = [open(f"{prefix}_text_document.{x}", "rb").read() for x in ("bin", "idx")] if rc == 0 else None
check(f"preprocess TikTokenizer (JSON file, v2, 10 specials, </s> = 2 ends documents): .bin and .idx "
      f"byte-identical to Megatron's ({len(ref_bin)} + {len(ref_idx)} bytes)", got == [ref_bin, ref_idx], err)
# Llama3Tokenizer: <|begin_of_text|> before each text (its template), <|end_of_text|> ends documents
docs = megatron_encode(lines, ["text"], lambda t: [N] + meta_encode(t), N + 1, append_eod=True)
ref_bin, ref_idx = megatron_files(docs, "text", N + 256)
prefix = path("llama3")
rc, _, err = tt.outputs([trident, "preprocess", "--input", corpus, "--append-eod", "--output-prefix", prefix,
                         "--tokenizer-type", "Llama3Tokenizer", "--tokenizer-model", tiktoken_file], timeout=300)
got = [open(f"{prefix}_text_document.{x}", "rb").read() for x in ("bin", "idx")] if rc == 0 else None
check(f"preprocess Llama3Tokenizer (BOS first, <|end_of_text|> ends documents): .bin and .idx byte-identical to "
      f"Megatron's writer's ({len(ref_bin)} + {len(ref_idx)} bytes)", got == [ref_bin, ref_idx], err)

# ---- trident generate finds Meta's tokenizer.model: an HF folder's, a checkpoint's, alone ----
sys.path.insert(0, os.path.join(HERE, "..", "hf"))
import hf_files as hff  # noqa: E402

hff.V, hff.C, hff.NH, hff.P, hff.L = N + 256, 8, 2, 64, 1
folder = path("hf-llama3-vocab")
os.makedirs(folder)
with open(os.path.join(folder, "model.safetensors"), "wb") as f:
    f.write(hff.st_bytes(hff.gpt2_tensors(layers=1)))
tt.write(os.path.join(folder, "config.json"), json.dumps(dict(
    hff.CONFIG, n_layer=1, n_embd=8, n_head=2, n_positions=64, vocab_size=N + 256, bos_token_id=N,
    eos_token_id=N + 1)))
with open(tiktoken_file, "rb") as src, open(os.path.join(folder, "tokenizer.model"), "wb") as dst:
    dst.write(src.read())
prompt = "Hello world<|eot_id|> it's 12345"
want = [N] + meta_encode(prompt)
ck = path("ck-llama3-vocab")
rc, _, err = tt.outputs([trident, "convert", "--from", "hf", "--input", folder, "--output", ck], timeout=120)
check("the HF folder converts", rc == 0, err)
if rc == 0:
    shutil.copy(os.path.join(folder, "tokenizer.model"), ck)  # where --from meta puts it
for name, where, extra in [("an HF folder's tokenizer.model", folder, []),
                           ("a checkpoint's tokenizer.model", ck, []),
                           ("--tokenizer-model alone", ck, ["--tokenizer-model", tiktoken_file])]:
    rc, out, err = tt.outputs([trident, "generate", where, "--json", "--prompt", prompt, "--max-new-tokens", "1",
                               "--temperature", "0", *extra], timeout=120)
    got = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    check(f"trident generate, {name}: read as Llama3Tokenizer, the prompt's ids are Meta's encode with BOS",
          rc == 0 and got and got[0].get("prompt_ids") == want, f"{err[-600:]} {got[:1]} want {want}")
rc, out, err = tt.outputs([trident, "generate", ck, "--json", "--prompt", prompt, "--max-new-tokens", "1",
                           "--temperature", "0", "--tokenizer-type", "TikTokenizer", "--tokenizer-model", json_file,
                           "--tiktoken-pattern", "v2", "--tiktoken-num-special-tokens", "10"], timeout=120)
got = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
want = megatron(json_ranks, V2, ["<unk>", "<s>", "</s>"], 10).encode_ordinary(prompt)
check("trident generate --tokenizer-type TikTokenizer --tiktoken-pattern v2 --tiktoken-num-special-tokens 10: "
      "the prompt's ids are Megatron's tokenize", rc == 0 and got and got[0].get("prompt_ids") == want,
      f"{err[-600:]} {got[:1]} want {want}")
tt.finish("tiktoken rank files: tiktoken's ids and decoding, Megatron's bytes")
