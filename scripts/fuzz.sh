#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 20) from seeds generated out of
# the fixtures, and prints each target's executions. A crash fails the run (the input is
# kept under fuzz/artifacts/). cargo-fuzz needs nightly compiler features (-Z flags): the
# stable toolchain provides them with RUSTC_BOOTSTRAP=1, so no nightly toolchain is needed
# and nothing is skipped.
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
# One build at a time: `make test` builds the targets in the background
# (scripts/prebuild.sh); a foreground run waits for it and finds them built.
mkdir -p "$cache/build"
exec {lock}>"$cache/build/fuzz.lock"
flock "$lock"
if ! [ -x "$tools/bin/cargo-fuzz" ]; then
  log "installing cargo-fuzz into $tools (once; about a minute)"
  cargo install --quiet --locked cargo-fuzz --root "$tools" || cargo install --quiet cargo-fuzz --root "$tools"
fi
export PATH="$tools/bin:$PATH"
target_dir="$cache/fuzz-target"
cd "$root"
# No sanitizer: the targets run safe Rust (core, the policy, serde), where AddressSanitizer
# finds nothing the borrow checker lets through, and its instrumentation made this build
# the longest step of a cold `make test` (20 min in the background, docs/ci-time.md).
# libFuzzer's coverage guidance, panics and the timeouts below are what find bugs here.
sanitizer=(--sanitizer none)
log "building the targets (the first build takes several minutes)"
cargo +"$toolchain" fuzz build "${sanitizer[@]}" --target-dir "$target_dir" 2>&1 | grep -E "^(error|warning)" -A5 || true
exec {lock}>&-
if $build_only; then exit 0; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 scripts/fuzz-seeds.py "$work/seeds" >/dev/null
summary=()
for target in $(cargo +"$toolchain" fuzz list); do
  mkdir -p "$work/corpus/$target" "$work/seeds/$target"
  out="$work/$target.log"
  if ! cargo +"$toolchain" fuzz run "${sanitizer[@]}" --target-dir "$target_dir" "$target" "$work/corpus/$target" "$work/seeds/$target" \
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
