#!/usr/bin/env bash
# A real, local Kubernetes control plane for tests and the demo: etcd + kube-apiserver +
# kube-controller-manager + kube-scheduler on loopback, built from the Go module proxy, and
# KWOK simulating the nodes (Ready with heartbeats; pods bound to them Running/Ready with IPs;
# deleted pods removed), so the workload controllers behave as on a real cluster.
#
#   cluster.sh install   build the binaries into the cache (idempotent; a warm cache builds nothing)
#   cluster.sh up        start everything (reuses a running cluster), create the nodes
#   cluster.sh down      stop exactly the processes `up` started, remove the state dir
#   cluster.sh env       print `export KUBECONFIG=...` and `export PATH=<kubectl dir>:...`
#   cluster.sh status    say whether the cluster is running
#
# Environment:
#   K8S_VERSION      Kubernetes release (default below; e.g. v1.32.2 for the oldest supported)
#   WS_CACHE_DIR     binaries + Go caches (default ${XDG_CACHE_HOME:-~/.cache}/workloadspread)
#   WS_CLUSTER_DIR   state dir           (default ${TMPDIR:-/tmp}/workloadspread-cluster)
#   WS_NODES         KWOK nodes, comma-separated ZONE=COUNT[:KEY=VALUE:EFFECT]
#                    (default zone-a=2,zone-b=2,zone-c=2; "none": no nodes)
#   WS_APISERVER_PORT  fixed apiserver port (default: a free one)
#   WS_READY_TIMEOUT   seconds to wait for each component (default 60)
set -euo pipefail

# The Kubernetes release the suites run on: the newest on the Go module proxy that the machine's
# Go (1.26) builds. K8S_VERSION=v1.MINOR.PATCH selects another (its wrapper module is generated
# into the cache; the committed one in e2e/cluster/k8s is for the default).
DEFAULT_K8S_VERSION=v1.37.2
K8S_VERSION="${K8S_VERSION:-$DEFAULT_K8S_VERSION}"
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${WS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/workloadspread}"
K8S_BIN="$CACHE/kubernetes/$K8S_VERSION/bin"
ETCD_BIN="$CACHE/etcd/$ETCD_VERSION/etcd"
KWOK_DIR="$CACHE/kwok/$KWOK_VERSION"
STATE="${WS_CLUSTER_DIR:-${TMPDIR:-/tmp}/workloadspread-cluster}"
NODES="${WS_NODES:-zone-a=2,zone-b=2,zone-c=2}"
READY_TIMEOUT="${WS_READY_TIMEOUT:-60}"
# The control plane and the kubectl the scripts use; kubelet and kube-proxy only for a real node.
K8S_COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
# Go's module and build caches live with the binaries, outside the repository.
export GOMODCACHE="$CACHE/go/mod"
export GOCACHE="$CACHE/go/build"
export GOFLAGS="-mod=readonly"
export GOTOOLCHAIN=local

log() { echo "[cluster] $*" >&2; }
die() { echo "[cluster] error: $*" >&2; exit 1; }

# ---------------------------------------------------------------- install

have_k8s() {
  local c
  for c in "${K8S_COMPONENTS[@]}"; do [ -x "$K8S_BIN/$c" ] || return 1; done
}

etcd_bin() { [ -x "$ETCD_BIN" ] && echo "$ETCD_BIN"; }

# One build step, timed, its output in the build log; on failure the log's tail explains.
build_step() {
  local what="$1" logf="$2" started; shift 2
  started=$(date +%s)
  log "building $what (log: $logf)"
  if ! "$@" >>"$logf" 2>&1; then
    tail -n 30 "$logf" >&2
    die "building $what failed; full log: $logf"
  fi
  log "$what built in $(( $(date +%s) - started ))s"
}

# The wrapper module for K8S_VERSION: the committed one, or one generated into the cache.
k8s_module_dir() {
  if [ "$K8S_VERSION" = "$DEFAULT_K8S_VERSION" ]; then
    echo "$HERE/k8s"
  else
    local dir="$CACHE/kubernetes/$K8S_VERSION/module"
    [ -f "$dir/go.sum" ] || bash "$HERE/gen-k8s-module.sh" "$K8S_VERSION" "$dir" >&2 || return 1
    echo "$dir"
  fi
}

# go_build_k8s DEST COMPONENT...: build commands of k8s.io/kubernetes from the wrapper module.
# Every step checks its status: build_step runs this in an `if`, where errexit is off.
go_build_k8s() (
  local dest="$1" mod minor c; shift
  mod="$(k8s_module_dir)" || return 1
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  cd "$mod" || return 1
  mkdir -p "$dest" || return 1
  for c in "$@"; do
    go build -trimpath -tags providerless -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
      -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
      -X k8s.io/component-base/version.gitTreeState=clean" \
      -o "$dest/$c.tmp" "k8s.io/kubernetes/cmd/$c" || return 1
    mv "$dest/$c.tmp" "$dest/$c" || return 1
  done
)

install_k8s() {
  have_k8s && return 0
  local missing=() c
  for c in "${K8S_COMPONENTS[@]}"; do [ -x "$K8S_BIN/$c" ] || missing+=("$c"); done
  log "Kubernetes $K8S_VERSION from the Go module proxy: about 8 minutes on 2 cores the first"
  log "time (with etcd and KWOK ~11 min, ~1.2 GB of modules); binaries cached in $K8S_BIN"
  mkdir -p "$CACHE/build"
  build_step "${missing[*]} $K8S_VERSION" "$CACHE/build/kubernetes-$K8S_VERSION.log" \
    go_build_k8s "$K8S_BIN" "${missing[@]}"
}

# Kubelet and kube-proxy for a real node; built on first use only.
install_node_binaries() {
  local missing=() c
  for c in kubelet kube-proxy; do [ -x "$K8S_BIN/$c" ] || missing+=("$c"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  mkdir -p "$CACHE/build"
  build_step "${missing[*]} $K8S_VERSION" "$CACHE/build/kubernetes-$K8S_VERSION.log" \
    go_build_k8s "$K8S_BIN" "${missing[@]}"
}

# etcd's server module points its sibling modules at ../ with replace; a wrapper pins them.
build_etcd() (
  local mod="$CACHE/build/etcd-$ETCD_VERSION-module" m
  rm -rf "$mod" && mkdir -p "$mod" && cd "$mod" || return 1
  {
    printf 'module workloadspread.test/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n\nreplace (\n' "$ETCD_VERSION"
    for m in api/v3 client/pkg/v3 client/v3 pkg/v3; do
      printf '\tgo.etcd.io/etcd/%s => go.etcd.io/etcd/%s %s\n' "$m" "$m" "$ETCD_VERSION"
    done
    printf ')\n'
  } >go.mod || return 1
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
  GOFLAGS=-mod=mod go mod tidy || return 1
  mkdir -p "$(dirname "$ETCD_BIN")"
  go build -trimpath -ldflags "-s -w" -o "$ETCD_BIN.tmp" go.etcd.io/etcd/server/v3 || return 1
  mv "$ETCD_BIN.tmp" "$ETCD_BIN"
)

install_etcd() {
  [ -n "$(etcd_bin)" ] && return 0
  mkdir -p "$CACHE/build"
  build_step "etcd $ETCD_VERSION" "$CACHE/build/etcd-$ETCD_VERSION.log" build_etcd
}

# KWOK has no replace directives, so `go install` works. Standalone kwok ships no stages; we
# take the module's own: node initialize + heartbeat with a lease (the node-lifecycle controller
# then keeps the nodes Ready), pods Ready and deleted pods removed. Not pod-complete: Job pods
# stay Running like a long job, so tests see where they were placed.
KWOK_STAGES=(node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml)
# Pods labelled with this key are left as their test wrote them (e.g. Running but not Ready,
# or terminating behind a finalizer): every pod stage skips them.
KWOK_FROZEN_LABEL=workloadspread.test/kwok-frozen

build_kwok() (
  mkdir -p "$KWOK_DIR"
  GOBIN="$KWOK_DIR" GOFLAGS= go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
)

install_kwok() {
  [ -x "$KWOK_DIR/kwok" ] && return 0
  mkdir -p "$CACHE/build"
  build_step "kwok $KWOK_VERSION" "$CACHE/build/kwok-$KWOK_VERSION.log" build_kwok
}

# write_kwok_stages FILE: the stages above from the module source, pod stages restricted to
# pods without the frozen label.
write_kwok_stages() {
  local src="$GOMODCACHE/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage" f
  [ -d "$src" ] || go mod download "sigs.k8s.io/kwok@$KWOK_VERSION" >/dev/null 2>&1 || true
  for f in "${KWOK_STAGES[@]}"; do
    [ -f "$src/$f" ] || die "missing KWOK stage $src/$f"
    echo "---"
    case "$f" in
      pod/*) awk -v key="$KWOK_FROZEN_LABEL" '
        {print}
        /^    matchExpressions:$/ && !done {
          print "    - key: '"'"'.metadata.labels[\"" key "\"]'"'"'"
          print "      operator: '"'"'DoesNotExist'"'"'"
          done = 1
        }
        END { if (!done) { print "no matchExpressions to restrict in " FILENAME > "/dev/stderr"; exit 1 } }' "$src/$f" ;;
      *) cat "$src/$f" ;;
    esac
  done >"$1"
}

have_all() { have_k8s && [ -n "$(etcd_bin)" ] && [ -x "$KWOK_DIR/kwok" ]; }

cmd_install() {
  command -v go >/dev/null || die "Go missing (the machine's Go 1.26 builds the control plane)"
  install_etcd
  install_kwok
  install_k8s
  log "binaries ready: $K8S_BIN, $(etcd_bin), $KWOK_DIR/kwok"
}

# ---------------------------------------------------------------- up / down

# A free port below the kernel's ephemeral range, so outgoing connections of other
# processes (tests running meanwhile) cannot take it between choosing and binding.
free_port() {
  python3 - <<'PY'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    port = random.randrange(20000, max(20001, min(low, 32768)))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

port_in_use() {
  python3 -c 'import socket,sys; s=socket.socket(); sys.exit(0 if s.connect_ex(("127.0.0.1",int(sys.argv[1])))==0 else 1)' "$1"
}

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

running() {
  [ -f "$STATE/pids" ] || return 1
  local name pid
  while read -r name pid; do pid_alive "$pid" || return 1; done <"$STATE/pids"
  [ -s "$STATE/pids" ]
}

gen_certs() {
  local d="$STATE/pki"
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=workloadspread-test-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  sign_cert "$d" apiserver "/CN=kube-apiserver" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes.default.svc"
  sign_cert "$d" admin "/O=system:masters/CN=admin" ""
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
}

sign_cert() {
  local d="$1" name="$2" subj="$3" san="$4" ext
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$d/$name.key" -out "$d/$name.csr" 2>/dev/null
  ext="$d/$name.ext"
  { echo "basicConstraints=CA:FALSE"; [ -n "$san" ] && echo "$san"; } >"$ext"
  openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -extfile "$ext" -out "$d/$name.crt" 2>/dev/null
}

write_kubeconfig() {
  local port="$1" d="$STATE/pki"
  cat >"$STATE/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority: $d/ca.crt
users:
- name: admin
  user:
    client-certificate: $d/admin.crt
    client-key: $d/admin.key
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
EOF
}

# start NAME LOGFILE CMD... : run detached in its own session, record the pid
start() {
  local name="$1" logf="$2"; shift 2
  setsid "$@" >"$logf" 2>&1 </dev/null &
  echo "$name $!" >>"$STATE/pids"
}

wait_until() {
  local what="$1" logf="$2"; shift 2
  local deadline=$(( $(date +%s) + READY_TIMEOUT ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "$what did not become ready within ${READY_TIMEOUT}s; last lines of $logf:"
      tail -n 25 "$logf" >&2
      return 1
    fi
    sleep 0.5
  done
}

component_pid() { awk -v n="$1" '$1==n {print $2}' "$STATE/pids" 2>/dev/null; }

alive_or_fail() {
  local name="$1" logf="$2"
  pid_alive "$(component_pid "$name")" && return 0
  log "$name exited; last lines of $logf:"
  tail -n 25 "$logf" >&2
  return 1
}

pick_port() {
  local want="${1:-}"
  if [ -n "$want" ]; then
    port_in_use "$want" && die "port $want is already in use (set another WS_APISERVER_PORT or unset it)"
    echo "$want"
  else
    free_port
  fi
}

start_etcd() {
  local cport="$1" pport="$2" etcd
  etcd="$(etcd_bin)"
  start etcd "$STATE/etcd.log" "$etcd" --name local --data-dir "$STATE/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "local=http://127.0.0.1:$pport" --unsafe-no-fsync=true
  wait_until etcd "$STATE/etcd.log" curl -fsS "http://127.0.0.1:$cport/health"
}

# Pod writes audited at Metadata level (which carries the admission webhooks' audit
# annotations) into $STATE/audit.log, next to the kubeconfig; nothing else is audited.
write_audit_policy() {
  cat >"$STATE/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, delete]
  resources: [{group: "", resources: [pods]}]
- level: None
EOF
}

start_apiserver() {
  local port="$1" eport="$2" d="$STATE/pki"
  write_audit_policy
  start kube-apiserver "$STATE/kube-apiserver.log" "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$eport" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --endpoint-reconciler-type none \
    --secure-port "$port" --tls-cert-file "$d/apiserver.crt" --tls-private-key-file "$d/apiserver.key" \
    --client-ca-file "$d/ca.crt" --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$d/sa.pub" --service-account-signing-key-file "$d/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --authorization-mode RBAC \
    --disable-admission-plugins ServiceAccount --allow-privileged=true \
    --audit-policy-file "$STATE/audit-policy.yaml" --audit-log-path "$STATE/audit.log" \
    --audit-log-maxsize 200 --audit-log-maxbackup 1
  wait_until kube-apiserver "$STATE/kube-apiserver.log" \
    curl -fsS --cacert "$d/ca.crt" --cert "$d/admin.crt" --key "$d/admin.key" "https://127.0.0.1:$port/readyz"
}

# The node-lifecycle controller runs: it lifts the not-ready taint of new nodes once KWOK
# reports them Ready, as on a real cluster.
start_controllers() {
  local d="$STATE/pki" kc="$STATE/kubeconfig"
  start kube-controller-manager "$STATE/kube-controller-manager.log" "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --leader-elect=false --controllers '*' --secure-port "$(free_port)" \
    --bind-address 127.0.0.1 --service-account-private-key-file "$d/sa.key" --root-ca-file "$d/ca.crt" \
    --use-service-account-credentials=false
  start kube-scheduler "$STATE/kube-scheduler.log" "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --leader-elect=false --secure-port "$(free_port)" --bind-address 127.0.0.1
  wait_until kube-controller-manager "$STATE/kube-controller-manager.log" \
    component_serving kube-controller-manager
  wait_until kube-scheduler "$STATE/kube-scheduler.log" component_serving kube-scheduler
}

# The process runs and its log says it serves (both components print this once their secure
# port listens); on timeout wait_until shows the log's tail.
component_serving() {
  pid_alive "$(component_pid "$1")" && grep -q "Serving securely" "$STATE/$1.log"
}

# KWOK manages the nodes annotated kwok.x-k8s.io/node=fake (other nodes, e.g. a real kubelet's,
# are left alone); a 40 s node lease keeps them Ready for the node-lifecycle controller.
start_kwok() {
  write_kwok_stages "$STATE/kwok-stages.yaml"
  start kwok "$STATE/kwok.log" "$KWOK_DIR/kwok" --kubeconfig "$STATE/kubeconfig" \
    --config "$STATE/kwok-stages.yaml" --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds 40 --cidr 10.244.0.0/16 --node-ip 10.0.0.1
}

kubectl_() { "$K8S_BIN/kubectl" --kubeconfig "$STATE/kubeconfig" "$@"; }

# node_json NAME ZONE [TAINT]   TAINT = KEY=VALUE:EFFECT
node_json() {
  local name="$1" zone="$2" taint="${3:-}" taints="[]"
  if [ -n "$taint" ]; then
    local kv="${taint%:*}" effect="${taint##*:}"
    taints="[{\"key\":\"${kv%%=*}\",\"value\":\"${kv#*=}\",\"effect\":\"$effect\"}]"
  fi
  printf '{"apiVersion":"v1","kind":"Node","metadata":{"name":"%s",
  "annotations":{"kwok.x-k8s.io/node":"fake"},
  "labels":{"kubernetes.io/hostname":"%s","topology.kubernetes.io/zone":"%s",
    "kubernetes.io/os":"linux","kubernetes.io/arch":"amd64","type":"kwok"}},
 "spec":{"taints":%s}}\n' "$name" "$name" "$zone" "$taints"
}

create_nodes() {
  local entry zone rest count taint i
  [ "$NODES" = none ] && { log "no nodes (WS_NODES=none)"; return 0; }
  IFS=',' read -ra entries <<<"$NODES"
  for entry in "${entries[@]}"; do
    [ -n "$entry" ] || continue
    zone="${entry%%=*}"; rest="${entry#*=}"
    count="${rest%%:*}"; taint=""
    [ "$rest" != "$count" ] && taint="${rest#*:}"
    [[ "$count" =~ ^[0-9]+$ ]] || die "bad WS_NODES entry '$entry' (want ZONE=COUNT[:KEY=VALUE:EFFECT])"
    for ((i = 1; i <= count; i++)); do node_json "node-${zone#zone-}-$i" "$zone" "$taint"; done
  done | kubectl_ apply -f - >/dev/null
  wait_until "KWOK nodes" "$STATE/kwok.log" nodes_schedulable
  log "nodes: $(kubectl_ get nodes -o name | tr '\n' ' ')"
}

# Every node Ready and free of the node-lifecycle controller's not-ready/unreachable taints.
nodes_schedulable() {
  local out
  out="$(kubectl_ get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.conditions[?(@.type=="Ready")].status}{" "}{.spec.taints[*].key}{"\n"}{end}')"
  [ -n "$out" ] || return 1
  ! grep -v -E '^[^ ]+ True( |$)' <<<"$out" | grep -q . || return 1
  ! grep -q -e node.kubernetes.io/not-ready -e node.kubernetes.io/unreachable <<<"$out"
}

cleanup_failed_up() {
  log "startup failed; stopping what was started"
  stop_all
}

cmd_up() {
  if running; then
    local have
    have="$(cat "$STATE/k8s-version" 2>/dev/null || echo "$K8S_VERSION")"
    [ "$have" = "$K8S_VERSION" ] ||
      die "a cluster of Kubernetes $have runs at $STATE; stop it (cluster.sh down) or use another WS_CLUSTER_DIR for $K8S_VERSION"
    log "already running (state: $STATE)"
    cmd_env
    return 0
  fi
  [ -d "$STATE" ] && stop_all
  have_all || cmd_install
  mkdir -p "$STATE"
  : >"$STATE/pids"
  # Any way out before the end (a failed command, die's exit) stops what was started.
  trap cleanup_failed_up EXIT
  local port eport pport started
  started=$(date +%s)
  port="$(pick_port "${WS_APISERVER_PORT:-}")"; eport="$(free_port)"; pport="$(free_port)"
  gen_certs
  write_kubeconfig "$port"
  log "starting etcd on 127.0.0.1:$eport"
  start_etcd "$eport" "$pport"
  log "starting kube-apiserver $K8S_VERSION on https://127.0.0.1:$port"
  start_apiserver "$port" "$eport"
  log "starting kube-controller-manager and kube-scheduler"
  start_controllers
  log "starting KWOK $KWOK_VERSION"
  start_kwok
  create_nodes
  trap - EXIT
  echo "$port" >"$STATE/apiserver-port"
  echo "$K8S_VERSION" >"$STATE/k8s-version"
  log "ready in $(( $(date +%s) - started ))s (state: $STATE)"
  cmd_env
}

stop_all() {
  local name pid i
  if [ -f "$STATE/pids" ]; then
    # Reverse order: controllers first, etcd last.
    tac "$STATE/pids" | while read -r name pid; do
      pid_alive "$pid" || continue
      kill -TERM "$pid" 2>/dev/null || true
      for i in $(seq 1 50); do pid_alive "$pid" || break; sleep 0.1; done
      pid_alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    done
  fi
  rm -rf "$STATE"
}

cmd_down() {
  [ -d "$STATE" ] || { log "not running"; return 0; }
  stop_all
  log "stopped and removed $STATE"
}

cmd_env() {
  [ -f "$STATE/kubeconfig" ] || die "no cluster at $STATE (run: cluster.sh up)"
  # The kubectl of the running cluster's release, whatever K8S_VERSION says now.
  local version
  version="$(cat "$STATE/k8s-version" 2>/dev/null || echo "$K8S_VERSION")"
  echo "export KUBECONFIG=$STATE/kubeconfig"
  echo "export PATH=$CACHE/kubernetes/$version/bin:\$PATH"
}

cmd_status() {
  if running; then echo "running: $(cat "$STATE/apiserver-port" 2>/dev/null) ($STATE)"; else echo "not running"; return 1; fi
}

case "${1:-}" in
  install) cmd_install ;;
  install-node) install_node_binaries ;;
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  *) echo "usage: $0 install|up|down|env|status" >&2; exit 2 ;;
esac
