#!/usr/bin/env bash
# Installs everything the build and the tests need, idempotently.
# Debian packages (wasm fallback toolchain, Go for the control plane, test tools),
# then etcd and the Kubernetes control plane binaries into the cache.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

APT_PKGS=(rustc-web cargo-web rust-web-src wasi-libc golang-1.19-go
  golang-github-modern-go-reflect2-dev rsync jq make bats openssl curl dpkg-dev bsdextrautils
  chromium docker-registry)
# Node.js for the playground's browser test (any packaged node >= 18 will do).
command -v npm >/dev/null || APT_PKGS+=(nodejs npm)

missing_pkgs() {
  local p
  for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

enable_deb_src() {
  local src=/etc/apt/sources.list.d/debian.sources dst=/etc/apt/sources.list.d/debian-src.sources
  [ -f "$dst" ] && return 0
  if [ -f "$src" ]; then
    sed 's/^Types: deb$/Types: deb-src/' "$src" | $SUDO tee "$dst" >/dev/null
  elif [ -f /etc/apt/sources.list ]; then
    grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' | $SUDO tee /etc/apt/sources.list.d/debian-src.list >/dev/null
  fi
  echo "[prereqs] enabled deb-src entries"
  NEED_UPDATE=1
}

NEED_UPDATE=0
enable_deb_src
todo="$(missing_pkgs | tr '\n' ' ')"
if [ -n "${todo// /}" ] || [ "$NEED_UPDATE" = 1 ]; then
  echo "[prereqs] apt-get update"
  $SUDO apt-get update -qq
fi
if [ -n "${todo// /}" ]; then
  echo "[prereqs] installing: $todo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $todo >/dev/null
fi
# Helm's SDK (chart lint/render) and YAML for the chart tests.
if ! python3 -c 'import helm_python, yaml' 2>/dev/null; then
  echo "[prereqs] pip install helm-python-sdk pyyaml"
  python3 -m pip install -q --disable-pip-version-check helm-python-sdk pyyaml 2>&1 | grep -v WARNING || true
  python3 -c 'import helm_python, yaml'
fi
[ "${1:-}" = "--no-cluster" ] || "$here/../e2e/cluster/cluster.sh" install
