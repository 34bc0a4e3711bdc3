#!/usr/bin/env bash
# A real, local Kubernetes control plane for tests and the demo:
# etcd + kube-apiserver + kube-controller-manager + kube-scheduler on loopback,
# fake Ready nodes (no kubelets).
#
#   cluster.sh install   build/fetch the binaries into the cache (idempotent)
#   cluster.sh up        start everything (reuses a running cluster), create nodes
#   cluster.sh down      stop exactly the processes `up` started, remove the state dir
#   cluster.sh env       print `export KUBECONFIG=...`
#   cluster.sh status    say whether the cluster is running
#
# Environment:
#   WS_CACHE_DIR     binaries cache      (default ${XDG_CACHE_HOME:-~/.cache}/workloadspread)
#   WS_CLUSTER_DIR   state dir           (default ${TMPDIR:-/tmp}/workloadspread-cluster)
#   WS_NODES         fake nodes, comma-separated ZONE=COUNT[:KEY=VALUE:EFFECT]
#                    (default zone-a=2,zone-b=2,zone-c=2)
#   WS_APISERVER_PORT  fixed apiserver port (default: a free one)
#   WS_READY_TIMEOUT   seconds to wait for each component (default 60)
set -euo pipefail

K8S_VERSION=v1.20.2
CACHE="${WS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/workloadspread}"
K8S_BIN="$CACHE/kubernetes/$K8S_VERSION/bin"
ETCD_DIR="$CACHE/etcd"
STATE="${WS_CLUSTER_DIR:-${TMPDIR:-/tmp}/workloadspread-cluster}"
NODES="${WS_NODES:-zone-a=2,zone-b=2,zone-c=2}"
READY_TIMEOUT="${WS_READY_TIMEOUT:-60}"
K8S_COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler)

log() { echo "[cluster] $*" >&2; }
die() { echo "[cluster] error: $*" >&2; exit 1; }

# ---------------------------------------------------------------- install

have_k8s() {
  local c
  for c in "${K8S_COMPONENTS[@]}"; do [ -x "$K8S_BIN/$c" ] || return 1; done
}

etcd_bin() { ls "$ETCD_DIR"/*/usr/bin/etcd 2>/dev/null | head -n 1; }

install_etcd() {
  [ -n "$(etcd_bin)" ] && return 0
  log "fetching etcd from Debian's etcd-server package (extracted, no service started)"
  local tmp ver
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download etcd-server >/dev/null) || die "apt-get download etcd-server failed (run apt-get update?)"
  ver="$(dpkg-deb -f "$tmp"/etcd-server_*.deb Version)"
  mkdir -p "$ETCD_DIR/$ver"
  dpkg-deb -x "$tmp"/etcd-server_*.deb "$ETCD_DIR/$ver"
  rm -rf "$tmp"
  [ -n "$(etcd_bin)" ] || die "etcd binary not found in the etcd-server package"
}

install_k8s() {
  have_k8s && return 0
  local build="$CACHE/build" blog="$CACHE/build/kubernetes-build.log" src started
  mkdir -p "$build"
  log "building kube-apiserver, kube-controller-manager, kube-scheduler $K8S_VERSION from Debian's"
  log "kubernetes source package with Go 1.19: about 8-13 minutes on 2 cores, once (cached in $K8S_BIN)."
  log "build log: $blog"
  started=$(date +%s)
  if ! build_k8s "$build" >"$blog" 2>&1; then
    tail -n 30 "$blog" >&2
    die "Kubernetes build failed; full log: $blog"
  fi
  log "control plane built in $(( $(date +%s) - started ))s"
}

# Runs in a subshell: it changes directory and traces commands into the log.
build_k8s() (
  local build="$1" src
  set -x
  cd "$build"
  rm -rf kubernetes-src && mkdir kubernetes-src && cd kubernetes-src
  apt-get source --download-only kubernetes
  dpkg-source --no-check -x ./kubernetes_*.dsc tree
  src="$build/kubernetes-src/tree"
  # Vendored reflect2 1.0.1 is broken on Go >= 1.18; Debian's 1.0.2 is a drop-in.
  local r="$src/vendor/github.com/modern-go/reflect2"
  rm -f "$r"/*.go "$r"/*.s
  cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go "$r"/
  cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.s "$r"/ 2>/dev/null || true
  rm -f "$r"/*_test.go
  cd "$src"
  PATH=/usr/lib/go-1.19/bin:$PATH KUBE_GIT_VERSION=$K8S_VERSION KUBE_GIT_TREE_STATE=clean \
    GOFLAGS=-tags=providerless GOLDFLAGS="-s -w" GOCACHE="$build/gocache" \
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler"
  mkdir -p "$K8S_BIN.tmp"
  local c
  for c in "${K8S_COMPONENTS[@]}"; do cp "_output/bin/$c" "$K8S_BIN.tmp/"; done
  rm -rf "$K8S_BIN" && mv "$K8S_BIN.tmp" "$K8S_BIN"
  cd "$build" && rm -rf kubernetes-src gocache
)

cmd_install() {
  command -v go >/dev/null || [ -x /usr/lib/go-1.19/bin/go ] || die "Go 1.19 missing: run scripts/install-prereqs.sh"
  install_etcd
  install_k8s
  log "binaries ready: $K8S_BIN, $(etcd_bin)"
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

start_apiserver() {
  local port="$1" eport="$2" d="$STATE/pki"
  start kube-apiserver "$STATE/kube-apiserver.log" "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$eport" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --secure-port "$port" --tls-cert-file "$d/apiserver.crt" --tls-private-key-file "$d/apiserver.key" \
    --client-ca-file "$d/ca.crt" --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$d/sa.pub" --service-account-signing-key-file "$d/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --authorization-mode RBAC \
    --disable-admission-plugins ServiceAccount --allow-privileged=true
  wait_until kube-apiserver "$STATE/kube-apiserver.log" \
    curl -fsS --cacert "$d/ca.crt" --cert "$d/admin.crt" --key "$d/admin.key" "https://127.0.0.1:$port/readyz"
}

start_controllers() {
  local d="$STATE/pki" kc="$STATE/kubeconfig"
  start kube-controller-manager "$STATE/kube-controller-manager.log" "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --leader-elect=false --controllers '*,-nodelifecycle' --port 0 --secure-port "$(free_port)" \
    --bind-address 127.0.0.1 --service-account-private-key-file "$d/sa.key" --root-ca-file "$d/ca.crt" \
    --use-service-account-credentials=false
  start kube-scheduler "$STATE/kube-scheduler.log" "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --leader-elect=false --port 0 --secure-port "$(free_port)" --bind-address 127.0.0.1
  sleep 1
  alive_or_fail kube-controller-manager "$STATE/kube-controller-manager.log"
  alive_or_fail kube-scheduler "$STATE/kube-scheduler.log"
}

# create_node NAME ZONE [TAINT]   TAINT = KEY=VALUE:EFFECT
create_node() {
  local name="$1" zone="$2" taint="${3:-}" kc="$STATE/kubeconfig" taints="[]"
  if [ -n "$taint" ]; then
    local kv="${taint%:*}" effect="${taint##*:}"
    taints="[{\"key\":\"${kv%%=*}\",\"value\":\"${kv#*=}\",\"effect\":\"$effect\"}]"
  fi
  kubectl --kubeconfig "$kc" apply -f - >/dev/null <<EOF
{"apiVersion":"v1","kind":"Node","metadata":{"name":"$name","labels":{
  "kubernetes.io/hostname":"$name","topology.kubernetes.io/zone":"$zone","kubernetes.io/os":"linux",
  "kubernetes.io/arch":"amd64"}},"spec":{"taints":$taints}}
EOF
  # No kubelet: report Ready with capacity ourselves; the admission-added
  # not-ready taint is never removed without node-lifecycle, so replace taints.
  kubectl --kubeconfig "$kc" patch node "$name" --subresource=status --type=merge -p \
    "{\"status\":{\"capacity\":{\"cpu\":\"32\",\"memory\":\"128Gi\",\"pods\":\"250\"},
      \"allocatable\":{\"cpu\":\"32\",\"memory\":\"128Gi\",\"pods\":\"250\"},
      \"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"FakeKubelet\",
      \"message\":\"fake node for tests\",\"lastHeartbeatTime\":\"$(date -u +%FT%TZ)\",
      \"lastTransitionTime\":\"$(date -u +%FT%TZ)\"}]}}" >/dev/null
  kubectl --kubeconfig "$kc" patch node "$name" --type=merge -p "{\"spec\":{\"taints\":$taints}}" >/dev/null
}

create_nodes() {
  local entry zone rest count taint i
  IFS=',' read -ra entries <<<"$NODES"
  for entry in "${entries[@]}"; do
    [ -n "$entry" ] || continue
    zone="${entry%%=*}"; rest="${entry#*=}"
    count="${rest%%:*}"; taint=""
    [ "$rest" != "$count" ] && taint="${rest#*:}"
    [[ "$count" =~ ^[0-9]+$ ]] || die "bad WS_NODES entry '$entry' (want ZONE=COUNT[:KEY=VALUE:EFFECT])"
    for ((i = 1; i <= count; i++)); do create_node "node-${zone#zone-}-$i" "$zone" "$taint"; done
  done
  log "nodes: $(kubectl --kubeconfig "$STATE/kubeconfig" get nodes -o name | tr '\n' ' ')"
}

cleanup_failed_up() {
  log "startup failed; stopping what was started"
  stop_all
}

cmd_up() {
  if running; then
    log "already running (state: $STATE)"
    cmd_env
    return 0
  fi
  [ -d "$STATE" ] && stop_all
  have_k8s && [ -n "$(etcd_bin)" ] || cmd_install
  mkdir -p "$STATE"
  : >"$STATE/pids"
  trap cleanup_failed_up ERR
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
  create_nodes
  trap - ERR
  echo "$port" >"$STATE/apiserver-port"
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
  echo "export KUBECONFIG=$STATE/kubeconfig"
}

cmd_status() {
  if running; then echo "running: $(cat "$STATE/apiserver-port" 2>/dev/null) ($STATE)"; else echo "not running"; return 1; fi
}

case "${1:-}" in
  install) cmd_install ;;
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  *) echo "usage: $0 install|up|down|env|status" >&2; exit 2 ;;
esac
