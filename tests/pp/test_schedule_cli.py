#!/usr/bin/python3
"""`trident schedule`: the 1F1B acceptance case in JSON, GPipe and interleaved output, the text
timeline, --help, and exit code 2 with a message for every bad argument.
usage: test_schedule_cli.py TRIDENT"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import expect  # noqa: E402

trident = sys.argv[1]


def run(*args):
    return tt.outputs([trident, "schedule", *args])


def schedule_json(*args):
    return tt.json_output([trident, "schedule", *args, "--json"])


# Acceptance: 1F1B, P=4, M=8.
d = schedule_json("--pp", "4", "--microbatches", "8", "--schedule", "1f1b")
stages = d["stages"]
expect(len(stages) == 4, "4 stages")
expect(stages[0][:5] == ["F0", "F1", "F2", "F3", "B0"], 
       f"stage 0 starts F0 F1 F2 F3 B0: {stages[0]}")
expect(stages[3][:2] == ["F0", "B0"], f"stage 3 starts F0 B0: {stages[3]}")
for r, ops in enumerate(stages):
    expect(sorted(o for o in ops if o[0] == "F") == sorted(f"F{i}" for i in range(8)),
           f"stage {r}: 8 forwards")
    expect(sorted(o for o in ops if o[0] == "B") == sorted(f"B{i}" for i in range(8)),
           f"stage {r}: 8 backwards")
expect(d["peak_activations"] == [4, 3, 2, 1], f"1f1b peaks {d['peak_activations']}")
expect(abs(d["bubble_fraction"] - 3 / 11) < 1e-6, "simulated bubble 3/11")
expect(abs(d["bubble_fraction_theory"] - 3 / 11) < 1e-6, "theory bubble 3/11")
expect(d["schedule"] == "1f1b" and d["pp"] == 4 and d["microbatches"] == 8, "echoed arguments")

# The default schedule is 1f1b; --key=value works.
expect(schedule_json("--pp=4", "--microbatches=8")["stages"] == stages, "1f1b is the default")

# Peaks: 1F1B flat in M, GPipe grows with M.
for m in (4, 32):
    expect(schedule_json("--pp", "4", "--microbatches", str(m))["peak_activations"] == [4, 3, 2, 1],
           f"1f1b peaks at M={m}")
    expect(schedule_json("--pp", "4", "--microbatches", str(m), "--schedule", "gpipe")
           ["peak_activations"] == [m] * 4, f"gpipe peaks at M={m}")

g = schedule_json("--pp", "2", "--microbatches", "3", "--schedule", "gpipe")
expect(g["stages"] == [["F0", "F1", "F2", "B2", "B1", "B0"]] * 2, f"gpipe order {g['stages']}")

i = schedule_json("--pp", "4", "--microbatches", "8", "--schedule", "interleaved", "--vpp", "2")
expect(i["stages"][0][:6] == ["F0.0", "F1.0", "F2.0", "F3.0", "F0.1", "F1.1"],
       f"interleaved stage 0 {i['stages'][0][:6]}")
expect(len(i["stages"][2]) == 32, "interleaved: 2 x 8 forwards and backwards per stage")
expect(abs(i["bubble_fraction"] - 3 / 19) < 1e-6
       and abs(i["bubble_fraction_theory"] - 3 / 19) < 1e-6,
       "interleaved bubble 3/19")

c = schedule_json("--pp", "2", "--microbatches", "2", "--comm")
kinds = [o["op"] for o in c["ops"][1]]
expect(kinds[:2] == ["recv_forward", "forward"], f"--comm ops of stage 1: {kinds}")
expect(c["ops"][1][0]["peer"] == 0, "recv_forward from stage 0")

# Text output: op lists, timeline, bubble line.
rc, out, err = run("--pp", "4", "--microbatches", "8")
expect(rc == 0, "text output exit 0")
expect("stage 0: F0 F1 F2 F3 B0 F4" in out, "text op list")
expect("stage 3 |.........F0 B0    F1" in out, f"timeline row of stage 3:\n{out}")
expect("bubble fraction: simulated 0.2727, theory 0.2727 = (P-1)/(M+P-1) = 3/11" in out,
       "bubble line")
expect("peak stored activations per stage: 4 3 2 1" in out, "peak line")
rc, out, err = run("--pp", "4", "--microbatches", "8", "--comm")
expect(rc == 0 and "[sendF3>1 recvB0<1]" in out, f"--comm text shows batches:\n{out}")

rc, out, err = run("--help")
expect(rc == 0 and "usage: trident schedule" in out and "--vpp" in out, "--help")

# Bad arguments: exit 2 and a message.
bad = [
    (["--pp", "4", "--microbatches", "6", "--schedule", "interleaved", "--vpp", "2"],
     "number of micro-batches (6) to be a multiple of the pipeline size (4)"),
    (["--pp", "0", "--microbatches", "4"], "pipeline size must be in 1..256 (got 0)"),
    (["--pp", "4", "--microbatches", "0"], "number of micro-batches must be >= 1 (got 0)"),
    (["--pp", "4", "--microbatches", "-3"], "(got -3)"),
    (["--pp", "4", "--microbatches", "8", "--schedule", "interleaved", "--vpp", "1"],
     "needs >= 2 virtual chunks per stage"),
    (["--pp", "4", "--microbatches", "8", "--schedule", "interleaved"],
     "--schedule interleaved needs --vpp V"),
    (["--pp", "1", "--microbatches", "8", "--schedule", "interleaved", "--vpp", "2"],
     "needs pipeline size >= 2 (got 1)"),
    (["--pp", "4", "--microbatches", "8", "--vpp", "2"], "--vpp 2 needs --schedule interleaved"),
    (["--pp", "4", "--microbatches", "8", "--schedule", "zigzag"],
     "unknown pipeline schedule 'zigzag'"),
    (["--pp", "four", "--microbatches", "8"], "--pp needs an integer (got 'four')"),
    (["--pp", "4x", "--microbatches", "8"], "--pp needs an integer (got '4x')"),
    (["--pp", "99999999999", "--microbatches", "8"], "--pp needs an integer"),
    (["--microbatches", "8"], "--pp P is required"),
    (["--pp", "4"], "--microbatches M is required"),
    (["--pp", "4", "--microbatches"], "--microbatches needs a value"),
    (["--pp", "4", "--microbatches", "8", "--frobnicate"], "unknown argument '--frobnicate'"),
    (["--pp", "4", "--microbatches", "8", "--json=yes"], "--json takes no value"),
    (["--pp", "300", "--microbatches", "8"], "pipeline size must be in 1..256 (got 300)"),
]
for args, text in bad:
    rc, out, err = run(*args)
    expect(rc == 2, f"{args}: exit {rc}, want 2")
    expect(text in err, f"{args}: stderr {err!r} lacks {text!r}")
    expect(out == "", f"{args}: nothing on stdout")

tt.finish("trident schedule: all checks passed")
