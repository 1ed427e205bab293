#!/usr/bin/env bash
# A real Slurm cluster on this one host, for the tests (issue 21): Debian's slurm-wlm 22.05 (built
# with multiple-slurmd support) and munge. NODES "nodes" n1..nN (2-4), each its own
# `slurmd -N nX` listening on 127.0.0.1 at its own port, one slurmctld, and munged run as the
# munge user with its own key and socket. Everything lives under one temporary folder (config,
# key, state, spool, logs, pid files) and in a PID + mount namespace of its own, so `down` (or
# the death of the process that ran `up`) leaves no process behind; inside it /etc/hosts names
# n1..nN 127.0.0.1, as a real cluster's DNS names its nodes (jobs resolve their node list).
#
#   eval "$(tests/slurm/cluster.sh up [NODES])"    # prints SLURM_CONF=... TRIDENT_SLURM_DIR=...
#   srun -N2 -n8 hostname; sbatch ...; scontrol ...
#   tests/slurm/cluster.sh down "$TRIDENT_SLURM_DIR"
#
# Exit status of up: 0 up (all nodes idle); 77 cannot run here for a reason outside the project
# (the packages are missing, not root, no namespaces), the reason on stderr; 1 the cluster did
# not come up (the logs' tails on stderr). The cluster watches the process that ran `up` (or
# TRIDENT_SLURM_WATCH_PID) and tears itself down when that process is gone (folder included,
# unless TRIDENT_SLURM_KEEP=1, which down honours too).
set -uo pipefail

die_skip() { echo "cluster.sh: SKIP: $*" >&2; exit 77; }
die() { echo "cluster.sh: $*" >&2; exit 1; }

# ---- the namespace's init: starts the daemons, then reaps until it is killed -------------
if [ "${1:-}" = "--init" ]; then
  dir=$2 nodes=$3
  mount --bind "$dir/hosts" /etc/hosts || { echo "cannot bind-mount /etc/hosts" >&2; exit 1; }
  setpriv --reuid=munge --regid=munge --init-groups -- /usr/sbin/munged --foreground \
    --socket="$dir/munge-run/munge.sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge-run/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" &
  for _ in $(seq 100); do [ -S "$dir/munge-run/munge.sock" ] && break; sleep 0.1; done
  export SLURM_CONF="$dir/slurm.conf"
  /usr/sbin/slurmctld -D -i -f "$SLURM_CONF" >>"$dir/log/slurmctld.out" 2>&1 &
  for i in $(seq "$nodes"); do
    /usr/sbin/slurmd -D -N "n$i" -f "$SLURM_CONF" >>"$dir/log/slurmd-n$i.out" 2>&1 &
  done
  # PID 1 of the namespace: bash reaps every orphan handed to it (slurmstepd, tasks)
  while :; do wait; sleep 1; done
fi

# ---- up ----------------------------------------------------------------------------------
up() {
  local nodes=${1:-3}
  case $nodes in 2|3|4) ;; *) die "NODES must be 2, 3 or 4 (got '$nodes')" ;; esac
  local p
  for p in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged /usr/bin/srun /usr/bin/sbatch \
           /usr/bin/scontrol /usr/bin/sinfo; do
    [ -x "$p" ] || die_skip "$p is missing: Debian's slurm-wlm and munge are not installed" \
                            "(scripts/setup.sh installs them)"
  done
  [ "$(id -u)" -eq 0 ] || die_skip "needs root (munged runs as the munge user, slurmd as root)"
  id munge >/dev/null 2>&1 || die_skip "no munge user (the munge package's postinst makes it)"
  unshare --pid --fork --mount-proc --mount true 2>/dev/null ||
    die_skip "cannot make PID and mount namespaces here (unshare --pid --mount failed)"

  local dir
  dir=$(mktemp -d /tmp/trident-slurm.XXXXXX) || die "mktemp failed"
  chmod 755 "$dir"
  mkdir -p "$dir/state" "$dir/log" "$dir/run" "$dir/munge"
  for i in $(seq "$nodes"); do mkdir -p "$dir/spool/n$i"; done
  # munged: its key and seed private, its socket's folder open to all (it checks both)
  mkdir -p "$dir/munge-run"
  chown munge:munge "$dir/munge" "$dir/munge-run" && chmod 700 "$dir/munge" && chmod 755 "$dir/munge-run"
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chown munge:munge "$dir/munge/munge.key" && chmod 600 "$dir/munge/munge.key"
  touch "$dir/log/munged.log" && chown munge:munge "$dir/log/munged.log"
  { cat /etc/hosts; echo "127.0.0.1 $(seq -f 'n%g' -s ' ' "$nodes")"; } >"$dir/hosts"

  # a free block of nodes+1 ports: slurmctld at base, node i at base+i (17000 first)
  local base
  base=$(python3 - "$nodes" <<'EOF'
import random, socket, sys
n = int(sys.argv[1])
def free(p):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
for b in [17000] + random.Random().sample(range(17100, 29000, 10), 200):
    if all(free(b + i) for i in range(n + 1)):
        print(b)
        break
EOF
  ) || true
  [ -n "$base" ] || die "no free block of $((nodes + 1)) ports for slurmctld and the slurmds"

  local host
  host=$(hostname -s)
  cat >"$dir/slurm.conf" <<EOF
# written by tests/slurm/cluster.sh: one host, $nodes slurmds (multiple-slurmd), all under $dir
ClusterName=trident-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge-run/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
PlugStackConfig=$dir/plugstack.conf
ReturnToService=1
MinJobAge=600
KillWait=10
InactiveLimit=0
MessageTimeout=10
SlurmdTimeout=60
SlurmctldTimeout=60
NodeName=n[1-$nodes] NodeAddr=127.0.0.1 Port=[$((base + 1))-$((base + nodes))] CPUs=4 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=n[1-$nodes] Default=YES MaxTime=INFINITE State=UP
EOF
  : >"$dir/plugstack.conf"

  # the keeper: outside, watches the caller; inside (unshare's child), the init above
  local watch=${TRIDENT_SLURM_WATCH_PID:-$PPID} self
  self=$(readlink -f "$0")
  setsid bash -c '
    unshare --pid --fork --mount-proc --mount --kill-child=SIGKILL -- bash "$1" --init "$2" "$3" \
      </dev/null >>"$2/log/init.out" 2>&1 &
    u=$!
    echo "$u" >"$2/run/unshare.pid"
    trap "kill -KILL $u 2>/dev/null; exit 0" TERM INT
    while kill -0 "$u" 2>/dev/null && kill -0 "$4" 2>/dev/null; do sleep 1; done
    kill -KILL "$u" 2>/dev/null
    wait
    [ "${TRIDENT_SLURM_KEEP:-0}" = 1 ] || rm -rf "$2"   # its caller is gone: nobody will
  ' keeper "$self" "$dir" "$nodes" "$watch" </dev/null >/dev/null 2>&1 &
  echo $! >"$dir/run/keeper.pid"

  export SLURM_CONF="$dir/slurm.conf"
  local deadline=$((SECONDS + 90)) states=""
  while [ $SECONDS -lt $deadline ]; do
    states=$(sinfo -h -N -o '%N=%T' 2>/dev/null | sort -u | tr '\n' ' ')
    if [ -n "$states" ] && [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" -eq "$nodes" ]; then
      echo "SLURM_CONF=$dir/slurm.conf"
      echo "TRIDENT_SLURM_DIR=$dir"
      return 0
    fi
    kill -0 "$(cat "$dir/run/keeper.pid")" 2>/dev/null || break
    # munged refuses to start on a wrong permission at once: no use waiting then
    [ $SECONDS -gt $((deadline - 80)) ] && [ ! -S "$dir/munge-run/munge.sock" ] && break
    sleep 0.5
  done
  {
    echo "cluster.sh: the cluster did not come up in 90 s (nodes: ${states:-none})"
    for f in "$dir"/log/*; do echo "--- $f"; tail -15 "$f"; done
  } >&2
  down "$dir" >&2
  exit 1
}

# ---- down --------------------------------------------------------------------------------
down() {
  local dir=${1:?usage: cluster.sh down DIR}
  [ -f "$dir/slurm.conf" ] || die "$dir is not a cluster made by cluster.sh up"
  local u k ns="" child
  u=$(cat "$dir/run/unshare.pid" 2>/dev/null || true)
  k=$(cat "$dir/run/keeper.pid" 2>/dev/null || true)
  # the cluster's PID namespace (daemons, steps, tasks: everything it started is in it)
  if [ -n "$u" ]; then
    child=$(pgrep -P "$u" | head -1)
    [ -n "$child" ] && ns=$(readlink "/proc/$child/ns/pid" 2>/dev/null)
  fi
  # killing unshare SIGKILLs the namespace's init, and with it every process in the namespace
  [ -n "$u" ] && kill -KILL "$u" 2>/dev/null
  [ -n "$k" ] && kill -TERM "$k" 2>/dev/null
  local deadline=$((SECONDS + 30)) left f
  while :; do
    left=""
    for p in $u $k; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
    if [ -n "$ns" ]; then
      for f in /proc/[0-9]*/ns/pid; do
        [ "$(readlink "$f" 2>/dev/null)" = "$ns" ] && left="$left $(basename "$(dirname "$(dirname "$f")")")"
      done
    fi
    [ -z "$left" ] && break
    if [ $SECONDS -ge $deadline ]; then
      echo "cluster.sh: processes left after down:$left" >&2
      return 1
    fi
    sleep 0.2
  done
  [ "${TRIDENT_SLURM_KEEP:-0}" = 1 ] || rm -rf "$dir"
  return 0
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) shift; down "$@" ;;
  *) echo "usage: $0 up [NODES] | down DIR" >&2; exit 2 ;;
esac
