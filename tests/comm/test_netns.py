#!/usr/bin/env python3
"""Two "nodes" on one machine: two network namespaces joined by a veth pair (test-only
addresses 10.203.0.1/24 and 10.203.0.2/24, on the veth ends only), 2 ranks in each started by
`trident launch --nnodes 2 --node-rank I --master-addr 10.203.0.1`, running the collective
check over UCX's tcp transport (UCX_TLS=tcp: without it UCX would use shared memory across
namespaces). Namespaces are entered with `ip netns exec`, which also gives each its own
/sys/class/net, so UCX sees only that namespace's devices. The namespaces (and with them the
veth pair) are removed on every exit path. Exit 77 (meson's SKIP) with the reason when
namespaces cannot be created here.

usage: test_netns.py TRIDENT COLL_CHECK"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

SKIP = 77


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def main():
    trident, coll_check = sys.argv[1], sys.argv[2]
    if not shutil.which("ip"):
        print("SKIP: the `ip` command (iproute2) is not installed")
        return SKIP
    tag = f"{os.getpid() % 100000}"
    ns = [f"trc{tag}a", f"trc{tag}b"]
    dev = [f"trv{tag}a", f"trv{tag}b"]
    addr = ["10.203.0.1", "10.203.0.2"]
    created = []

    def cleanup(*_):
        for n in created:
            ip("netns", "del", n, check=False)
        created.clear()

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda *a: (cleanup(), sys.exit(1)))
    try:
        for n in ns:
            r = ip("netns", "add", n, check=False)
            if r.returncode:
                print(f"SKIP: cannot create a network namespace here "
                      f"(needs root / CAP_SYS_ADMIN): {r.stderr.strip()}")
                return SKIP
            created.append(n)
        r = ip("link", "add", dev[0], "type", "veth", "peer", "name", dev[1], check=False)
        if r.returncode:
            print(f"SKIP: cannot create a veth pair here: {r.stderr.strip()}")
            return SKIP
        for i in range(2):
            ip("link", "set", dev[i], "netns", ns[i])
            ip("-n", ns[i], "addr", "add", f"{addr[i]}/24", "dev", dev[i])
            ip("-n", ns[i], "link", "set", dev[i], "up")
            ip("-n", ns[i], "link", "set", "lo", "up")
        port = 29000 + os.getpid() % 1000
        procs = []
        t0 = time.monotonic()
        for i in range(2):
            env = dict(os.environ, UCX_TLS="tcp", UCX_NET_DEVICES=dev[i],
                       TRIDENT_JOB_TOKEN=f"netns-test-{tag}")
            cmd = ["ip", "netns", "exec", ns[i], trident, "launch", "--nproc", "2",
                   "--nnodes", "2", "--node-rank", str(i), "--master-addr", addr[0],
                   "--master-port", str(port), "--", coll_check, "--big", "--timeout", "60"]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        outs, codes = [], []
        for p in procs:
            out, _ = tt.wait_output(p, 240)
            outs.append(out)
            codes.append(p.returncode)
        elapsed = time.monotonic() - t0
        for i in range(2):
            print(f"--- node {i} (namespace {ns[i]}, exit {codes[i]}):\n{outs[i]}")
        stats = ip("-n", ns[0], "-s", "link", "show", dev[0]).stdout
        print(stats)
        tx = int(stats.split("TX:")[1].split("\n")[1].split()[0])
        print(f"{elapsed:.1f} s; {tx} bytes sent from node 0 over the veth pair")
        if any(codes):
            print("FAIL: a node's job failed")
            return 1
        if "4 ranks, all matched" not in outs[0]:
            print("FAIL: rank 0 did not report the 4-rank check")
            return 1
        if tx < 8 << 20:
            print("FAIL: too little traffic crossed the veth pair; did UCX use it?")
            return 1
        print("ok: collectives over tcp between two namespaces")
        return 0
    finally:
        cleanup()


if __name__ == "__main__":
    sys.exit(main())
