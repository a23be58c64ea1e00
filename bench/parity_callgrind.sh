#!/usr/bin/env bash
# What fault tolerance costs one server, in instructions: a deterministic count, to measure the
# parity path's cuts by (bench/ft_cost.sh measures CPU-seconds, which the machine's noise blurs).
#
# The roles are started by hand (ecps coordinator, ecps server, ecps worker, as in
# docs/deploy.md), server 0 under `valgrind --tool=callgrind`, the others as they are. Every
# server is a data server and a parity holder at once (parity rotates over the servers), so
# server 0's count holds both sides of the parity path: applying its own pushes and sending
# their deltas, and applying the deltas the other servers send it.
#
# Each configuration runs twice, a short job (STEPS_A steps) and a long one (STEPS_B), with
# the same seed, ids and pushes for their common steps. Instrumentation is off while the
# server initialises its tables and goes on just before the worker starts; the server's
# totals at exit then hold the steps, the final evaluation, the final scrub (coded modes) and
# the shutdown, which are the same in both jobs. The difference of the two totals over the
# difference of the row updates server 0 applied (ServerStats.pushes) is the cost of one row
# update in steady training, start-up and the end of the job left out:
#
#   Ir per row update = (Ir(B) - Ir(A)) / (pushes(B) - pushes(A))
#
# Callgrind counts user-space instructions only: the kernel's part (TCP on loopback, context
# switches) is not in it. And glibc copies and clears large buffers with `rep movsb`/`rep
# stosb`, which it counts once per byte, so big memcpys weigh more here than they cost.
# Timing still moves the count a little (how often pollers wake, how deltas coalesce): two
# runs of the same build agree to about 0.5%.
#
#   bench/parity_callgrind.sh [CONFIGS] [STEPS_A] [STEPS_B]
#     CONFIGS   default "none ec41 rep1": any of none, ec41, ec42, rep1 (after_parity acks),
#               ec41-async, rep1-async, ec41-tcp (parity batches over plain TCP)
#     STEPS_A   default 10;  STEPS_B default 40
#   ECPS_CALLGRIND_OUT=DIR  keep the callgrind files and logs there (default: a temporary dir)
#   ECPS_CALLGRIND_TOP=N    inclusive functions listed per configuration (default 25; 0: none)
#
# Prints per configuration both totals and the Ir per row update, then a table against none,
# then (of the long job) the top inclusive functions from callgrind_annotate.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
configs="${1:-none ec41 rep1}"
steps_a="${2:-10}"
steps_b="${3:-40}"
ecps="${ECPS_BIN:-$root/build/cli/ecps}"
top="${ECPS_CALLGRIND_TOP:-25}"
python=/usr/bin/python3
if [[ -n "${ECPS_CALLGRIND_OUT:-}" ]]; then
  work="$ECPS_CALLGRIND_OUT"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
for tool in valgrind callgrind_control callgrind_annotate; do
  command -v "$tool" >/dev/null || { echo "needs $tool (Debian: valgrind)" >&2; exit 2; }
done
secret="callgrind-bench-secret"

ft_body() {
  case "$1" in
    none) echo "mode: none" ;;
    ec41) echo "mode: erasure_code, k: 4, r: 1, ack: after_parity" ;;
    ec42) echo "mode: erasure_code, k: 4, r: 2, ack: after_parity" ;;
    rep1) echo "mode: replication, r: 1, ack: after_parity" ;;
    ec41-async) echo "mode: erasure_code, k: 4, r: 1, ack: async" ;;
    ec41-tcp) echo "mode: erasure_code, k: 4, r: 1, ack: after_parity, parity_transport: tcp" ;;
    rep1-async) echo "mode: replication, r: 1, ack: async" ;;
    *) echo "unknown configuration $1" >&2; exit 2 ;;
  esac
}

# bench-small's model and data on 6 servers, one worker thread (its results are deterministic
# for a given thread count), generous timeouts: the server under callgrind runs ~50x slower and
# must not be declared dead for it.
write_spec() {  # CONFIG STEPS FILE
  cat >"$3" <<EOF
job: {name: callgrind-$1, steps: $2, eval_every: 0, eval_samples: 1024, seed: 42, token: "$secret"}
cluster: {servers: 6, workers: 1, worker_threads: 1, server_threads: 2, host: 127.0.0.1,
          heartbeat_interval_ms: 500, heartbeat_timeout_ms: 600000, rpc_timeout_ms: 600000}
model: {num_dense: 13, num_sparse: 26, embedding_dim: 16, table_rows: 50000,
        bottom_mlp: [64, 16], top_mlp: [64, 32]}
optimizer: {sparse: {type: adagrad, lr: 0.05}, dense: {type: adam, lr: 0.001}}
data: {source: synthetic, batch_size: 2048}
fault_tolerance: {$(ft_body "$1"), checkpoint: {save_final: false}}
monitoring: {progress: false, metrics_interval_ms: 500, log_level: warn, metrics_port: -1}
EOF
}

pids=()
stop_all() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all' INT TERM

# Runs one job; prints "IR PUSHES" of server 0 over the instrumented part.
run_job() {  # CONFIG STEPS
  local name="$1-$2" dir="$work/$1-$2"
  rm -rf "$dir"
  mkdir -p "$dir"
  write_spec "$1" "$2" "$dir/spec.yaml"
  pids=()
  ECPS_TOKEN="$secret" "$ecps" coordinator --spec "$dir/spec.yaml" --host 127.0.0.1 --port 0 \
    --address-file "$dir/coordinator.address" --final-status "$dir/final.json" \
    >"$dir/coordinator.log" 2>&1 &
  local coord=$!
  pids+=("$coord")
  until [[ -s "$dir/coordinator.address" ]]; do
    kill -0 "$coord" 2>/dev/null || { echo "$name: coordinator died" >&2; cat "$dir/coordinator.log" >&2; exit 1; }
    sleep 0.1
  done
  local addr
  addr="$(cat "$dir/coordinator.address")"
  export ECPS_COORDINATOR="$addr"
  ECPS_TOKEN="$secret" valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$dir/callgrind.out" \
    "$ecps" server --spec "$dir/spec.yaml" --id 0 --host 127.0.0.1 >"$dir/server-0.log" 2>&1 &
  local vg=$!
  pids+=("$vg")
  local s
  for s in 1 2 3 4 5; do
    ECPS_TOKEN="$secret" "$ecps" server --spec "$dir/spec.yaml" --id "$s" --host 127.0.0.1 \
      >"$dir/server-$s.log" 2>&1 &
    pids+=("$!")
  done
  # Every server registered and initialised: the coordinator lists six active servers.
  until ECPS_TOKEN="$secret" "$ecps" status "$addr" --json 2>/dev/null | "$python" -c '
import json, sys
s = json.load(sys.stdin)
servers = [n for n in s.get("nodes", []) if n.get("role") == "ROLE_SERVER"]
sys.exit(0 if len(servers) == 6 and all(n.get("state") == "NODE_ACTIVE" for n in servers) else 1)
'; do
    kill -0 "$vg" 2>/dev/null || { echo "$name: server 0 died" >&2; tail "$dir/server-0.log" >&2; exit 1; }
    sleep 0.5
  done
  callgrind_control -i on "$vg" >/dev/null
  ECPS_TOKEN="$secret" "$ecps" worker --spec "$dir/spec.yaml" --id 0 --host 127.0.0.1 \
    >"$dir/worker-0.log" 2>&1 &
  pids+=("$!")
  wait "$coord" || true
  wait "$vg" || true
  stop_all
  wait 2>/dev/null || true
  local ir
  ir="$(callgrind_annotate --inclusive=no "$dir"/callgrind.out* 2>/dev/null |
        awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')"
  local pushes
  pushes="$("$python" -c '
import json, sys
s = json.load(open(sys.argv[1]))
# A measurement of a job that failed, or whose final scrub found a parity mismatch, is void.
scrub = s.get("scrub", {})
if s.get("phase") != "JOB_FINISHED" or (scrub.get("done") and not scrub.get("clean")):
    sys.exit("job ended in %s, scrub %s" % (s.get("phase"), scrub))
for n in s.get("nodes", []):
    if n.get("role") == "ROLE_SERVER" and int(n.get("id", -1)) == 0:
        print(int(n.get("server", {}).get("pushes", 0)))
        break
' "$dir/final.json")"
  echo "$ir $pushes"
}

results="$work/results.txt"
: >"$results"
for c in $configs; do
  ft_body "$c" >/dev/null
  echo "$c: $steps_a steps" >&2
  read -r ir_a pushes_a < <(run_job "$c" "$steps_a")
  echo "$c: $steps_b steps" >&2
  read -r ir_b pushes_b < <(run_job "$c" "$steps_b")
  echo "$c $ir_a $pushes_a $ir_b $pushes_b" >>"$results"
  echo "$c: Ir $ir_a over $pushes_a row updates ($steps_a steps), $ir_b over $pushes_b ($steps_b steps)" >&2
done

"$python" - "$results" "$steps_a" "$steps_b" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
per = {}
print("| configuration | Ir (%s steps) | Ir (%s steps) | row updates in between | Ir per row update | extra over none | extra / none |" % (sys.argv[2], sys.argv[3]))
print("| --- | --- | --- | --- | --- | --- | --- |")
for name, ia, pa, ib, pb in rows:
    per[name] = (int(ib) - int(ia)) / (int(pb) - int(pa))
none = per.get("none")
for name, ia, pa, ib, pb in rows:
    extra = "" if none is None else "%+.0f | %.2fx" % (per[name] - none, (per[name] - none) / none)
    print("| %s | %s | %s | %d | %.0f | %s |" % (name, ia, ib, int(pb) - int(pa), per[name],
                                                 extra or " | "))
PY

if ((top > 0)); then
  for c in $configs; do
    echo
    echo "== $c, $steps_b steps: top $top inclusive (server 0, all threads) =="
    callgrind_annotate --inclusive=yes "$work/$c-$steps_b"/callgrind.out* 2>/dev/null |
      awk '/^-+$/ {n++} n >= 3' | grep -v '^-' | head -n "$((top + 1))" || true
  done
fi
