"""megatron-core 0.8.0 GPT models on the CPU for megatron_ref.py (torch 1.13, --ckpt-format torch)
and make_torch_dist_fixtures.py (torch 2.4, torch_dist): the families' switches, our RMSNorm
(the local spec has none), the model of a family, its parameters moved off their initial values
(seeded by name, TP rank and first layer), and Megatron-LM's args of it. Import after
torch.distributed and megatron.core's parallel state are set up."""
import argparse
import zlib

import torch
import torch.nn.functional as F
import megatron.core.transformer.transformer_block as tblock
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.transformer_config import TransformerConfig


class RMSNorm(torch.nn.Module):
    """megatron-core 0.8's local spec has RMSNorm only through apex / Transformer Engine."""

    def __init__(self, config, hidden_size, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


FAMILIES = {
    # GPT-2-like: LayerNorm, learned positions, GELU, biases, tied
    "gpt": dict(cfg=dict(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256),
                model=dict(position_embedding_type="learned_absolute",
                           share_embeddings_and_output_weights=True),
                args=dict(normalization="LayerNorm", position_embedding_type="learned_absolute",
                          swiglu=False, add_bias_linear=True, group_query_attention=False,
                          num_query_groups=None, untie_embeddings_and_output_weights=False)),
    # Llama-like: RMSNorm, rope, SwiGLU, GQA, untied, no biases
    "llama": dict(cfg=dict(num_layers=4, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                           ffn_hidden_size=96, gated_linear_unit=True, activation_func=F.silu,
                           normalization="RMSNorm", add_bias_linear=False),
                  model=dict(position_embedding_type="rope", share_embeddings_and_output_weights=False,
                             rotary_base=10000),
                  args=dict(normalization="RMSNorm", position_embedding_type="rope", swiglu=True,
                            add_bias_linear=False, group_query_attention=True, num_query_groups=2,
                            untie_embeddings_and_output_weights=True, rotary_base=10000,
                            rotary_percent=1.0)),
}

LAYER_NORM = tblock.LayerNormImpl  # the final norm's (a GPT-2-like one built after a Llama-like one)


def gpt_model(cfg, vocab, max_len, pre, post, **kw):
    """megatron-core's GPTModel of TransformerConfig cfg, local spec (RMSNorm: ours)"""
    spec = get_gpt_layer_local_spec()
    tblock.LayerNormImpl = RMSNorm if cfg.normalization == "RMSNorm" else LAYER_NORM
    if cfg.normalization == "RMSNorm":
        spec.submodules.input_layernorm = spec.submodules.pre_mlp_layernorm = RMSNorm
    return GPTModel(config=cfg, transformer_layer_spec=spec, vocab_size=vocab,
                    max_sequence_length=max_len, pre_process=pre, post_process=post, **kw)


def build(f, fusion, vocab, max_len, rank, pre=True, post=True):
    """the model of family f (a FAMILIES entry) with every parameter away from its initial value:
    a TP-split one per rank, a replicated one the same on every rank, each pipeline chunk's its
    own (the seed of the first layer's number)"""
    cfg = TransformerConfig(**f["cfg"], use_cpu_initialization=True, hidden_dropout=0.0,
                            attention_dropout=0.0, bias_activation_fusion=fusion)
    m = gpt_model(cfg, vocab, max_len, pre, post, **f["model"])
    first = m.decoder.layers[0].layer_number if len(m.decoder.layers) else 0
    with torch.no_grad():
        for name, p in m.named_parameters():
            split = getattr(p, "tensor_model_parallel", False)
            g = torch.Generator().manual_seed(zlib.crc32(name.encode()) + (rank if split else 0) +
                                              1000 * first)
            base = 1.0 if name.endswith("norm.weight") else 0.0
            p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
    return m.eval()


def args_of(f, fusion, tp, pp, vp, rank, seq_length, vocab, max_len, divisible, **extra):
    """Megatron-LM's args of family f as arguments.py and validate_args leave them (the model's
    keys)."""
    c = f["cfg"]
    return argparse.Namespace(
        num_layers=c["num_layers"], hidden_size=c["hidden_size"], ffn_hidden_size=c["ffn_hidden_size"],
        num_attention_heads=c["num_attention_heads"], kv_channels=c.get("kv_channels", c["hidden_size"] // c["num_attention_heads"]),
        seq_length=seq_length, max_position_embeddings=max_len, padded_vocab_size=vocab,
        make_vocab_size_divisible_by=divisible,
        vocab_size=None, norm_epsilon=1e-5, apply_layernorm_1p=False, openai_gelu=False, onnx_safe=None,
        bias_gelu_fusion=fusion, squared_relu=False, rotary_interleaved=False,
        rotary_seq_len_interpolation_factor=None, use_rope_scaling=False, add_qkv_bias=False,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vp if vp > 1 else None, num_experts=None,
        expert_model_parallel_size=1, qk_layernorm=False, params_dtype=torch.float32,
        transformer_impl="local", use_mcore_models=True, init_method_std=0.02, rank=rank,
        tokenizer_type="GPT2BPETokenizer", lr=3e-4, **extra, **f["args"])
