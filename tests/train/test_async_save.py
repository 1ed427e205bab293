#!/usr/bin/python3
"""checkpoint.async_save and checkpoint.keep_last (issue 21, point 3), on 2 ranks
(data-parallel 2, ZeRO-1: each rank writes its shard of the moments):
  - the checkpoints written in the background are byte for byte those of synchronous saves
    (every tensor file and the manifest), the tracker names the last;
  - keep_last 2 leaves only the two newest, also with async saves;
  - a run resumed from an async checkpoint trains on bit-identically.
usage: test_async_save.py TRIDENT WORKDIR"""
import filecmp
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
prefix = tt.make_corpus(trident, work, 61, ["async", "save", "thread", "write"], 300, 3, 30)
config = tt.write_config(os.path.join(work, "small.yaml"),
    model=dict(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=16),
    parallel=dict(use_distributed_optimizer=True),
    training=dict(micro_batch_size=2, global_batch_size=4, train_iters=20, lr=1.0e-3),
    data=dict(data_path=prefix, split="100,0,0"))


def train(name, *sets):
    ck = os.path.join(work, name + "-ck")
    r = tt.run(tt.train_cmd(trident, config, os.path.join(work, name), world=2, flags=["--quiet"],
                            sets=[f"checkpoint.save={ck}", "checkpoint.save_interval=5", *sets]),
               timeout=300)
    check(f"{name}: exit 0", r.returncode == 0, r.stderr[-800:])
    return ck, tt.losses(os.path.join(work, name))


def listing(ck):
    return sorted(x for x in os.listdir(ck) if x.startswith("iter_"))


sync_ck, sync_losses = train("sync")
async_ck, async_losses = train("async", "checkpoint.async_save=true")
check("async saves: the same checkpoints", listing(async_ck) == listing(sync_ck) ==
      ["iter_0000005", "iter_0000010", "iter_0000015", "iter_0000020"], str(listing(async_ck)))
differ = []
for d in listing(sync_ck):
    files = sorted(os.listdir(os.path.join(sync_ck, d)))
    _, mismatch, errors = filecmp.cmpfiles(os.path.join(sync_ck, d), os.path.join(async_ck, d),
                                           files, shallow=False)
    differ += [f"{d}/{f}" for f in mismatch + errors]
check("async saves: every file byte-identical to the synchronous saves'", not differ, str(differ[:5]))
check("async saves: the training itself unchanged (losses bit-identical)", async_losses == sync_losses)
check("tracker names iteration 20",
      open(os.path.join(async_ck, "latest_checkpointed_iteration.txt")).read() == "20\n")
kept_ck, _ = train("kept", "checkpoint.async_save=true", "checkpoint.keep_last=2")
check("keep_last 2: the two newest", listing(kept_ck) == ["iter_0000015", "iter_0000020"],
      str(listing(kept_ck)))
# resume from the async checkpoint of iteration 10 (tracker moved back to it)
resume_ck = os.path.join(work, "resume-ck")
os.makedirs(resume_ck)
os.symlink(os.path.join(async_ck, "iter_0000010"), os.path.join(resume_ck, "iter_0000010"))
tt.write(os.path.join(resume_ck, "latest_checkpointed_iteration.txt"), "10\n")
r = tt.run(tt.train_cmd(trident, config, os.path.join(work, "resumed"), world=2, flags=["--quiet"],
                        sets=[f"checkpoint.load={resume_ck}"]), timeout=300)
got = tt.losses(os.path.join(work, "resumed"))
check("resumed from an async checkpoint: iterations 11..20 bit-identical",
      r.returncode == 0 and got == sync_losses[10:], f"{r.stderr[-300:]} {got[:3]} {sync_losses[10:13]}")
tt.finish()
