#!/usr/bin/python3
"""pytorch_model.bin folders (tr_pt_open) against the same models saved as safetensors, with
transformers 4.38.2 and its torch writing both: tiny GPT-2, OPT and Llama (bfloat16) models saved
with save_pretrained(safe_serialization=False) (pytorch_model.bin), a GPT-2 sharded by
max_shard_size (pytorch_model.bin.index.json and its .bin shards) and a legacy torch.save
(_use_new_zipfile_serialization=False) of GPT-2's state dict with the buffers older uploads carry
(attn.bias as uint8, attn.masked_bias), and one of pickle protocol 4: `trident convert --from hf` of each gives the checkpoint
of the safetensors folder, byte for byte. A data.pkl that calls os.system in an otherwise valid
archive is refused (exit 2, the GLOBAL named) and its command does not run.
usage: test_hf_bin_oracle.py TRIDENT HF_PROBE WORKDIR VENV"""
import os
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
import torch  # noqa: E402
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,  # noqa: E402
                          OPTConfig, OPTForCausalLM)


def convert(src, name):
    ck = os.path.join(work, name)
    rc, out, err = tt.outputs([trident, "convert", "--from", "hf", "--input", src, "--output", ck],
                              timeout=120)
    tt.check(f"trident convert --from hf {os.path.basename(src)}", rc == 0, err)
    return ck


def same_as_safetensors(name, model, **save):
    """model saved both ways (save: the .bin's extra save_pretrained arguments): one checkpoint."""
    st, pt = os.path.join(work, name + "-st"), os.path.join(work, name + "-bin")
    model.save_pretrained(st, safe_serialization=True)
    model.save_pretrained(pt, safe_serialization=False, **save)
    files = sorted(os.listdir(pt))
    tt.check(f"{name}: transformers wrote .bin weights only ({', '.join(files)})",
             not any(f.endswith(".safetensors") for f in files) and
             any(f.startswith("pytorch_model") for f in files))
    a, b = convert(st, name + "-st-ck"), convert(pt, name + "-bin-ck")
    tt.check(f"{name}: the .bin folder's checkpoint is the safetensors folder's, byte for byte",
             hff.same_checkpoint(a, b))
    return st, pt, a


torch.manual_seed(5)
gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64, vocab_size=300))
hff.randomize(gpt2, lambda n: ".ln_" in n)
st, pt, gpt2_ck = same_as_safetensors("gpt2", gpt2)
same_as_safetensors("gpt2-sharded", gpt2, max_shard_size="20KB")
tt.check("gpt2-sharded: several shards and the index",
         os.path.exists(os.path.join(work, "gpt2-sharded-bin", "pytorch_model.bin.index.json")) and
         len([f for f in os.listdir(os.path.join(work, "gpt2-sharded-bin")) if f.endswith(".bin")]) > 2)

opt = OPTForCausalLM(OPTConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, ffn_dim=128,
                               vocab_size=300, max_position_embeddings=64, word_embed_proj_dim=32))
hff.randomize(opt, lambda n: "layer_norm" in n)
same_as_safetensors("opt", opt)

llama = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                     num_key_value_heads=2, intermediate_size=64, vocab_size=300,
                                     max_position_embeddings=64))
hff.randomize(llama, lambda n: "norm" in n)
_, llama_bin, _ = same_as_safetensors("llama-bf16", llama.to(torch.bfloat16))
with zipfile.ZipFile(os.path.join(llama_bin, "pytorch_model.bin")) as z:
    pkl = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
tt.check("llama-bf16: its storages are torch.BFloat16Storage", b"BFloat16Storage" in pkl and
         b"FloatStorage\n" not in pkl.replace(b"BFloat16Storage", b""))

# legacy torch.save, with the buffers of older GPT-2 uploads (ignored by the import)
legacy = tt.fresh_dir(os.path.join(work, "gpt2-legacy"))
sd = gpt2.state_dict()
for i in range(2):
    sd[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 64, 64, dtype=torch.uint8))
    sd[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
torch.save(sd, os.path.join(legacy, "pytorch_model.bin"), _use_new_zipfile_serialization=False)
with open(os.path.join(legacy, "pytorch_model.bin"), "rb") as f:
    tt.check("the legacy file is not a ZIP", f.read(2) != b"PK")
gpt2.config.to_json_file(os.path.join(legacy, "config.json"))
tt.check("gpt2 legacy torch.save: the safetensors folder's checkpoint, byte for byte",
         hff.same_checkpoint(gpt2_ck, convert(legacy, "gpt2-legacy-ck")))

# torch.save with pickle protocol 4 (FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL)
proto4 = tt.fresh_dir(os.path.join(work, "gpt2-protocol-4"))
torch.save(gpt2.state_dict(), os.path.join(proto4, "pytorch_model.bin"), pickle_protocol=4)
gpt2.config.to_json_file(os.path.join(proto4, "config.json"))
tt.check("gpt2 torch.save(pickle_protocol=4): the safetensors folder's checkpoint, byte for byte",
         hff.same_checkpoint(gpt2_ck, convert(proto4, "gpt2-protocol-4-ck")))

# a hostile data.pkl in a valid archive: GLOBAL os.system, REDUCE ('touch MARKER',)
marker = os.path.join(work, "MARKER")
hostile = tt.fresh_dir(os.path.join(work, "hostile"))
cmd = f"touch {marker}".encode()
pkl = b"\x80\x02cos\nsystem\nX" + len(cmd).to_bytes(4, "little") + cmd + b"\x85R."
with zipfile.ZipFile(os.path.join(pt, "pytorch_model.bin")) as zin, \
        zipfile.ZipFile(os.path.join(hostile, "pytorch_model.bin"), "w", zipfile.ZIP_STORED) as zout:
    for info in zin.infolist():
        data = pkl if info.filename.endswith("/data.pkl") else zin.read(info)
        zout.writestr(info.filename, data)
gpt2.config.to_json_file(os.path.join(hostile, "config.json"))
out = os.path.join(work, "hostile-ck")
rc, _, err = tt.outputs([trident, "convert", "--from", "hf", "--input", hostile, "--output", out],
                        timeout=120)
tt.check("a data.pkl calling os.system: exit 2, the GLOBAL named",
         rc == 2 and "pickle calls GLOBAL 'os.system', which is not a tensor or a dict" in err, err)
tt.check("... and the command did not run, nothing written",
         not os.path.exists(marker) and not os.path.exists(out))
tt.finish("PASSED")
