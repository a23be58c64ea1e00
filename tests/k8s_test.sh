#!/usr/bin/env bash
# The Kubernetes test (CTest label k8s): `ecps k8s` writes the manifests of example jobs and
# every object is validated offline against Kubernetes' own object schemas
# (tests/k8s/validate.js, kubernetes-models). No cluster is involved.
#
#   tests/k8s_test.sh ECPS_BINARY
#
# A job with mutual TLS (certificates from tests/tls/make_certs.sh) gets a Secret per role and
# exec probes (`ecps health` with the pod's certificate): a coordinator started from the
# ConfigMap's spec with the files of its Secret and its StatefulSet's --state-dir and
# --linger-ms answers its two probes, taken from its StatefulSet, SERVING, and a probe without
# a certificate (Kubernetes' gRPC probe) nothing. SIGKILLed and started again as Kubernetes
# would, on the same state folder, it takes the job over (term 2) and answers them again.
#
# Also checks that the validator rejects broken manifests (a wrong type, a misspelt field, an
# unknown kind), so that a check that silently validates nothing fails here, and that a spec
# Kubernetes cannot run is refused with exit code 2. Exits 77 (CTest: skipped) only when node
# is not installed; missing npm modules or openssl are a failure: deploy/test.sh installs them.
set -euo pipefail
ecps="$(realpath "${1:?usage: k8s_test.sh ECPS_BINARY}")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
validator="$root/tests/k8s/validate.js"

test_name=k8s_test
work="$(mktemp -d "${TMPDIR:-/tmp}/ecps-k8s-test.XXXXXX")"
fail_logs=("$work/coordinator.log" "$work/coordinator-2.log")
job_pid=""  # the TLS coordinator, while it runs
# shellcheck source=tests/lib/job_test.sh
. "$root/tests/lib/job_test.sh"
trap 'stop_job; remove_work' EXIT

command -v node >/dev/null || skip "node is not installed"
for module in kubernetes-models js-yaml; do
  [ -d "$root/tests/k8s/node_modules/$module" ] ||
    fail "tests/k8s/node_modules/$module is missing; deploy/test.sh installs it" \
         "(npm ci --prefix tests/k8s)"
done
command -v openssl >/dev/null || fail "openssl is not installed (the TLS job's certificates)"

# An example spec with its faults: section left out (only `ecps run` runs drills) and a k8s:
# section added.
derive() {  # derive EXAMPLE OUT K8S_YAML
  awk '/^[a-z_]+:/ { skip = ($1 == "faults:") } !skip' "$root/deploy/examples/$1" > "$2"
  printf '%s\n' "$3" >> "$2"
}
derive quickstart.yaml "$work/quickstart.yaml" \
  'k8s: {image: "registry.example.org/ecps:1.0", checkpoint_claim: quickstart-checkpoints}'
derive bench-small.yaml "$work/bench-small.yaml" \
  'k8s: {image: "ecps:dev", image_pull_policy: Never, namespace: bench, checkpoint_claim: ckpt,
       server_cpu: 1500m, server_memory: 2Gi, worker_memory: 3.5Gi, coordinator_cpu: ""}'
# No checkpoints (an emptyDir each), no metrics, a coordinator port of its own, three workers.
cat > "$work/plain.yaml" <<'EOF'
job: {name: plain-job, steps: 100}
cluster: {servers: 3, spares: 2, workers: 3, coordinator_port: 7000}
fault_tolerance: {mode: replication, r: 1, checkpoint: {save_final: false}}
monitoring: {metrics_port: -1}
k8s:
  image: ecps:dev
  namespace: ml-jobs
  service_account: ecps-runner
  node_selector: [kubernetes.io/arch=amd64, pool=train]
EOF
# Mutual TLS: a Secret per role, exec probes.
bash "$root/tests/tls/make_certs.sh" "$work/certs"
derive quickstart.yaml "$work/tls.yaml" 'k8s: {image: "ecps:dev", checkpoint_claim: ckpt}'
cat "$root/tests/tls/security.yaml" >> "$work/tls.yaml"

files=()
for spec in quickstart bench-small plain tls; do
  out="$work/out-$spec"
  "$ecps" k8s "$work/$spec.yaml" -o "$out" > "$work/$spec.log" ||
    fail "ecps k8s $spec.yaml: $(cat "$work/$spec.log")"
  grep -q "^apply them with: kubectl apply -f $out\$" "$work/$spec.log" ||
    fail "ecps k8s $spec.yaml did not print the kubectl line"
  for f in "$out"/*.yaml; do files+=("$f"); done
done
[ -f "$work/out-plain/22-spare.statefulset.yaml" ] || fail "plain.yaml has spares: no spare StatefulSet"
[ ! -e "$work/out-bench-small/22-spare.statefulset.yaml" ] || fail "bench-small has no spares"
for role in coordinator server worker; do
  f="$(echo "$work"/out-tls/0?-$role-tls.secret.yaml)"
  [ -f "$f" ] || fail "tls.yaml: no Secret for the ${role}s' certificate"
  [ "$(stat -c %a "$f")" = 600 ] || fail "$f holds a private key but is not mode 0600"
  [ ! -e "$work/out-quickstart/${f##*/}" ] || fail "quickstart.yaml has no TLS but got ${f##*/}"
done

echo "== node validate.js on ${#files[@]} files"
node "$validator" "${files[@]}" | tee "$work/valid.txt" || fail "the manifests do not validate"
grep -qx "${#files[@]} valid, 0 invalid" "$work/valid.txt" || fail "not every file was validated"

# The validator must reject what Kubernetes would: a replica count that is not a number, a
# misspelt field, a kind it does not know.
sed 's/^  replicas: 5$/  replicas: "two"/' "$work/out-quickstart/21-server.statefulset.yaml" \
  > "$work/bad-replicas.yaml"
grep -q 'replicas: "two"' "$work/bad-replicas.yaml" || fail "the broken manifest was not made"
sed 's/^\( *\)imagePullPolicy:/\1imagePullPolcy:/' "$work/out-quickstart/30-worker.job.yaml" \
  > "$work/bad-field.yaml"
printf 'apiVersion: v1\nkind: Gadget\nmetadata: {name: g}\n' > "$work/bad-kind.yaml"
echo "== node validate.js on broken manifests (must fail)"
if node "$validator" "$work/bad-replicas.yaml" "$work/bad-field.yaml" "$work/bad-kind.yaml" \
    > "$work/invalid.txt"; then
  cat "$work/invalid.txt"
  fail "the validator accepted broken manifests"
fi
cat "$work/invalid.txt"
for expected in "/spec/replicas: must be integer" "imagePullPolcy: unknown field" \
                "unknown kind: kubernetes-models/v1 has no Gadget" "0 valid, 3 invalid"; do
  grep -qF "$expected" "$work/invalid.txt" || fail "the validator did not say: $expected"
done

# The TLS coordinator's pod, as far as one process shows it: the coordinator runs from the
# ConfigMap's spec with the files of its Secret where the pod mounts them (/etc/ecps-tls
# becomes a folder here; no metrics port, which another process may hold), with its
# StatefulSet's state folder (under a folder here) and linger, and its two probes run as its
# StatefulSet writes them.
pod_tls="$work/pod-tls"
mkdir -p "$pod_tls"
out="$work/out-tls"
node - "$root/tests/k8s/node_modules/js-yaml" "$out/02-coordinator-tls.secret.yaml" \
    "$out/00-spec.configmap.yaml" "$out/11-coordinator.statefulset.yaml" "$pod_tls" \
    > "$work/probes.txt" <<'JS'
const fs = require("fs");
const [yamlModule, secretFile, mapFile, setFile, dir] = process.argv.slice(2);
const yaml = require(yamlModule);
const load = (file) => yaml.load(fs.readFileSync(file, "utf8"));
for (const [key, value] of Object.entries(load(secretFile).stringData)) {
  fs.writeFileSync(`${dir}/${key}`, value);
}
fs.writeFileSync(`${dir}/../pod-spec.yaml`, load(mapFile).data["spec.yaml"]);
const set = load(setFile);
const container = set.spec.template.spec.containers[0];
const flag = (name) => container.args[container.args.indexOf(name) + 1];
fs.writeFileSync(`${dir}/../state-flags`,
                 `${flag("--state-dir")} ${flag("--linger-ms")} ${container.volumeMounts
                     .find((m) => m.name === set.spec.volumeClaimTemplates[0].metadata.name)
                     .mountPath}\n`);
for (const probe of ["livenessProbe", "readinessProbe"]) {
  console.log(container[probe].exec.command.join(" "));
}
JS
[ "$(wc -l < "$work/probes.txt")" -eq 2 ] || fail "no exec probes in the TLS coordinator's StatefulSet"
read -r state_dir linger claim_mount < "$work/state-flags"
[ "$linger" = -1 ] || fail "the coordinator's StatefulSet lingers $linger ms, not until SIGTERM"
case "$state_dir" in "$claim_mount"/?*) ;; *)
  fail "the coordinator's --state-dir $state_dir is not in its claim ($claim_mount)" ;;
esac
state_dir="$work/claim${state_dir#"$claim_mount"}"
mkdir -p "$work/claim"
grep -q "^    ca: \"/etc/ecps-tls/ca.crt\"$" "$work/pod-spec.yaml" ||
  fail "the pods' spec does not name the CA at /etc/ecps-tls"
sed -i "s#/etc/ecps-tls#$pod_tls#; s#metrics_port: 9400#metrics_port: -1#" "$work/pod-spec.yaml"
start_pod_coordinator() {  # start_pod_coordinator LOG
  rm -f "$work/coordinator.port"
  (cd "$work" && exec env ECPS_TOKEN=k8s-test-secret "$ecps" coordinator --spec pod-spec.yaml \
     --host 127.0.0.1 --port 0 --port-file coordinator.port --state-dir "$state_dir" \
     --linger-ms "$linger" > "$1" 2>&1) &
  job_pid=$!
  wait_for "the TLS coordinator to listen" 30 listening
  port="$(cat "$work/coordinator.port")"
}
listening() { [ -s "$work/coordinator.port" ]; }
run_probes() {
while read -r probe; do
  # The pod's command, word for word, but for this machine's binary, port and files.
  read -ra args <<< "${probe//\/etc\/ecps-tls/$pod_tls}"
  [ "${args[0]} ${args[1]} ${args[2]}" = "ecps health 127.0.0.1:7070" ] ||
    fail "unexpected probe: $probe"
  args[0]="$ecps"
  args[2]="127.0.0.1:$port"
  answer="$("${args[@]}" 2>&1)" || fail "the probe failed: $probe: $answer"
  echo "k8s_test: probe ${probe%% --deadline-ms*}: $answer"
  case "$answer" in *": SERVING") ;; *) fail "the probe did not answer SERVING: $answer" ;; esac
done < "$work/probes.txt"
}
start_pod_coordinator coordinator.log
run_probes
# What Kubernetes' own gRPC probe does: no client certificate, and so no answer.
set +e
plain="$("$ecps" health "127.0.0.1:$port" coordinator --deadline-ms 2000 2>&1)"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "a probe without a certificate exited $rc, expected 2: $plain"
echo "k8s_test: a probe without a certificate: $plain"
# Killed, and started again on its state folder as Kubernetes would: it takes the job over.
kill -9 "$job_pid"
wait "$job_pid" 2>/dev/null || true
job_pid=""
start_pod_coordinator coordinator-2.log
grep -q "as term 2" "$work/coordinator-2.log" ||
  fail "the restarted coordinator did not take the job over: $(tail -5 "$work/coordinator-2.log")"
run_probes
echo "k8s_test: the restarted coordinator took the job over: $(grep -o "takes job .* as term 2" "$work/coordinator-2.log")"
stop_job

# Each role's certificate is checked as the role checks it: a server's certificate given as
# the workers' is refused before anything is written.
sed 's#worker: {cert: certs/worker.pem, key: certs/worker.key}#worker: {cert: certs/server.pem, key: certs/server.key}#' \
  "$work/tls.yaml" > "$work/tls-wrong.yaml"
set +e
"$ecps" k8s "$work/tls-wrong.yaml" -o "$work/out-tls-wrong" 2> "$work/tls-wrong.log"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "ecps k8s with a server's certificate for the workers exited $rc"
grep -q "its subject CN is 'server', but a worker's certificate must have CN=worker" \
  "$work/tls-wrong.log" || fail "no CN error: $(cat "$work/tls-wrong.log")"
[ ! -e "$work/out-tls-wrong" ] || fail "a refused TLS spec wrote files"
# The same folder without TLS: the TLS Secrets of the earlier run are removed.
"$ecps" k8s "$work/quickstart.yaml" -o "$work/out-tls" > "$work/untls.log" ||
  fail "ecps k8s quickstart.yaml into out-tls: $(cat "$work/untls.log")"
[ -z "$(ls "$work"/out-tls/0?-*-tls.secret.yaml 2>/dev/null)" ] ||
  fail "the TLS Secrets of an earlier run were left behind"

# A spec that cannot run on Kubernetes: exit 2, the key named, nothing written.
printf 'k8s: {image: "ecps:dev", checkpoint_claim: c}\n' >> "$work/with-faults.yaml"
cat "$root/deploy/examples/quickstart.yaml" "$work/with-faults.yaml" > "$work/refused.yaml"
set +e
"$ecps" k8s "$work/refused.yaml" -o "$work/out-refused" 2> "$work/refused.log"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "ecps k8s on a spec with drills exited $rc, expected 2"
grep -q "faults\[0\]: kill_server drills are run by" "$work/refused.log" ||
  fail "no faults[0] error: $(cat "$work/refused.log")"
[ ! -e "$work/out-refused" ] || fail "a refused spec wrote files"
echo "k8s_test: ok"
