#!/usr/bin/env bash
# `make bench`: regenerates docs/benchmarks.md (machine and date recorded).
#   1. policy evaluation: the Wasm module in wasmtime vs the same code native
#   2. controller reconcile of one WorkloadSpread with 5 000 pods
#   3. admissions through the real API server: pods/s and end-to-end CREATE latency
#      p50/p99 without a webhook, with reserved slots (default), group commit alone and
#      one write per pod
#      and OpenKruise v1.9.0's own kruise-manager in the same series, then the scale
#      sequence 0 -> 10 -> 4 -> 12 -> 20 -> 7 -> 15 for both, and the scale-ins
#      600 -> 60 and 3 000 -> 300 under the invariant monitor (issue #65)
#   4. footprint: host and controller memory and CPU as unrelated pods grow to 10 000,
#      then with 1 000 WorkloadSpreads of 10 pods each in one namespace
# Every figure and every goal verdict in the document comes from this run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
out="$root/docs/benchmarks.md"
tmp="$(mktemp)"
started=$(date +%s)
phase() { echo "[bench] $* ($(( $(date +%s) - started )) s)"; }

phase "policy module"
make --no-print-directory policy
# One release build serves both the host's `bench` subcommand and the admission bench:
# the bench's dev-dependencies change core's features, so a plain `cargo build
# --release` of the host would be a second full (LTO) build.
phase "building release binaries (first run: 15-25 minutes on 2 cores)"
cargo bench --locked -p workloadspread-host --bench admission --bench footprint --no-run
cargo build --release --locked -p workloadspread-controller
host="$target/release/workloadspread-host"
phase "OpenKruise $(sed -n 's/^KRUISE_VERSION=//p' e2e/kruise/kruise.sh) from the Go module proxy (first run: ~7 minutes)"
WS_KRUISE_MANAGER="$(bash e2e/kruise/kruise.sh build)"
WS_KRUISE_MANIFESTS="$(bash e2e/kruise/kruise.sh manifests)"
export WS_KRUISE_MANAGER WS_KRUISE_MANIFESTS

# Instances kept between evaluations, as `serve` does by default (--reuse-instances 8).
reuse=(--reuse-instances 8)
eval_bench() {
  "$host" bench -n 2000 --json --cache-dir none -r "policy/test_data/requests/$1" \
    --cluster-state policy/test_data/cluster.yaml "${@:2}" policy/policy.wasm
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
phase "evaluation latency (five consecutive runs: issue #43 asks for ≤ 1.5× in each)"
# The table shows the first run; the goal is judged on the worst ratio of each run.
run_ratios=()
for run in 1 2 3 4 5; do
  e=$(eval_bench pod-create.json "${reuse[@]}")
  b=$(eval_bench pod-create.json --no-counter "${reuse[@]}")
  v=$(eval_bench workloadspread-create-valid-v1beta1.json "${reuse[@]}")
  [ "$run" = 1 ] && { exact=$e; best=$b; validate=$v; }
  run_ratios+=("$(jq -s 'map(.p50_ratio) | max * 100 | floor / 100' <<<"$e $b $v")")
done
fresh=$(eval_bench pod-create.json)
pooled=$(eval_bench pod-create.json --pool-instances 4)
fresh_ratio=$(jq '.p50_ratio * 100 | floor / 100' <<<"$fresh")
row() { jq -r --arg n "$1" '"| \($n) | \(.wasm.p50_us|floor) µs | \(.wasm.p99_us|floor) µs | \(.native.p50_us|floor) µs | \(.native.p99_us|floor) µs | \(.p50_ratio*100|floor/100) |"' <<<"$2"; }
worst_ratio=$(printf '%s\n' "${run_ratios[@]}" | jq -s 'max')
pooled_ratio=$(jq '.p50_ratio * 100 | floor / 100' <<<"$pooled")
eval_verdict=$(jq -rn --argjson r "$worst_ratio" 'if $r <= 1.5 then "met" else "not met" end')
run_list=$(IFS=,; sed 's/,/, /g' <<<"${run_ratios[*]}")

phase "best-effort admission by workload size"
# One matched best-effort pod CREATE with 30 … 10 000 realistic pods in its workload
# (scripts/bench-state.py); the host honours the policy's field masks, and once more
# ignoring them (a Kubewarden host older than SDK 0.17's masks).
sizes_tmp="$(mktemp -d)"
best_rows=""
declare -A best_p50
for n in 30 300 3000 10000; do
  python3 scripts/bench-state.py "$n" "$sizes_tmp/state-$n.json"
  # Enough evaluations that one busy moment on the machine does not move the p50 (30 at
  # 3 000 pods once read 1.6 ms where 3 idle reruns read 0.81-0.83 ms).
  iterations=$(( n >= 10000 ? 60 : (n >= 3000 ? 300 : 1000) ))
  for masks in honoured ignored; do
    flag=(); [ "$masks" = ignored ] && flag=(--ignore-field-masks)
    # `bench` refuses to time a module whose answer differs from the native build's (a
    # trap, e.g. the per-instance memory cap): such a row says so instead of a time.
    if result=$("$host" bench -n "$iterations" --json --cache-dir none --no-counter "${flag[@]}" \
      -r policy/test_data/requests/pod-create.json --cluster-state "$sizes_tmp/state-$n.json" \
      policy/policy.wasm 2>"$sizes_tmp/error"); then
      best_p50["$n-$masks"]=$(jq '.wasm.p50_us' <<<"$result")
      best_rows+=$(jq -r --arg n "$n" --arg m "$masks" '"| \($n) | \($m) | \(.wasm.p50_us/1000*10|floor/10) ms | \(.wasm.p99_us/1000*10|floor/10) ms | \(.native.p50_us/1000*10|floor/10) ms | \(.p50_ratio*100|floor/100) |"' <<<"$result")$'\n'
    else
      if "$host" bench -n 1 --json --cache-dir none --no-counter "${flag[@]}" --max-memory-mib 4096 \
        -r policy/test_data/requests/pod-create.json --cluster-state "$sizes_tmp/state-$n.json" \
        policy/policy.wasm >/dev/null 2>&1; then
        why="the module traps: over the 256 MiB per-instance memory cap (passes with 4 GiB)"
      else
        why="fails: $(grep -o 'wasm trap: [^"\\]*' "$sizes_tmp/error" | head -n 1)"
      fi
      best_p50["$n-$masks"]=0
      best_rows+="| $n | $masks | $why | | | |"$'\n'
    fi
  done
done
rm -rf "$sizes_tmp"
best_growth=$(jq -n --argjson a "${best_p50[3000-honoured]}" --argjson b "${best_p50[30-honoured]}" '$a / $b * 10 | floor / 10')
best_10k_ms=$(jq -n --argjson a "${best_p50[10000-honoured]}" '$a / 1000 * 10 | floor / 10')
best_growth_verdict=$(jq -rn --argjson r "$best_growth" 'if $r <= 3 then "met" else "not met" end')
best_10k_verdict=$(jq -rn --argjson r "$best_10k_ms" 'if $r <= 20 then "met" else "not met" end')

phase "admission by WorkloadSpreads in the namespace"
# One matched pod CREATE (both modes), its DELETE and a WorkloadSpread CREATE with 1 / 100 /
# 1 000 WorkloadSpreads in the namespace, each other one spreading its own Deployment
# (scripts/bench-state.py --spreads), listed before the one that matches.
spreads_tmp="$(mktemp -d)"
spread_rows=""
declare -A spread_p50
for s in 1 100 1000; do
  python3 scripts/bench-state.py 30 "$spreads_tmp/state-$s.json" --spreads "$s"
  iterations=$(( s >= 1000 ? 300 : 1000 ))
  for what in exact best-effort delete validation exact-list best-effort-list validation-list masks-ignored; do
    # The bundled host's lookup (by target name, the chart's setting there); "-list": the
    # one masked list Kubewarden's policy-server is given.
    lookup='{"spreadLookup":"target-name"}'
    case "$what" in
      exact) args=(-r policy/test_data/requests/pod-create.json) ;;
      best-effort) args=(-r policy/test_data/requests/pod-create.json --no-counter) ;;
      delete) args=(-r policy/test_data/requests/pod-delete.json) ;;
      validation) args=(-r policy/test_data/requests/workloadspread-create-valid-v1beta1.json) ;;
      exact-list) lookup='{}'; args=(-r policy/test_data/requests/pod-create.json) ;;
      best-effort-list) lookup='{}'; args=(-r policy/test_data/requests/pod-create.json --no-counter) ;;
      validation-list) lookup='{}'
        args=(-r policy/test_data/requests/workloadspread-create-valid-v1beta1.json) ;;
      masks-ignored) [ "$s" = 1000 ] || continue; lookup='{}'
        args=(-r policy/test_data/requests/pod-create.json --no-counter --ignore-field-masks) ;;
    esac
    result=$("$host" bench -n "$iterations" --json --cache-dir none --settings-json "$lookup" "${reuse[@]}" "${args[@]}" \
      --cluster-state "$spreads_tmp/state-$s.json" policy/policy.wasm)
    spread_p50["$s-$what"]=$(jq '.wasm.p50_us' <<<"$result")
    spread_rows+=$(jq -r --arg s "$s" --arg w "$what" '"| \($s) | \($w) | \(.wasm.p50_us|floor) µs | \(.wasm.p99_us|floor) µs | \(.native.p50_us|floor) µs | \(.native.p99_us|floor) µs |"' <<<"$result")$'\n'
  done
done
rm -rf "$spreads_tmp"
spread_ratio() { jq -n --argjson a "${spread_p50[1000-$1]}" --argjson b "${spread_p50[1-$1]}" '$a / $b * 100 | floor / 100'; }
spread_exact=$(spread_ratio exact)
spread_best=$(spread_ratio best-effort)
spread_verdict=$(jq -rn --argjson a "$spread_exact" --argjson b "$spread_best" 'if $a <= 2 and $b <= 2 then "met" else "not met" end')
spread_exact_list=$(spread_ratio exact-list)
spread_best_list=$(spread_ratio best-effort-list)

phase "controller reconcile"
reconcile=$(cargo bench --locked -q -p workloadspread-core --bench reconcile 2>/dev/null | grep '^reconcile')
reconcile_verdict="not met"
grep -q 'unchanged 0$' <<<"$reconcile" && reconcile_verdict="met"

phase "admissions through the API server"
# A control plane of its own; its kubeconfig.
cluster_up() { bash e2e/cluster/cluster.sh up | sed -n 's/^export KUBECONFIG=//p'; }
kubeconfig="$(cluster_up)"
trap 'bash e2e/cluster/cluster.sh down' EXIT
k8s_version="$(cat "$(dirname "$kubeconfig")/k8s-version" 2>/dev/null || echo unknown)"
# Each bench's output and errors are kept in $logs: a later failure loses no measurement,
# and a failed bench says why.
logs="$target/bench-logs"
mkdir -p "$logs"
run_bench() { # name, then env assignments for it
  local name=$1; shift
  if ! env "$@" WS_TEST_KUBECONFIG="$kubeconfig" WS_REQUIRE_WASM=1 \
    cargo bench --locked -q -p workloadspread-host --bench "${name%%-*}" \
    >"$logs/$name.out" 2>"$logs/$name.err"; then
    echo "[bench] the $name bench failed ($logs/$name.err):" >&2
    tail -n 20 "$logs/$name.err" >&2
    return 1
  fi
}
run_bench admission
admission=$(cat "$logs/admission.out")
# The profiles, in a run of their own (a profiler running skews what the table measures):
# host + controller and the injection floor, series long enough for 5 s of profile.
phase "profiles of the API server (pprof) and of the host and controller (perf)"
profiles_dir="$(mktemp -d)"
run_bench admission-profiled WS_BENCH_FOCUS=whole-system WS_BENCH_PODS=1500 \
  WS_BENCH_PROFILE="$profiles_dir" || echo "[bench] the profiled run failed: its tables below may be missing" >&2
profiles=$(python3 scripts/bench-profile.py "$profiles_dir" <(printf '%s\n' "$admission"))
rm -rf "$profiles_dir"
phase "footprint as the cluster grows"
# On a fresh control plane: the OpenKruise rows above replaced the WorkloadSpread CRD with
# OpenKruise's (conversion webhook and all), which ours cannot be applied over (422:
# spec.conversion.strategy required), and the footprint's levels assume an empty cluster.
bash e2e/cluster/cluster.sh down
kubeconfig="$(cluster_up)"
run_bench footprint
footprint=$(cat "$logs/footprint.out")

cat >"$tmp" <<DOC
# Benchmarks

Regenerate with \`make bench\` (\`scripts/bench.sh\`, $(( ($(date +%s) - started) / 60 )) minutes this run). Numbers
are from one run; the load average is recorded because other work on the machine
skews them.

* Date: $(date -u +%Y-%m-%dT%H:%MZ)
* Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
* Load average (1/5/15 min) before the measurements: ${load_before}
* Build: release (\`cargo bench\` profile), policy module \`--profile wasm\` ($(stat -c %s policy/policy.wasm) bytes)

## Against the goals

* Guest vs native evaluation ≤ 1.5× (p50) in five consecutive runs: **${eval_verdict}**, worst
  ratio of each run ${run_list} as \`serve\` runs it (instances kept between evaluations); a pod create with a fresh instance per
  evaluation (policy-server's way) ${fresh_ratio}×, with the pooling allocator ${pooled_ratio}×
  (table below).
* Controller: 0 API writes per reconcile when nothing changed: **${reconcile_verdict}**.
* Best-effort pod CREATE, 3 000 pods in the workload ≤ 3× the 30-pod time: **${best_growth_verdict}**
  (${best_growth}×); 10 000 pods ≤ 20 ms p50 in the module: **${best_10k_verdict}** (${best_10k_ms} ms).
* Matched pod CREATE with 1 000 WorkloadSpreads in the namespace ≤ 2× with one (p50, in the module):
  **${spread_verdict}**, exact ${spread_exact}×, best-effort ${spread_best}× (by target name, the
  bundled host's lookup); with the one masked list Kubewarden gets, exact ${spread_exact_list}×,
  best-effort ${spread_best_list}×.
$(grep -E '^\* (Matched pod|Concurrency 64|Status writes|Host \+ controller|Writes per admitted pod|CPU per admitted pod)' <<<"$admission" | sed 's/(goal \([^:]*\): \([a-z ]*\))/(goal \1: **\2**)/')
$(grep '^\* Unrelated' <<<"$admission" | sed 's/(goal ≤ +1 ms: \(.*\));/(goal ≤ +1 ms: **\1**);/')
$(grep -E '^\* (OpenKruise|Scale sequence|Scale-in)' <<<"$admission")
$(grep '^\* Concurrency 1, median' <<<"$admission")
$(grep '^\* ' <<<"$footprint")

$(awk '/^Against issue #43/ {on=1} on && seen && !/^\|/ {exit} on {print; if (/^\|/) seen=1}' <<<"$admission")

The profiles behind "what bounds it" (\`scripts/bench-profile.py\`, a run of their own with
\`WS_BENCH_PROFILE\`, 1 500 pods per series, 5 s of each):

$profiles

Why the bounds stand, beyond this run's figures:

* **The fence read** is what a reserved slot costs instead of a status write: a hand-out is
  answered only once a read begun after its decision shows the stored spec, so a maximum
  lowered before the watch brings it is never overrun
  (\`fault_matrix::a_maximum_lowered_before_the_host_sees_it_admits_no_pod_above_it\`).
  No cheaper fresh read exists in the API: a GET without \`resourceVersion\` is a quorum read
  of etcd (\`CacheDelegator.Get\`, k8s.io/apiserver v0.37.2), and a consistent LIST from the
  watch cache waits for etcd's progress notification, which the API server requests every
  100 ms while a reader waits. A fence without a read per pod (placeholders as leases fenced
  by the validating webhook) was reviewed adversarially and rejected: it holds only while
  every spec edit reaches our webhook (issue #43's notes).
* **The pod watch** the controller needs (node, conditions, owner of every pod of a spread
  namespace) is JSON: the API server encodes every pod event once more for it, where the
  cluster's own controllers share one protobuf encoding; the client libraries we build on (kube-rs, k8s-openapi) decode JSON only.
* **Our CPU** has no hot spot left to remove (the profile above); what remains is per
  admission (TLS, HTTP, the AdmissionReview's JSON, the guest, the patch) and per event.

## Policy evaluation (one pod CREATE / one WorkloadSpread CREATE)

\`workloadspread-host bench\`: the module in wasmtime, instances kept between evaluations
as \`serve\` does (\`--reuse-instances 8\`), vs the same policy crate compiled natively, both
answering host calls from the same in-memory cluster state and doing the same work around
the policy: the request encoded into the waPC payload, \`validate\` on those bytes, the
answer decoded and the JSON patch computed (\`engine::evaluate::evaluate_with\`); before timing, both
sides' answers to the request are checked equal, and the two are timed interleaved (one
evaluation of each per round, 2 000 rounds) so the machine's load weighs on both alike. Goal:
wasm ≤ 1.5× native.

| request | wasm p50 | wasm p99 | native p50 | native p99 | ratio (p50) |
|---|---|---|---|---|---|
$(row "pod create, exact (counter)" "$exact")
$(row "pod create, best-effort" "$best")
$(row "WorkloadSpread validation" "$validate")
$(row "pod create, exact, a fresh instance per evaluation (\`--reuse-instances 0\`, policy-server's way)" "$fresh")
$(row "pod create, exact, fresh, pooling allocator (\`--pool-instances 4\`)" "$pooled")

Where the difference comes from: both sides do the same JSON work (the payload, every host
call's request and answer are bytes on both); what differs is the code that runs it and the
copies across the boundary. What bounds the ratio, on the smallest request most: a \`perf\`
profile of 100 000 interleaved rounds of the WorkloadSpread validation row (2026-11-29,
ratio 1.46 in that run) put 38 % of all samples in the module's compiled code — about 20 µs
of its ~33 µs, where the same policy code compiled natively takes about 10 µs (Cranelift's
code against LLVM's, on allocation-heavy JSON decoding) — and under 2 % in wasmtime's own
runtime (calls across the boundary, libcalls, export lookups); the rest is the host-side
work both sides share, which is why the larger pod rows read 1.2–1.3. Building the module
with SIMD (\`-C target-feature=+simd128\`) changed nothing (32.0 vs 31.7 µs p50).
The decision logic is the same code; the module allocates with talc instead of Rust's
default dlmalloc for wasm (\`policy/src/lib.rs\`: an evaluation builds a JSON tree per
request and per host answer; with dlmalloc the module took 7–12 % longer on these rows,
ratios 1.36 and 1.66 instead of 1.29 and 1.48 on 2026-11-27), and decodes typed objects from
the request's JSON tree by reference instead of from a copy of it. The last two rows instantiate a fresh instance (WASI
context, linear memory, \`wapc_init\`) for every evaluation, as Kubewarden's policy-server
does: that instantiation is what keeping instances saves (\`serve --reuse-instances\`, default
8; an instance that trapped, timed out or grew past 32 MiB is dropped, none serves more than
10 000 evaluations).

## Best-effort admission by workload size

\`workloadspread-host bench --no-counter\` on one matched pod CREATE (the
\`policy/test_data\` request) with the given number of pods in its workload, each as a
kubelet reports it (\`scripts/bench-state.py\`: defaulted spec, affinity, tolerations,
volumes, status with conditions, IPs and container statuses; ~4 KB of JSON). The state is
steady: the status the controller wrote counts all but the newest 10 pods, which still carry
the \`workloadspread.io/pending\` label. Without the counter the policy starts from that
status and lists only the pending pods (one fixed label selector, field masks
\`workloadspread_core::masks::PENDING_POD_FIELDS\`; \`docs/counter-protocol.md\`, *best-effort
by size*), so the other pods of the workload are never copied to the module. *ignored*
answers with whole pods, as a host that predates the masks does. Wasm and native make the
same host calls. Before this design (commit 1677533) the module recounted every
pod of the workload: 2.5 / 23.4 / 284.5 / 935.8 ms p50 at 30 / 300 / 3 000 / 10 000 pods
with masks honoured (the previous version of this page).

| pods in the workload | field masks | wasm p50 | wasm p99 | native p50 | ratio (p50) |
|---|---|---|---|---|---|
${best_rows}
## Admission by WorkloadSpreads in the namespace

\`workloadspread-host bench\` (as above) with 1 / 100 / 1 000 WorkloadSpreads in the
namespace: the fixtures' \`web-spread\` (30 pods in its workload, 10 still pending) and the
others, each spreading its own Deployment over three zones with a status the controller
wrote (\`scripts/bench-state.py --spreads\`), listed before the one that matches. Rows: the
matched pod CREATE in exact mode (counter) and best-effort, its DELETE (exact), a
WorkloadSpread CREATE (validation: the overlap check and the target's template), and at
1 000 the best-effort CREATE answered by a host that ignores field masks. Rows without a
suffix look WorkloadSpreads up by target name (\`spreadLookup: target-name\`, what the chart
gives the bundled host): the pod's owner chain first, then one list per name on it selected
by \`spec.targetRef.name\` (answered from the host's cache), pruned to what matching reads.
Rows \`-list\` use the one list of the namespace's every WorkloadSpread (\`spreadLookup: list\`,
what Kubewarden's policy-server gets: one fixed request, one cache there), pruned the same
way (field masks \`workloadspread_core::masks::WORKLOADSPREAD_TARGET_FIELDS\`: name,
deletionTimestamp, targetRef, targetFilter). Either way core's rule picks one (each owner of
the pod looked up once) and only that one is read whole (a GET); a DELETE reads the pod's
WorkloadSpread by the name its annotation carries. Before the masked list (commit d195846)
every admission listed every WorkloadSpread whole and looked the pod's owners up again for
each one.

| WorkloadSpreads in the namespace | request | wasm p50 | wasm p99 | native p50 | native p99 |
|---|---|---|---|---|---|
${spread_rows}
## Controller reconcile

\`cargo bench -p workloadspread-core --bench reconcile\` (one WorkloadSpread, 3 subsets,
5 000 running pods; the second and later reconciles see nothing changed):

    $reconcile

## Admissions through the API server

\`cargo bench -p workloadspread-host --bench admission\`: 256 pods of one workload
created through the local kube-apiserver ${k8s_version} (KWOK nodes), at the given concurrency, each
CREATE timed by its client from request to response (so with the webhook it includes
the API server calling the webhook over TLS, the policy evaluation and the exact
counter's status write when there is one). Rows: no webhook (the API server's own cost);
the transport floor, a no-op mutating webhook in the bench (TLS and HTTP/1.1 as the host,
an empty patch); the injection floor, the same webhook answering with the part of the
host's patch every pod gets (the matched annotation and the empty \`nodeAffinity\`,
diffed per request as the host does; the bench fails if the host's pods stop carrying
it): what any injecting webhook costs the API server; what users run, the host and the
controller with their defaults; one host replica in exact mode with its defaults — reserved slots (claims answered from
slots reserved ahead in one write, renamed to the pods in a batched write ~1 s later;
\`docs/counter-protocol.md\`) over group commit; with group commit alone
(\`--reserve-max 0\`: every claim written before it is answered, an idle queue writes at
once, claims arriving during a write share the next one); and with one status write per
claim (\`--reserve-max 0 --max-batch 1\`, the reference algorithm); then pods of a namespace without a WorkloadSpread through the same
webhook ("unrelated", most pods of a cluster), answered without the policy (the default)
and with it (\`--evaluate-unrelated\`); last, OpenKruise v1.9.0 itself, the reference
users come from: its \`kruise-manager\` (pod webhook and WorkloadSpread controller in one
process, built from the Go module proxy by \`e2e/kruise/kruise.sh\` and run out of cluster
with its WorkloadSpread and pod-webhook gates on, its daemon off, all of its CRDs and webhook
configurations installed) spreading the same Fleet's pods with the same WorkloadSpread
(\`v1alpha1\`, the version v1.9.0 serves; its CRD replaces ours for its series), with its
client's defaults (30 qps, burst 50) and with them lifted; its webhook call is the API
server's mean for \`mpod.kb.io\`, its status writes and 409s the API server's count, its CPU
in the *host + controller* column. *Webhook call* is
the API server's mean (\`apiserver_admission_webhook_admission_duration_seconds\`);
*evaluation* is the host's mean time to answer (\`workloadspread_host_evaluation_duration_seconds\`,
counter wait included). Status writes (reservations, settles and returns included) and 409
conflicts are the host's counters; the last subset has no maximum, so the pods placed there
need no claim. *API server CPU per pod* is the API server's own \`process_cpu_seconds_total\`
over the series divided by its pods (etcd not included); *host + controller CPU per pod*
is theirs (\`/proc/<pid>/stat\`, 10 ms ticks): on a cluster of two cores every
millisecond of either is taken from the pod creates. *Machine CPU per pod* is every
process's together (\`/proc/stat\`: the API server, etcd, the cluster's controllers, the
bench's client and the no-op webhook that runs in it, the host and controller, the
kernel), with the cores kept busy on average in brackets: at concurrency 64 both
webhooks keep the two cores busy, so throughput is what that CPU per pod allows. To see
where the API server's share goes, \`WS_BENCH_PROFILE=<dir>\` (with \`WS_BENCH_PODS\` to
lengthen the series) saves a CPU profile of the API server per row
(\`host/benches/admission/profile.rs\`).

$admission

With one write per claim, the claims of concurrent pods queue behind each other's
status writes; group commit answers a batch of claims with one write, which is why
its latency grows far less with concurrency; reserved slots answer most claims with no
write at all, and the writes they do make (a block, a batch of renames) are off the
admission path. Past that, throughput is bounded by the
API server's own pod creates on 2 cores.

## Footprint as the cluster grows

\`cargo bench -p workloadspread-host --bench footprint\`: one host replica (exact mode, the
webhook enrolled in every namespace) and one release controller (all namespaces) on the
local control plane. First a spread workload of 500 pods (a Fleet over 3 subsets) is admitted
and counted; then unrelated pods (bare pods bound to KWOK nodes, in 10 namespaces without a
WorkloadSpread: most pods of a real cluster) are created up to each level. Per row: resident
memory (\`VmRSS\`, the largest of five samples over 2 s after the level settled) and the CPU
time (user + system) each process spent during the row. Both cache pods only in namespaces
that have a WorkloadSpread (the host also answers unrelated pods without the guest); the
controller keeps each pod pruned to what a reconcile reads (\`core::pods::prune_for_cache\`).
Before the controller's per-namespace caches (commit fe80b0d, same machine, same day) it
watched every pod of the cluster: 42.6 / 71.3 / 107.3 MB at 1 000 / 5 000 / 10 000 unrelated
pods. The last rows (#31): 1 000 WorkloadSpreads in one namespace, each over its own Fleet of
10 pods (3 subsets), created, then their pods admitted by the host and counted by the
controller, then 30 s idle; the line under "Against the goals" gives CPU per admission and
per reconcile over the admitting rows (the host's and the controller's histogram counts).

$(grep '^|' <<<"$footprint")
DOC
mv "$tmp" "$out"
phase "wrote $out"
cat "$out"
