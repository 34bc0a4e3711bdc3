#!/usr/bin/env bash
# OpenKruise's kruise-manager, built from the Go module proxy and run out of cluster against
# the local control plane: the reference implementation `make bench` compares against.
#
#   kruise.sh build      builds (once) and prints the manager's path
#   kruise.sh manifests  writes (once) and prints the path of install.yaml: every CRD of
#                        config/crd, the kruise-system namespace and the two webhook
#                        configurations kruise-manager fills in itself (kustomize's output of
#                        config/webhook, generated here from upstream's files, never typed)
#
# The module (e2e/kruise: go.mod repeats upstream's replace block, go.sum pins every hash)
# builds like the cluster's Kubernetes (e2e/cluster/gen-k8s-module.sh). The checksum database
# has no entry for github.com/openkruise/kruise (a 404 on 2026-11-28), so the committed go.sum
# is what verifies it: GOFLAGS=-mod=readonly refuses any module whose hash differs.
# Costs seen on 2 cores: ~420 MB of modules, the build ~6 minutes cold; cached in
# $CACHE/kruise/$KRUISE_VERSION and Go's caches, outside the repository.
set -euo pipefail
KRUISE_VERSION=v1.9.0
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${WS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/workloadspread}"
OUT="$CACHE/kruise/$KRUISE_VERSION"
export GOMODCACHE="$CACHE/go/mod"
export GOCACHE="$CACHE/go/build"
export GOFLAGS="-mod=readonly"
export GOTOOLCHAIN=local
export GONOSUMDB=github.com/openkruise/kruise

log() { echo "[kruise] $*" >&2; }

build() {
  local bin="$OUT/kruise-manager"
  if [ ! -x "$bin" ]; then
    mkdir -p "$OUT"
    log "building kruise-manager $KRUISE_VERSION from the Go module proxy (~6 min the first time)"
    local started; started=$(date +%s)
    (cd "$HERE" && go build -trimpath -ldflags "-s -w" -o "$bin.tmp" github.com/openkruise/kruise) \
      >"$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log" >&2; log "build failed ($OUT/build.log)"; exit 1; }
    mv "$bin.tmp" "$bin"
    log "built in $(( $(date +%s) - started ))s"
  fi
  echo "$bin"
}

source_dir() {
  (cd "$HERE" && go mod download -json "github.com/openkruise/kruise@$KRUISE_VERSION" >/dev/null)
  echo "$GOMODCACHE/github.com/openkruise/kruise@$KRUISE_VERSION"
}

manifests() {
  local out="$OUT/install.yaml" src
  if [ ! -s "$out" ]; then
    src="$(source_dir)"
    mkdir -p "$OUT"
    python3 - "$src" "$out.tmp" <<'PY'
import glob, sys, yaml
src, out = sys.argv[1], sys.argv[2]
# config/crd's kustomization: the bases, with the conversion webhooks of its
# patchesStrategicMerge (webhook_in_*.yaml, the Service renamed as below).
crd_kustomization = yaml.safe_load(open(f"{src}/config/crd/kustomization.yaml"))
conversions = {}
for patch in crd_kustomization.get("patchesStrategicMerge", []):
    p = yaml.safe_load(open(f"{src}/config/crd/{patch}"))
    conv = p["spec"]["conversion"]
    svc = conv["webhook"]["clientConfig"]["service"]
    svc["name"], svc["namespace"] = "kruise-webhook-service", "kruise-system"
    conversions[p["metadata"]["name"]] = conv
docs = []
for path in crd_kustomization["resources"]:
    for d in yaml.safe_load_all(open(f"{src}/config/crd/{path}")):
        if d:
            if d["metadata"]["name"] in conversions:
                d["spec"]["conversion"] = conversions[d["metadata"]["name"]]
            docs.append(d)
docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kruise-system"}})
# config/webhook through config/default's kustomization: name prefix `kruise-`, namespace
# kruise-system, the Service kruise-webhook-service, and patch_manifests.yaml's selectors
# merged into the webhooks of the same name.
patches = {}
for d in yaml.safe_load_all(open(f"{src}/config/webhook/patch_manifests.yaml")):
    if d:
        for wh in d.get("webhooks", []):
            patches[(d["kind"], wh["name"])] = wh
for d in yaml.safe_load_all(open(f"{src}/config/webhook/manifests.yaml")):
    if not d:
        continue
    d["metadata"]["name"] = "kruise-" + d["metadata"]["name"]
    for wh in d.get("webhooks", []):
        svc = wh["clientConfig"]["service"]
        svc["name"], svc["namespace"] = "kruise-webhook-service", "kruise-system"
        for k, v in patches.get((d["kind"], wh["name"]), {}).items():
            if k != "name":
                wh[k] = v
    docs.append(d)
yaml.safe_dump_all(docs, open(out, "w"), sort_keys=False)
PY
    mv "$out.tmp" "$out"
  fi
  echo "$out"
}

case "${1:-}" in
  build) build ;;
  manifests) manifests ;;
  *) echo "usage: kruise.sh build|manifests" >&2; exit 2 ;;
esac
