#!/usr/bin/env bash
# `make demo`: a real local control plane with fake nodes in three zones, and a
# Deployment whose pods the real scheduler binds to them. Later stages add the
# admission host and the controller (see README). Ctrl-C stops everything.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cluster="$root/e2e/cluster/cluster.sh"
ns=workloadspread-demo

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() { say "stopping the control plane"; bash "$cluster" down || true; }

say "bringing up the local control plane (first run builds Kubernetes v1.20.2: 8-13 min, cached after)"
bash "$cluster" install
started_here=1
bash "$cluster" status >/dev/null 2>&1 && started_here=0
eval "$(bash "$cluster" up)"
# Leave a control plane that was already running alone.
[ "$started_here" = 1 ] && trap cleanup EXIT
trap 'exit 130' INT TERM

kubectl get nodes -L topology.kubernetes.io/zone
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$ns" create deployment web --image=nginx:1.25 --replicas=6 --dry-run=client -o yaml |
  kubectl apply -f - >/dev/null

say "waiting for 6 pods of deployment/web to be scheduled"
for _ in $(seq 1 60); do
  bound=$(kubectl -n "$ns" get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c . || true)
  [ "$bound" -ge 6 ] && break
  sleep 1
done

say "pods per node and zone"
kubectl -n "$ns" get pods -o custom-columns='POD:.metadata.name,NODE:.spec.nodeName' --no-headers |
  while read -r pod node; do
    zone=$(kubectl get node "$node" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}')
    printf '%-28s %-10s %s\n' "$pod" "$node" "$zone"
  done
