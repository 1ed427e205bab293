"""megatron-core 0.8.0's GPT model with a mixture of experts (its MoE layer: TopKRouter, the allgather
token dispatcher, SequentialMLP, moe_grouped_gemm off) on the CPU, saved as Megatron-LM's save_checkpoint
saves it (--ckpt-format torch), with its logits, for test_megatron_moe_oracle.py: at TP 1 in one process, or
rank RANK of TP 2 (gloo; megatron-core's MoE with TP needs sequence parallelism, whose all-gather and
reduce-scatter into one tensor gloo lacks: patched onto all_gather / all_reduce).
The model: Llama-like (RMSNorm, rope, SwiGLU, GQA, untied), 2 layers of 4 experts, top-2, Mixtral's
routing (moe_router_pre_softmax false), the routers' weights 10x the rest (the gate logits spread:
OUT/margin.txt holds the smallest gap between a token's 2nd and 3rd logit over the run).
usage: megatron_moe_ref.py OUT RANK WORLD PORT [SAVE LOGITS]
  OUT/moe-tpWORLD/save (the --save folder), OUT/moe-tpWORLD/logits.f32 ([2, 16, V]) of the int32 tokens
  OUT/tokens.i32, written by rank 0.
With SAVE (a `trident convert --to megatron` folder at TP 1): megatron-core's GPTModel of SAVE's args
loads it with load_state_dict(strict=True) and writes its logits on OUT/tokens.i32 to LOGITS."""
import argparse
import contextlib
import os
import sys
import zlib

import numpy as np
import torch

out, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.cuda.current_device = lambda: "cpu"  # megatron.core.utils' global buffer asks for it
os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
dist = torch.distributed


def gather_base(output, input_, group=None, async_op=False):
    """all_gather_into_tensor by all_gather (gloo has no gather into one tensor)"""
    parts = [torch.empty_like(input_) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, input_.contiguous(), group=group)
    output.copy_(torch.cat(parts, 0))


def scatter_base(output, input_, op=dist.ReduceOp.SUM, group=None, async_op=False):
    """reduce_scatter_tensor by all_reduce and this rank's slice"""
    whole = input_.clone()
    dist.all_reduce(whole, group=group)
    output.copy_(whole.chunk(dist.get_world_size(group), 0)[dist.get_rank(group)])


dist._all_gather_base = dist.all_gather_into_tensor = gather_base
dist._reduce_scatter_base = dist.reduce_scatter_tensor = scatter_base
torch.set_num_threads(1)
import torch.nn.functional as F  # noqa: E402
from megatron.core import parallel_state, tensor_parallel  # noqa: E402

parallel_state.initialize_model_parallel(world, 1)
tensor_parallel.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
import megatron.core.transformer.transformer_block as tblock  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402
from megatron_models import RMSNorm  # noqa: E402

V, B, T, E, K = 128, 2, 16, 4, 2
gaps = []


def model_of(a):
    """megatron-core's GPTModel of args a (as core_transformer_config_from_args makes it), local spec
    with experts (RMSNorm: megatron_models'), the routers' logits' margins recorded in gaps"""
    cfg = TransformerConfig(
        num_layers=a.num_layers, hidden_size=a.hidden_size, num_attention_heads=a.num_attention_heads,
        num_query_groups=a.num_query_groups, ffn_hidden_size=a.ffn_hidden_size, gated_linear_unit=True,
        activation_func=F.silu, normalization="RMSNorm", add_bias_linear=False, layernorm_epsilon=a.norm_epsilon,
        num_moe_experts=a.num_experts, moe_router_topk=a.moe_router_topk,
        moe_router_pre_softmax=a.moe_router_pre_softmax, moe_aux_loss_coeff=a.moe_aux_loss_coeff,
        moe_z_loss_coeff=a.moe_z_loss_coeff, moe_router_load_balancing_type=a.moe_router_load_balancing_type,
        moe_token_dispatcher_type="allgather", moe_grouped_gemm=False, use_cpu_initialization=True,
        tensor_model_parallel_size=a.tensor_model_parallel_size, sequence_parallel=a.sequence_parallel,
        hidden_dropout=0.0, attention_dropout=0.0, bias_activation_fusion=False,
        params_dtype=a.params_dtype)
    spec = get_gpt_layer_local_spec(num_experts=a.num_experts, moe_grouped_gemm=False)
    tblock.LayerNormImpl = RMSNorm
    spec.submodules.input_layernorm = spec.submodules.pre_mlp_layernorm = RMSNorm
    m = GPTModel(config=cfg, transformer_layer_spec=spec, vocab_size=a.padded_vocab_size,
                 max_sequence_length=a.max_position_embeddings, position_embedding_type="rope",
                 share_embeddings_and_output_weights=False, rotary_base=a.rotary_base)
    for layer in m.decoder.layers:
        layer.mlp.router.register_forward_hook(lambda mod, inp, o: gaps.append(
            (lambda s: (s[:, K - 1] - s[:, K]).min().item())(
                torch.nn.functional.linear(inp[0].reshape(-1, inp[0].shape[-1]), mod.weight)
                .sort(-1, descending=True).values)))
    return m.eval()


def run(m, ids):
    pos = torch.arange(T).unsqueeze(0).expand(B, -1)
    mask = torch.tril(torch.ones(1, 1, T, T)) < 0.5
    with torch.no_grad():
        y = m(ids, pos, mask)
    if world > 1:  # the vocabulary-parallel logits gathered
        parts = [torch.empty_like(y) for _ in range(world)]
        dist.all_gather(parts, y.contiguous())
        y = torch.cat(parts, -1)
    return y


tokens = torch.from_numpy(np.fromfile(os.path.join(out, "tokens.i32"), dtype=np.int32).astype(np.int64)).view(B, T)
if len(sys.argv) > 5:  # an export loaded strictly
    sd = torch.load(os.path.join(sys.argv[5], "release", f"mp_rank_{rank:02d}", "model_optim_rng.pt"))
    sd["args"].sequence_parallel = world > 1
    m = model_of(sd["args"])
    m.load_state_dict(sd["model"], strict=True)
    y = run(m, tokens)
    if rank == 0:
        y.float().numpy().astype(np.float32).tofile(sys.argv[6])
    sys.exit(0)

args = argparse.Namespace(
    num_layers=2, hidden_size=64, ffn_hidden_size=96, num_attention_heads=4, kv_channels=16,
    group_query_attention=True, num_query_groups=2, seq_length=T, max_position_embeddings=32,
    padded_vocab_size=V, make_vocab_size_divisible_by=128, vocab_size=None, norm_epsilon=1e-5,
    normalization="RMSNorm", apply_layernorm_1p=False, swiglu=True, openai_gelu=False, onnx_safe=None,
    bias_gelu_fusion=False, squared_relu=False, position_embedding_type="rope", rotary_base=10000,
    rotary_percent=1.0, rotary_interleaved=False, rotary_seq_len_interpolation_factor=None,
    use_rope_scaling=False, untie_embeddings_and_output_weights=True, add_bias_linear=False,
    add_qkv_bias=False, tensor_model_parallel_size=world, sequence_parallel=world > 1,
    pipeline_model_parallel_size=1,
    virtual_pipeline_model_parallel_size=None, expert_model_parallel_size=1, qk_layernorm=False,
    params_dtype=torch.float32, transformer_impl="local", use_mcore_models=True, init_method_std=0.02,
    num_experts=E, moe_router_topk=K, moe_router_pre_softmax=False, moe_aux_loss_coeff=0.01,
    moe_z_loss_coeff=None, moe_router_load_balancing_type="aux_loss", moe_grouped_gemm=False,
    moe_token_dispatcher_type="allgather", moe_expert_capacity_factor=None,
    moe_pad_expert_input_to_capacity=False, moe_input_jitter_eps=None, moe_per_layer_logging=False,
    moe_shared_expert_intermediate_size=None, rank=rank, tokenizer_type="GPT2BPETokenizer", lr=3e-4)
m = model_of(args)
with torch.no_grad():  # every parameter off its initial value, seeded by name (and TP rank where
    for name, p in m.named_parameters():  # split); the routers 10x
        split = getattr(p, "tensor_model_parallel", False)
        g = torch.Generator().manual_seed(zlib.crc32(name.encode()) + (rank if split else 0))
        base = 1.0 if name.endswith("norm.weight") else 0.0
        p.copy_(base + (1.0 if "router" in name else 0.1) * torch.randn(p.shape, generator=g))
logits = run(m, tokens)
d = os.path.join(out, f"moe-tp{world}")
path = os.path.join(d, "save", "iter_0000010", f"mp_rank_{rank:02d}", "model_optim_rng.pt")
os.makedirs(os.path.dirname(path), exist_ok=True)
torch.save({"args": args, "checkpoint_version": 3.0, "iteration": 10,
            "model": m.state_dict_for_save_checkpoint()}, path)
smallest = torch.tensor([min(gaps)])  # (every rank's tokens: a share of the sequence under SP)
dist.all_reduce(smallest, op=dist.ReduceOp.MIN)
if rank == 0:
    with open(os.path.join(d, "save", "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("10")
    logits.float().numpy().astype(np.float32).tofile(os.path.join(d, "logits.f32"))
    with open(os.path.join(d, "margin.txt"), "w") as f:
        f.write(f"{smallest.item():.6e}\n")
