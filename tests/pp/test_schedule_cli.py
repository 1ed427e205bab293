#!/usr/bin/python3
"""`trident schedule`: the 1F1B acceptance case in JSON, GPipe and interleaved output, the text
timeline, --help, and exit code 2 with a message for every bad argument.
usage: test_schedule_cli.py TRIDENT"""
import json
import subprocess
import sys

trident = sys.argv[1]
failures = []


def run(*args):
    p = subprocess.run([trident, "schedule", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def schedule_json(*args):
    rc, out, err = run(*args, "--json")
    check(rc == 0, f"{args}: exit {rc}, stderr {err!r}")
    return json.loads(out)


# Acceptance: 1F1B, P=4, M=8.
d = schedule_json("--pp", "4", "--microbatches", "8", "--schedule", "1f1b")
stages = d["stages"]
check(len(stages) == 4, "4 stages")
check(stages[0][:5] == ["F0", "F1", "F2", "F3", "B0"], 
      f"stage 0 starts F0 F1 F2 F3 B0: {stages[0]}")
check(stages[3][:2] == ["F0", "B0"], f"stage 3 starts F0 B0: {stages[3]}")
for r, ops in enumerate(stages):
    check(sorted(o for o in ops if o[0] == "F") == sorted(f"F{i}" for i in range(8)),
          f"stage {r}: 8 forwards")
    check(sorted(o for o in ops if o[0] == "B") == sorted(f"B{i}" for i in range(8)),
          f"stage {r}: 8 backwards")
check(d["peak_activations"] == [4, 3, 2, 1], f"1f1b peaks {d['peak_activations']}")
check(abs(d["bubble_fraction"] - 3 / 11) < 1e-6, "simulated bubble 3/11")
check(abs(d["bubble_fraction_theory"] - 3 / 11) < 1e-6, "theory bubble 3/11")
check(d["schedule"] == "1f1b" and d["pp"] == 4 and d["microbatches"] == 8, "echoed arguments")

# The default schedule is 1f1b; --key=value works.
check(schedule_json("--pp=4", "--microbatches=8")["stages"] == stages, "1f1b is the default")

# Peaks: 1F1B flat in M, GPipe grows with M.
for m in (4, 32):
    check(schedule_json("--pp", "4", "--microbatches", str(m))["peak_activations"] == [4, 3, 2, 1],
          f"1f1b peaks at M={m}")
    check(schedule_json("--pp", "4", "--microbatches", str(m), "--schedule", "gpipe")
          ["peak_activations"] == [m] * 4, f"gpipe peaks at M={m}")

g = schedule_json("--pp", "2", "--microbatches", "3", "--schedule", "gpipe")
check(g["stages"] == [["F0", "F1", "F2", "B2", "B1", "B0"]] * 2, f"gpipe order {g['stages']}")

i = schedule_json("--pp", "4", "--microbatches", "8", "--schedule", "interleaved", "--vpp", "2")
check(i["stages"][0][:6] == ["F0.0", "F1.0", "F2.0", "F3.0", "F0.1", "F1.1"],
      f"interleaved stage 0 {i['stages'][0][:6]}")
check(len(i["stages"][2]) == 32, "interleaved: 2 x 8 forwards and backwards per stage")
check(abs(i["bubble_fraction"] - 3 / 19) < 1e-6
      and abs(i["bubble_fraction_theory"] - 3 / 19) < 1e-6,
      "interleaved bubble 3/19")

c = schedule_json("--pp", "2", "--microbatches", "2", "--comm")
kinds = [o["op"] for o in c["ops"][1]]
check(kinds[:2] == ["recv_forward", "forward"], f"--comm ops of stage 1: {kinds}")
check(c["ops"][1][0]["peer"] == 0, "recv_forward from stage 0")

# Text output: op lists, timeline, bubble line.
rc, out, err = run("--pp", "4", "--microbatches", "8")
check(rc == 0, "text output exit 0")
check("stage 0: F0 F1 F2 F3 B0 F4" in out, "text op list")
check("stage 3 |.........F0 B0    F1" in out, f"timeline row of stage 3:\n{out}")
check("bubble fraction: simulated 0.2727, theory 0.2727 = (P-1)/(M+P-1) = 3/11" in out,
      "bubble line")
check("peak stored activations per stage: 4 3 2 1" in out, "peak line")
rc, out, err = run("--pp", "4", "--microbatches", "8", "--comm")
check(rc == 0 and "[sendF3>1 recvB0<1]" in out, f"--comm text shows batches:\n{out}")

rc, out, err = run("--help")
check(rc == 0 and "usage: trident schedule" in out and "--vpp" in out, "--help")

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
    check(rc == 2, f"{args}: exit {rc}, want 2")
    check(text in err, f"{args}: stderr {err!r} lacks {text!r}")
    check(out == "", f"{args}: nothing on stdout")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("trident schedule: all checks passed")
