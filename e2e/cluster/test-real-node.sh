#!/usr/bin/env bash
# Smoke test of the real kubelet node of cluster.sh (WS_REAL_NODE=1): brings a cluster up in
# its own state dir, checks the node end to end, and brings it down on exit, failed or not.
#
#   bash e2e/cluster/test-real-node.sh
#
# What it proves:
#   - an image pushed to the loopback registry (skopeo) is pulled by the kubelet
#     (imagePullPolicy: Always; the registry's log shows containerd fetching the manifest);
#   - the pod runs on the real node with an IP from the CNI bridge's range;
#   - the pod reaches the API server through the `kubernetes` Service's ClusterIP
#     (kube-proxy's rules): a TCP connect, and a TLS request answered by /version;
#   - `kubectl logs` works (API server -> kubelet, authenticated both ways);
#   - the API server reaches a pod behind a Service: through its service proxy (the page the
#     pod serves), and as an admission webhook (resolved to the pod by aggregator routing; the
#     pod serves plain HTTP, so the call fails with Go's "server gave HTTP response to HTTPS
#     client": that answer came from the pod).
#
# Environment: WS_CLUSTER_DIR (default ${TMPDIR:-/tmp}/ws-real-node-test), WS_CACHE_DIR.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CLUSTER="$HERE/cluster.sh"
export WS_CLUSTER_DIR="${WS_CLUSTER_DIR:-${TMPDIR:-/tmp}/ws-real-node-test}"
export WS_REAL_NODE=1
NS=real-node-smoke
IMAGE_NAME=workloadspread/busybox
IMAGE_TAG=smoke
WAIT=90

log() { echo "[real-node-test] $*" >&2; }
ok() { echo "[real-node-test] ok: $*"; }
fail() { echo "[real-node-test] FAIL: $*" >&2; exit 1; }

command -v skopeo >/dev/null || fail "skopeo missing (Debian package skopeo)"
if bash "$CLUSTER" status >/dev/null 2>&1; then
  fail "a cluster already runs at $WS_CLUSTER_DIR; this test brings up and down its own (set WS_CLUSTER_DIR)"
fi

WORK="$(mktemp -d)"
on_exit() {
  local rc=$?
  if [ "$rc" -ne 0 ] && [ -n "${KUBECONFIG:-}" ]; then
    log "diagnostics:"
    kubectl get pods -n "$NS" -o wide >&2 2>&1 || true
    kubectl get events -n "$NS" --sort-by=.lastTimestamp 2>&1 | tail -n 20 >&2 || true
    tail -n 15 "$WS_CLUSTER_DIR/kubelet.log" >&2 2>/dev/null || true
  fi
  log "bringing the cluster down"
  bash "$CLUSTER" down || rc=1
  rm -rf "$WORK"
  if [ "$rc" -eq 0 ]; then echo "[real-node-test] PASS"; else echo "[real-node-test] FAILED (exit $rc)" >&2; fi
  exit "$rc"
}
trap on_exit EXIT

started=$(date +%s)
bash "$CLUSTER" up >/dev/null
eval "$(bash "$CLUSTER" env)"
log "cluster up in $(( $(date +%s) - started ))s; registry $WS_REGISTRY, node $WS_REAL_NODE_NAME"
if [ -z "${WS_REGISTRY:-}" ] || [ -z "${WS_REAL_NODE_NAME:-}" ]; then
  fail "cluster.sh env printed no WS_REGISTRY/WS_REAL_NODE_NAME: $(bash "$CLUSTER" env | tr '\n' ' ')"
fi
POD_CIDR_PREFIX=10.88.
IMAGE="$WS_REGISTRY/$IMAGE_NAME:$IMAGE_TAG"

# ---------------------------------------------------------------- image

bash "$HERE/busybox-image.sh" "$WORK/image" "$IMAGE_TAG" sleep 3600
skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$WORK/image:$IMAGE_TAG" "docker://$IMAGE" ||
  fail "skopeo could not push to $WS_REGISTRY"
ok "pushed $IMAGE"

# ---------------------------------------------------------------- pods

# pod_yaml NAME APP SCRIPT: a pod pinned to the real node (tolerating its taint) running
# SCRIPT with busybox sh, pulling the image every time.
pod_yaml() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NS, labels: {app: $2}}
spec:
  nodeSelector: {kubernetes.io/hostname: $WS_REAL_NODE_NAME}
  tolerations: [{key: workloadspread.test/real-node, operator: Exists, effect: NoSchedule}]
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: Always
    command:
    - sh
    - -c
    - |
      ${3//$'\n'/$'\n'      }
EOF
}

# The client checks the kubernetes Service from inside the pod: a TCP connect, then plain HTTP
# to the TLS port, which Go's HTTPS server (the API server's) answers with its own message.
# (Debian's busybox nc has no -z: -w is its connect timeout. Busybox's own TLS client cannot
# talk to the API server: "TLS error from peer (alert code 40): handshake failure"; its wget
# without openssl uses that one, and segfaults on https with -T.)
# shellcheck disable=SC2016 # expanded by the pod's shell
CLIENT_SCRIPT='addr="$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"
if nc -w 5 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" </dev/null; then echo "tcp-ok $addr"; else echo "tcp-failed $addr"; fi
answer="$(printf "GET /version HTTP/1.0\r\n\r\n" | nc -w 5 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" 2>&1 | tr -d "\r" | tr "\n" " ")"
echo "https-server-via-service: $answer"
exec sleep 3600'
# shellcheck disable=SC2016 # expanded by the pod's shell
SERVER_SCRIPT='mkdir -p /www && echo "hello from $(hostname)" >/www/index.html && exec httpd -f -v -p 8080 -h /www'

kubectl create namespace "$NS" >/dev/null
{
  pod_yaml client client "$CLIENT_SCRIPT"
  echo ---
  pod_yaml web web "$SERVER_SCRIPT"
  echo ---
  cat <<EOF
apiVersion: v1
kind: Service
metadata: {name: web, namespace: $NS}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
EOF
} | kubectl apply -f - >/dev/null

for pod in client web; do
  kubectl wait -n "$NS" --for=condition=Ready "pod/$pod" --timeout="${WAIT}s" >/dev/null ||
    fail "pod $pod not Ready within ${WAIT}s: $(kubectl get pod -n "$NS" "$pod" -o jsonpath='{.status}')"
done

node="$(kubectl get pod -n "$NS" client -o jsonpath='{.spec.nodeName}')"
ip="$(kubectl get pod -n "$NS" client -o jsonpath='{.status.podIP}')"
phase="$(kubectl get pod -n "$NS" client -o jsonpath='{.status.phase}')"
[ "$node" = "$WS_REAL_NODE_NAME" ] || fail "client pod on node '$node', expected $WS_REAL_NODE_NAME"
[ "$phase" = Running ] || fail "client pod phase '$phase', expected Running"
[[ "$ip" == "$POD_CIDR_PREFIX"* ]] || fail "client pod IP '$ip' is not in the CNI range ${POD_CIDR_PREFIX}0.0/16"
ok "pod client Running on $node with IP $ip"

# The kubelet pulled: its event, and containerd resolving the tag in the registry's access log.
pulled="$(kubectl get events -n "$NS" --field-selector involvedObject.name=client,reason=Pulled -o jsonpath='{.items[*].message}')"
[[ "$pulled" == *"Successfully pulled image \"$IMAGE\""* ]] || fail "no 'Successfully pulled image \"$IMAGE\"' event for client; Pulled events: '$pulled'"
resolved="$(grep -E "\"(HEAD|GET) /v2/$IMAGE_NAME/manifests/$IMAGE_TAG HTTP/1.1\" 200 .*\"containerd/" "$WS_CLUSTER_DIR/registry.log" || true)"
[ -n "$resolved" ] ||
  fail "the registry's access log shows no containerd request for /v2/$IMAGE_NAME/manifests/$IMAGE_TAG: $(grep -c . "$WS_CLUSTER_DIR/registry.log") lines, manifests: $(grep -o '"[A-Z]* /v2/[^"]*manifests[^"]*" [0-9]* [0-9]* "" "[^"]*"' "$WS_CLUSTER_DIR/registry.log" | tr '\n' ' ')"
first="$(head -n1 <<<"$resolved")"
ok "image pulled from the registry: $pulled; the registry saw $(cut -d'"' -f2 <<<"$first") from $(cut -d'"' -f6 <<<"$first")"

# kubectl logs (API server -> kubelet) and what the client saw through the kubernetes Service.
deadline=$(( $(date +%s) + 30 ))
until logs="$(kubectl logs -n "$NS" client 2>&1)" && [[ "$logs" == *https-server-via-service* ]]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "kubectl logs of client, after 30s: '$logs'"
  sleep 1
done
[[ "$logs" == *"tcp-ok 10.0.0.1:443"* ]] || fail "the client's TCP check of the kubernetes Service did not pass; its log: '$logs'"
[[ "$logs" == *"https-server-via-service: HTTP/1.0 400 Bad Request  Client sent an HTTP request to an HTTPS server."* ]] ||
  fail "the client got no answer of the API server's HTTPS server through the kubernetes Service; its log: '$logs'"
ok "kubectl logs works; the pod reached the API server at 10.0.0.1:443: $(tr '\n' ' ' <<<"$logs")"

# The API server's service proxy reaches the pod behind the Service.
expected="hello from web"
deadline=$(( $(date +%s) + 30 ))
until body="$(kubectl get --raw "/api/v1/namespaces/$NS/services/web:80/proxy/" 2>&1)" && [ "$body" = "$expected" ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "service proxy to web:80 answered '$body', expected '$expected'"
  sleep 1
done
ok "service proxy to web:80 answered '$body'"

# An admission webhook behind the Service, for labelled ConfigMaps of this namespace only.
kubectl apply -f - >/dev/null <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: real-node-smoke}
webhooks:
- name: smoke.workloadspread.test
  clientConfig:
    service: {name: web, namespace: $NS, port: 80, path: /validate}
    caBundle: $(base64 -w0 "$WS_CLUSTER_DIR/pki/ca.crt")
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $NS}}
  objectSelector: {matchLabels: {smoke-webhook: "yes"}}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 5
EOF
expected_err="server gave HTTP response to HTTPS client"
deadline=$(( $(date +%s) + 30 ))
until out="$(kubectl create configmap -n "$NS" probe --from-literal=a=b --dry-run=client -o yaml |
  sed 's/^metadata:/metadata:\n  labels: {smoke-webhook: "yes"}/' | kubectl create -f - 2>&1)"
  [[ "$out" == *"$expected_err"* ]]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "webhook call through Service web: expected '$expected_err', got '$out'"
  kubectl delete configmap -n "$NS" probe --ignore-not-found >/dev/null 2>&1
  sleep 1
done
kubectl delete validatingwebhookconfiguration real-node-smoke >/dev/null
ok "the API server called the webhook at the pod behind Service web: failed calling webhook${out#*failed calling webhook}"
