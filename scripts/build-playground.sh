#!/usr/bin/env bash
# Builds the browser planner into OUT (default playground/dist): core + the playground
# crate for wasm32-unknown-unknown (scripts/build-wasm.sh picks the toolchain), bound by
# wasm-bindgen-cli of exactly the wasm-bindgen version in Cargo.lock (installed once
# into ~/.cache/workloadspread/tools), plus the static page.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# `--tools-only` installs the wasm-bindgen CLI and stops (`scripts/prebuild.sh`).
tools_only=false
if [ "${1:-}" = --tools-only ]; then tools_only=true; shift; fi
out="${1:-$root/playground/dist}"
cache="${WS_CACHE_DIR:-$HOME/.cache/workloadspread}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
log() { echo "[playground] $*" >&2; }

version="$(awk '$0 == "name = \"wasm-bindgen\"" {getline; gsub(/version = |"/, ""); print; exit}' "$root/Cargo.lock")"
[ -n "$version" ] || { log "error: wasm-bindgen not found in Cargo.lock"; exit 1; }
tools="$cache/tools/wasm-bindgen-$version"
bindgen="$tools/bin/wasm-bindgen"
# One install at a time: `make test` builds it in the background (scripts/prebuild.sh);
# a foreground run waits for that one instead of building it a second time beside it.
mkdir -p "$cache/build"
exec {lock}>"$cache/build/wasm-bindgen.lock"
flock "$lock"
if ! [ -x "$bindgen" ] || [ "$("$bindgen" --version)" != "wasm-bindgen $version" ]; then
  log "installing wasm-bindgen-cli $version into $tools (once; about 3 minutes)"
  # --locked first; a crates.io mirror that lags behind the CLI's lockfile needs the fallback.
  cargo install --quiet --locked wasm-bindgen-cli --version "=$version" --root "$tools" ||
    { log "locked install failed; resolving the CLI's dependencies afresh"
      cargo install --quiet wasm-bindgen-cli --version "=$version" --root "$tools"; }
fi
exec {lock}>&-

if $tools_only; then exit 0; fi
wasm="$target_dir/playground/playground.wasm"
# WS_PLAYGROUND_PROFILE: `playground` (what is published) by default; `make test` builds
# the same code with `wasm-test` (Cargo.toml).
"$root/scripts/build-wasm.sh" workloadspread-playground wasm32-unknown-unknown "$wasm" "${WS_PLAYGROUND_PROFILE:-playground}"
rm -rf "$out"
mkdir -p "$out/pkg"
"$bindgen" --target web --no-typescript --remove-name-section --remove-producers-section \
  --out-dir "$out/pkg" --out-name playground "$wasm"
cp "$root"/playground/web/* "$out/"
log "wrote $out (page + pkg/playground_bg.wasm $(stat -c %s "$out/pkg/playground_bg.wasm") bytes)"
