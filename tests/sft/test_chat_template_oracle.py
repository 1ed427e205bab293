#!/usr/bin/python3
"""`trident preprocess --sft --chat-template` against transformers 4.38.2: for each template
(chatml-hf, llama2, llama3, mistral, mistral-v0.1, qwen2, qwen2.5), a small tokenizer of the family trained
offline on fortunes (SentencePiece-style BPE with byte fallback in Llama-2's shape for
llama2/mistral; byte-level BPE with Llama-3's regex, GPT-2's or Qwen2's (without its NFC normalizer)
for llama3/chatml-hf/qwen) and a
tokenizer_config.json holding the official template; a JSONL of varied conversations (system
or not, multi-turn, unicode, spaces around, empty-ish content, U+2581, special-token text in the
content) through `trident preprocess --chat-template auto` (and by name: the same files). The
ids must equal tokenizer.apply_chat_template(messages, tokenize=True) and the loss mask must be
1 exactly on the tokens whose offsets overlap an assistant reply: what
apply_chat_template(prefix + [reply]) adds to apply_chat_template(prefix,
add_generation_prompt=True), up to its end marker. Conversations the template raises on are
refused by both, naming FILE:LINE; qwen2.5's tool calls and "tool" messages, which transformers
renders, are refused by trident naming FILE:LINE.
`trident generate --chat-template NAME|auto [--system TEXT] --json --max-new-tokens 3` on a tiny
GPT-2 folder written here (its greedy token fixed by ln_f's bias): the prompt ids equal
apply_chat_template(messages, add_generation_prompt=True) for a few prompts with and without a
system message (Mistral's system message: refused by both); generation stops right after the
end-of-reply marker (llama3 <|eot_id|>, chatml-hf and qwen <|im_end|>, llama2 EOS) when the model makes it,
and --eos-id overrides it.
usage: test_chat_template_oracle.py TRIDENT WORKDIR VENV"""
import json
import os
import random
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work, venv = sys.argv[1:4]
if os.environ.get("CHAT_ORACLE_VENV") != venv:  # run again inside the venv
    py = tt.venv_python(venv, tt.HF_PACKAGES, "transformers, jinja2")  # (tests/hf's)
    os.environ["CHAT_ORACLE_VENV"] = venv
    os.execv(py, [py, os.path.abspath(sys.argv[0]), *sys.argv[1:]])

import oracle_env  # noqa: E402  (tests/tokenizer: Llama-2's tokenizer.json shape)
from jinja2.exceptions import TemplateError  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

t_start = time.time()
work = tt.fresh_dir(work)

# The official templates, as the models' tokenizer_config.json hold them.
LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")  # noqa: E501
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")  # noqa: E501
MISTRAL = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")  # noqa: E501
MISTRAL_V01 = MISTRAL.replace("eos_token}}", "eos_token + ' ' }}")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")  # noqa: E501
# Qwen2-*-Instruct (and Qwen1.5-*-Chat); Qwen2.5-*-Instruct (Qwen/Qwen2.5-0.5B-Instruct at 7ae5576, as
# the guidance library's guidance/chat.py copies it; the same in a copy for lmdeploy).
QWEN2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")  # noqa: E501
QWEN25 = ("{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\" and not message.tool_calls) %}\n        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n")  # noqa: E501
# Qwen2's pre-tokenizer regex (its tokenizer.json; its NFC normalizer left out here)
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
GEMMA = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")  # noqa: E501

fortunes = oracle_env.fortune_files()
with open(fortunes[0], encoding="utf-8", errors="replace") as f:
    sentences = [s.strip() for s in f.read().replace("\n%\n", "\n").split("\n") if s.strip()][:400]


# ---- the tokenizers: trained on a few fortune files, the family's special tokens ----
def sentencepiece_style(folders):
    """Llama-2 / Mistral: BPE over characters, byte fallback, <unk> <s> </s>, the BOS template
    (oracle_env.llama2_style); in folders[0] with Llama-2's Prepend + Replace normalizer, in
    folders[1] with a Metaspace pre-tokenizer (prepend_scheme always; not "first": tokenizers
    0.15, which transformers 4.38.2 pins, prepends to the first segment after a leading <s>,
    where tokenizers 0.19+ and trident do not)."""
    trained = oracle_env.train_sentencepiece_style(fortunes[:3], 1200)
    write_tokenizer(folders[0], oracle_env.llama2_style(trained))
    write_tokenizer(folders[1], oracle_env.llama2_style(trained, {
        "type": "Metaspace", "replacement": oracle_env.SP, "add_prefix_space": True,
        "prepend_scheme": "always"}))


def byte_level(folder, specials, llama3_regex, pattern=None):
    """Llama-3 (its regex, then ByteLevel without one, the BOS template), Qwen2 (`pattern`, no
    template) or GPT-2 style."""
    tok = Tokenizer(models.BPE())
    if llama3_regex or pattern:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern or oracle_env.LLAMA3_PATTERN), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(fortunes[:3], trainers.BpeTrainer(vocab_size=1200, special_tokens=specials, show_progress=False,
                                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    j = json.loads(tok.to_str())
    if llama3_regex:
        bos = {"SpecialToken": {"id": specials[0], "type_id": 0}}
        j["post_processor"] = {
            "type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {specials[0]: {"id": specials[0], "ids": [tok.token_to_id(specials[0])],
                                             "tokens": [specials[0]]}}}
    write_tokenizer(folder, j)


def write_tokenizer(folder, j):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(j, f, ensure_ascii=False)


def write_config(folder, template, bos, eos):
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        # (model_max_length: transformers' save_pretrained writes int(1e30) where the model set
        # none, as Llama 2's and Llama 3's files hold it: past JSON readers' 64-bit integers)
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
                   "chat_template": template, "model_max_length": int(1e30)}, f, indent=2)
    return PreTrainedTokenizerFast.from_pretrained(folder)


sp_dir, meta_dir, l3_dir, cm_dir, qw_dir = (os.path.join(work, n) for n in ("sp", "sp-meta", "llama3", "chatml",
                                                                             "qwen"))
sentencepiece_style([sp_dir, meta_dir])
byte_level(l3_dir, ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                    "<|eot_id|>"], True)
byte_level(cm_dir, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], False)
byte_level(qw_dir, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], False, QWEN2_PATTERN)
print(f"tokenizers trained ({time.time() - t_start:.1f} s)")


# ---- conversations ----
rng = random.Random(20)
ODD = ["", " ", "\n", "  padded both sides  ", "\ttab\t", "caf\u00e9 na\u00efve \u00fcber", "\u4e2d\u6587\u5b57",
       "emoji \U0001F642\U0001F680 ok", "e\u0301 combining", "\u2581literal\u2581sp", " leading", "trailing ",
       "\n\nnewlines\n\n", "\u00a0nbsp\u3000ideographic\u00a0", "x", "a  b   c", "</s> in text", "<s>",
       "<|eot_id|>", "<|im_end|>", "[INST] nested [/INST]", "1234567 digits", "'s 'll contractions"]


def text():
    r = rng.random()
    if r < 0.35:
        return rng.choice(ODD)
    s = " ".join(rng.choice(sentences) for _ in range(rng.randint(1, 3)))
    if r < 0.5:
        s = rng.choice([" ", "\n", "  ", ""]) + s + rng.choice([" ", "\n", "", "  \n"])
    return s


def conversation(system, first_assistant, turns):
    msgs = [{"role": "system", "content": text()}] if system else []
    role = "assistant" if first_assistant else "user"
    for _ in range(turns):
        msgs.append({"role": role, "content": text()})
        role = "user" if role == "assistant" else "assistant"
    if not any(m["role"] == "assistant" for m in msgs):
        msgs.append({"role": "assistant", "content": text()})
    return msgs


def conversations(system_ok, assistant_first_ok, n=40):
    """n conversations the template takes: the first two hold every ODD text."""
    out = [[{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"}],
           [{"role": ("user", "assistant")[j % 2], "content": t} for j, t in enumerate(ODD + ODD[:1])]]
    for k in range(n - 2):
        out.append(conversation(system_ok and k % 2 == 0, assistant_first_ok and k % 7 == 3, rng.randint(1, 6)))
    return out


QWEN_EXTRA = [  # a system message after the first; tool_calls that Jinja takes as false (rendered as none)
    [{"role": "user", "content": "q"}, {"role": "system", "content": "later system"},
     {"role": "assistant", "content": "a", "tool_calls": []}],
    [{"role": "system", "content": ""}, {"role": "user", "content": ""},
     {"role": "assistant", "content": "", "tool_calls": None}, {"role": "user", "content": "\u00e9\u4e2d"},
     {"role": "assistant", "content": "\U0001F642 <|im_start|>", "tool_calls": {}}]]
FAMILIES = [  # name, folder, template, bos, eos, end marker, conversations
    ("llama2", sp_dir, LLAMA2, "<s>", "</s>", "</s>", conversations(True, False)
     + [[{"role": "user", "content": "q"}, {"role": "system", "content": "dropped at an odd turn"},
         {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a"}]]),
    ("llama3", l3_dir, LLAMA3, "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", conversations(True, False)),
    ("mistral", sp_dir, MISTRAL, "<s>", "</s>", "</s>", conversations(False, False)),
    ("mistral-v0.1", sp_dir, MISTRAL_V01, "<s>", "</s>", "</s>", conversations(False, False)),
    ("mistral", meta_dir, MISTRAL, "<s>", "</s>", "</s>", conversations(False, False, 20)),
    ("llama2", meta_dir, LLAMA2, "<s>", "</s>", "</s>", conversations(True, False, 20)),
    ("chatml-hf", cm_dir, CHATML, None, "<|im_end|>", "<|im_end|>", conversations(True, True)),
    ("qwen2", qw_dir, QWEN2, None, "<|im_end|>", "<|im_end|>", conversations(True, True) + QWEN_EXTRA),
    ("qwen2.5", qw_dir, QWEN25, None, "<|im_end|>", "<|im_end|>", conversations(True, True) + QWEN_EXTRA),
]


def indexed(prefix, fmt):
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    with open(prefix + ".bin", "rb") as f:
        raw = f.read()
    vals = struct.unpack("<%d%s" % (len(raw) // struct.calcsize(fmt), fmt), raw)
    n = struct.unpack_from("<Q", idx, 18)[0]
    out, at = [], 0
    for s in struct.unpack_from("<%di" % n, idx, 34):
        out.append(list(vals[at:at + s]))
        at += s
    return out


def preprocess(folder, jsonl, prefix, template):
    p = subprocess.run([trident, "preprocess", "--input", jsonl, "--output-prefix", prefix, "--json-keys",
                        "messages", "--sft", "--chat-template", template, "--tokenizer-type", "HFTokenizer",
                        "--tokenizer-model", os.path.join(folder, "tokenizer.json"), "--workers", "2"],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stderr


def reference_mask(tok, msgs, end_marker):
    """1 on the tokens whose offsets overlap a reply: what apply_chat_template(msgs[:k+1]) adds
    to apply_chat_template(msgs[:k], add_generation_prompt=True), up to its end marker."""
    full = tok.apply_chat_template(msgs, tokenize=False)
    spans = []
    for k, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        with_reply = tok.apply_chat_template(msgs[:k + 1], tokenize=False)
        try:
            before = tok.apply_chat_template(msgs[:k], tokenize=False, add_generation_prompt=True)
        except TemplateError:  # qwen2.5 reads messages[0]: no prompt before a first reply
            before = None
        end = with_reply.rindex(end_marker)
        if k == 0 and (before is None or not with_reply.startswith(before)):
            before = with_reply[:end - len(m["content"])]  # qwen: [] has no default system prompt
        assert full.startswith(with_reply) and with_reply.startswith(before), (msgs[:k + 1])
        spans.append((len(before), end + len(end_marker)))
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(s < b and max(e, s + 1) > a for a, b in spans)) for s, e in enc["offset_mapping"]]
    return enc["input_ids"], mask


# ---- trident generate --chat-template: a tiny GPT-2 folder whose greedy token is `argmax` ----
def tiny_gpt2(folder, vocab, argmax):
    """config.json + model.safetensors (1 layer, 8 wide): ln_f's weight 0 and bias e0, so the
    last hidden state is e0 at every position and the tied head's logits are wte[:, 0]: 4 for
    `argmax`, below 0.1 elsewhere."""
    c, npos, rnd = 8, 128, random.Random(argmax)
    shapes = {"wte.weight": [vocab, c], "wpe.weight": [npos, c], "ln_f.weight": [c], "ln_f.bias": [c]}
    for k, shape in [("ln_1.weight", [c]), ("ln_1.bias", [c]), ("attn.c_attn.weight", [c, 3 * c]),
                     ("attn.c_attn.bias", [3 * c]), ("attn.c_proj.weight", [c, c]), ("attn.c_proj.bias", [c]),
                     ("ln_2.weight", [c]), ("ln_2.bias", [c]), ("mlp.c_fc.weight", [c, 4 * c]),
                     ("mlp.c_fc.bias", [4 * c]), ("mlp.c_proj.weight", [4 * c, c]), ("mlp.c_proj.bias", [c])]:
        shapes["h.0." + k] = shape
    data, header, at = [], {}, 0
    for k, shape in shapes.items():
        n = 1
        for d in shape:
            n *= d
        v = [rnd.uniform(-0.1, 0.1) for _ in range(n)]
        if ".ln_" in k or k.startswith("ln_"):
            v = [1.0 if k.endswith("weight") else 0.0] * n
        if k == "ln_f.weight":
            v = [0.0] * n
        if k == "ln_f.bias":
            v = [1.0] + [0.0] * (c - 1)
        if k == "wte.weight":
            v[argmax * c] = 4.0
        data.append(struct.pack("<%df" % n, *v))
        header[k] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + 4 * n]}
        at += 4 * n
    os.makedirs(folder, exist_ok=True)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(data))
    tt.write(os.path.join(folder, "config.json"), json.dumps({
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 1, "n_embd": c, "n_head": 2,
        "n_positions": npos, "vocab_size": vocab, "bos_token_id": 0, "eos_token_id": 0}))
    return folder


def chat_generate(model, folder, template, prompt, system=None, extra=()):
    cmd = [trident, "generate", model, "--tokenizer-type", "HFTokenizer", "--tokenizer-model",
           os.path.join(folder, "tokenizer.json"), "--chat-template", template, "--prompt", prompt,
           "--json", "--temperature", "0", "--max-new-tokens", "3", *extra] + (["--system", system] if system else [])
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=60)  # partial UTF-8
    line = [x for x in p.stdout.splitlines() if x.startswith("{")]
    return p.returncode, (json.loads(line[0]) if line else None), p.stderr


GEN_PROMPTS = [("What is a pipeline bubble?", None), ("  padded: caf\u00e9 \u4e2d\u6587 ", "You are terse."),
               ("two\nlines\n", "  sys with spaces \n")]
GEN_WIDE = 2048  # above every tokenizer's vocabulary
gen_model = tiny_gpt2(os.path.join(work, "gpt2-tiny"), GEN_WIDE, 100)


def check_generate(name, label, folder, tok, end_marker):
    """The prompt ids of trident generate --chat-template (by name, and auto once) =
    apply_chat_template(..., add_generation_prompt=True), greedy (token 100) running its 3 tokens;
    a model whose greedy token is the end marker stops right after it."""
    t0, bad, n = time.time(), [], 0
    assert len(tok) <= GEN_WIDE, len(tok)
    for k, (prompt, system) in enumerate(GEN_PROMPTS):
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        try:
            want = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        except TemplateError:
            want = None
        for template in ([name, "auto"] if k == 0 else [name]):
            rc, out, err = chat_generate(gen_model, folder, template, prompt, system)
            n += 1
            if want is None and not (rc == 2 and "raises" in err):
                bad.append(f"{template} {msgs}: apply_chat_template raises, trident exit {rc} {err.strip()}")
            elif want is not None and (rc or out["prompt_ids"] != want or out["generated_ids"] != [100] * 3):
                bad.append(f"{template} {msgs}: exit {rc} {err.strip()[-300:]}\n       trident "
                           f"{out and out['prompt_ids']} {out and out['generated_ids']}\n       "
                           f"apply_chat_template {want}")
    check(f"{label}: generate --chat-template prompt ids == apply_chat_template(add_generation_prompt=True) "
          f"({n} runs, {time.time() - t0:.1f} s)", not bad, "\n     ".join(bad[:3]))
    if name not in ("llama3", "chatml-hf", "llama2", "qwen2", "qwen2.5") or folder == meta_dir:
        return
    marker = tok.convert_tokens_to_ids(end_marker)
    stopper = tiny_gpt2(os.path.join(work, "gpt2-stop-" + name), GEN_WIDE, marker)
    rc, out, err = chat_generate(stopper, folder, name, "Hi")
    rc2, out2, err2 = chat_generate(stopper, folder, name, "Hi", extra=["--eos-id", "100"])
    check(f"{label}: generation stops right after {end_marker} (id {marker}), the text without it; "
          f"--eos-id 100 runs past it", rc == 0 and out["generated_ids"] == [marker] and out["text"] == ""
          and rc2 == 0 and out2["generated_ids"] == [marker] * 3, f"{err} {out} {err2} {out2}")


total = 0
for name, folder, template, bos, eos, end_marker, convs in FAMILIES:
    tok = write_config(folder, template, bos, eos)
    label = name + ("" if folder != meta_dir else " (Metaspace)")
    check_generate(name, label, folder, tok, end_marker)
    prefix = os.path.join(work, name + ("" if folder != meta_dir else "-meta"))
    jsonl = tt.write(prefix + ".jsonl", "".join(json.dumps({"messages": c}) + "\n" for c in convs))
    rc, err = preprocess(folder, jsonl, prefix, "auto")
    if not check(f"{label}: preprocess --chat-template auto exits 0", rc == 0, err):
        continue
    rc2, err2 = preprocess(folder, jsonl, prefix + "-named", name)
    check(f"{label}: --chat-template {name} writes the same files as auto", rc2 == 0 and all(
        open(prefix + s, "rb").read() == open(prefix + "-named" + s, "rb").read()
        for s in (".bin", ".idx", "_loss_mask.bin", "_loss_mask.idx")), err2)
    ids, masks = indexed(prefix, "H"), indexed(prefix + "_loss_mask", "B")
    bad_ids, bad_mask = [], []
    for i, msgs in enumerate(convs):
        want = tok.apply_chat_template(msgs, tokenize=True)
        whole, want_mask = reference_mask(tok, msgs, end_marker)
        assert whole == want
        got = ids[i] if i < len(ids) else None
        if got != want:
            bad_ids.append(f"line {i + 1}: trident {got} vs apply_chat_template {want}\n       "
                           f"{tok.apply_chat_template(msgs, tokenize=False)!r}")
        elif masks[i] != want_mask:
            toks = tok.convert_ids_to_tokens(want)
            diff = [(j, toks[j], masks[i][j], want_mask[j]) for j in range(len(want)) if masks[i][j] != want_mask[j]]
            bad_mask.append(f"line {i + 1}: (index, token, trident, reference) {diff[:6]}")
    n_tok = sum(len(x) for x in ids)
    total += len(convs)
    check(f"{label}: ids == apply_chat_template(tokenize=True) on {len(convs)} conversations ({n_tok} tokens)",
          len(ids) == len(convs) and not bad_ids, "\n     ".join(bad_ids[:3]))
    check(f"{label}: loss mask == the tokens of the assistant's replies and end markers "
          f"({sum(map(sum, masks))} learned)", not bad_mask, "\n     ".join(bad_mask[:3]))

# ---- what the templates raise on: refused by both, naming FILE:LINE ----
raising = [("llama2", LLAMA2, [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}], "alternate"),
           ("llama2", LLAMA2, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                               {"role": "assistant", "content": "c"}], "alternate"),
           ("mistral", MISTRAL, [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
                                 {"role": "assistant", "content": "b"}], "alternate"),
           ("mistral", MISTRAL, [{"role": "user", "content": "a"}, {"role": "system", "content": "s"},
                                 {"role": "assistant", "content": "b"}], "Only user and assistant")]
for name, template, msgs, words in raising:
    tok = write_config(sp_dir, template, "<s>", "</s>")
    try:
        tok.apply_chat_template(msgs)
        hf_raises = False
    except TemplateError:
        hf_raises = True
    f = tt.write(os.path.join(work, "raise.jsonl"), json.dumps({"messages": [
        {"role": "user", "content": "ok"}, {"role": "assistant", "content": "fine"}]}) + "\n"
        + json.dumps({"messages": msgs}) + "\n")
    rc, err = preprocess(sp_dir, f, os.path.join(work, "raise"), "auto")
    check(f"{name}, roles {[m['role'] for m in msgs]}: apply_chat_template raises, trident exits 2 "
          f"naming raise.jsonl:2", hf_raises and rc == 2 and "raise.jsonl:2:" in err and words in err,
          f"hf raises {hf_raises}, rc {rc}: {err.strip()}")

# ---- qwen2.5's tool sections, which trident does not render: refused naming FILE:LINE ----
tools = [("an assistant message with tool_calls", [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}],
    ['"tool_calls"', "renders tool calls, which trident does not"]),
    ("a tool message", [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": "calling"},
                        {"role": "tool", "content": "22 C"}, {"role": "assistant", "content": "22 C"}],
     ['role is "tool" (system, user or assistant)'])]
tok = write_config(qw_dir, QWEN25, None, "<|im_end|>")
for what, msgs, words in tools:
    rendered = tok.apply_chat_template(msgs, tokenize=False)  # transformers renders them
    f = tt.write(os.path.join(work, "tools.jsonl"), json.dumps({"messages": [
        {"role": "user", "content": "ok"}, {"role": "assistant", "content": "fine"}]}) + "\n"
        + json.dumps({"messages": msgs}) + "\n")
    for template in ("auto", "qwen2.5"):
        rc, err = preprocess(qw_dir, f, os.path.join(work, "tools"), template)
        check(f"qwen2.5 ({template}), {what} (apply_chat_template writes {rendered.count('<tool_')} "
              f"<tool_...> tags): exit 2 naming tools.jsonl:2", rc == 2 and "tools.jsonl:2:" in err
              and all(w in err for w in words), f"rc {rc}: {err.strip()}")

# ---- templates trident does not know, and a template for another family's tokenizer ----
write_config(sp_dir, GEMMA, "<s>", "</s>")
rc, err = preprocess(sp_dir, os.path.join(work, "mistral.jsonl"), os.path.join(work, "gemma"), "auto")
check("auto, Gemma's template: exit 2 naming tokenizer_config.json", rc == 2 and
      os.path.join(sp_dir, "tokenizer_config.json") in err and "none of the official templates" in err, err.strip())
rc, err = preprocess(sp_dir, os.path.join(work, "mistral.jsonl"), os.path.join(work, "l3sp"), "llama3")
check("llama3 with a Llama-2-style tokenizer: exit 2 (<|start_header_id|> is not one token)",
      rc == 2 and "'<|start_header_id|>', which the HFTokenizer tokenizer makes" in err, err.strip())

print(f"{total} conversations in {time.time() - t_start:.1f} s")
tt.finish("chat templates: ids and masks equal transformers' apply_chat_template")
