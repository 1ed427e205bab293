#!/usr/bin/python3
"""`trident preprocess` for supervised fine-tuning (issue 20, item 1): --json-keys
PROMPT,RESPONSE pairs and --sft chat messages give PREFIX.bin/.idx (ids) and
PREFIX_loss_mask.bin/.idx (uint8 0/1, the same sizes) holding exactly the documented template;
every malformed line (not JSON, bad UTF-8, a missing key, a wrong type, an empty response, an
unknown role, no assistant message) is exit 2 naming FILE:LINE; --skip-bad-lines skips them.
usage: test_sft_preprocess.py TRIDENT WORKDIR"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])


def path(name):
    return os.path.join(work, name)


def preprocess(*args):
    return tt.outputs([trident, "preprocess", *args])


def indexed(prefix, fmt, code):
    """The documents of an indexed dataset (one sequence each) as tuples of values."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    with open(prefix + ".bin", "rb") as f:
        raw = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00" and idx[17] == code, (prefix, idx[17])
    vals = struct.unpack("<%d%s" % (len(raw) // struct.calcsize(fmt), fmt), raw)
    n = struct.unpack_from("<Q", idx, 18)[0]
    sizes = struct.unpack_from("<%di" % n, idx, 34)
    out, at = [], 0
    for s in sizes:
        out.append(vals[at:at + s])
        at += s
    return out, sizes


def documents(prefix):
    """[(ids, mask)] of an SFT dataset (byte-level ids)."""
    ids, s1 = indexed(prefix, "H", 8)
    mask, s2 = indexed(prefix + "_loss_mask", "B", 1)
    check(f"{os.path.basename(prefix)}: mask sizes equal the ids' sizes", s1 == s2, f"{s1} vs {s2}")
    return list(zip(ids, mask))


def expect_doc(what, doc, pieces):
    """doc = (ids, mask) must be the (text, learned) pieces, then EOD with pieces' last flag."""
    ids, mask = doc
    want_ids, want_mask = [], []
    for text, learned in pieces:
        b = text.encode()
        want_ids += list(b)
        want_mask += [learned] * len(b)
    check(what, list(ids) == want_ids + [0] and list(mask[:-1]) == want_mask,
          f"ids {bytes(ids)!r} mask {list(mask)}")
    return mask[-1]


# ---- prompt/response pairs
pairs = [{"prompt": "Complete: The cat ", "response": "sat on the mat."},
         {"prompt": "", "response": "x"},
         {"prompt": "Q: caf\u00e9?\nA: ", "response": "ol\u00e9", "extra": 3}]
tt.write(path("pairs.jsonl"), "".join(json.dumps(p) + "\n" for p in pairs) + "\n")
rc, out, err = preprocess("--input", path("pairs.jsonl"), "--output-prefix", path("pairs"),
                          "--json-keys", "prompt,response")
check("pairs: exit 0", rc == 0, err)
docs = documents(path("pairs"))
check("pairs: one document per example (the blank line skipped)", len(docs) == 3, len(docs))
for i, p in enumerate(pairs[:len(docs)]):
    last = expect_doc(f"pairs[{i}]: prompt masked, response and EOD learned", docs[i],
                      [(p["prompt"], 0), (p["response"], 1)])
    check(f"pairs[{i}]: EOD learned", last == 1)
check("pairs: stdout names both outputs", "pairs_loss_mask.{bin,idx}" in out, out)

# the same with two keys and --sft
rc, _, err = preprocess("--input", path("pairs.jsonl"), "--output-prefix", path("pairs2"),
                        "--json-keys", "prompt", "response", "--sft", "--workers", "2")
check("--sft --json-keys PROMPT RESPONSE: the same files", rc == 0 and all(
    open(path("pairs" + s), "rb").read() == open(path("pairs2" + s), "rb").read()
    for s in (".bin", ".idx", "_loss_mask.bin", "_loss_mask.idx")), err)

# ---- chat messages
chats = [{"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "hi"},
                       {"role": "assistant", "content": "hello"}]},
         {"messages": [{"role": "assistant", "content": "A"},
                       {"role": "user", "content": "B"}]}]
tt.write(path("chat.jsonl"), "".join(json.dumps(c) + "\n" for c in chats))
rc, out, err = preprocess("--input", path("chat.jsonl"), "--output-prefix", path("chat"),
                          "--json-keys", "messages", "--sft")
check("chat: exit 0", rc == 0, err)
docs = documents(path("chat"))
for i, c in enumerate(chats[:len(docs)]):
    pieces = []
    for m in c["messages"]:
        a = int(m["role"] == "assistant")
        pieces += [(f"<|im_start|>{m['role']}\n", 0), (m["content"] + "<|im_end|>\n", a)]
    last = expect_doc(f"chat[{i}]: the ChatML template, the assistant's content learned", docs[i],
                      pieces)
    check(f"chat[{i}]: EOD learned iff the assistant speaks last", last == int(i == 0), last)

# ---- malformed lines: exit 2 naming FILE:LINE
bad = [
    ("not JSON", b'{"prompt": "a", "response": }', "not valid JSON"),
    ("bad UTF-8", b'{"prompt": "a\xff", "response": "b"}', "invalid UTF-8"),
    ("a missing key", b'{"prompt": "a"}', 'no key "response"'),
    ("a wrong type", b'{"prompt": ["a"], "response": "b"}', '"prompt" is a list, not a string'),
    ("an empty response", b'{"prompt": "a", "response": ""}', '"response" is empty'),
    ("not an object", b'["a", "b"]', "not a JSON object"),
]
for what, line, msg in bad:
    f = tt.write(path("bad.jsonl"), b'{"prompt": "ok", "response": "fine"}\n' + line + b"\n")
    rc, _, err = preprocess("--input", f, "--output-prefix", path("bad"), "--json-keys",
                            "prompt,response")
    check(f"pairs, {what}: exit 2 naming bad.jsonl:2", rc == 2 and "bad.jsonl:2:" in err and msg in err,
          f"rc {rc}: {err.strip()}")
    check(f"pairs, {what}: nothing written", not os.path.exists(path("bad.idx")))
chat_bad = [
    ("not a list", {"messages": "hi"}, '"messages" is a string, not a list'),
    ("an empty list", {"messages": []}, "an empty list"),
    ("a message without content", {"messages": [{"role": "user"}]}, 'has no "content"'),
    ("an unknown role", {"messages": [{"role": "bot", "content": "x"}]}, 'role is "bot"'),
    ("a content of another type", {"messages": [{"role": "user", "content": 5}]},
     "content is a number"),
    ("no assistant message", {"messages": [{"role": "user", "content": "x"}]}, "no assistant message"),
    ("empty assistant content", {"messages": [{"role": "user", "content": "x"},
                                              {"role": "assistant", "content": ""}]},
     "the assistant's content is empty"),
]
for what, obj, msg in chat_bad:
    f = tt.write(path("cbad.jsonl"), json.dumps(chats[0]) + "\n\n" + json.dumps(obj) + "\n")
    rc, _, err = preprocess("--input", f, "--output-prefix", path("cbad"), "--json-keys", "messages",
                            "--sft")
    check(f"chat, {what}: exit 2 naming cbad.jsonl:3", rc == 2 and "cbad.jsonl:3:" in err and msg in err,
          f"rc {rc}: {err.strip()}")

# --skip-bad-lines keeps the good examples, and a usage error for a bad pair spelling
f = tt.write(path("mixed.jsonl"), b'{"prompt": "a", "response": "b"}\n{"prompt": 1}\n'
             b'{"prompt": "c", "response": "d"}\n')
rc, _, err = preprocess("--input", f, "--output-prefix", path("mixed"), "--json-keys",
                        "prompt,response", "--skip-bad-lines")
check("--skip-bad-lines: exit 0, 2 examples, the skipped line named",
      rc == 0 and len(documents(path("mixed"))) == 2 and "mixed.jsonl:2" in err, err)
for keys in (["a,b,c"], ["a,"], ["a,b", "c"]):
    rc, _, err = preprocess("--input", f, "--output-prefix", path("u"), "--json-keys", *keys)
    check(f"--json-keys {' '.join(keys)}: usage error", rc == 2, err)

tt.finish("sft preprocess: all checks passed")
