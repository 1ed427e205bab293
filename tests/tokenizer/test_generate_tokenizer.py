#!/usr/bin/python3
"""A BPE tokenizer from end to end: a small byte-level tokenizer.json written here (the 256
bytes, merges that spell a few words, <|endoftext|>), a JSON Lines corpus preprocessed with it
(--append-eod), a model trained with data.tokenizer {type: HFTokenizer} (model.vocab_size checked
against it), then `trident generate` with the tokenizer: --prompt is encoded with it (the same
continuation as --prompt-ids of its ids), the text is decoded, and the greedy continuation is
made of the corpus' words; a tokenizer larger than the model's vocabulary is refused (exit 2).
The same from preprocess to generate with a SentencePiece-style tokenizer.json in Llama-2's shape
(characters and U+2581 merged into the words, <0xHH> byte fallback, <s> template, </s> end of
document): the prompt gets <s> and its words' tokens, a character outside the vocabulary its
UTF-8 bytes, and the decoded text has spaces where the model's U+2581 are; exported as a
Hugging Face folder (convert --to hf --config: the run's tokenizer.json goes with it),
`trident generate HF_DIR` uses that tokenizer unasked.
usage: test_generate_tokenizer.py TRIDENT WORKDIR"""
import json
import os
import random
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
words = ["alpha", "beta", "gamma", "delta", "pipe", "rank", "token", "cache"]


byte_char = tt.gpt2_byte_char


vocab = {byte_char(b): b for b in range(256)}
merges = []
for w in words:  # " word" built left to right
    s = [byte_char(32)] + list(w)
    cur = s[0]
    for ch in s[1:]:
        if cur + ch not in vocab:
            merges.append([cur, ch])
            vocab[cur + ch] = len(vocab)
        cur += ch
eot = len(vocab)
vocab["<|endoftext|>"] = eot
tok = {"version": "1.0", "truncation": None, "padding": None,
       "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                         "rstrip": False, "normalized": False, "special": True}],
       "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
       "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
       "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                 "vocab": vocab, "merges": merges}}
tok_path = tt.write(os.path.join(work, "tokenizer.json"), json.dumps(tok))
V = len(vocab)

rng = random.Random(18)
with open(os.path.join(work, "corpus.jsonl"), "w") as f:
    for _ in range(400):
        f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(rng.randint(4, 30)))}) + "\n")
prefix = os.path.join(work, "corpus")
tokflags = ["--tokenizer-type", "HFTokenizer", "--tokenizer-model", tok_path]
rc, out, err = tt.outputs([trident, "preprocess", "--input", os.path.join(work, "corpus.jsonl"),
                           "--output-prefix", prefix, "--append-eod", "--workers", "2", *tokflags])
check("preprocess with the tokenizer: exit 0", rc == 0, err)
data_prefix = prefix + "_text_document"
with open(data_prefix + ".bin", "rb") as f:
    raw = f.read()
ids = struct.unpack("<%dH" % (len(raw) // 2), raw)
check(f"the corpus is the words' tokens ({len(ids)} tokens, vocabulary {V})",
      max(ids) < V and ids.count(eot) == 400 and sum(i >= 256 for i in ids) > len(ids) / 3)

ckpt = os.path.join(work, "ckpt")
model = dict(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32, max_position_embeddings=96,
             vocab_size=V)
data = dict(data_path=data_prefix, split="100,0,0", tokenizer={"type": "HFTokenizer", "model": tok_path})
training = dict(micro_batch_size=4, global_batch_size=8, train_iters=60, lr=3.0e-3)
config = tt.write_config(os.path.join(work, "small.yaml"), model=model, training=training, data=data,
                         checkpoint=dict(save=ckpt))
r = tt.run(tt.train_cmd(trident, config, os.path.join(work, "run"), flags=["--quiet"]), timeout=300)
if not check("training with data.tokenizer {type: HFTokenizer, model: ...}: exit 0", r.returncode == 0, r.stderr[-2000:]):
    tt.finish()
small = tt.write_config(os.path.join(work, "small-vocab.yaml"), model=dict(model, vocab_size=200),
                        training=dict(micro_batch_size=4, train_iters=1, lr=1e-3), data=data)
r = tt.run(tt.train_cmd(trident, small, os.path.join(work, "run2"), flags=["--quiet"]), timeout=60)
check("model.vocab_size 200 below the tokenizer's: exit 2 naming both",
      r.returncode == 2 and f"model.vocab_size 200 is smaller than the vocabulary of data.tokenizer.type "
      f"HFTokenizer ({V} ids)" in r.stderr, r.stderr[-800:])


def generate_json(folder, *args, new_tokens=24):
    """`trident generate FOLDER --json` greedy: its JSON object, with its stderr under "stderr"
    (or {"error": ...})."""
    r = tt.run([trident, "generate", folder, "--json", "--temperature", "0", "--max-new-tokens", str(new_tokens),
                *args], timeout=120)
    if r.returncode:
        return {"error": f"exit {r.returncode}: {r.stderr[-800:]}"}
    return dict(json.loads(r.stdout[r.stdout.index("{"):]), stderr=r.stderr)


with_tok = generate_json(ckpt, "--prompt", "alpha beta", *tokflags)
prompt_ids = with_tok.get("prompt_ids", [])
check("--prompt is encoded with the tokenizer ('alpha' bytes, then ' beta' one token)",
      prompt_ids == [97, 108, 112, 104, 97, vocab[byte_char(32) + "beta"]], with_tok)
by_ids = generate_json(ckpt, "--prompt-ids", ",".join(map(str, prompt_ids)), *tokflags)
check("--prompt-ids of those ids: the same continuation", by_ids.get("generated_ids") == with_tok.get("generated_ids"),
      f"{by_ids} vs {with_tok}")
text = with_tok.get("text", "")
pieces = text.replace("<|endoftext|>", " ").split()
check("the text is decoded, and greedy continues with the corpus' words",
      len(pieces) >= 3 and sum(p in words for p in pieces) >= len(pieces) - 1, repr(text))
r = tt.run([trident, "generate", ckpt, "--prompt", "alpha", "--max-new-tokens", "8", "--temperature", "0",
            *tokflags], timeout=120)
check("plain output prints decoded text", r.returncode == 0 and r.stdout.startswith("alpha ") and "\\x" not in r.stdout,
      r.stdout + r.stderr[-500:])
big = dict(tok, added_tokens=tok["added_tokens"] + [{"id": 5000, "content": "<|big|>", "special": True}])
big_path = tt.write(os.path.join(work, "big.json"), json.dumps(big))
r = tt.run([trident, "generate", ckpt, "--prompt", "alpha", "--tokenizer-type", "HFTokenizer",
            "--tokenizer-model", big_path], timeout=60)
check("a tokenizer larger than the model's vocabulary: exit 2", r.returncode == 2 and "do not fit" in r.stderr,
      r.stderr[-500:])
r = tt.run([trident, "generate", ckpt, "--prompt", "alpha", "--tokenizer-type", "GPT2BPETokenizer"], timeout=60)
check("a tokenizer without its files: exit 2 naming the flag", r.returncode == 2 and "needs --vocab-file" in r.stderr,
      r.stderr[-500:])

# ---- SentencePiece-style (Llama-2's shape) ----
SP = "\u2581"
sp_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for b in range(256):
    sp_vocab["<0x%02X>" % b] = 3 + b
sp_merges = []
for w in words:  # "▁word" built left to right from its characters
    chars = [SP] + list(w)
    for ch in chars:
        sp_vocab.setdefault(ch, len(sp_vocab))
    cur = chars[0]
    for ch in chars[1:]:
        if cur + ch not in sp_vocab:
            sp_merges.append(f"{cur} {ch}")
            sp_vocab[cur + ch] = len(sp_vocab)
        cur += ch
bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
sp_tok = {"version": "1.0", "truncation": None, "padding": None,
          "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])],
          "normalizer": {"type": "Sequence", "normalizers": [
              {"type": "Prepend", "prepend": SP}, {"type": "Replace", "pattern": {"String": " "}, "content": SP}]},
          "pre_tokenizer": None,
          "post_processor": {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                             "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
          "decoder": {"type": "Sequence", "decoders": [
              {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"},
              {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
          "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                    "vocab": sp_vocab, "merges": sp_merges}}
sp_path = tt.write(os.path.join(work, "llama2-style.json"), json.dumps(sp_tok, ensure_ascii=False))
spflags = ["--tokenizer-type", "HFTokenizer", "--tokenizer-model", sp_path]
sp_prefix = os.path.join(work, "sp-corpus")
rc, out, err = tt.outputs([trident, "preprocess", "--input", os.path.join(work, "corpus.jsonl"),
                           "--output-prefix", sp_prefix, "--append-eod", "--workers", "2", *spflags])
check("SentencePiece-style: preprocess exit 0", rc == 0, err)
with open(sp_prefix + "_text_document.bin", "rb") as f:
    raw = f.read()
sp_ids = struct.unpack("<%dH" % (len(raw) // 2), raw)
word_ids = {sp_vocab[SP + w] for w in words}
check(f"SentencePiece-style: the corpus is <s>, its words' tokens and </s> ({len(sp_ids)} tokens)",
      sp_ids.count(1) == 400 and sp_ids.count(2) == 400 and set(sp_ids) <= word_ids | {1, 2}, sorted(set(sp_ids))[:20])
sp_ckpt = os.path.join(work, "sp-ckpt")
sp_data = dict(data_path=sp_prefix + "_text_document", split="100,0,0",
               tokenizer={"type": "HFTokenizer", "model": sp_path})
sp_model = dict(model, vocab_size=len(sp_vocab))
sp_config = tt.write_config(os.path.join(work, "sp.yaml"), model=sp_model, training=training, data=sp_data,
                            checkpoint=dict(save=sp_ckpt))
r = tt.run(tt.train_cmd(trident, sp_config, os.path.join(work, "sp-run"), flags=["--quiet"]), timeout=300)
if check("SentencePiece-style: training exit 0", r.returncode == 0, r.stderr[-2000:]):
    got = generate_json(sp_ckpt, "--prompt", "alpha \u00e9", *spflags, new_tokens=1)
    check("SentencePiece-style: the prompt is <s>, ▁alpha, ▁ and é's two bytes",
          got.get("prompt_ids") == [1, sp_vocab[SP + "alpha"], sp_vocab[SP], 3 + 0xC3, 3 + 0xA9], got)
    got = generate_json(sp_ckpt, "--prompt", "alpha beta", *spflags)
    pieces = got.get("text", "").replace("</s>", " ").replace("<s>", " ").split()
    check("SentencePiece-style: the continuation decodes to the corpus' words, spaced",
          len(pieces) >= 3 and sum(p in words for p in pieces) >= len(pieces) - 1, got)
    # the same model as a Hugging Face folder with its tokenizer.json: generate takes it unasked
    hf_dir = os.path.join(work, "sp-hf")
    r = tt.run([trident, "convert", "--to", "hf", "--input", sp_ckpt, "--output", hf_dir, "--config", sp_config],
               timeout=120)
    with open(sp_path, "rb") as f, open(os.path.join(hf_dir, "tokenizer.json"), "rb") as g:
        same = f.read() == g.read()
    if check("convert --to hf --config: exit 0, the run's tokenizer.json copied into the folder",
             r.returncode == 0 and same and "with the run's tokenizer" in r.stdout, r.stderr[-800:]):
        hf_got = generate_json(hf_dir, "--prompt", "alpha beta")
        check("generate HF_DIR uses HF_DIR/tokenizer.json unasked (said on stderr): the same ids and text",
              hf_got.get("prompt_ids") == got.get("prompt_ids") and hf_got.get("text") == got.get("text")
              and "tokenizer.json" in hf_got.get("stderr", ""), f"{hf_got} vs {got}")
        # a tokenizer_config.json beside it that cannot be read (a folder): nothing half-written
        tokdir = os.path.join(work, "tokdir")
        os.makedirs(os.path.join(tokdir, "tokenizer_config.json"), exist_ok=True)
        tt.write(os.path.join(tokdir, "tokenizer.json"), json.dumps(sp_tok, ensure_ascii=False))
        bad_config = tt.write_config(os.path.join(work, "sp-bad.yaml"), model=sp_model, training=training,
                                     data=dict(sp_data, tokenizer={"type": "HFTokenizer",
                                                                   "model": os.path.join(tokdir, "tokenizer.json")}))
        r = tt.run([trident, "convert", "--to", "hf", "--input", sp_ckpt, "--output", hf_dir + "-2",
                    "--config", bad_config], timeout=120)
        check("a tokenizer file that cannot be read: convert exits 1 naming it, no folder left",
              r.returncode == 1 and "tokenizer_config.json" in r.stderr and not os.path.exists(hf_dir + "-2")
              and not any(n.startswith("sp-hf-2.tmp") for n in os.listdir(work)), r.stderr[-600:])
        raw = generate_json(hf_dir, "--prompt", "alpha", "--tokenizer-type", "ByteLevel", new_tokens=2)
        check("--tokenizer-type ByteLevel keeps bytes", raw.get("prompt_ids") == list(b"alpha"), raw)
tt.finish()
