"""megatron-core 0.8.0 GPT models on the CPU, saved as Megatron-LM's save_checkpoint saves them
(--ckpt-format torch: megatron/training/checkpointing.py's get_checkpoint_name, the tracker,
the dict of args, checkpoint_version 3.0, iteration, model / model0.., optimizer,
opt_param_scheduler, rng_state), with their logits for test_megatron_oracle.py.
usage: megatron_ref.py OUT RANK WORLD PORT [SAVE LOGITS]
  WORLD 1: TP 1 models (a GPT-2-like one with the exact GELU, a Llama-like one, llama-kv: heads
           of kv_channels 24, rotary_percent 0.5, rotary_base 500000, saved as 'release'), the
           Llama-like one over PP 2 x 2 virtual chunks (one process: parallel_state's pipeline
           ranks patched, the chunks' forward chained), the tied GPT-2-like one over PP 2 (the
           head's copy on the last stage) and under the legacy model's nested names
  WORLD 2: rank RANK of TP 2 (gloo): the GPT-2-like one with the fused bias-GELU (tanh) under
           megatron-core's and the legacy model's names, the Llama-like one
Each model: OUT/NAME/save (the --save folder), OUT/NAME/logits.f32 ([2, 16, V]) for the int32
tokens OUT/tokens.i32 ([2, 16]), written by rank 0.
With SAVE (a `trident convert --to megatron` folder, TP WORLD and PP 1, or TP 1 and PP 2 in one
process): megatron-core's GPTModel of SAVE's args (as Megatron-LM's core_transformer_config_from_args
makes it) loads each rank's model with load_state_dict(strict=True); rank 0 writes the logits to
LOGITS."""
import contextlib
import io
import os
import random
import sys

import numpy as np
import torch

out, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.cuda.current_device = lambda: "cpu"  # megatron.core.utils' global buffer asks for it
os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
torch.set_num_threads(1)
import torch.nn.functional as F  # noqa: E402
from megatron.core import parallel_state, tensor_parallel  # noqa: E402

parallel_state.initialize_model_parallel(world, 1)
tensor_parallel.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402
import megatron_models as mm  # noqa: E402
from megatron_models import FAMILIES, gpt_model  # noqa: E402

V, B, T = 128, 2, 16
# Llama-like with heads of 24 (not hidden / heads), rope on half of them, base 500000
FAMILIES["llama-kv"] = dict(cfg=dict(FAMILIES["llama"]["cfg"], kv_channels=24),
                            model=dict(FAMILIES["llama"]["model"], rotary_base=500000, rotary_percent=0.5),
                            args=dict(FAMILIES["llama"]["args"], rotary_base=500000, rotary_percent=0.5))


def build(family, fusion, pre=True, post=True):
    return mm.build(FAMILIES[family], fusion, V, 32, rank, pre, post)


def args_of(family, fusion, tp, pp, vp):
    """Megatron-LM's args as arguments.py and validate_args leave them (the model's keys)."""
    return mm.args_of(FAMILIES[family], fusion, tp, pp, vp, rank, T, V, 32, 128,
                      data_path=["1.0", "corpus_text_document"])


def legacy_names(sd):
    """megatron-core's names -> the legacy GPTModel's nested state_dict_for_save_checkpoint."""
    lm = {"embedding": {}, "encoder": {}}
    rename = [("self_attention.linear_qkv.", "self_attention.query_key_value."),
              ("self_attention.linear_proj.", "self_attention.dense."),
              ("pre_mlp_layernorm.", "post_attention_norm."), ("input_layernorm.", "input_norm."),
              ("mlp.linear_fc1.", "mlp.dense_h_to_4h."), ("mlp.linear_fc2.", "mlp.dense_4h_to_h.")]
    for k, v in sd.items():
        if k.endswith("_extra_state"):
            continue
        if k.startswith("embedding."):
            part, rest = k[len("embedding."):].split(".", 1)
            lm["embedding"].setdefault(part, {})[rest] = v
        elif k.startswith("decoder.final_layernorm."):
            lm["encoder"]["final_norm." + k.rsplit(".", 1)[1]] = v
        elif k.startswith("decoder.layers."):
            k = k[len("decoder."):]
            for a, b in rename:
                k = k.replace(a, b)
            lm["encoder"][k] = v
        elif k.startswith("output_layer."):
            lm.setdefault("output_layer", {})[k.split(".", 1)[1]] = v
    return {"language_model": lm}


def save(save_dir, args, chunks, tp_rank, pp_rank, pp, legacy=False, release=False):
    """One rank's model_optim_rng.pt where save_checkpoint puts it (release: in release/), and the
    tracker."""
    name = f"mp_rank_{tp_rank:02d}" if pp == 1 else f"mp_rank_{tp_rank:02d}_{pp_rank:03d}"
    path = os.path.join(save_dir, "release" if release else "iter_0000010", name, "model_optim_rng.pt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sd = {"args": args, "checkpoint_version": 3.0, "iteration": 10}
    params = []
    for i, m in enumerate(chunks):
        state = m.state_dict_for_save_checkpoint()
        sd["model" if len(chunks) == 1 else f"model{i}"] = legacy_names(state) if legacy else state
        params += [q.detach().clone().requires_grad_() for q in m.parameters()]  # (the model's
    opt = torch.optim.Adam(params, lr=3e-4)  # own stay as they are)
    opt.zero_grad()
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()  # its state: exp_avg, exp_avg_sq, step (tensors of the optimizer's dict)
    sd["optimizer"] = {"optimizer": opt.state_dict(), "fp32_from_fp16_params": [],
                       "grad_scaler": None}
    sd["opt_param_scheduler"] = {"max_lr": 3e-4, "num_steps": 640, "decay_style": "cosine"}
    sd["rng_state"] = [{"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
                        "torch_rng_state": torch.get_rng_state(), "cuda_rng_state": torch.get_rng_state(),
                        "rng_tracker_states": {"model-parallel-rng": torch.get_rng_state()}}]
    sd["num_floating_point_operations_so_far"] = 12345.0
    sd["extra"] = {"bytes": io.BytesIO(b"te extra state"), "size": torch.Size([2, 3]),
                   "scalar": np.float64(1.5)}
    torch.save(sd, path)
    with open(os.path.join(save_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("release" if release else "10")


def run(m, ids):
    pos = torch.arange(T).unsqueeze(0).expand(B, -1)
    mask = torch.tril(torch.ones(1, 1, T, T)) < 0.5
    with torch.no_grad():
        y = m(ids, pos, mask)
    if world > 1 and m.post_process:  # the vocabulary-parallel logits gathered (gloo has no
        parts = [torch.empty_like(y) for _ in range(world)]  # all_gather_into_tensor)
        torch.distributed.all_gather(parts, y.contiguous())
        y = torch.cat(parts, -1)
    return y


def patch_pipeline(state, vp):
    """parallel_state as stage state["pp"] (chunk state["vp"]) of PP 2 x vp virtual chunks (None:
    none) in one process; a tied head's copy is not all-reduced (the caller copies it)"""
    parallel_state.get_pipeline_model_parallel_world_size = lambda: 2
    parallel_state.get_pipeline_model_parallel_rank = lambda: state["pp"]
    parallel_state.get_virtual_pipeline_model_parallel_world_size = lambda: vp
    parallel_state.get_virtual_pipeline_model_parallel_rank = lambda: state["vp"]
    parallel_state.is_pipeline_first_stage = lambda ignore_virtual=False: state["pp"] == 0 and (
        ignore_virtual or state["vp"] == 0)
    parallel_state.is_pipeline_last_stage = lambda ignore_virtual=False: state["pp"] == 1 and (
        ignore_virtual or state["vp"] == (vp or 1) - 1)
    parallel_state.is_rank_in_embedding_group = lambda ignore_virtual=False: False


def write(name, logits):
    if rank == 0:
        logits.float().numpy().astype("<f4").tofile(os.path.join(out, name, "logits.f32"))


torch.manual_seed(3)
ids = torch.randint(0, V, (B, T))
if rank == 0:
    ids.numpy().astype("<i4").tofile(os.path.join(out, "tokens.i32"))

if len(sys.argv) > 6:  # load an exported SAVE
    save_dir, logits_path = sys.argv[5:7]
    def rank_file(p, pp):
        name = f"mp_rank_{rank:02d}" if pp == 1 else f"mp_rank_{rank:02d}_{p:03d}"
        return torch.load(os.path.join(save_dir, "release", name, "model_optim_rng.pt"), weights_only=False)

    a = rank_file(0, 1 if os.path.isdir(os.path.join(save_dir, "release", "mp_rank_00")) else 2)["args"]
    pp = a.pipeline_model_parallel_size
    assert a.tensor_model_parallel_size == world and (pp == 1 or (pp == 2 and world == 1))
    act = F.silu if a.swiglu else (lambda x: F.gelu(x, approximate="tanh")) if a.openai_gelu else F.gelu
    cfg = TransformerConfig(
        num_layers=a.num_layers, hidden_size=a.hidden_size, num_attention_heads=a.num_attention_heads,
        num_query_groups=a.num_query_groups if a.group_query_attention else None,
        ffn_hidden_size=a.ffn_hidden_size, kv_channels=a.kv_channels, gated_linear_unit=a.swiglu,
        activation_func=act, bias_activation_fusion=a.bias_gelu_fusion, normalization=a.normalization,
        layernorm_epsilon=a.norm_epsilon, add_bias_linear=a.add_bias_linear, add_qkv_bias=a.add_qkv_bias,
        apply_query_key_layer_scaling=False, use_cpu_initialization=True, hidden_dropout=0.0,
        attention_dropout=0.0, params_dtype=a.params_dtype)
    state = {"pp": 0, "vp": 0}
    if pp == 2:  # the stages in one process, chained
        patch_pipeline(state, None)
    y = None
    for p in range(pp):
        state["pp"] = p
        m = gpt_model(cfg, a.padded_vocab_size, a.max_position_embeddings, p == 0, p == pp - 1,
                      position_embedding_type=a.position_embedding_type, rotary_base=int(a.rotary_base),
                      rotary_percent=a.rotary_percent,
                      share_embeddings_and_output_weights=not a.untie_embeddings_and_output_weights)
        m.load_state_dict(rank_file(p, pp)["model"], strict=True)
        if a.bf16:  # built of bfloat16 parameters, run in float32 (the values exactly the bf16 ones)
            assert not a.fp16 and all(q.dtype == torch.bfloat16 for q in m.parameters() if q.dim() > 1)
            m = m.float()
        if y is not None:
            m.set_input_tensor(y)
        y = run(m.eval(), ids)
    y = y[..., :a.vocab_size]
    if rank == 0:
        y.float().numpy().astype("<f4").tofile(logits_path)
elif world == 1:
    for family, fusion in (("gpt", False), ("llama", False), ("llama-kv", False)):
        name = f"{family}-tp1"
        m = build(family, fusion)
        save(os.path.join(out, name, "save"), args_of(family, fusion, 1, 1, 1), [m], 0, 0, 1,
             release=family == "llama-kv")
        write(name, run(m, ids))
        if family == "gpt":
            save(os.path.join(out, "gpt-tp1-legacy", "save"), args_of(family, fusion, 1, 1, 1), [m],
                 0, 0, 1, legacy=True)
            write("gpt-tp1-legacy", run(m, ids))
    # PP 2 x 2 virtual chunks in one process: the chunks (v, p) in the pipeline's order
    state = {"pp": 0, "vp": 0}
    patch_pipeline(state, 2)
    chunks = {}
    for v in range(2):
        for p in range(2):
            state["pp"], state["vp"] = p, v
            chunks[(p, v)] = build("llama", False, pre=(p, v) == (0, 0), post=(p, v) == (1, 1))
    hidden = None
    for v in range(2):
        for p in range(2):
            m = chunks[(p, v)]
            if hidden is not None:
                m.set_input_tensor(hidden)
            hidden = run(m, ids)
    name = "llama-pp2-vp2"
    for p in range(2):
        save(os.path.join(out, name, "save"), args_of("llama", False, 1, 2, 2),
             [chunks[(p, 0)], chunks[(p, 1)]], 0, p, 2)
    write(name, hidden)
    # the tied GPT-2-like one over PP 2: the head's copy on the last stage = the embedding (as the
    # embedding group's all-reduce of Megatron-LM's start leaves it)
    state["pp"], state["vp"] = 0, 0
    patch_pipeline(state, None)
    stages = []
    for p in range(2):
        state["pp"] = p
        stages.append(build("gpt", False, pre=p == 0, post=p == 1))
    with torch.no_grad():
        stages[1].output_layer.weight.copy_(stages[0].embedding.word_embeddings.weight)
    hidden = None
    for p in range(2):
        state["pp"] = p
        if hidden is not None:
            stages[p].set_input_tensor(hidden)
        hidden = run(stages[p], ids)
        save(os.path.join(out, "gpt-pp2", "save"), args_of("gpt", False, 1, 2, 1), [stages[p]], 0, p, 2)
    write("gpt-pp2", hidden)
else:
    for family, fusion in (("gpt", True), ("llama", False)):
        name = f"{family}-tp2"
        m = build(family, fusion)
        save(os.path.join(out, name, "save"), args_of(family, fusion, 2, 1, 1), [m], rank, 0, 1)
        write(name, run(m, ids))
        if family == "gpt":
            save(os.path.join(out, "gpt-tp2-legacy", "save"), args_of(family, fusion, 2, 1, 1), [m],
                 rank, 0, 1, legacy=True)
            write("gpt-tp2-legacy", run(m, ids))
torch.distributed.barrier()
