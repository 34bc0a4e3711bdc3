#!/usr/bin/env bash
# `make demo`: a real local control plane (kube-apiserver, controller-manager,
# scheduler; KWOK nodes in zones a, b, c), the admission host (webhook over TLS) and
# the controller as local processes, and a Deployment spread by a WorkloadSpread
# while it scales 0 → 10 → 4 → 12. On scale-in it shows which pods the ReplicaSet
# controller removed and whether they were the lowest-cost ones. Ctrl-C stops everything.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cluster="$root/e2e/cluster/cluster.sh"
ns=workloadspread-demo
webhook=workloadspread-demo
target="${CARGO_TARGET_DIR:-$root/target}"
state="$(mktemp -d /tmp/workloadspread-demo.XXXXXX)"
pids=()

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  kubectl delete mutatingwebhookconfiguration,validatingwebhookconfiguration "$webhook" \
    --ignore-not-found >/dev/null 2>&1 || true
  if [ "${started_here:-0}" = 1 ]; then say "stopping the control plane"; bash "$cluster" down || true; fi
  echo "logs: $state"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "building the policy module, host and controller; beside them, the first time, Kubernetes, etcd and KWOK from the Go module proxy (cached after)"
# The Go builds and the Rust builds side by side: each leaves cores idle the other takes.
bash "$cluster" install >"$state/install.log" 2>&1 &
install_pid=$!
make -C "$root" --no-print-directory policy
(cd "$root" && cargo build --bins -p workloadspread-host -p workloadspread-controller)
if ! wait "$install_pid"; then
  tail -n 30 "$state/install.log" >&2
  echo "building the control plane failed (log: $state/install.log)" >&2
  exit 1
fi

say "bringing up the local control plane"
started_here=1
bash "$cluster" status >/dev/null 2>&1 && started_here=0
eval "$(bash "$cluster" up)"
kubectl get nodes -L topology.kubernetes.io/zone

say "installing the CRD and webhook configurations; starting host and controller"
kubectl apply -f "$root/charts/workloadspread/crds/workloadspreads.yaml" >/dev/null
kubectl wait --for condition=established crd/workloadspreads.apps.kruise.io --timeout=60s >/dev/null
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl label namespace "$ns" workloadspread.io/demo=true --overwrite >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sed -e "s/NAME/$webhook/" -e "s/PORT/$port/" <<'EOF' | kubectl apply -f - >/dev/null
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: NAME}
webhooks:
- name: pods.workloadspread.io
  clientConfig: {url: "https://127.0.0.1:PORT/mutate"}
  rules:
  - {apiGroups: [""], apiVersions: [v1], resources: [pods], operations: [CREATE, DELETE]}
  - {apiGroups: [""], apiVersions: [v1], resources: [pods/eviction], operations: [CREATE]}
  namespaceSelector: {matchLabels: {workloadspread.io/demo: "true"}}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 10
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: NAME}
webhooks:
- name: workloadspreads.workloadspread.io
  clientConfig: {url: "https://127.0.0.1:PORT/validate"}
  rules:
  - {apiGroups: [apps.kruise.io], apiVersions: [v1alpha1, v1beta1], resources: [workloadspreads], operations: [CREATE, UPDATE]}
  namespaceSelector: {matchLabels: {workloadspread.io/demo: "true"}}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 10
EOF
RUST_LOG=info "$target/debug/workloadspread-host" serve --listen "127.0.0.1:$port" \
  --tls-san 127.0.0.1 --webhook-config "$webhook" --ca-bundle-out "$state/ca.pem" \
  --conversion-crd workloadspreads.apps.kruise.io --conversion-url "https://127.0.0.1:$port/convert" \
  --policy "$root/policy/policy.wasm" 2>"$state/host.log" &
pids+=($!)
RUST_LOG=info "$target/debug/workloadspread-controller" run --namespace "$ns" \
  --metrics-listen 127.0.0.1:0 2>"$state/controller.log" &
pids+=($!)
for _ in $(seq 1 100); do
  curl -sfk "https://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.3
done
curl -sfk "https://127.0.0.1:$port/readyz" >/dev/null || { cat "$state/host.log"; exit 1; }
echo "host on https://127.0.0.1:$port (CA bundle patched into the webhook configurations)"

say "a Deployment (0 replicas) and its WorkloadSpread: zone-a 30%, zone-b 50%, zone-c the rest"
kubectl apply -n "$ns" -f - >/dev/null <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 0
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx:1.25}]}
---
apiVersion: apps.kruise.io/v1beta1
kind: WorkloadSpread
metadata: {name: web}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  subsets:
  - name: zone-a
    requiredNodeSelector: {matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [zone-a]}]}
    maxReplicas: 30%
  - name: zone-b
    requiredNodeSelector: {matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [zone-b]}]}
    maxReplicas: 50%
  - name: zone-c
    requiredNodeSelector: {matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [zone-c]}]}
EOF

pods_json() { kubectl -n "$ns" get pods -o json | jq '[.items[] | select(.metadata.deletionTimestamp | not)]'; }

subset_of='(.metadata.annotations["apps.kruise.io/matched-workloadspread"] // "{}" | fromjson | .subset // "-")'
cost_of='(.metadata.annotations["controller.kubernetes.io/pod-deletion-cost"] // "0" | tonumber)'

# Settled: the wanted number of Running pods, each with a deletion cost, and a status that
# counts exactly them with nothing in flight (the controller has caught up).
wait_settled() {
  local want=$1 pods status deadline=$((SECONDS + 120))
  while [ "$SECONDS" -lt "$deadline" ]; do
    pods=$(pods_json | jq --argjson n "$want" '
      length == $n and all(.[]; .status.phase == "Running" and
        .metadata.annotations["controller.kubernetes.io/pod-deletion-cost"])')
    status=$(kubectl -n "$ns" get workloadspread web -o json | jq --argjson n "$want" '
      ([.status.subsetStatuses[]?.replicas] | add // 0) == $n and
      all(.status.subsetStatuses[]?; (.creatingPods // {} | length) == 0 and (.deletingPods // {} | length) == 0)')
    [ "$pods" = true ] && [ "$status" = true ] && return 0
    sleep 0.5
  done
  echo "warning: not settled after 120 s" >&2
}

# name, subset, cost of the live pods (TSV), to tell afterwards which ones went.
snapshot() { pods_json | jq -r ".[] | [.metadata.name, $subset_of, $cost_of] | @tsv"; }

show() {
  pods_json | jq -r "sort_by($subset_of, .metadata.name)[] |
    [$subset_of, .metadata.name, .spec.nodeName, $cost_of] | @tsv" |
    (printf 'SUBSET\tPOD\tNODE\tDELETION-COST\n'; cat) | column -t
  echo
  kubectl -n "$ns" get workloadspread web -o json | jq -r '
    .status.subsetStatuses[] | [.name, .replicas, .missingReplicas,
      (.creatingPods // {} | length), (.deletingPods // {} | length)] | @tsv' |
    (printf 'STATUS\tREPLICAS\tMISSING\tCREATING\tDELETING\n'; cat) | column -t
}

# Which pods the ReplicaSet controller removed (from the snapshot before the step), the
# cost each carried, and whether they were the lowest-cost ones.
show_removed() {
  local before="$1" after="$2"
  # FILENAME, not NR==FNR: an empty "after" must not be taken for "before".
  awk -F'\t' -v after="$after" 'FILENAME == after {kept[$1]=1; next} !($1 in kept)' "$after" "$before" |
    sort -t$'\t' -k3,3n >"$state/removed"
  awk -F'\t' -v after="$after" 'FILENAME == after {kept[$1]=1; next} ($1 in kept)' "$after" "$before" >"$state/kept"
  if [ ! -s "$state/removed" ]; then
    echo "=> no pod was removed although the Deployment was scaled in"
    demo_failed=1
    return
  fi
  echo "removed by the ReplicaSet controller:"
  (printf 'POD\tSUBSET\tDELETION-COST\n'; cat "$state/removed") | column -t | sed 's/^/  /'
  local max_removed min_kept
  max_removed=$(cut -f3 "$state/removed" | sort -n | tail -n 1)
  min_kept=$(cut -f3 "$state/kept" | sort -n | head -n 1)
  if [ -z "$max_removed" ] || [ -z "$min_kept" ] || [ "$max_removed" -le "$min_kept" ]; then
    echo "=> the lowest-cost pods were removed (highest removed ${max_removed:-none} <= lowest kept ${min_kept:-none})"
  else
    echo "=> NOT the lowest-cost set: removed a pod with cost $max_removed, kept one with $min_kept"
    demo_failed=1
  fi
}

demo_failed=0
current=0
for replicas in 10 4 12; do
  say "scale to $replicas"
  snapshot >"$state/before"
  kubectl -n "$ns" scale deployment web --replicas="$replicas" >/dev/null
  wait_settled "$replicas"
  show
  if [ "$replicas" -lt "$current" ]; then
    echo
    snapshot >"$state/after"
    show_removed "$state/before" "$state/after"
  fi
  current=$replicas
done

say "scale-in order (lowest deletion cost goes first)"
pods_json | jq -r "sort_by($cost_of) | map(\"\\(.metadata.name)(\\($cost_of))\") | join(\" → \")"
say "done: host and controller logs are in $state"
exit "$demo_failed"
