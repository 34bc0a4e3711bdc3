#!/usr/bin/env bash
# A real, local Kubernetes control plane for tests and the demo: etcd + kube-apiserver +
# kube-controller-manager + kube-scheduler on loopback, built from the Go module proxy, and
# KWOK simulating the nodes (Ready with heartbeats; pods bound to them Running/Ready with IPs;
# deleted pods removed), so the workload controllers behave as on a real cluster.
#
#   cluster.sh install   build the binaries into the cache (idempotent; a warm cache builds nothing)
#   cluster.sh install-node  build kubelet and kube-proxy too (for WS_REAL_NODE=1)
#   cluster.sh up        start everything (reuses a running cluster), create the nodes
#   cluster.sh down      stop exactly the processes `up` started, remove the state dir
#   cluster.sh env       print `export KUBECONFIG=...` and `export PATH=<kubectl dir>:...`
#                        (with a real node also WS_REGISTRY and WS_REAL_NODE_NAME)
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
#   WS_REAL_NODE     1: also a real kubelet node (containerd + runc + CNI bridge, kube-proxy, a
#                    loopback OCI registry) beside the KWOK nodes; see "real node" below.
#                    Needs root and the Debian packages of scripts/install-prereqs.sh. One real
#                    node per machine: it owns the address 10.200.0.1 and the cgroup /workloadspread.
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
REAL_NODE="${WS_REAL_NODE:-0}"
# The real node's names and addresses, chosen apart from the machine's network (192.0.2.0/24
# here), KWOK's pod IPs (10.244.0.0/16) and the service range (10.0.0.0/24).
REAL_NODE_NAME=real-node-1
REAL_NODE_TAINT_KEY=workloadspread.test/real-node  # =true:NoSchedule, so KWOK tests never land there
NODE_IP=10.200.0.1           # the node's InternalIP; the API server listens and advertises here
NODE_LINK=wsnode0            # a veth pair holds it (this kernel has no dummy links)
NODE_PEER=wsnode1
POD_CIDR=10.88.0.0/16        # the CNI bridge's pod range, kube-proxy's --cluster-cidr
CNI_BRIDGE=wscni0
CNI_NETWORK=workloadspread
CGROUP_ROOT=/workloadspread  # the kubelet's cgroupRoot: every pod process lives below it
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
# One `go build` for all of them: their shared packages compile once, and the links (each
# single-threaded, tens of seconds) run side by side instead of one after the other.
go_build_k8s() (
  local dest="$1" mod minor c staging pkgs=(); shift
  mod="$(k8s_module_dir)" || return 1
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  cd "$mod" || return 1
  mkdir -p "$dest" || return 1
  staging="$(mktemp -d "$dest/.build.XXXXXX")" || return 1
  for c in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  go build -trimpath -tags providerless -ldflags "-s -w \
    -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
    -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
    -X k8s.io/component-base/version.gitTreeState=clean" \
    -o "$staging/" "${pkgs[@]}" || { rm -rf "$staging"; return 1; }
  # Moved in one by one when all are built: an interrupted build leaves none half-written.
  for c in "$@"; do mv "$staging/$c" "$dest/$c" || return 1; done
  rm -rf "$staging"
)

# Installs take this lock: `make test` starts them in the background (scripts/prebuild.sh)
# and `cluster.sh up` of the integration tests waits here for them instead of building the
# same binaries a second time beside them.
with_install_lock() {
  mkdir -p "$CACHE/build"
  local fd
  exec {fd}>"$CACHE/build/install.lock"
  if ! flock -n "$fd"; then
    log "another install is building into $CACHE; waiting for it"
    flock "$fd"
  fi
  "$@"
  exec {fd}>&-
}

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

# A zombie is not alive: PID 1 on this machine reaps orphans only seconds later.
pid_alive() {
  [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null
}

running() {
  [ -f "$STATE/pids" ] || return 1
  local name pid
  while read -r name pid; do pid_alive "$pid" || return 1; done <"$STATE/pids"
  [ -s "$STATE/pids" ]
}

gen_certs() {
  local d="$STATE/pki" san="IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes.default.svc"
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=workloadspread-test-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  # Pods reach the API server as https://10.0.0.1 (the `kubernetes` Service), by its DNS names,
  # and the kubelet and kube-proxy at the node address.
  real_node_on && san="$san,IP:$NODE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc.cluster.local"
  sign_cert "$d" apiserver "/CN=kube-apiserver" "subjectAltName=$san"
  sign_cert "$d" admin "/O=system:masters/CN=admin" ""
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  # The certificate the API server presents to admission webhooks (AdmissionConfiguration ->
  # kubeConfigFile, user "*"), from a CA of its own: a host started with
  # --client-ca-file pki/webhook-client-ca.crt answers the API server and no one else.
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=workloadspread-webhook-client-ca" \
    -keyout "$d/webhook-client-ca.key" -out "$d/webhook-client-ca.crt" 2>/dev/null
  sign_cert "$d" webhook-client "/CN=kube-apiserver-webhook-client" "" webhook-client-ca
  real_node_on && gen_node_certs
  return 0
}

# The real node's identities. The kubelet is a proper node (system:node:NAME in system:nodes,
# authorized by the Node authorizer, limited by NodeRestriction) rather than an admin: the
# rules it runs under are then those of a real cluster, and the Node authorizer only ever
# decides for node users, so the suites' admin requests are judged by RBAC as before.
# kube-proxy is system:kube-proxy (RBAC's default binding system:node-proxier); the API server
# calls the kubelets (logs, exec) as a system:masters client, which the kubelet's webhook
# authorizer allows; the kubelet serves with a cert of the test CA for its node address.
gen_node_certs() {
  local d="$STATE/pki"
  sign_cert "$d" kubelet "/O=system:nodes/CN=system:node:$REAL_NODE_NAME" ""
  sign_cert "$d" kubelet-serving "/CN=$REAL_NODE_NAME" "subjectAltName=IP:$NODE_IP,DNS:$REAL_NODE_NAME"
  sign_cert "$d" kube-proxy "/CN=system:kube-proxy" ""
  sign_cert "$d" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" ""
}

sign_cert() {
  local d="$1" name="$2" subj="$3" san="$4" ca="${5:-ca}" ext
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$d/$name.key" -out "$d/$name.csr" 2>/dev/null
  ext="$d/$name.ext"
  { echo "basicConstraints=CA:FALSE"; [ -n "$san" ] && echo "$san"; } >"$ext"
  openssl x509 -req -in "$d/$name.csr" -CA "$d/$ca.crt" -CAkey "$d/$ca.key" -CAcreateserial \
    -days 2 -extfile "$ext" -out "$d/$name.crt" 2>/dev/null
}

# Admission webhooks get the API server's client certificate (as a cluster configured for
# authenticated webhooks does; docs/operations.md, Security).
write_admission_config() {
  local d="$STATE/pki"
  cat >"$STATE/webhook-kubeconfig" <<EOF
apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: $d/webhook-client.crt
    client-key: $d/webhook-client.key
EOF
  cat >"$STATE/admission-config.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $STATE/webhook-kubeconfig
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $STATE/webhook-kubeconfig
EOF
}

write_kubeconfig() { kubeconfig_for "$STATE/kubeconfig" "https://127.0.0.1:$1" admin; }

# kubeconfig_for FILE SERVER CERT: a kubeconfig authenticating with pki/CERT.{crt,key}
kubeconfig_for() {
  local file="$1" server="$2" cert="$3" d="$STATE/pki"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $server
    certificate-authority: $d/ca.crt
users:
- name: $cert
  user:
    client-certificate: $d/$cert.crt
    client-key: $d/$cert.key
contexts:
- name: local
  context: {cluster: local, user: $cert}
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
  # KWOK only: loopback, and no `kubernetes` endpoints (nothing could use 127.0.0.1 from a pod).
  # KWOK pods need no service account token: without the ServiceAccount admission plugin a
  # pod can be created the moment its namespace exists (no wait for the `default` account).
  local node_args=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1
    --endpoint-reconciler-type none --authorization-mode RBAC
    --disable-admission-plugins ServiceAccount)
  if real_node_on; then
    # One --bind-address only: the wildcard serves both the tests' 127.0.0.1 and the node
    # address, which the `kubernetes` Service's endpoint (the lease reconciler) points at.
    # Webhooks and aggregated APIs behind a Service are called at an endpoint (pod) IP,
    # reached through the CNI bridge's route: --enable-aggregator-routing rather than the
    # ClusterIP, which would only work through kube-proxy's rules in the host's nat OUTPUT
    # chain, i.e. only after kube-proxy has synced that Service and never while it is down.
    # (The service proxy, /api/v1/namespaces/NS/services/NAME:PORT/proxy/, always picks an
    # endpoint IP itself.)
    # The ServiceAccount admission plugin stays on (the default): pods on the real node (our
    # chart's) get their token mounted and reach the API server in-cluster.
    # shellcheck disable=SC2054 # Node,RBAC is one argument
    node_args=(--bind-address 0.0.0.0 --advertise-address "$NODE_IP"
      --endpoint-reconciler-type lease --authorization-mode Node,RBAC
      --enable-admission-plugins NodeRestriction --enable-aggregator-routing=true
      --kubelet-client-certificate "$d/apiserver-kubelet-client.crt"
      --kubelet-client-key "$d/apiserver-kubelet-client.key"
      --kubelet-certificate-authority "$d/ca.crt" --kubelet-preferred-address-types InternalIP)
  fi
  write_audit_policy
  write_admission_config
  start kube-apiserver "$STATE/kube-apiserver.log" "$K8S_BIN/kube-apiserver" \
    --admission-control-config-file "$STATE/admission-config.yaml" \
    --etcd-servers "http://127.0.0.1:$eport" "${node_args[@]}" \
    --secure-port "$port" --tls-cert-file "$d/apiserver.crt" --tls-private-key-file "$d/apiserver.key" \
    --client-ca-file "$d/ca.crt" --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$d/sa.pub" --service-account-signing-key-file "$d/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --allow-privileged=true \
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

# ---------------------------------------------------------------- real node (WS_REAL_NODE=1)
#
# One kubelet node beside the KWOK ones: containerd 1.6 (Debian) with runc and a CNI bridge,
# kube-proxy in iptables mode, and a loopback OCI registry the kubelet pulls from. The process
# state lives in the state dir; what the kernel keeps machine-wide is the node address (a veth
# pair), the CNI bridge, iptables rules, the cgroup CGROUP_ROOT and the kubelet's log symlinks
# in /var/log/containers: `down` removes those too (teardown_real_node), also after a failed
# `up`. The file $STATE/real-node says that this state dir owns them.

real_node_on() { [ "$REAL_NODE" = 1 ]; }
real_node_here() { [ -f "$STATE/real-node" ]; }
PAUSE_IMAGE=workloadspread.test/pause:1
REAL_NODE_CMDS=(containerd containerd-shim-runc-v2 runc ctr docker-registry busybox iptables
  iptables-save ip findmnt python3)

ctr_() { ctr --address "$STATE/containerd/containerd.sock" --namespace k8s.io "$@"; }

check_real_node_prereqs() {
  local c missing=()
  [ "$(id -u)" = 0 ] || die "WS_REAL_NODE=1 needs root (links, iptables, mounts, cgroups)"
  for c in "${REAL_NODE_CMDS[@]}"; do command -v "$c" >/dev/null || missing+=("$c"); done
  for c in bridge host-local portmap loopback; do [ -x "/usr/lib/cni/$c" ] || missing+=("/usr/lib/cni/$c"); done
  [ ${#missing[@]} -eq 0 ] ||
    die "WS_REAL_NODE=1 needs: ${missing[*]} (Debian: containerd runc containernetworking-plugins busybox-static iptables docker-registry; see scripts/install-prereqs.sh)"
  with_install_lock install_node_binaries
}

# The node address on a veth pair (this kernel has no `dummy` links): not loopback, which the
# kubelet refuses as node IP and pods could not reach. The link's alias names the owning state
# dir; a second real node on the machine is refused before anything starts.
claim_node_address() {
  if [ -e "/sys/class/net/$NODE_LINK" ]; then
    local owner; owner="$(cat "/sys/class/net/$NODE_LINK/ifalias" 2>/dev/null)"
    die "$NODE_LINK exists: another cluster's real node runs (state: ${owner:-unknown}); one real node per machine (if that state dir is gone: ip link del $NODE_LINK)"
  fi
  touch "$STATE/real-node"
  # The bridge plugin (isGateway) turns forwarding on; `down` puts the old value back.
  cat /proc/sys/net/ipv4/ip_forward >"$STATE/ip_forward.orig"
  # Directories others create on first use: the CNI result cache, the kubelet's log links and
  # device-plugin socket (/var/lib/kubelet/device-plugins, whatever its root dir), containerd
  # 1.6's shim sockets (always under /run/containerd/s, whatever its state dir).
  [ -d /var/lib/cni ] || touch "$STATE/var-lib-cni.created"
  [ -d /var/lib/kubelet ] || touch "$STATE/var-lib-kubelet.created"
  [ -d /run/containerd ] || touch "$STATE/run-containerd.created"
  [ -d /var/log/containers ] || touch "$STATE/var-log-containers.created"
  ip link add "$NODE_LINK" type veth peer name "$NODE_PEER"
  ip link set "$NODE_LINK" alias "$STATE"
  ip addr add "$NODE_IP/32" dev "$NODE_LINK"
  ip link set "$NODE_PEER" up
  ip link set "$NODE_LINK" up
}

# The registry the tests push to (skopeo) and the kubelet pulls from: plain HTTP on loopback.
start_registry() {
  local port; port="$(free_port)"
  mkdir -p "$STATE/registry-data"
  cat >"$STATE/registry.yml" <<EOF
version: 0.1
log: {level: info}
storage:
  filesystem: {rootdirectory: $STATE/registry-data}
  delete: {enabled: true}
http:
  addr: 127.0.0.1:$port
EOF
  start registry "$STATE/registry.log" docker-registry serve "$STATE/registry.yml"
  wait_until registry "$STATE/registry.log" curl -fsS "http://127.0.0.1:$port/v2/"
  echo "127.0.0.1:$port" >"$STATE/registry"
}

# containerd as a plain process: root, state, sockets, runc state, pod network namespaces
# and the CNI config all in the state dir. Pulls from the loopback registry go over http
# (its hosts.toml); every other image must be imported (no network beyond apt and friends).
write_containerd_config() {
  local c="$STATE/containerd" reg
  reg="$(cat "$STATE/registry")"
  mkdir -p "$c/certs.d/$reg" "$STATE/cni/net.d"
  cat >"$c/certs.d/$reg/hosts.toml" <<EOF
server = "http://$reg"
[host."http://$reg"]
  capabilities = ["pull", "resolve"]
EOF
  cat >"$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
[grpc]
  address = "$c/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$c/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Root here lacks CAP_SYS_RESOURCE: runc cannot set the negative oom_score_adj the kubelet
  # asks for ("can't get final child's PID from pipe: EOF") unless containerd clamps it.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = "$c/runc"
      SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$c/certs.d"
EOF
  # A bridge with the node's pod range; masquerade for traffic leaving it, hairpin so that a
  # pod reaches itself through a Service. containerd adds the loopback interface itself.
  cat >"$STATE/cni/net.d/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {"type": "bridge", "bridge": "$CNI_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$STATE/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

start_containerd() {
  write_containerd_config
  start containerd "$STATE/containerd.log" containerd --config "$STATE/containerd/config.toml"
  wait_until containerd "$STATE/containerd.log" ctr_ version
}

# The sandbox ("pause") image: busybox sleeping forever, imported, as nothing can be pulled
# from registry.k8s.io here.
import_pause_image() {
  local dir="$STATE/images/pause"
  bash "$HERE/busybox-image.sh" "$dir" "$PAUSE_IMAGE" sleep 2147483647
  tar -C "$dir" -cf "$dir.tar" .
  ctr_ images import "$dir.tar" >>"$STATE/containerd.log" 2>&1 ||
    { tail -n 20 "$STATE/containerd.log" >&2; die "importing $PAUSE_IMAGE into containerd failed"; }
  ctr_ images ls -q | grep -qx "$PAUSE_IMAGE" ||
    die "$PAUSE_IMAGE not in containerd after import: $(ctr_ images ls -q | tr '\n' ' ')"
}

# kube-proxy gives pods the `kubernetes` Service (10.0.0.1:443 -> NODE_IP:port) and every other
# ClusterIP. It leaves the machine's sysctls alone (conntrack limits and timeouts as they are,
# no route_localnet for localhost NodePorts) and serves NodePorts on the node address only.
start_kube_proxy() {
  local port="$1"
  kubeconfig_for "$STATE/kube-proxy.kubeconfig" "https://$NODE_IP:$port" kube-proxy
  cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
hostnameOverride: $REAL_NODE_NAME
bindAddress: $NODE_IP
mode: iptables
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:$(free_port)
metricsBindAddress: 127.0.0.1:$(free_port)
nodePortAddresses: [$NODE_IP/32]
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  start kube-proxy "$STATE/kube-proxy.log" "$K8S_BIN/kube-proxy" --config "$STATE/kube-proxy.yaml"
  wait_until "kube-proxy (rules for the kubernetes Service)" "$STATE/kube-proxy.log" kube_proxy_synced
}

kube_proxy_synced() {
  pid_alive "$(component_pid kube-proxy)" &&
    iptables -t nat -S KUBE-SERVICES 2>/dev/null | grep -q 'default/kubernetes:https'
}

# The kubelet's cgroup root must exist in every cgroup v1 hierarchy; a new cpuset cgroup
# starts without cpus and mems, so it gets its parent's.
make_cgroup_root() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h" ] || continue
    mkdir -p "$h${CGROUP_ROOT#/}"
  done
  if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset$CGROUP_ROOT/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset$CGROUP_ROOT/cpuset.mems"
  fi
}

start_kubelet() {
  local port="$1" k="$STATE/kubelet" d="$STATE/pki"
  mkdir -p "$k"
  make_cgroup_root
  kubeconfig_for "$STATE/kubelet.kubeconfig" "https://$NODE_IP:$port" kubelet
  cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine mounts cgroup v1 only, which kubelet >= 1.35 refuses unless told; no systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
failSwapOn: false
enforceNodeAllocatable: []
containerRuntimeEndpoint: unix://$STATE/containerd/containerd.sock
address: $NODE_IP
port: $(free_port)
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $(free_port)
tlsCertFile: $d/kubelet-serving.crt
tlsPrivateKeyFile: $d/kubelet-serving.key
# The API server (logs, exec) authenticates with a client cert of the test CA.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $d/ca.crt}
authorization: {mode: Webhook}
podLogsDir: $k/pod-logs
clusterDNS: []
registerWithTaints:
- {key: $REAL_NODE_TAINT_KEY, value: "true", effect: NoSchedule}
# The disk is shared with the whole machine: no evictions for its usage, and no image garbage
# collection (the imported pause image could not be pulled back).
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  start kubelet "$STATE/kubelet.log" "$K8S_BIN/kubelet" --config "$STATE/kubelet.yaml" \
    --kubeconfig "$STATE/kubelet.kubeconfig" --root-dir "$k" \
    --hostname-override "$REAL_NODE_NAME" --node-ip "$NODE_IP" \
    --node-labels topology.kubernetes.io/zone=zone-real,type=real
}

real_node_ready() {
  local out
  pid_alive "$(component_pid kubelet)" || return 1
  out="$(kubectl_ get node "$REAL_NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}')"
  [[ "$out" == True* ]] && ! grep -q -e node.kubernetes.io/not-ready -e node.kubernetes.io/unreachable <<<"$out"
}

start_real_node() {
  local port="$1"
  log "real node: registry, containerd, kube-proxy, kubelet $REAL_NODE_NAME on $NODE_IP"
  start_registry
  start_containerd
  import_pause_image
  # The kubelet first: kube-proxy waits up to 30 s for its node's Node object to exist.
  start_kubelet "$port"
  start_kube_proxy "$port"
  wait_until "kubelet ($REAL_NODE_NAME Ready, not-ready taint lifted)" "$STATE/kubelet.log" real_node_ready
  log "real node $REAL_NODE_NAME Ready (pods in $POD_CIDR, registry $(cat "$STATE/registry"))"
}

# Before anything stops: the pods on the real node are deleted through the API, so that the
# kubelet stops their containers and sandboxes the normal way (CNI DEL releases the address,
# removes the veth and the bridge plugin's masquerade rules). Bounded and best-effort; what
# is left (a dead kubelet, a failed `up`) is killed through containerd, then the kubelet stops.
stop_real_node_pods() (
  set +e
  local t
  if pid_alive "$(component_pid kubelet)" && pid_alive "$(component_pid kube-apiserver)"; then
    kubectl_ cordon "$REAL_NODE_NAME" >/dev/null 2>&1 || true
    kubectl_ delete pods --all-namespaces --field-selector "spec.nodeName=$REAL_NODE_NAME" \
      --grace-period 1 --wait --timeout 30s >/dev/null 2>&1 ||
      log "pods on $REAL_NODE_NAME not all deleted within 30s; killing them through containerd"
  fi
  stop_pid "$(component_pid kubelet)"
  if pid_alive "$(component_pid containerd)"; then
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete --force "$t" >/dev/null 2>&1; done
  fi
  return 0
)

# After the processes stopped: whatever is left of the real node, in the order it depends on.
# Every step runs whatever the others did (no errexit here), and tolerates that its object
# never existed (a failed `up`).
teardown_real_node() (
  set +e
  local pid m h
  # Pod processes, should any have survived, all live in the kubelet's cgroup root; shims of
  # this containerd are recognised by its socket on their command line.
  kill_cgroup_procs
  for pid in $(pgrep -f -- "-address $STATE/containerd/containerd.sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  # Deepest mounts first: container root filesystems, network namespaces, kubelet volumes.
  findmnt -rn -o TARGET | grep "^$STATE/" | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
  done
  remove_cni_rules
  forget_sandboxes
  if [ -x "$K8S_BIN/kube-proxy" ]; then
    "$K8S_BIN/kube-proxy" --cleanup >"$STATE/kube-proxy-cleanup.log" 2>&1 || true
  fi
  remove_kubelet_chains
  for h in /sys/fs/cgroup/*"$CGROUP_ROOT"; do
    [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  [ -f "$STATE/var-lib-cni.created" ] && rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null
  [ -f "$STATE/run-containerd.created" ] && rmdir /run/containerd/s /run/containerd 2>/dev/null
  if [ -f "$STATE/var-lib-kubelet.created" ]; then
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock
    rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null
  fi
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -lname "$STATE/*" -delete
    [ -f "$STATE/var-log-containers.created" ] && rmdir /var/log/containers 2>/dev/null
  fi
  [ -e "/sys/class/net/$CNI_BRIDGE" ] && ip link del "$CNI_BRIDGE"
  [ "$(cat "/sys/class/net/$NODE_LINK/ifalias" 2>/dev/null)" = "$STATE" ] && ip link del "$NODE_LINK"
  [ -f "$STATE/ip_forward.orig" ] && cat "$STATE/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward
  return 0
)

kill_cgroup_procs() {
  local h pids i
  for i in 1 2 3 4 5; do
    pids="$(for h in /sys/fs/cgroup/*"$CGROUP_ROOT"; do
      [ ! -d "$h" ] || find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null
    done | sort -u || true)"
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086 # one pid per word
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
}

# What containerd and CNI keep outside the state dir per pod sandbox, left behind when a pod
# was not stopped through CRI (containerd or the kubelet killed): the shim's socket, named
# sha256(<containerd socket>/<namespace>/<sandbox id>) by containerd 1.6, and the CNI result
# cache of the pod network and of containerd's loopback network.
forget_sandboxes() {
  local dir id
  for dir in "$STATE"/containerd/root/io.containerd.grpc.v1.cri/sandboxes/* \
      "$STATE"/containerd/state/io.containerd.runtime.v2.task/k8s.io/*; do
    id="${dir##*/}"
    [[ "$id" =~ ^[0-9a-f]{64}$ ]] || continue
    rm -f "/run/containerd/s/$(printf '%s' "$STATE/containerd/containerd.sock/k8s.io/$id" | sha256sum | cut -c1-64)"
    rm -f "/var/lib/cni/results/$CNI_NETWORK-$id-"* "/var/lib/cni/results/cni-loopback-$id-"*
  done
}

# The bridge plugin's masquerade rules (one chain per pod, commented with the network name),
# for pods whose CNI DEL never ran.
remove_cni_rules() {
  local rule chain
  iptables -t nat -S POSTROUTING 2>/dev/null | grep -F "name: \\\"$CNI_NETWORK\\\"" | while read -r rule; do
    chain="${rule##*-j }"
    eval "iptables -t nat ${rule/-A /-D }" 2>/dev/null || true
    iptables -t nat -F "$chain" 2>/dev/null || true
    iptables -t nat -X "$chain" 2>/dev/null || true
  done
}

# The kubelet's own chains, which `kube-proxy --cleanup` leaves (KUBE-FIREWALL, the canary and
# hint chains kube-proxy checks to pick the iptables backend), in both families.
remove_kubelet_chains() {
  local ipt table chain
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for table in filter nat mangle; do
      for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
        "$ipt" -t "$table" -S 2>/dev/null | grep -- "-j $chain\$" | while read -r rule; do
          eval "$ipt -t $table ${rule/-A /-D }" 2>/dev/null || true
        done
        "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
        "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
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
    real_node_on && ! real_node_here &&
      die "the cluster at $STATE runs without a real node; stop it (cluster.sh down) first for WS_REAL_NODE=1"
    log "already running (state: $STATE)"
    cmd_env
    return 0
  fi
  [ -d "$STATE" ] && stop_all
  have_all || with_install_lock cmd_install
  real_node_on && check_real_node_prereqs
  mkdir -p "$STATE"
  : >"$STATE/pids"
  # Any way out before the end (a failed command, die's exit) stops what was started.
  trap cleanup_failed_up EXIT
  real_node_on && claim_node_address
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
  real_node_on && start_real_node "$port"
  trap - EXIT
  echo "$port" >"$STATE/apiserver-port"
  echo "$K8S_VERSION" >"$STATE/k8s-version"
  log "ready in $(( $(date +%s) - started ))s (state: $STATE)"
  cmd_env
}

stop_all() {
  local name pid
  real_node_here && stop_real_node_pods
  if [ -f "$STATE/pids" ]; then
    # Reverse order: controllers first, etcd last.
    tac "$STATE/pids" | while read -r name pid; do stop_pid "$pid"; done
  fi
  real_node_here && teardown_real_node
  rm -rf "$STATE"
}

# SIGTERM, up to 5 s to exit, then SIGKILL.
stop_pid() {
  local pid="${1:-}" i
  pid_alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do pid_alive "$pid" || break; sleep 0.1; done
  if pid_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
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
  # Not WS_REAL_NODE: that is the switch, and `eval` of this output must not flip it.
  if real_node_here; then
    echo "export WS_REGISTRY=$(cat "$STATE/registry" 2>/dev/null)"
    echo "export WS_REAL_NODE_NAME=$REAL_NODE_NAME"
  fi
}

cmd_status() {
  if running; then echo "running: $(cat "$STATE/apiserver-port" 2>/dev/null) ($STATE)"; else echo "not running"; return 1; fi
}

case "${1:-}" in
  install) with_install_lock cmd_install ;;
  install-node) with_install_lock install_node_binaries ;;
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  *) echo "usage: $0 install|up|down|env|status" >&2; exit 2 ;;
esac
