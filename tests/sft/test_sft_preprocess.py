#!/usr/bin/python3
"""`trident preprocess` for supervised fine-tuning (issue 20, item 1): --json-keys
PROMPT,RESPONSE pairs and --sft chat messages give PREFIX.bin/.idx (ids) and
PREFIX_loss_mask.bin/.idx (uint8 0/1, the same sizes) holding exactly the documented template;
every malformed line (not JSON, bad UTF-8, a missing key, a wrong type, an empty response, an
unknown role, no assistant message) is exit 2 naming FILE:LINE; --skip-bad-lines skips them.
--chat-template: each template's text and mask on a token-per-byte tokenizer.json, `auto`, and
every refusal (unknown name or template, no --sft, roles the template raises on).
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

# ---- --chat-template: a byte-level tokenizer.json without merges (token = byte) and the
# templates' special tokens, so every id is known here (the transformers oracle is
# test_chat_template_oracle.py, release build only)
SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>"]
tok_dir = os.path.join(work, "tok")
os.makedirs(tok_dir)
tok_json = tt.write(os.path.join(tok_dir, "tokenizer.json"), json.dumps({
    "version": "1.0", "normalizer": None, "post_processor": None, "decoder": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "added_tokens": [{"id": 256 + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True} for i, t in enumerate(SPECIALS)],
    "model": {"type": "BPE", "vocab": {tt.gpt2_byte_char(b): b for b in range(256)}, "merges": []}}))


def special_ids(text):
    """The ids of text: its special tokens' ids, every other byte its own."""
    out, i = [], 0
    while i < len(text):
        hit = [t for t in SPECIALS if text.startswith(t, i)]
        if hit:
            out.append(256 + SPECIALS.index(max(hit, key=len)))
            i += len(max(hit, key=len))
        else:
            out += list(text[i].encode())
            i += 1
    return out


def chat_preprocess(name, lines, *extra):
    f = tt.write(path("tpl.jsonl"), "".join(json.dumps(x) + "\n" for x in lines))
    return preprocess("--input", f, "--output-prefix", path("tpl-" + name), "--json-keys", "messages", "--sft",
                      "--tokenizer-type", "HFTokenizer", "--tokenizer-model", tok_json, *extra)


conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " hi "},
        {"role": "assistant", "content": " hello\n"}, {"role": "user", "content": "bye"},
        {"role": "assistant", "content": "ok"}]
head = "<|start_header_id|>%s<|end_header_id|>\n\n"
mistral = [("<s>[INST]  hi  [/INST]", 0), (" hello\n</s>", 1), ("[INST] bye [/INST]", 0), ("ok</s>", 1)]
rendered = {  # the conversation as the official templates render it: (text, learned) pieces
    "chatml-hf": [("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n hi <|im_end|>\n"
                   "<|im_start|>assistant\n", 0), (" hello\n<|im_end|>", 1),
                  ("\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n", 0), ("ok<|im_end|>", 1), ("\n", 0)],
    "llama2": [("<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n hi [/INST]", 0), (" hello </s>", 1),
               ("<s>[INST] bye [/INST]", 0), (" ok </s>", 1)],
    "llama3": [("<|begin_of_text|>" + head % "system" + "Be brief.<|eot_id|>" + head % "user" + "hi<|eot_id|>"
                + head % "assistant", 0), ("hello<|eot_id|>", 1),
               (head % "user" + "bye<|eot_id|>" + head % "assistant", 0), ("ok<|eot_id|>", 1)],
    "mistral": mistral,
    "mistral-v0.1": [mistral[0], mistral[1], (" " + mistral[2][0], 0), mistral[3], (" ", 0)],
}
chatml_tail = [(" hello\n<|im_end|>", 1), ("\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n", 0),
               ("ok<|im_end|>", 1), ("\n", 0)]
for name, system in [("qwen2", "You are a helpful assistant."),
                     ("qwen2.5", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")]:
    # without a system message: the default one first (not learned); with one: chatml-hf's text
    rendered[name] = [(f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n hi <|im_end|>\n"
                       "<|im_start|>assistant\n", 0)] + chatml_tail
    rendered[name + "+system"] = rendered["chatml-hf"]
for key, pieces in rendered.items():
    name = key.split("+")[0]
    msgs = conv[1:] if name.startswith("mistral") or key in ("qwen2", "qwen2.5") else conv
    rc, _, err = chat_preprocess(name, [{"messages": msgs}], "--chat-template", name)
    want_ids, want_mask = [], []
    for text, learned in pieces:
        ids = special_ids(text)
        want_ids += ids
        want_mask += [learned] * len(ids)
    docs = documents(path("tpl-" + name)) if rc == 0 else [([], [])]
    check(f"--chat-template {name}{', system message first' if '+' in key else ''}: the official "
          "template's text, no EOD, the replies learned",
          rc == 0 and list(docs[0][0]) == want_ids and list(docs[0][1]) == want_mask,
          f"rc {rc} {err.strip()}\n     ids {list(docs[0][0])}\n    want {want_ids}\n     mask "
          f"{list(docs[0][1])}\n    want {want_mask}")

# auto: the template of tokenizer_config.json, recognised; refused when unknown or missing
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          "{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
config = os.path.join(tok_dir, "tokenizer_config.json")
tt.write(config, json.dumps({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": LLAMA3}))
rc, _, err = chat_preprocess("auto", [{"messages": conv}], "--chat-template", "auto")
check("--chat-template auto, Llama-3-Instruct's template: the llama3 files", rc == 0 and all(
    open(path("tpl-auto") + s, "rb").read() == open(path("tpl-llama3") + s, "rb").read()
    for s in (".bin", ".idx", "_loss_mask.bin", "_loss_mask.idx")), err)
ok_line = {"messages": conv[1:3]}
template_bad = [
    ("a template trident does not know", {"chat_template": LLAMA3.replace("trim", "upper")}, ["auto"],
     [config, "none of the official templates"]),
    ("no chat_template", {"eos_token": "</s>"}, ["auto"], [config, 'has no "chat_template"']),
    ("no tokenizer_config.json", None, ["auto"], ["there is no " + config]),
    ("an unknown name", None, ["llama9"], ["--chat-template 'llama9' is unknown"]),
]
for what, cfg, args, msgs in template_bad:
    if cfg is None:
        os.remove(config) if os.path.exists(config) else None
    else:
        tt.write(config, json.dumps(cfg))
    rc, _, err = chat_preprocess("x", [ok_line], "--chat-template", *args)
    check(f"--chat-template {args[0]}, {what}: exit 2 saying so", rc == 2 and all(m in err for m in msgs),
          f"rc {rc}: {err.strip()}")
for what, args in [("without --sft", ["--json-keys", "text"]), ("with a pair", ["--json-keys", "prompt,response"])]:
    rc, _, err = preprocess("--input", path("pairs.jsonl"), "--output-prefix", path("x"), *args,
                            "--chat-template", "llama2")
    check(f"--chat-template {what}: usage error", rc == 2 and "--chat-template is for chat lists" in err,
          f"rc {rc}: {err.strip()}")
rc, _, err = preprocess("--input", path("chat.jsonl"), "--output-prefix", path("x"), "--json-keys", "messages",
                        "--sft", "--chat-template", "auto")
check("--chat-template auto with the byte-level tokenizer: exit 2 (no tokenizer.json)",
      rc == 2 and "no tokenizer.json" in err, f"rc {rc}: {err.strip()}")
# what the official templates raise on: FILE:LINE
raising = [("llama2", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "must alternate"),
           ("llama2", [{"role": "assistant", "content": "a"}], "must alternate"),
           ("mistral", conv, "must alternate"),
           ("mistral", [conv[1], conv[0], conv[2]], "Only user and assistant roles are supported"),
           ("llama3", [conv[0], conv[1]], "no assistant message"),
           # qwen2.5's tool sections, which transformers renders: refused by trident
           ("qwen2.5", [conv[1], dict(conv[2], tool_calls=[{"type": "function", "function": {
               "name": "f", "arguments": {}}}])], '"messages"[1] is an assistant message with "tool_calls"'),
           ("qwen2.5", [conv[1], {"role": "tool", "content": "22 C"}, conv[2]],
            '"messages"[1].role is "tool" (system, user or assistant)')]
for name, msgs, msg in raising:
    rc, _, err = chat_preprocess("bad", [ok_line, {"messages": msgs}], "--chat-template", name)
    check(f"--chat-template {name}, roles {[m['role'] for m in msgs]}: exit 2 naming tpl.jsonl:2",
          rc == 2 and "tpl.jsonl:2:" in err and msg in err, f"rc {rc}: {err.strip()}")

tt.finish("sft preprocess: all checks passed")
