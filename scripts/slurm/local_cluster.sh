#!/usr/bin/env bash
# scripts/slurm/local_cluster.sh start|stop|status DIR: a one-machine Slurm cluster for
# testing megac's sbatch scripts for real (tests/scripts/test_slurm.sh, CI boxes, laptops).
#
#   scripts/slurm/local_cluster.sh start /tmp/slurm     # munged + slurmctld + slurmd, node idle
#   export SLURM_CONF=/tmp/slurm/slurm.conf             # point sbatch, srun, squeue at it
#   sbatch --wait ... ; squeue ; sinfo
#   scripts/slurm/local_cluster.sh stop /tmp/slurm      # cancels jobs, stops the daemons
#
# Runs munged (as the `munge` user when it exists), slurmctld and slurmd as plain processes,
# as root, without systemd. Everything (config, munge key and socket, state, spool, pid and
# log files) lives under DIR; DIR is made traversable (mode 0711) so that munged can reach
# its socket directory (DIR/munge, mode 0711: munged refuses 0700). Nothing outside DIR is
# written. Ports: SLURM_LOCAL_PORT (slurmctld; slurmd gets the next one) or a free pair
# picked at random in 10000-29999, so several clusters can run side by side.
#
# The one node is this machine (`hostname -s`, at 127.0.0.1) declaring SLURM_LOCAL_CPUS
# CPUs (default 128, whatever the real core count: SlurmdParameters=config_overrides) in
# one partition `local` with OverSubscribe=YES, so a 128-task job fits on a 2-core box.
# Settings that matter (see docs/ENVIRONMENT.md, "Slurm on one machine"):
#   MpiDefault=pmi2        srun -n 8 starts one 8-rank MPICH job (with `none`: 8 one-rank jobs)
#   EnforcePartLimits=ALL  a job asking for more than the node has is rejected, not pending forever
#   proctrack/linuxproc, task/none, switch/none, no accounting: no cgroups, no slurmdbd.
#   MinJobAge=5            finished jobs are forgotten after 5 s; `sbatch --wait` then polls
#                          every 2 s (it backs off 2 -> 8 -> 32 s only while below MinJobAge/2),
#                          so a 3 s job returns in ~4 s, not ~10 s (or ~42 s)
# Needs: slurm-wlm and munge (Debian), root. Exit status: 0 ok, 1 error, 77 Slurm missing.
set -euo pipefail

usage() { echo "usage: $0 start|stop|status DIR" >&2; exit 2; }
(($# == 2)) || usage
cmd="$1"
[[ "$cmd" == start ]] && mkdir -p "$2"
dir="$(cd "$2" 2>/dev/null && pwd)" || dir="$2"
conf="$dir/slurm.conf"
node="$(hostname -s)"
export SLURM_CONF="$conf"

log() { echo "local_cluster: $*"; }
die() { echo "local_cluster: error: $*" >&2; exit 1; }

# pid_alive FILE: the process named in FILE runs.
pid_alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# port_free P: nothing listens on 127.0.0.1:P.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_ports() {
  if [[ -n "${SLURM_LOCAL_PORT:-}" ]]; then
    ctld_port=$SLURM_LOCAL_PORT
    if ! port_free "$ctld_port" || ! port_free $((ctld_port + 1)); then
      die "port $ctld_port or $((ctld_port + 1)) in use"
    fi
  else
    for _ in $(seq 50); do
      ctld_port=$((10000 + 2 * (RANDOM % 10000)))
      port_free "$ctld_port" && port_free $((ctld_port + 1)) && break
    done
  fi
  slurmd_port=$((ctld_port + 1))
}

write_conf() {
  cat > "$conf" <<EOF
# Written by scripts/slurm/local_cluster.sh: a one-node test cluster in $dir.
ClusterName=megac-local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket.2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=pmi2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
EnforcePartLimits=ALL
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerParameters=sched_interval=1
MinJobAge=5
MessageTimeout=30
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=${SLURM_LOCAL_CPUS:-128} State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

start_munged() {
  local m="$dir/munge" as=()
  mkdir -p "$m"
  chmod 0711 "$dir" "$m"
  if id munge >/dev/null 2>&1; then
    chown munge: "$m"
    as=(runuser -u munge --)
    "${as[@]}" test -x "$m" || die "user munge cannot reach $m: make the directories above it traversable (o+x)"
  fi
  if [[ ! -s "$m/munge.key" ]]; then
    if command -v mungekey >/dev/null; then
      "${as[@]}" mungekey --create --keyfile="$m/munge.key"
    else
      (umask 077; dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none)
      ((${#as[@]})) && chown munge: "$m/munge.key"
    fi
  fi
  local force=(); ((${#as[@]})) || force=(--force)
  "${as[@]}" munged "${force[@]}" --socket="$m/munge.socket.2" --key-file="$m/munge.key" \
    --pid-file="$m/munged.pid" --log-file="$m/munged.log" --seed-file="$m/munged.seed" \
    || die "munged did not start (see $m/munged.log)"
}

# wait_node_idle SECONDS: the node reports idle (or mixed/allocated: it already runs jobs).
wait_node_idle() {
  local state=""
  for _ in $(seq $(($1 * 10))); do
    state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
    [[ "$state" == idle* || "$state" == mixed* || "$state" == allocated* ]] && return 0
    sleep 0.1
  done
  die "node $node is '${state:-unknown}' after $1 s (see $dir/log/)"
}

start() {
  local p
  for p in slurmctld slurmd munged sinfo; do
    command -v "$p" >/dev/null || { echo "local_cluster: $p missing (apt-get install slurm-wlm munge)" >&2; exit 77; }
  done
  [[ $(id -u) -eq 0 ]] || die "must run as root (SlurmUser=root)"
  if pid_alive "$dir/run/slurmctld.pid"; then log "already running in $dir"; return 0; fi
  mkdir -p "$dir/state" "$dir/spool" "$dir/run" "$dir/log"
  pick_ports
  write_conf
  pid_alive "$dir/munge/munged.pid" || start_munged
  slurmctld -f "$conf" || die "slurmctld did not start (see $dir/log/slurmctld.log)"
  slurmd -f "$conf" -N "$node" || die "slurmd did not start (see $dir/log/slurmd.log)"
  wait_node_idle 30
  log "node $node idle (CPUs=${SLURM_LOCAL_CPUS:-128}, ports $ctld_port/$slurmd_port); export SLURM_CONF=$conf"
}

# stop_pids FILE...: TERM the processes named in the pid FILEs all at once (each takes ~2 s
# to shut down), KILL those still running after 10 s.
stop_pids() {
  local f pids=() p
  for f in "$@"; do pid_alive "$f" && pids+=("$(cat "$f")"); done
  ((${#pids[@]})) || return 0
  kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && break; p=""; done
    [[ -z "$p" ]] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null && { log "pid $p ignored SIGTERM for 10 s; killing it"; kill -9 "$p" 2>/dev/null || true; }
  done
  rm -f "$@"
}

stop() {
  if pid_alive "$dir/run/slurmctld.pid"; then
    # Cancel this cluster's jobs first, so that no job step outlives the daemons.
    local jobs
    jobs=$(squeue -h -o %i 2>/dev/null || true)
    if [[ -n "$jobs" ]]; then
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      for _ in $(seq 100); do [[ -z "$(squeue -h -o %i 2>/dev/null)" ]] && break; sleep 0.1; done
    fi
  fi
  stop_pids "$dir/run/slurmd.pid" "$dir/run/slurmctld.pid" "$dir/munge/munged.pid"
  log "stopped ($dir)"
}

status() {
  local rc=0 f
  for f in munge/munged.pid run/slurmctld.pid run/slurmd.pid; do
    if pid_alive "$dir/$f"; then echo "$(basename "$f" .pid): running (pid $(cat "$dir/$f"))"
    else echo "$(basename "$f" .pid): not running"; rc=1; fi
  done
  if ((rc == 0)); then sinfo; squeue; fi
  return $rc
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) usage ;;
esac
