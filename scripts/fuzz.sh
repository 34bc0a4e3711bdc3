#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 20) from seeds generated out of
# the fixtures, and prints each target's executions. A crash fails the run (the input is
# kept under fuzz/artifacts/). cargo-fuzz needs nightly compiler features (sanitizers,
# -Z flags): the stable toolchain provides them with RUSTC_BOOTSTRAP=1 (its sanitizer
# runtimes ship with it), so no nightly toolchain is needed and nothing is skipped.
# `--build-only` installs cargo-fuzz and builds the targets, nothing more
# (`scripts/prebuild.sh`).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_only=false
if [ "${1:-}" = --build-only ]; then build_only=true; shift; fi
seconds="${1:-20}"
cache="${WS_CACHE_DIR:-$HOME/.cache/workloadspread}"
tools="$cache/tools/cargo-fuzz"
log() { echo "[fuzz] $*" >&2; }

toolchain="${WS_FUZZ_TOOLCHAIN:-stable}"
export RUSTC_BOOTSTRAP=1
if ! [ -x "$tools/bin/cargo-fuzz" ]; then
  log "installing cargo-fuzz into $tools (once; about a minute)"
  cargo install --quiet --locked cargo-fuzz --root "$tools" || cargo install --quiet cargo-fuzz --root "$tools"
fi
export PATH="$tools/bin:$PATH"
target_dir="$cache/fuzz-target"
cd "$root"
log "building the targets (sanitizer build; the first one takes ~7 minutes)"
cargo +"$toolchain" fuzz build --target-dir "$target_dir" 2>&1 | grep -E "^(error|warning)" -A5 || true
if $build_only; then exit 0; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 scripts/fuzz-seeds.py "$work/seeds" >/dev/null
summary=()
for target in $(cargo +"$toolchain" fuzz list); do
  mkdir -p "$work/corpus/$target" "$work/seeds/$target"
  out="$work/$target.log"
  if ! cargo +"$toolchain" fuzz run --target-dir "$target_dir" "$target" "$work/corpus/$target" "$work/seeds/$target" \
      -- -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 >"$out" 2>&1; then
    tail -40 "$out" >&2
    log "FAILED: $target (input under fuzz/artifacts/$target/)"
    exit 1
  fi
  runs="$(grep -Eo 'Done [0-9]+ runs' "$out" | grep -Eo '[0-9]+' | tail -1)"
  cov="$(grep -Eo 'cov: [0-9]+' "$out" | tail -1 | grep -Eo '[0-9]+')"
  summary+=("$(printf '%-22s %10s runs in %ss  (coverage %s edges, corpus %s)' "$target" "$runs" "$seconds" "$cov" \
    "$(ls "$work/corpus/$target" | wc -l)")")
done
log "no crashes"
printf '%s\n' "${summary[@]}"
