"""Makes tests/hf/fixtures/torch_dist/: tiny megatron-core 0.8.0 GPT models saved as Megatron-LM
saves them with --ckpt-format torch_dist (and, from the same weights, with --ckpt-format torch),
with megatron-core's logits for fixed tokens. test_torch_dist.py reads them; CI runs no torch 2.

Run once, by hand, with a venv outside the repository (torch 2.x's distributed checkpoint on the
CPU, gloo; megatron_ref.py's patches: CUDA device, RNG tracker):
    python3 -m venv /tmp/venv-tdist
    /tmp/venv-tdist/bin/pip install torch==2.4.1 megatron-core==0.8.0 numpy psutil
    /tmp/venv-tdist/bin/python tests/hf/make_torch_dist_fixtures.py tests/hf/fixtures/torch_dist

Each model NAME: NAME/dist (the --save folder: latest_checkpointed_iteration.txt "10",
iter_0000010/ as megatron.core.dist_checkpointing.save(state, dir, ('torch_dist', 1)) writes it:
metadata.json, common.pt (args, checkpoint_version 3.0, iteration, ...), .metadata,
__R_T.distcp per rank R and writer thread T), NAME/torch (the same weights as
model_optim_rng.pt per rank: --ckpt-format torch) and NAME/logits.f32 ([B, T, V] float32) for
the int32 tokens tokens.i32 ([B, T]).
  gpt-tp1:   GPT-2-like (LayerNorm, learned positions, exact GELU, biases, tied), TP 1; its
             save also holds rng_state (a ShardedObject) and an optimizer-like state
             (optimizer.state.exp_avg.* ShardedTensors) that an import ignores
  llama-tp2: Llama-like (RMSNorm, rope, SwiGLU, GQA, untied, no biases), TP 2 (two gloo ranks)
  llama-pp2: the same shape, PP 2 (two gloo ranks, the hidden state sent from stage 0 to 1)
  llama-tp2-bf16: llama-tp2 with --bf16's bfloat16 parameters (its logits: the bf16 values run
             in float32)
  llama-pp2-vp2: the same shape of 4 layers, PP 2 x 2 virtual chunks (model0, model1; each
             chunk's sharded keys under its virtual rank, as generate_state_dict makes them);
             no NAME/torch
and bad/*.metadata: gpt-tp1's .metadata edited (chunks that overlap, leave a gap, run outside;
no model tensor; a chunk without storage; a path outside the folder; a length past the file's
end; a missing and an extra model tensor; a chunk stored in 8 bytes; an embedding of twice the
args' vocabulary) and bad/moe-common.pt (args.num_experts 4) for the refusals.
megatron-core 0.8.0 under torch 2.4 needs one patch to save (MCoreSavePlanner adds every
ShardedObject twice to the coordinator's plan: worker() says why) and psutil.
usage: make_torch_dist_fixtures.py OUT"""
import contextlib
import os
import shutil
import socket
import sys

import torch
import torch.multiprocessing as mp

V, B, T = 32, 2, 8
TOKENS_SEED = 5


# megatron_models.py's families, smaller
SIZES = {"gpt": dict(hidden_size=16, num_attention_heads=4, ffn_hidden_size=32),
         "llama": dict(hidden_size=16, num_attention_heads=4, ffn_hidden_size=24)}
# name: (family, TP, PP, virtual chunks per stage)
MODELS = {"gpt-tp1": ("gpt", 1, 1, 1), "llama-tp2": ("llama", 2, 1, 1),
          "llama-pp2": ("llama", 1, 2, 1), "llama-tp2-bf16": ("llama", 2, 1, 1),
          "llama-pp2-vp2": ("llama", 1, 2, 2)}


def family(name, layers):
    import megatron_models as mm
    f = mm.FAMILIES[name]
    return dict(f, cfg=dict(f["cfg"], **SIZES[name], num_layers=layers))


def torch_format(save, args, ms, tp_rank, pp_rank, pp):
    """--ckpt-format torch: mp_rank_TT[_PPP]/model_optim_rng.pt (no optimizer) of the stage's
    chunks ms: model, or model0, model1, ..."""
    name = f"mp_rank_{tp_rank:02d}" if pp == 1 else f"mp_rank_{tp_rank:02d}_{pp_rank:03d}"
    path = os.path.join(save, "iter_0000010", name, "model_optim_rng.pt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sd = {"args": args, "checkpoint_version": 3.0, "iteration": 10}
    for i, m in enumerate(ms):
        sd["model" if len(ms) == 1 else f"model{i}"] = m.state_dict_for_save_checkpoint()
    torch.save(sd, path)
    with open(os.path.join(save, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("10")


def dist_format(save, args, ms, tp, pp, tp_rank, pp_rank, extra):
    """--ckpt-format torch_dist as Megatron-LM's save_checkpoint writes it (generate_state_dict:
    args, checkpoint_version, iteration, each chunk's sharded_state_dict under its virtual
    rank (model, or model0, model1, ...), rng_state's ShardedObject)"""
    from megatron.core import dist_checkpointing, parallel_state
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor
    d = os.path.join(save, "iter_0000010")
    os.makedirs(d, exist_ok=True)
    torch.distributed.barrier()
    sd = {"args": args, "checkpoint_version": 3.0, "iteration": 10,
          "num_floating_point_operations_so_far": 0.0}
    for i, m in enumerate(ms):
        if len(ms) > 1:
            parallel_state.set_virtual_pipeline_model_parallel_rank(i)
        sd["model" if len(ms) == 1 else f"model{i}"] = m.sharded_state_dict()
    m = ms[0]
    if extra:
        sd["rng_state"] = ShardedObject("rng_state", [{"random_rng_state": (3, (1, 2), None)}],
                                        (pp, tp), (pp_rank, tp_rank), replica_id=0)
        opt = {}
        for k, v in m.sharded_state_dict().items():
            if isinstance(v, ShardedTensor) and k.startswith("decoder.final_layernorm"):
                opt[k] = ShardedTensor.from_rank_offsets("optimizer.state.exp_avg." + v.key,
                                                         torch.full_like(v.data, 0.5),
                                                         replica_id=0)
        sd["optimizer"] = {"state": opt, "param_groups": [{"lr": 3e-4}]}
    dist_checkpointing.save(sd, d, ("torch_dist", 1))
    if torch.distributed.get_rank() == 0:
        with open(os.path.join(save, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("10")


def worker(rank, world, port, out, names):
    torch.cuda.current_device = lambda: "cpu"  # megatron.core.utils' global buffer asks for it
    torch.cuda.synchronize = lambda *a, **k: None  # dist_checkpointing.save's async caller
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.dist_checkpointing.strategies import torch as mcore_torch
    import megatron_models as mm
    # torch 2.4's local save plan already holds every rank's BytesIO (ShardedObject) items;
    # megatron-core 0.8.0 adds them again (torch <= 2.3's gap) and the global plan asserts
    mcore_torch.MCoreSavePlanner._add_non_coordinator_iobytes_request = lambda self, plan: None
    torch.manual_seed(TOKENS_SEED)
    ids = torch.randint(0, V, (B, T))
    pos = torch.arange(T).unsqueeze(0).expand(B, -1)
    mask = torch.tril(torch.ones(1, 1, T, T)) < 0.5
    if rank == 0:
        ids.numpy().astype("<i4").tofile(os.path.join(out, "tokens.i32"))
    for name in names:
        fam, tp, pp, vp = MODELS[name]
        assert tp * pp == world
        f = family(fam, 2 if vp == 1 else pp * vp)
        parallel_state.initialize_model_parallel(tp, pp, virtual_pipeline_model_parallel_size=(
            vp if vp > 1 else None))
        tensor_parallel.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
        tp_rank = parallel_state.get_tensor_model_parallel_rank()
        pp_rank = parallel_state.get_pipeline_model_parallel_rank()
        ms = []
        for v in range(vp):  # the stage's chunks (Megatron-LM's model list)
            if vp > 1:
                parallel_state.set_virtual_pipeline_model_parallel_rank(v)
            ms.append(mm.build(f, False, V, 16, rank, parallel_state.is_pipeline_first_stage(),
                               parallel_state.is_pipeline_last_stage()))
        args = mm.args_of(f, False, tp, pp, vp, rank, T, V, 16, 32, ckpt_format="torch_dist",
                          use_dist_ckpt=True)
        if name.endswith("-bf16"):  # --bf16: bfloat16 parameters saved, run in float32 (the
            ms[0].bfloat16()        # values exactly the bf16 ones)
            args.bf16, args.fp16, args.params_dtype = True, False, torch.bfloat16
        if vp == 1:  # (the VP one's logits check its layer order: no twin, the fixtures stay small)
            torch_format(os.path.join(out, name, "torch"), args, ms, tp_rank, pp_rank, pp)
        dist_format(os.path.join(out, name, "dist"), args, ms, tp, pp, tp_rank, pp_rank,
                    name == "gpt-tp1")
        ms[0].float()
        with torch.no_grad():  # chunk v of stage p after every stage's chunk v - 1
            for v in range(vp):
                m = ms[v]
                if pp_rank > 0 or v > 0:  # the chunk before's hidden state [T, B, C]
                    h = torch.empty(T, B, SIZES[fam]["hidden_size"])
                    torch.distributed.recv(h, (rank - tp) % world)
                    m.set_input_tensor(h)
                y = m(ids, pos, mask)
                if pp_rank < pp - 1 or v < vp - 1:
                    torch.distributed.send(y.contiguous(), (rank + tp) % world)
            if tp > 1:  # the vocabulary-parallel logits gathered
                parts = [torch.empty_like(y) for _ in range(tp)]
                torch.distributed.all_gather(parts, y.contiguous(),
                                             group=parallel_state.get_tensor_model_parallel_group())
                y = torch.cat(parts, -1)
            if pp_rank == pp - 1 and tp_rank == 0:
                y.float().numpy().astype("<f4").tofile(os.path.join(out, name, "logits.f32"))
        parallel_state.destroy_model_parallel()
        torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def bad_metadata(out):
    """gpt-tp1's .metadata edited (bad/NAME.metadata) for test_torch_dist.py's refusals"""
    import copy
    import dataclasses
    import pickle
    d = os.path.join(out, "bad")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(out, "gpt-tp1", "dist", "iter_0000010", ".metadata"), "rb") as f:
        good = pickle.load(f)
    qkv = "decoder.layers.self_attention.linear_qkv.weight"
    proj = "decoder.layers.self_attention.linear_proj.weight"
    fc2 = "decoder.layers.mlp.linear_fc2.weight"

    def index(md, fqn, layer):
        return next(k for k in md.storage_data if k.fqn == fqn and k.offset[0] == layer)

    def overlap(md):  # layer 1's chunk placed at layer 0
        md.state_dict_metadata[qkv].chunks[1].offsets = torch.Size([0, 0, 0])

    def gap(md):
        del md.state_dict_metadata[proj].chunks[1]

    def outside(md):
        c = md.state_dict_metadata[fc2].chunks[1]
        c.sizes = torch.Size([2] + list(c.sizes)[1:])

    def optimizer_only(md):
        for k in list(md.state_dict_metadata):
            if not k.startswith(("optimizer.", "rng_state")):
                del md.state_dict_metadata[k]

    def no_storage(md):
        del md.storage_data[index(md, proj, 1)]

    def bad_path(md):
        md.storage_data[index(md, fc2, 0)].relative_path = "../__0_0.distcp"

    def past_end(md):
        md.storage_data[index(md, fc2, 1)].length = 1 << 30

    def missing(md):
        del md.state_dict_metadata[fc2]

    def extra(md):
        k = "decoder.layers.self_attention.linear_extra.weight"
        md.state_dict_metadata[k] = md.state_dict_metadata[qkv]
        for i in [i for i in md.storage_data if i.fqn == qkv]:
            md.storage_data[dataclasses.replace(i, fqn=k)] = md.storage_data[i]

    def short(md):  # a chunk's storage of fewer bytes than its elements need
        md.storage_data[index(md, fc2, 1)].length = 8

    def shape(md):  # the embedding twice the args' vocabulary, its one chunk too
        emb = md.state_dict_metadata["embedding.word_embeddings.weight"]
        emb.size = torch.Size([2 * emb.size[0], emb.size[1]])
        emb.chunks[0].sizes = emb.size

    for edit in (overlap, gap, outside, optimizer_only, no_storage, bad_path, past_end, missing,
                 extra,
                 short, shape):
        md = copy.deepcopy(good)
        edit(md)
        with open(os.path.join(d, edit.__name__.replace("_", "-") + ".metadata"), "wb") as f:
            pickle.dump(md, f)
    # common.pt of a mixture of experts (args.num_experts 4, top-2): not read from torch_dist
    common = torch.load(os.path.join(out, "gpt-tp1", "dist", "iter_0000010", "common.pt"),
                        weights_only=False)
    common["args"].num_experts, common["args"].moe_router_topk = 4, 2
    torch.save(common, os.path.join(d, "moe-common.pt"))


if __name__ == "__main__":
    out = sys.argv[1]
    for name in list(MODELS) + ["bad"]:
        shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    mp.spawn(worker, args=(1, free_port(), out, ["gpt-tp1"]), nprocs=1)
    mp.spawn(worker, args=(2, free_port(), out, ["llama-tp2", "llama-pp2", "llama-tp2-bf16",
                                                 "llama-pp2-vp2"]), nprocs=2)
    bad_metadata(out)
