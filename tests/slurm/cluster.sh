#!/usr/bin/env bash
# tests/slurm/cluster.sh -- a private, throw-away Slurm cluster on this host.
#
# Brings up munged + slurmctld + two slurmd ("node1", "node2", two virtual
# nodes on this one host) with every file they use (key, sockets, config,
# state, spool, logs, pid files) inside a directory given by the caller.
# Nothing is written to /etc, /run, /var or any other system path, and the
# system's /etc/slurm and /etc/munge/munge.key are not used (own key, own
# munged socket, own plugstack.conf).  Needs root (SlurmUser =
# SlurmdUser = root) and the Debian packages slurmctld slurmd slurm-client
# munge.  No systemd and no cgroups needed (proctrack/linuxproc, task/none).
#
# Usage:
#   cluster.sh start DIR      Create DIR (must not hold a running cluster),
#                             start the daemons, wait until both nodes are
#                             idle.  On success prints `export SLURM_CONF=...`
#                             on stdout (everything else goes to stderr) and
#                             writes the same to DIR/env, so the caller does
#                               eval "$(cluster.sh start DIR)"   or
#                               cluster.sh start DIR && . DIR/env
#                             On failure prints log tails to stderr, stops
#                             whatever it started and exits non-zero.
#   cluster.sh stop DIR       Cancel all jobs, SIGTERM every pid in DIR/pids
#                             (SIGKILL after a deadline), then kill whatever
#                             of THIS cluster is left behind: slurmstepd with
#                             cwd in DIR, processes whose /proc/PID/environ has
#                             ECPS_SLURM_CLUSTER=DIR, or SLURM_CONF=DIR/etc/
#                             slurm.conf together with SLURM_JOB_ID (tasks,
#                             batch scripts).  Never the caller or its
#                             ancestors.  Idempotent; exits 0.  DIR (logs) is
#                             left in place for the caller to inspect/remove.
#   cluster.sh status DIR     Exit 0 iff every recorded daemon is alive and
#                             sinfo answers; prints sinfo.
#   cluster.sh logs DIR       Print the tails of all logs (diagnostics).
#   cluster.sh run DIR CMD... start, run CMD with SLURM_CONF exported, then
#                             stop (always, also on error or signal); exits
#                             with CMD's status.  Handy as a CTest COMMAND.
#
# Layout of DIR:  etc/slurm.conf etc/plugstack.conf  env  pids
#                 munge/{munge.key,munge.socket,munged.pid,munged.log,seed}
#                 state/ (StateSaveLocation)  spool/node{1,2}/  run/ (pids)
#                 log/{slurmctld,slurmd-node1,slurmd-node2}.log (+ .out)
# DIR/pids holds one "NAME PID" line per daemon, written as each starts.
#
# Tunables (environment):
#   CLUSTER_CPUS=2          CPUs per virtual node (default 2, whatever the
#                           host has: SlurmdParameters=config_overrides)
#   CLUSTER_START_TIMEOUT=60  seconds to wait for the cluster to be ready
#   CLUSTER_STOP_TIMEOUT=15   seconds to wait for SIGTERM before SIGKILL
#   CLUSTER_PORT_BASE=...   first port to try (default: random, between 10000
#                           and the start of the kernel's ephemeral range)
#
# Notes (see README.md for measured behaviour):
#   * DIR is chmod 0755: munged refuses a socket in a dir that is not
#     world-executable (mktemp -d makes 0700).  Every parent of DIR must be
#     world-executable too (e.g. /tmp is fine).
#   * Daemons run in the foreground (-D / -F) under setsid, stdio redirected
#     to files (so a pipe from CTest is never held open), pid from $!.
#   * Use `srun --overcommit` / `sbatch --overcommit` for more tasks than
#     CPUs, `--overlap` for steps sharing CPUs inside one allocation.

set -u -o pipefail

PROG=${0##*/}
HOST=$(hostname -s 2>/dev/null || hostname)
NODES=(node1 node2)

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# now_ms: monotonic-ish wall clock in milliseconds (for deadlines/timings).
now_ms() { date +%s%3N; }

# wait_for SECONDS DESCRIPTION CMD... : poll CMD (every 0.1 s) until it
# succeeds or the deadline passes.  Returns 0 on success, 1 on timeout.
wait_for() {
  local secs=$1 what=$2; shift 2
  local deadline=$(( $(now_ms) + secs * 1000 ))
  while :; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if (( $(now_ms) >= deadline )); then
      log "timed out after ${secs}s waiting for: $what"
      return 1
    fi
    sleep 0.1
  done
}

abs_dir() {  # make $1 absolute (it need not exist yet)
  case $1 in /*) printf '%s\n' "${1%/}" ;; *) printf '%s\n' "$PWD/${1%/}" ;; esac
}

# ---------------------------------------------------------------- ports ---
# Local ports in use (any TCP state, v4 and v6), one decimal per line.
used_ports() {
  local f
  for f in /proc/net/tcp /proc/net/tcp6; do
    [[ -r $f ]] || continue
    awk 'NR > 1 { split($2, a, ":"); print a[2] }' "$f" |
      while read -r h; do echo $((16#$h)); done
  done
}

# port_free PORT: nothing bound to PORT and nothing answers on 127.0.0.1:PORT.
port_free() {
  local p=$1
  grep -qx "$p" <<<"$USED_PORTS" && return 1
  # Belt and braces: a listener we could not see in /proc/net.
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then return 1; fi
  return 0
}

# pick_ports N: print N distinct free ports, below the kernel's ephemeral
# range when possible (so a client's outgoing connection cannot grab one of
# them between our check and the daemon's bind()).
pick_ports() {
  local n=$1 p tries=0 found=() lo=10000 hi=60000 eph_lo _
  if read -r eph_lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null &&
     (( eph_lo > lo + 2000 )); then
    hi=$(( eph_lo - 1 ))
  fi
  USED_PORTS=$(used_ports | sort -un)
  p=${CLUSTER_PORT_BASE:-$(( lo + (RANDOM * 32768 + RANDOM) % (hi - lo - 100) ))}
  while (( ${#found[@]} < n )); do
    (( ++tries > 5000 )) && die "could not find $n free TCP ports"
    (( p > hi )) && p=$lo
    if port_free "$p"; then found+=("$p"); fi
    p=$(( p + 1 + RANDOM % 7 ))
  done
  printf '%s\n' "${found[@]}"
}

# ----------------------------------------------------------------- pids ---
record_pid() { printf '%s %s\n' "$1" "$2" >>"$DIR/pids"; }

alive() {  # alive PID: process exists and is not a zombie
  local line
  { while read -r line; do
      [[ $line == State:* ]] || continue
      line=${line#State:}; line=${line//[[:space:]]/}
      [[ $line != Z* && $line != X* ]]; return
    done <"/proc/$1/status"; } 2>/dev/null
  return 1
}

# is_ours PID: PID was started by this harness for DIR: its command line
# mentions DIR (all daemons get DIR-based paths as arguments) or its environ
# carries ECPS_SLURM_CLUSTER=DIR.  Guards against killing a reused pid.
is_ours() {
  local arr=() c
  { mapfile -d '' arr <"/proc/$1/cmdline"; } 2>/dev/null || return 1
  printf -v c '%s ' "${arr[@]}"
  [[ $c == *"$DIR/"* ]] && return 0
  arr=()
  { mapfile -d '' arr <"/proc/$1/environ"; } 2>/dev/null || return 1
  printf -v c '\n%s' "${arr[@]}"
  [[ $c$'\n' == *$'\n'"ECPS_SLURM_CLUSTER=$DIR"$'\n'* ]]
}

# spawn NAME LOGFILE CMD... : start CMD detached (own session, stdio to
# LOGFILE), record its pid.
spawn() {
  local name=$1 out=$2; shift 2
  # Subshell cds into DIR/run (so no daemon keeps the caller's cwd busy, and
  # slurmstepd inherits a cwd inside DIR), then execs setsid, which (not
  # being a process-group leader) calls setsid() and execs CMD: $! is the
  # daemon's own pid.
  ( cd "$DIR/run" && ECPS_SLURM_CLUSTER=$DIR exec setsid "$@" ) </dev/null >>"$out" 2>&1 &
  local pid=$!
  record_pid "$name" "$pid"
  log "started $name (pid $pid)"
}

# ---------------------------------------------------------- diagnostics ---
show_logs() {
  local f
  # *.out is the daemons' stdout/stderr: with -D it repeats the .log, so it
  # is shown only when the .log is missing/empty (e.g. config parse errors).
  for f in "$DIR"/log/*.log "$DIR"/log/*.out; do
    [[ -s $f ]] || continue
    [[ $f == *.out && -s ${f%.out}.log ]] && continue
    printf '===== %s (last 25 lines) =====\n' "$f" >&2
    tail -n 25 "$f" >&2
  done
  if [[ -r $DIR/pids ]]; then
    printf '===== %s =====\n' "$DIR/pids" >&2
    local name pid
    while read -r name pid; do
      if alive "$pid"; then echo "$name $pid alive" >&2; else echo "$name $pid dead" >&2; fi
    done <"$DIR/pids"
  fi
}

# ---------------------------------------------------------------- config ---
write_conf() {
  local ctld_port=$1 p1=$2 p2=$3 cpus=${CLUSTER_CPUS:-2}
  : >"$DIR/etc/plugstack.conf"   # no SPANK plugins (don't read /etc/slurm)
  cat >"$DIR/etc/slurm.conf" <<EOF
# Generated by tests/slurm/cluster.sh for a private test cluster.
ClusterName=ecpstest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$p1
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$DIR/etc/plugstack.conf
TmpFS=$DIR/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
# Fast turnaround for tests.
KillWait=2
MessageTimeout=10
InactiveLimit=0
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=60
UnkillableStepTimeout=30
NodeName=node1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$p1 CPUs=$cpus State=UNKNOWN
NodeName=node2 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$p2 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
}

# --------------------------------------------------------------- checks ---
munge_ok() {
  munge -n -S "$DIR/munge/munge.socket" | unmunge -S "$DIR/munge/munge.socket"
}

ctld_ok() {
  SLURM_CONF=$DIR/etc/slurm.conf scontrol ping | grep -q 'is UP'
}

nodes_idle() {
  local states
  states=$(SLURM_CONF=$DIR/etc/slurm.conf sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
  local n
  for n in "${NODES[@]}"; do
    grep -qx "$n idle" <<<"$states" || return 1
  done
}

# daemons_alive: every recorded daemon still runs (logs the first dead one).
daemons_alive() {
  local name pid
  while read -r name pid; do
    alive "$pid" || { log "$name (pid $pid) died"; return 1; }
  done <"$DIR/pids"
}

# wait_ready DESCRIPTION CHECK...: poll CHECK every 0.1 s until it succeeds
# (0); fail (1) as soon as a recorded daemon died or START_DEADLINE passed.
wait_ready() {
  local what=$1; shift
  local deadline=$START_DEADLINE
  while :; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    daemons_alive || return 1
    if (( $(now_ms) >= deadline )); then
      log "timed out waiting for: $what"
      return 1
    fi
    sleep 0.1
  done
}

# ---------------------------------------------------------------- start ---
cmd_start() {
  local t0; t0=$(now_ms)
  [[ $(id -u) == 0 ]] || die "must run as root (SlurmUser=root)"
  local b
  for b in munged munge unmunge mungekey slurmctld slurmd sinfo scontrol; do
    command -v "$b" >/dev/null || die "missing program: $b"
  done
  if [[ -s $DIR/pids ]]; then
    local name pid
    while read -r name pid; do
      alive "$pid" && die "$DIR already has a running $name (pid $pid); stop it first"
    done <"$DIR/pids"
  fi
  mkdir -p "$DIR" || die "cannot create $DIR"
  chmod 0755 "$DIR"
  mkdir -p "$DIR"/{etc,state,log,run,munge,tmp} "${NODES[@]/#/$DIR/spool/}" ||
    die "cannot create subdirectories of $DIR"
  chmod 0755 "$DIR/munge"
  : >"$DIR/pids"
  rm -f "$DIR/env" "$DIR/munge/munge.socket" "$DIR/munge/munge.socket.lock"

  # Make sure a failure part-way through tears down what already started.
  trap 'rc=$?; if (( rc != 0 )); then log "start failed; diagnostics follow"; show_logs; cmd_stop >/dev/null 2>&1; fi' EXIT
  trap 'exit 130' INT TERM HUP

  START_DEADLINE=$(( t0 + ${CLUSTER_START_TIMEOUT:-60} * 1000 ))

  # --- munge -----------------------------------------------------------
  rm -f "$DIR/munge/munge.key"
  if ! mungekey -c -k "$DIR/munge/munge.key" 2>/dev/null; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1 count=1024 2>/dev/null ||
      die "cannot create munge key"
  fi
  chmod 0400 "$DIR/munge/munge.key"
  spawn munged "$DIR/log/munged.out" munged -F \
    --key-file="$DIR/munge/munge.key" \
    --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/munge/munged.pid" \
    --log-file="$DIR/munge/munged.log" \
    --seed-file="$DIR/munge/munged.seed"
  wait_ready "munged to answer on $DIR/munge/munge.socket" munge_ok || exit 1

  # --- config ----------------------------------------------------------
  local ports
  mapfile -t ports < <(pick_ports 3)
  (( ${#ports[@]} == 3 )) || die "port selection failed"
  write_conf "${ports[0]}" "${ports[1]}" "${ports[2]}"
  printf 'export SLURM_CONF=%q\n' "$DIR/etc/slurm.conf" >"$DIR/env.tmp"
  export SLURM_CONF=$DIR/etc/slurm.conf
  log "ports: slurmctld=${ports[0]} node1=${ports[1]} node2=${ports[2]}"

  # --- slurmctld ---------------------------------------------------------
  spawn slurmctld "$DIR/log/slurmctld.out" slurmctld -D -c -i -f "$SLURM_CONF"
  wait_ready "slurmctld to answer scontrol ping" ctld_ok || exit 1

  # --- slurmd x2 ---------------------------------------------------------
  local n
  for n in "${NODES[@]}"; do
    spawn "slurmd-$n" "$DIR/log/slurmd-$n.out" slurmd -D -N "$n" -f "$SLURM_CONF"
  done
  wait_ready "nodes ${NODES[*]} to be idle in sinfo" nodes_idle || exit 1

  mv -f "$DIR/env.tmp" "$DIR/env"
  trap - EXIT INT TERM HUP
  log "cluster up in $(( $(now_ms) - t0 )) ms; $(sinfo -h -N -o '%N=%T' | tr '\n' ' ')"
  cat "$DIR/env"
}

# ----------------------------------------------------------------- stop ---
# ancestors: the calling shell, this (sub)shell and all their ancestors --
# never to be killed, even if they carry SLURM_CONF / SLURM_JOB_ID.
ancestors() {
  local p st
  for p in $$ "$BASHPID"; do
    while [[ -n $p && $p != 0 ]]; do
      echo "$p"
      { st=$(<"/proc/$p/status"); } 2>/dev/null || break
      p=${st#*PPid:}; p=${p%%$'\n'*}; p=${p//[!0-9]/}
    done
  done
}

# stray_pids: processes that belong to this cluster but are not recorded
# daemons.  Matched (no forks per process, only /proc reads):
#   * slurmstepd whose cwd is inside DIR (slurmd runs in DIR/run and
#     slurmstepd inherits it; its environ is partly overwritten by its
#     process title, so the marker variable is not reliable there), or
#     whose environ still shows SLURM_CONF=DIR/etc/slurm.conf;
#   * any process with ECPS_SLURM_CLUSTER=DIR in its environ (set on every
#     daemon we spawn, inherited by whatever they fork);
#   * job processes (batch script, step tasks, sruns inside a job): environ
#     has SLURM_CONF=DIR/etc/slurm.conf and SLURM_JOB_ID=.
stray_pids() {
  local keep=" " d pid comm cwd env arr
  local conf=$DIR/etc/slurm.conf name rp
  keep+="$(ancestors | tr '\n' ' ') "
  if [[ -r $DIR/pids ]]; then
    while read -r name rp; do keep+="$rp "; done <"$DIR/pids"
  fi
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [[ $keep == *" $pid "* ]] && continue
    arr=()
    { mapfile -d '' arr <"$d/environ"; } 2>/dev/null || continue
    (( ${#arr[@]} )) || continue            # kernel thread or zombie
    printf -v env '\n%s' "${arr[@]}"; env+=$'\n'
    comm=
    { read -r comm <"$d/comm"; } 2>/dev/null
    if [[ $comm == slurmstepd ]]; then
      cwd=$(readlink "$d/cwd" 2>/dev/null)
      if [[ $cwd == "$DIR" || $cwd == "$DIR"/* ||
            $env == *$'\n'"SLURM_CONF=$conf"$'\n'* ]]; then
        echo "$pid"; continue
      fi
    fi
    if [[ $env == *$'\n'"ECPS_SLURM_CLUSTER=$DIR"$'\n'* ]]; then
      echo "$pid"
    elif [[ $env == *$'\n'"SLURM_CONF=$conf"$'\n'* &&
            $env == *$'\n'SLURM_JOB_ID=* ]]; then
      echo "$pid"
    fi
  done
}

# wait_dead SECONDS PID...: wait until none of PIDs is alive (a zombie
# counts as dead).  Returns 1 if some are still alive at the deadline.
wait_dead() {
  local secs=$1; shift
  local deadline=$(( $(now_ms) + secs * 1000 )) p any
  while :; do
    any=0
    for p in "$@"; do alive "$p" && { any=1; break; }; done
    (( any )) || return 0
    (( $(now_ms) >= deadline )) && return 1
    sleep 0.05
  done
}

# kill_wait SECONDS PID...: SIGTERM, wait up to SECONDS, then SIGKILL.
kill_wait() {
  local secs=$1; shift
  local pids=() p left=()
  for p in "$@"; do alive "$p" && pids+=("$p"); done
  (( ${#pids[@]} )) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null
  wait_dead "$secs" "${pids[@]}" && return 0
  for p in "${pids[@]}"; do alive "$p" && left+=("$p"); done
  log "SIGKILL ${left[*]} (still alive ${secs}s after SIGTERM)"
  kill -KILL "${left[@]}" 2>/dev/null
  wait_dead 5 "${left[@]}" || log "pids ${left[*]} survive SIGKILL (uninterruptible?)"
  return 0
}

cmd_stop() {
  local secs=${CLUSTER_STOP_TIMEOUT:-15} t0
  t0=$(now_ms)
  [[ -d $DIR ]] || return 0
  local conf=$DIR/etc/slurm.conf name pid all=()
  local -A byname=()
  if [[ -r $DIR/pids ]]; then
    while read -r name pid; do
      [[ $pid =~ ^[0-9]+$ ]] || continue
      if alive "$pid" && ! is_ours "$pid"; then
        log "pid $pid ($name) is no longer ours (pid reused?); not touching it"
        continue
      fi
      byname[$name]=$pid; all+=("$pid")
    done <"$DIR/pids"
  fi
  # 1. Cancel all jobs while the controller is still up, so slurmstepd kills
  #    the tasks the normal way (SIGCONT+SIGTERM, SIGKILL after KillWait).
  if [[ -r $conf && -n ${byname[slurmctld]:-} ]] && alive "${byname[slurmctld]}"; then
    local jobs
    jobs=$(SLURM_CONF=$conf timeout 10 squeue -h -o '%i' 2>/dev/null | tr '\n' ' ')
    if [[ -n ${jobs// } ]]; then
      log "cancelling jobs: $jobs"
      # shellcheck disable=SC2086
      SLURM_CONF=$conf timeout 10 scancel $jobs 2>/dev/null
      # shellcheck disable=SC2016
      SLURM_CONF=$conf wait_for 10 "jobs to leave the queue" \
        bash -c '[[ -z $(squeue -h -o %i 2>/dev/null) ]]'
    fi
  fi
  # 2. Daemons: slurmd first, then slurmctld (munged last, see below).
  local d=()
  for name in "${!byname[@]}"; do [[ $name == slurmd-* ]] && d+=("${byname[$name]}"); done
  kill_wait "$secs" "${d[@]}"
  [[ -n ${byname[slurmctld]:-} ]] && kill_wait "$secs" "${byname[slurmctld]}"
  # 3. Anything left behind that is ours: slurmstepd, tasks, batch scripts.
  local strays=()
  mapfile -t strays < <(stray_pids)
  if (( ${#strays[@]} )); then
    log "killing leftover processes: ${strays[*]}"
    kill_wait 2 "${strays[@]}"   # slurmstepd ignores SIGTERM: keep it short
  fi
  # 4. munged, and any other recorded pid.
  for name in "${!byname[@]}"; do
    case $name in slurmctld|slurmd-*) ;; *) kill_wait "$secs" "${byname[$name]}" ;; esac
  done
  mapfile -t strays < <(stray_pids)
  if (( ${#strays[@]} )); then
    log "SIGKILL leftovers: ${strays[*]}"
    kill -KILL "${strays[@]}" 2>/dev/null
  fi
  # 5. Give init a moment to reap the zombies, so that `pgrep` right after
  #    `stop` is clean (not an error if it takes longer).
  local deadline=$(( $(now_ms) + 5000 )) p
  for p in "${all[@]}"; do
    while [[ -e /proc/$p ]] && (( $(now_ms) < deadline )); do sleep 0.05; done
  done
  [[ -e $DIR/pids ]] && mv -f "$DIR/pids" "$DIR/pids.stopped"
  rm -f "$DIR/env" "$DIR/munge/munge.socket"
  (( ${#all[@]} )) && log "cluster in $DIR stopped in $(( $(now_ms) - t0 )) ms"
  return 0
}

cmd_status() {
  [[ -r $DIR/pids ]] || { log "no cluster in $DIR"; return 1; }
  daemons_alive || return 1
  SLURM_CONF=$DIR/etc/slurm.conf sinfo -N
}

cmd_run() {
  (( $# )) || die "run: missing command"
  local rc=0 child=
  # The command runs in the background and we `wait` for it, so that a
  # signal to this script is handled at once (bash defers traps while a
  # foreground child runs): forward SIGTERM to the command, then stop.
  trap 'cmd_stop' EXIT
  trap '[[ -n $child ]] && kill -TERM "$child" 2>/dev/null; exit 143' TERM
  trap '[[ -n $child ]] && kill -TERM "$child" 2>/dev/null; exit 130' INT
  trap '[[ -n $child ]] && kill -TERM "$child" 2>/dev/null; exit 129' HUP
  ( cmd_start ) >/dev/null || exit 1
  export SLURM_CONF=$DIR/etc/slurm.conf
  "$@" <&0 &
  child=$!
  wait "$child" || rc=$?
  child=
  exit "$rc"
}

# ----------------------------------------------------------------- main ---
(( $# >= 2 )) || { sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2; exit 2; }
CMD=$1
DIR=$(abs_dir "$2")
shift 2
[[ $DIR != / && -n $DIR ]] || die "refusing DIR=$DIR"
[[ $DIR != *[[:space:]\'\"\$\`\\]* ]] || die "DIR must not contain blanks or quotes: $DIR"
case $CMD in
  start)  cmd_start ;;
  stop)   cmd_stop ;;
  status) cmd_status ;;
  logs)   show_logs ;;
  run)    cmd_run "$@" ;;
  *)      die "unknown command: $CMD (start|stop|status|logs|run)" ;;
esac
