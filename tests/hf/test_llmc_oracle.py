#!/usr/bin/python3
"""transformers 4.38.2's GPT2LMHeadModel as the oracle of `trident convert --from llmc` / `--to llmc`.
A GPT-2 of random weights (V 200: not a multiple of 128, so llm.c's file pads wte to 256 rows) is
written as llm.c's model file here, from the format, as llm.c's train_gpt2.py write_model writes
its own model (nn.Linear weights: transformers' Conv1D weights transposed; fp32 version 3, bf16
version 5), and saved with save_pretrained:
  - --from llmc of the fp32 file: the checkpoint --from hf makes of the saved model, byte for byte,
    and its logits transformers' (max |diff| / max |logit| <= 1e-5);
  - --from llmc of the bf16 file: the checkpoint --from hf makes of the model saved in bfloat16,
    byte for byte, and its logits those of the bf16-rounded model (1e-5);
  - --to llmc of the HF import, fp32 and bf16: the test's file byte for byte.
usage: test_llmc_oracle.py TRIDENT HF_PROBE WORKDIR VENV"""
import copy
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

L, C, NH, P, V = 3, 64, 4, 32, 200
LAYER = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
         "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
         "mlp.c_proj.weight", "mlp.c_proj.bias"]
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def write_model(model, filename, dtype):
    """llm.c's model file of transformers' GPT-2: the header (magic, version 3 fp32 / 5 bf16,
    maxT, V, L, NH, C, Vp; zeros), then wte padded with zero rows to Vp (a multiple of 128),
    wpe, each layer tensor of every layer in turn (nn.Linear's (out, in) weights), ln_f."""
    p = {k.removeprefix("transformer."): v.detach() for k, v in model.state_dict().items()}
    Vp = (V + 127) // 128 * 128
    header = torch.zeros(256, dtype=torch.int32)
    header[:8] = torch.tensor([20240326, 3 if dtype == "float32" else 5, P, V, L, NH, C, Vp])
    tensors = [torch.cat([p["wte.weight"], torch.zeros(Vp - V, C)]), p["wpe.weight"]]
    tensors += [p[f"h.{i}.{n}"].t() if n in CONV1D else p[f"h.{i}.{n}"] for n in LAYER for i in range(L)]
    tensors += [p["ln_f.weight"], p["ln_f.bias"]]
    with open(filename, "wb") as f:
        f.write(header.numpy().tobytes())
        for t in tensors:
            t = t.contiguous().to(torch.float32 if dtype == "float32" else torch.bfloat16)
            f.write((t if dtype == "float32" else t.view(torch.int16)).numpy().tobytes())
    return filename


def convert(*args):
    rc, out, err = tt.outputs([trident, "convert", *args], timeout=300)
    tt.check(f"trident convert {' '.join(args[:2])} -> {os.path.basename(args[args.index('--output') + 1])}",
             rc == 0, err)
    return rc == 0


def logits_check(what, ck, model):
    """hf_probe's logits of checkpoint ck against model's on 3 x P random tokens: one check."""
    tokens = torch.randint(0, V, (3, P), generator=torch.Generator().manual_seed(1))
    tokens.numpy().astype(np.int32).tofile(os.path.join(work, "tokens.bin"))
    out = os.path.join(work, "logits.bin")
    rc = subprocess.run([probe, "logits", ck, os.path.join(work, "tokens.bin"), "3", str(P), out]).returncode
    with torch.no_grad():
        ref = model(tokens).logits
    ours = torch.from_numpy(np.fromfile(out, dtype=np.float32).reshape(3, P, V)) if rc == 0 else ref + 1
    rel = ((ours - ref).abs().max() / ref.abs().max()).item()
    tt.check(f"{what}: logits of 3 x {P} tokens", rc == 0 and rel <= 1e-5, f"max |diff| / max |logit| = {rel:.2e}",
             show=True)


def read(path):
    with open(path, "rb") as f:
        return f.read()


torch.manual_seed(49)
model = GPT2LMHeadModel(GPT2Config(n_layer=L, n_embd=C, n_head=NH, n_positions=P, vocab_size=V,
                                   attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)).eval()
hff.randomize(model, lambda n: "ln_" in n and n.endswith(".weight"))
src, ck_hf, _ = hff.oracle_import(trident, work, "gpt2", model)
model16 = copy.deepcopy(model).to(torch.bfloat16)
_, ck_hf16, _ = hff.oracle_import(trident, work, "gpt2-bf16", model16)

for dtype, ref, hf_ck, name in (("float32", model, ck_hf, "fp32"), ("bfloat16", model16.float(), ck_hf16, "bf16")):
    f = write_model(model, os.path.join(work, f"gpt2-{name}.bin"), dtype)
    ck = os.path.join(work, f"llmc-{name}-ck")
    if convert("--from", "llmc", "--input", f, "--output", ck):
        tt.check(f"--from llmc ({name}): the checkpoint of --from hf of the {dtype} model, byte for byte",
                 hff.same_checkpoint(ck, hf_ck))
        logits_check(f"--from llmc ({name})", ck, ref)
    out = os.path.join(work, f"export-{name}.bin")
    if convert("--to", "llmc", "--input", ck_hf, "--output", out, "--dtype", name):
        tt.check(f"--to llmc --dtype {name} of the HF import: the test's write_model file byte for byte",
                 read(out) == read(f))
tt.finish()
