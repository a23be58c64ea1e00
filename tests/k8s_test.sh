#!/usr/bin/env bash
# The Kubernetes test (CTest label k8s): `ecps k8s` writes the manifests of example jobs and
# every object is validated offline against Kubernetes' own object schemas
# (tests/k8s/validate.js, kubernetes-models). No cluster is involved.
#
#   tests/k8s_test.sh ECPS_BINARY
#
# Also checks that the validator rejects broken manifests (a wrong type, a misspelt field, an
# unknown kind), so that a check that silently validates nothing fails here, and that a spec
# Kubernetes cannot run is refused with exit code 2. Exits 77 (CTest: skipped) only when node
# is not installed; missing npm modules are a failure: deploy/setup.sh installs them.
set -euo pipefail
ecps="$(realpath "${1:?usage: k8s_test.sh ECPS_BINARY}")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
validator="$root/tests/k8s/validate.js"

command -v node >/dev/null || { echo "k8s_test: skipped: node is not installed"; exit 77; }
for module in kubernetes-models js-yaml; do
  if [ ! -d "$root/tests/k8s/node_modules/$module" ]; then
    echo "k8s_test: FAIL: tests/k8s/node_modules/$module is missing; deploy/setup.sh installs it" \
         "(npm ci --prefix tests/k8s)" >&2
    exit 1
  fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/ecps-k8s-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "k8s_test: FAIL: $*" >&2; exit 1; }

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

files=()
for spec in quickstart bench-small plain; do
  out="$work/out-$spec"
  "$ecps" k8s "$work/$spec.yaml" -o "$out" > "$work/$spec.log" ||
    fail "ecps k8s $spec.yaml: $(cat "$work/$spec.log")"
  grep -q "^apply them with: kubectl apply -f $out\$" "$work/$spec.log" ||
    fail "ecps k8s $spec.yaml did not print the kubectl line"
  for f in "$out"/*.yaml; do files+=("$f"); done
done
[ -f "$work/out-plain/22-spare.statefulset.yaml" ] || fail "plain.yaml has spares: no spare StatefulSet"
[ ! -e "$work/out-bench-small/22-spare.statefulset.yaml" ] || fail "bench-small has no spares"

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
