#!/usr/bin/env bash
# The metrics test (CTest label prometheus): a real Prometheus scrapes a running job.
#
#   tests/prometheus_test.sh ECPS_BINARY
#
# Runs a small erasure-coded job under `ecps run` with every role serving /metrics on a free
# port and a drill that SIGKILLs a server (a spare takes over). Checks that every role's
# exposition passes `promtool check metrics`, then starts a Prometheus that discovers the
# roles through the job's prometheus_targets.json and asks its HTTP API for a rising samples
# counter, RPC counts, the failure the drill caused, its recovery and the spare's rebuilt
# rows. Every process it started is stopped by pid, also on failure. Exits 77 (CTest:
# skipped) when Prometheus is not installed (Debian: prometheus).
set -euo pipefail
ecps="$(realpath "${1:?usage: prometheus_test.sh ECPS_BINARY}")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
test_name=prometheus_test
work="$(mktemp -d /tmp/ecps-prometheus-test.XXXXXX)"
fail_logs=("$work/run.log" "$work/prometheus.log")
job_pid="" prom_pid=""
# shellcheck source=tests/lib/job_test.sh
. "$root/tests/lib/job_test.sh"
cleanup() {
  for pid in $prom_pid $job_pid; do kill "$pid" 2>/dev/null || true; done
  for pid in $prom_pid $job_pid; do wait "$pid" 2>/dev/null || true; done
  remove_work
}
trap cleanup EXIT
for tool in prometheus promtool; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (Debian package prometheus)"
done

steps=4000
cat >"$work/spec.yaml" <<SPEC
job: {name: promtest, steps: $steps, eval_every: 1000, eval_samples: 2048}
cluster: {servers: 3, spares: 1, workers: 1, heartbeat_interval_ms: 200, heartbeat_timeout_ms: 1500}
model: {num_dense: 13, num_sparse: 8, embedding_dim: 8, table_rows: 4000, bottom_mlp: [16, 8], top_mlp: [16]}
data: {source: synthetic, batch_size: 128}
fault_tolerance: {mode: erasure_code, k: 2, r: 1, checkpoint: {save_final: false}}
faults:
  - {at_step: 1000, action: kill_server, target: 1}
monitoring: {progress: false, metrics_port: 0}
SPEC
out="$work/job"
"$ecps" run "$work/spec.yaml" --output "$out" --no-progress >"$work/run.log" 2>&1 &
job_pid=$!

targets="$out/prometheus_targets.json"
# The coordinator, the 3 servers, the spare and the worker: 6 targets.
all_targets() {
  [ -f "$targets" ] && /usr/bin/python3 -c \
    "import json,sys; sys.exit(0 if len(json.load(open('$targets'))) >= 6 else 1)" 2>/dev/null
}
wait_for "prometheus_targets.json to list every role" 60 all_targets

# Every role's exposition passes promtool's checks (names, help, types, units).
addresses="$(/usr/bin/python3 -c \
  "import json; print(' '.join(g['targets'][0] for g in json.load(open('$targets'))))")"
for address in $addresses; do
  scrape="$work/scrape-$address.txt"
  /usr/bin/python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://$address/metrics', timeout=10).read().decode())" \
    >"$scrape" || fail "no /metrics at $address"
  grep -q '^ecps_' "$scrape" || fail "no ecps_ series at $address"
  promtool check metrics <"$scrape" >"$work/promtool-$address.txt" 2>&1 ||
    fail "promtool check metrics refused $address: $(cat "$work/promtool-$address.txt")"
done
echo "prometheus_test: promtool check metrics accepts all $(echo $addresses | wc -w) roles"

port="$(/usr/bin/python3 -c \
  'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat >"$work/prometheus.yml" <<CONFIG
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$root/deploy/prometheus/ecps_alerts.yml"]
scrape_configs:
  - job_name: ecps
    file_sd_configs: [{files: ["$targets"], refresh_interval: 1s}]
CONFIG
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$port" >"$work/prometheus.log" 2>&1 &
prom_pid=$!

# One number from Prometheus' HTTP API: the first result of an instant query (empty: none).
query() {
  /usr/bin/python3 - "$port" "$1" 2>/dev/null <<'PY'
import json, sys, urllib.parse, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
res = json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
print(res[0]["value"][1] if res else "")
PY
}
above() {
  local v
  v="$(query "$1")" || return 1
  [ -n "$v" ] && /usr/bin/python3 -c "import sys; sys.exit(0 if float('$v') > float('$2') else 1)"
}

wait_for "Prometheus to scrape a samples count" 60 above 'ecps_job_samples_total' 0
first="$(query 'ecps_job_samples_total')"
wait_for "the samples counter to rise past $first" 60 above 'ecps_job_samples_total' "$first"
echo "prometheus_test: ecps_job_samples_total rose from $first to $(query 'ecps_job_samples_total')"
wait_for "pulls counted by the servers' RPC metrics" 30 \
  above 'sum(ecps_grpc_server_handled_total{grpc_method="Pull",grpc_code="OK"})' 0
wait_for "the drill's server failure" 120 above 'sum(ecps_node_failures_total{role="server"})' 0
wait_for "the server's recovery" 120 above 'sum(ecps_node_recoveries_total{role="server"})' 0
wait_for "the spare's rebuilt rows" 60 above 'max(ecps_server_rebuild_rows)' 0
echo "prometheus_test: failures $(query 'sum(ecps_node_failures_total{role="server"})')," \
  "recoveries $(query 'sum(ecps_node_recoveries_total{role="server"})')," \
  "rebuilt rows $(query 'max(ecps_server_rebuild_rows)')," \
  "OK pulls $(query 'sum(ecps_grpc_server_handled_total{grpc_method="Pull",grpc_code="OK"})')," \
  "targets up $(query 'sum(up)') of $(query 'count(up)')"

wait "$job_pid" || { job_pid=""; fail "ecps run failed"; }
job_pid=""
echo "prometheus_test: PASS"
