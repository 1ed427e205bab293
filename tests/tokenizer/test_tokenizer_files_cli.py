#!/usr/bin/python3
"""Bad tokenizer files through the CLI (`trident preprocess --tokenizer-type HFTokenizer`): a
small byte-level tokenizer.json written here opens and picks its end of document from a
tokenizer_config.json beside it (a string or an AddedToken object); a tokenizer_config.json that
is there but broken (cut short, a repeated key, an eos_token of another shape or naming no
token) is a non-zero exit naming the file and the cause, never a silent fallback to
<|endoftext|>; an id of 2^24 or more (an added token or a vocabulary entry) is a non-zero exit
naming the file, the token and the id, at once and in little memory; Falcon's pre-tokenizer
opens, and its Punctuation or Digits with a bad field is exit 2 naming the file and the field.
usage: test_tokenizer_files_cli.py TRIDENT WORKDIR"""
import json
import os
import resource
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])


byte_char = tt.gpt2_byte_char


vocab = {byte_char(b): b for b in range(256)}
added = [{"id": 256, "content": "<|endoftext|>", "special": True},
         {"id": 257, "content": "<|eot_id|>", "special": True}]
tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
       "post_processor": None, "decoder": {"type": "ByteLevel"},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab, "merges": []}}
tok_path = tt.write(os.path.join(work, "tokenizer.json"), json.dumps(tok))
cfg_path = os.path.join(work, "tokenizer_config.json")
corpus = tt.write(os.path.join(work, "corpus.jsonl"), json.dumps({"text": "ab"}) + "\n")


def preprocess(tokenizer=tok_path):
    prefix = os.path.join(work, "out")
    for ext in (".bin", ".idx"):
        if os.path.exists(prefix + "_text_document" + ext):
            os.remove(prefix + "_text_document" + ext)
    rc, _, err = tt.outputs([trident, "preprocess", "--input", corpus, "--output-prefix", prefix,
                             "--append-eod", "--tokenizer-type", "HFTokenizer", "--tokenizer-model", tokenizer])
    ids = None
    if rc == 0:
        with open(prefix + "_text_document.bin", "rb") as f:
            raw = f.read()
        ids = list(struct.unpack("<%dH" % (len(raw) // 2), raw))
    return rc, err, ids


for config, eod in [(None, 256), ('{"eos_token": "<|eot_id|>"}', 257),
                    ('{"eos_token": {"__type": "AddedToken", "content": "<|eot_id|>", "special": true}}', 257)]:
    if os.path.exists(cfg_path):
        os.remove(cfg_path)
    if config:
        tt.write(cfg_path, config)
    rc, err, ids = preprocess()
    check(f"tokenizer_config.json {config}: exit 0, end of document {eod}", rc == 0 and ids == [97, 98, eod],
          f"exit {rc}, ids {ids}, {err[-500:]}")

for config, cause in [('{"eos_token": "<|eot_id|>"', "not valid JSON"),
                      ('{"eos_token": "<|eot_id|>", "eos_token": "<|eot_id|>"}', "duplicate"),
                      ('{"eos_token": 257}', "eos_token"),
                      ('{"eos_token": {"id": 257}}', "content"),
                      ('{"eos_token": "<|im_end|>"}', "neither an added token nor in the vocabulary")]:
    tt.write(cfg_path, config)
    rc, err, _ = preprocess()
    check(f"tokenizer_config.json {config}: a non-zero exit naming the file and '{cause}'",
          rc != 0 and cfg_path in err and cause in err, f"exit {rc}: {err[-500:]}")
os.remove(cfg_path)

# Falcon's pre-tokenizer (Punctuation, ByteLevel, Digits, Split) opens and splits digits in
# threes; a Punctuation behavior it does not know, a Digits without a boolean individual_digits:
# exit 2 naming the file and the field.
os.makedirs(os.path.join(work, "falcon"), exist_ok=True)
falcon_path = os.path.join(work, "falcon", "tokenizer.json")
falcon = dict(tok, pre_tokenizer={"type": "Sequence", "pretokenizers": [
    {"type": "Punctuation", "behavior": "Contiguous"},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    {"type": "Digits", "individual_digits": False},
    {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": False}]})
falcon["model"] = dict(tok["model"], vocab=dict(vocab, **{"12": 258, "123": 259}), merges=["1 2", "12 3"])
tt.write(corpus, json.dumps({"text": "1231"}) + "\n")
tt.write(falcon_path, json.dumps(falcon))
rc, err, ids = preprocess(falcon_path)
check("Falcon's pre-tokenizer: exit 0, '1231' as '123' '1'", rc == 0 and ids == [259, 49, 256], f"exit {rc}, ids {ids}, {err[-500:]}")
for change, field in [(("Punctuation", 0, "behavior", "Sideways"), "pre_tokenizer.behavior: Punctuation's behavior"),
                      (("Digits", 2, "individual_digits", "false"), "pre_tokenizer.individual_digits"),
                      (("Digits", 2, "individual_digits", None), "pre_tokenizer.individual_digits")]:
    bad = json.loads(json.dumps(falcon))
    bad["pre_tokenizer"]["pretokenizers"][change[1]][change[2]] = change[3]
    tt.write(falcon_path, json.dumps(bad))
    rc, err, _ = preprocess(falcon_path)
    check(f"{change[0]} with {change[2]} {change[3]!r}: exit 2 naming the file and '{field}'",
          rc == 2 and f"{falcon_path}: {field}" in err, f"exit {rc}: {err[-500:]}")
tt.write(corpus, json.dumps({"text": "ab"}) + "\n")

# Ids up from 2^24, stopping at the first failure: a loader without the cap spends ~200 MB on the
# first two, 1.28 GB on the fuzzer's 1e8 (its RSS is checked: the table is never sized for it).
os.makedirs(os.path.join(work, "big"), exist_ok=True)
big_path = os.path.join(work, "big", "tokenizer.json")
for what, big_id in [("added token", 1 << 24), ("vocabulary entry", 1 << 24), ("added token", 10**8)]:
    big = json.loads(json.dumps(tok))
    if what == "added token":
        big["added_tokens"][1]["id"], token = big_id, "<|eot_id|>"
    else:
        big["model"]["vocab"]["ab"], token = big_id, "ab"
    tt.write(big_path, json.dumps(big))
    rc, _, err = tt.outputs([trident, "preprocess", "--input", corpus, "--output-prefix",
                             os.path.join(work, "big", "out"), "--tokenizer-type", "HFTokenizer",
                             "--tokenizer-model", big_path])
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far
    if not check(f"{what} with id {big_id}: a non-zero exit naming the file, the token and the id "
                 f"(largest RSS {rss_mb:.0f} MB)",
                 rc != 0 and big_path in err and f"'{token}' has id {big_id}" in err and rss_mb < 400,
                 f"exit {rc}: {err[-500:]}"):
        break
tt.finish()
