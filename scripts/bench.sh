#!/usr/bin/env bash
# `make bench`: regenerates docs/benchmarks.md (machine and date recorded).
#   1. policy evaluation: the Wasm module in wasmtime vs the same code native
#   2. controller reconcile of one WorkloadSpread with 5 000 pods
#   3. webhook admissions/s through the real API server, group commit vs one write per pod
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
out="$root/docs/benchmarks.md"
tmp="$(mktemp)"

echo "[bench] policy module"
make --no-print-directory policy
echo "[bench] building release binaries"
cargo build --release --locked -p workloadspread-host
host="$target/release/workloadspread-host"

eval_bench() {
  "$host" bench -n 2000 --json --cache-dir none -r "policy/test_data/requests/$1" \
    --cluster-state policy/test_data/cluster.yaml "${@:2}" policy/policy.wasm
}
echo "[bench] evaluation latency"
exact=$(eval_bench pod-create.json)
best=$(eval_bench pod-create.json --no-counter)
validate=$(eval_bench workloadspread-create-valid.json)
row() { jq -r --arg n "$1" '"| \($n) | \(.wasm.p50_us|floor) µs | \(.wasm.p99_us|floor) µs | \(.native.p50_us|floor) µs | \(.native.p99_us|floor) µs | \(.p50_ratio*100|floor/100) |"' <<<"$2"; }

echo "[bench] controller reconcile"
reconcile=$(cargo bench --locked -q -p workloadspread-core --bench reconcile 2>/dev/null | grep '^reconcile')

echo "[bench] admissions through the API server"
kubeconfig="$(bash e2e/cluster/cluster.sh up | sed -n 's/^export KUBECONFIG=//p')"
trap 'bash e2e/cluster/cluster.sh down' EXIT
admission=$(WS_TEST_KUBECONFIG="$kubeconfig" WS_REQUIRE_WASM=1 \
  cargo bench --locked -q -p workloadspread-host --bench admission 2>/dev/null | grep '^|')

cat >"$tmp" <<DOC
# Benchmarks

Regenerate with \`make bench\` (\`scripts/bench.sh\`). Numbers are from one run; the
machine is shared with nothing else during the run.

* Date: $(date -u +%Y-%m-%dT%H:%MZ)
* Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
* Build: release (\`cargo build --release\`), policy module \`--profile wasm\` ($(stat -c %s policy/policy.wasm) bytes)

## Policy evaluation (one pod CREATE / one WorkloadSpread CREATE)

\`workloadspread-host bench\`: the module in wasmtime with a fresh instance per
evaluation (as \`serve\` does) vs the same policy crate compiled natively, both
answering host calls from the same in-memory cluster state. Goal: wasm ≤ 1.5× native.

| request | wasm p50 | wasm p99 | native p50 | native p99 | ratio (p50) |
|---|---|---|---|---|---|
$(row "pod create, exact (counter)" "$exact")
$(row "pod create, best-effort" "$best")
$(row "WorkloadSpread validation" "$validate")

## Controller reconcile

\`cargo bench -p workloadspread-core --bench reconcile\` (one WorkloadSpread, 3 subsets,
5 000 running pods; the second and later reconciles see nothing changed):

    $reconcile

## Webhook admissions through the API server

\`cargo bench -p workloadspread-host --bench admission\`: 256 pods of one workload
created through the local kube-apiserver v1.20.2 at the given concurrency; one host
replica in exact mode; status writes and 409 conflicts from the host's metrics.
Goal: group commit ≥ 5× one-write-per-pod at concurrency 64.

$admission
DOC
mv "$tmp" "$out"
echo "[bench] wrote $out"
cat "$out"
