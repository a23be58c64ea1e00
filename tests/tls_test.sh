#!/usr/bin/env bash
# The TLS test (CTest label tls): a whole job under `ecps run` with security.tls, every role in
# its own process with its role's certificate, every connection mutual TLS.
#
#   tests/tls_test.sh ECPS_BINARY
#
# Certificates come from openssl (tests/tls/make_certs.sh). While the erasure-coded job trains
# and a drill kills a server (a spare rebuilds it over TLS), the operator commands work with the
# job folder's admin certificate; an outside client (python3-grpcio) is refused by the real
# coordinator in plaintext, with another CA's certificate and with an expired one, and a
# worker's certificate may read the status but not scrub; a worker process holds only its
# role token. The job ends with a clean scrub. Every process it started is stopped by pid,
# also on failure.
set -euo pipefail
ecps="$(realpath "${1:?usage: tls_test.sh ECPS_BINARY}")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python=/usr/bin/python3
test_name=tls_test
work="$(mktemp -d /tmp/ecps-tls-test.XXXXXX)"
fail_logs=("$work/run.log" "$work/job/logs/*.log")
job_pid=""
# shellcheck source=tests/lib/job_test.sh
. "$root/tests/lib/job_test.sh"
trap 'stop_job; remove_work' EXIT
"$python" -c "import grpc" 2>/dev/null || skip "python3-grpcio is not installed"

certs="$work/certs"
bash "$root/tests/tls/make_certs.sh" "$certs"

cat >"$work/spec.yaml" <<SPEC
job: {name: tlstest, steps: 3000}
cluster: {servers: 3, spares: 1, workers: 1, heartbeat_interval_ms: 200, heartbeat_timeout_ms: 1500}
model: {num_dense: 13, num_sparse: 8, embedding_dim: 8, table_rows: 4000, bottom_mlp: [16, 8], top_mlp: [16]}
data: {source: synthetic, batch_size: 128}
fault_tolerance: {mode: erasure_code, k: 2, r: 1, checkpoint: {save_final: false}}
faults:
  - {at_step: 800, action: kill_server, target: 1}
monitoring: {progress: false, metrics_port: -1}
SPEC
cat "$root/tests/tls/security.yaml" >>"$work/spec.yaml"
out="$work/job"
"$ecps" run "$work/spec.yaml" --output "$out" --no-progress >"$work/run.log" 2>&1 &
job_pid=$!

has_address() { [ -s "$out/coordinator.address" ]; }
wait_for "the coordinator's address" 60 has_address
address="$(cat "$out/coordinator.address")"
admin_token="$(cat "$out/token")"
case "$admin_token" in ecps-admin-*) ;; *) fail "the job folder's token is not an admin token" ;; esac

# The operator commands use the job folder's admin certificate (DIR/tls).
training() { "$ecps" status --job "$out" --json 2>/dev/null | grep -q '"JOB_RUNNING"'; }
wait_for "the job to train" 60 training
echo "tls_test: ecps status --job over TLS: OK"

# Without a certificate, the coordinator does not answer the CLI.
if plain="$("$ecps" status "$address" --token "$admin_token" 2>&1)"; then
  fail "ecps status without TLS got an answer: $plain"
fi
grep -q "TLS expected" <<<"$plain" || fail "ecps status in plaintext does not say TLS was expected: $plain"
echo "tls_test: ecps status in plaintext refused: $(tail -n 1 <<<"$plain")"

# An outside client, on its own: refused at the handshake unless its certificate is the CA's.
outside() { "$python" "$root/tests/tls/outside_client.py" "$address" "$admin_token" "$@"; }
expect() {  # want what args...
  local want="$1" what="$2"
  shift 2
  local got
  got="$(outside "$@")"
  [ "$got" = "$want" ] || fail "$what: expected $want, got $got"
  echo "tls_test: $what: $got"
}
expect OK "outside client, admin certificate, Status" Status tls "$certs/ca.pem" "$certs/admin.pem" "$certs/admin.key"
expect UNAVAILABLE "outside client in plaintext" Status plaintext
expect UNAVAILABLE "outside client, another CA's certificate" Status tls "$certs/other-ca.pem" "$certs/other-worker.pem" "$certs/other-worker.key"
expect UNAVAILABLE "outside client, expired certificate" Status tls "$certs/ca.pem" "$certs/expired-worker.pem" "$certs/expired-worker.key"
# The role is the certificate's: a worker's may read the status, not scrub (admin only), even
# with the admin token.
expect OK "worker certificate, Status" Status tls "$certs/ca.pem" "$certs/worker.pem" "$certs/worker.key"
expect PERMISSION_DENIED "worker certificate, Scrub" Scrub tls "$certs/ca.pem" "$certs/worker.pem" "$certs/worker.key"

# The worker process holds its role token only, never the job secret.
worker_pid="$("$ecps" status --job "$out" --json |
  "$python" -c "import json,sys; print([n['pid'] for n in json.load(sys.stdin)['nodes'] if n.get('role') == 'ROLE_WORKER'][0])")"
worker_token="$(tr '\0' '\n' <"/proc/$worker_pid/environ" | sed -n 's/^ECPS_TOKEN=//p')"
case "$worker_token" in ecps-worker-*) ;; *) fail "worker $worker_pid has ECPS_TOKEN '$worker_token'" ;; esac
echo "tls_test: the worker holds only a worker token"

# A scrub mid-training, as an admin over TLS.
"$ecps" scrub --job "$out" >"$work/scrub.log" 2>&1 || fail "ecps scrub failed: $(cat "$work/scrub.log")"
grep -q "clean" "$work/scrub.log" || fail "ecps scrub is not clean: $(cat "$work/scrub.log")"
echo "tls_test: ecps scrub --job over TLS: $(head -n 1 "$work/scrub.log")"

rc=0
wait "$job_pid" || rc=$?
job_pid=""
[ "$rc" -eq 0 ] || fail "ecps run exited $rc"
grep -q "recover" "$work/run.log" || fail "no recovery in the run's report"
grep -qi "scrub.*clean" "$work/run.log" || fail "the final scrub is not clean"
echo "tls_test: the job ended after a recovery over TLS, with a clean final scrub"
echo "tls_test: PASS"
