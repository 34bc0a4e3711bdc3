#!/usr/bin/env bash
# `make demo`: a real local control plane (kube-apiserver, controller-manager,
# scheduler; fake nodes in zones a, b, c), the admission host (webhook over TLS) and
# the controller as local processes, and a Deployment spread by a WorkloadSpread
# while it scales 0 → 10 → 4 → 12. Ctrl-C stops everything.
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

say "building the policy module, host and controller (first run: ~10 min, cached after)"
make -C "$root" --no-print-directory policy
(cd "$root" && cargo build --bins -p workloadspread-host -p workloadspread-controller)

say "bringing up the local control plane (first run builds Kubernetes v1.20.2: 8-13 min, cached after)"
bash "$cluster" install
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

# No kubelets here: finish the graceful deletion of pods the way a kubelet would.
( while sleep 1; do
    kubectl -n "$ns" get pods -o json 2>/dev/null |
      jq -r '.items[] | select(.metadata.deletionTimestamp) | .metadata.name' |
      xargs -r kubectl -n "$ns" delete pod --grace-period=0 --force >/dev/null 2>&1 || true
  done ) &
pids+=($!)

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

wait_settled() {
  local want=$1
  for _ in $(seq 1 120); do
    local ok
    ok=$(pods_json | jq --argjson n "$want" '
      length == $n and all(.[]; .spec.nodeName and
        .metadata.annotations["controller.kubernetes.io/pod-deletion-cost"])')
    [ "$ok" = true ] && return 0
    sleep 0.5
  done
  echo "warning: not settled after 60 s" >&2
}

show() {
  pods_json | jq -r '
    def subset: (.metadata.annotations["apps.kruise.io/matched-workloadspread"] // "{}" | fromjson | .subset // "-");
    sort_by(subset, .metadata.name)[] |
    [subset, .metadata.name, .spec.nodeName, .metadata.annotations["controller.kubernetes.io/pod-deletion-cost"]] | @tsv' |
    (printf 'SUBSET\tPOD\tNODE\tDELETION-COST\n'; cat) | column -t
  echo
  kubectl -n "$ns" get workloadspread web -o json | jq -r '
    .status.subsetStatuses[] | [.name, .replicas, .missingReplicas,
      (.creatingPods // {} | length), (.deletingPods // {} | length)] | @tsv' |
    (printf 'STATUS\tREPLICAS\tMISSING\tCREATING\tDELETING\n'; cat) | column -t
}

for replicas in 10 4 12; do
  say "scale to $replicas"
  kubectl -n "$ns" scale deployment web --replicas="$replicas" >/dev/null
  wait_settled "$replicas"
  sleep 2
  show
  if [ "$replicas" = 4 ]; then
    echo "(note: this control plane is Kubernetes 1.20, whose ReplicaSet controller ignores"
    echo " pod-deletion-cost; from 1.22 scale-in removes the lowest-cost pods first)"
  fi
done

say "scale-in order (lowest deletion cost goes first)"
pods_json | jq -r 'sort_by(.metadata.annotations["controller.kubernetes.io/pod-deletion-cost"] | tonumber) |
  map("\(.metadata.name)(\(.metadata.annotations["controller.kubernetes.io/pod-deletion-cost"]))") | join(" → ")'
say "done: host and controller logs are in $state"
