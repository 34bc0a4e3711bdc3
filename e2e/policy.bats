#!/usr/bin/env bats
# The annotated policy module as a Kubewarden user runs it: `kwctl run` without an
# execution mode (the module's metadata says kubewarden-wapc), host calls replayed from
# recorded sessions. KWCTL names the runner: `make test` runs this suite against
# workloadspread-host's kwctl-compatible `run` and, where kwctl is installed, against kwctl
# too. Assertions are on the patched object and on allowed/message, never on the patch's
# text (kwctl and our host may encode the same change differently).
#
# kwctl 1.36 facts this suite is written to (seen with kwctl 1.36.0-beta.1 on this module;
# /work/shared/spec/kubewarden.md):
# * `--execution-mode` takes opa | gatekeeper | kubewarden | wasi at its argument parser,
#   and `kubewarden` is then refused ("Valid values are kubewarden-wapc, opa, gatekeeper"):
#   no -e value runs a waPC module. An annotated module runs without -e (its metadata says
#   kubewarden-wapc). Our `run` does the same.
# * Offline, every `kwctl run` first writes a multi-line WARN to stderr while it fails to
#   fetch the Sigstore trust root ("Cannot create Sigstore trust root…", then "Caused by:"
#   lines containing "error sending request"); stdout carries only the JSON answer. So
#   answers are read from stdout alone (`run --separate-stderr`), and checks of the log
#   look at the records that are not that warning (`evaluation_log`). `make kwctl-suite`
#   also runs the suite through e2e/kwctl-offline.sh, which adds that warning to our runner.

bats_require_minimum_version 1.5.0

setup() {
  ROOT="$(cd "$BATS_TEST_DIRNAME/.." && pwd)"
  DATA="$ROOT/policy/test_data"
  WASM="${WS_POLICY_WASM:-$ROOT/policy/annotated-policy.wasm}"
  KWCTL="${KWCTL:-kwctl}"
  [ -f "$WASM" ] || { echo "$WASM is missing: run make annotated-policy" >&2; return 1; }
  command -v "$KWCTL" >/dev/null || { echo "no runner $KWCTL (set KWCTL)" >&2; return 1; }
}

# run_policy REQUEST [SESSION] [SETTINGS_JSON]: the answer on stdout, the runner's log in
# $BATS_TEST_TMPDIR/log. Requests that make host calls come with their recorded session.
run_policy() {
  local request="$1" session="${2:-}" settings="${3:-}"
  local args=(run --request-path "$DATA/requests/$request")
  if [ -n "$session" ]; then
    args+=(--allow-context-aware --replay-host-capabilities-interactions "$DATA/sessions/$session")
  fi
  if [ -n "$settings" ]; then args+=(--settings-json "$settings"); fi
  "$KWCTL" "${args[@]}" "$WASM" 2>"$BATS_TEST_TMPDIR/log"
}

# evaluation_log: the runner's log without kwctl's offline Sigstore warning. A record is a
# line that starts at column 0 and does not start "Caused by"; its continuation lines
# (indented, "Caused by:", blank) belong to it. The record whose first line names Sigstore
# or its TUF repository is dropped whole.
evaluation_log() {
  awk '
    /^[[:space:]]/ || /^Caused by/ || /^$/ { if (!skip) print; next }
    { skip = ($0 ~ /[Ss]igstore|tuf-repo/) }
    !skip { print }
  ' "$BATS_TEST_TMPDIR/log"
}

# patched REQUEST: the request's object with the answer's JSON patch applied (RFC 6902,
# PyPI jsonpatch), as the API server applies it.
patched() {
  ANSWER="$output" python3 -c '
import base64, json, os, sys, jsonpatch
answer = json.loads(os.environ["ANSWER"])
request = json.load(open(sys.argv[1]))
obj = (request.get("request") or request)["object"]
ops = json.loads(base64.b64decode(answer["patch"])) if answer.get("patch") else []
print(json.dumps(jsonpatch.apply_patch(obj, ops)))' "$DATA/requests/$1"
}

@test "pod create is injected into the subset with room (best effort)" {
  run run_policy pod-create.json pod-create.yml
  [ "$status" -eq 0 ]
  [ "$(jq -r .allowed <<<"$output")" = true ]
  pod="$(patched pod-create.json)"
  [ "$(jq -r '.metadata.annotations["apps.kruise.io/matched-workloadspread"]' <<<"$pod")" \
    = '{"name":"web-spread","subset":"zone-b"}' ]
  terms="$(jq -c '.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms' <<<"$pod")"
  [[ "$terms" == *'{"key":"topology.kubernetes.io/zone","operator":"In","values":["zone-b"]}'* ]]
  # zone-b injects no toleration: the pod's own stay as they were.
  [ "$(jq -c '.spec.tolerations' <<<"$pod")" = \
    "$(jq -c '(.request // .).object.spec.tolerations' "$DATA/requests/pod-create.json")" ]
}

@test "dry-run pod create is admitted unchanged" {
  run run_policy pod-create-dry-run.json
  [ "$status" -eq 0 ]
  [ "$(jq -r .allowed <<<"$output")" = true ]
  [ "$(jq -r .patch <<<"$output")" = null ]
}

@test "a v1alpha1 WorkloadSpread whose terms the API server would prune is refused" {
  run run_policy workloadspread-create-valid.json
  [ "$status" -eq 0 ]
  [ "$(jq -r .allowed <<<"$output")" = false ]
  [[ "$(jq -r .status.message <<<"$output")" == *'write it as apps.kruise.io/v1beta1'* ]]
}

@test "invalid WorkloadSpread is rejected with every field error" {
  run run_policy workloadspread-create-invalid.json workloadspread-create-invalid.yml
  [ "$status" -eq 0 ]
  [ "$(jq -r .allowed <<<"$output")" = false ]
  message="$(jq -r .status.message <<<"$output")"
  [[ "$message" == *'duplicated subset name a'* ]]
  [[ "$message" == *'ScheduleStrategy'* ]]
}

@test "a WorkloadSpread created before its workload is admitted, with no failed lookup" {
  run run_policy workloadspread-create-valid-v1beta1.json workloadspread-before-workload.yml
  [ "$status" -eq 0 ]
  [ "$(jq -r .allowed <<<"$output")" = true ]
  # Neither a failed lookup nor a recorded read the policy did not make (a GET instead of
  # the list: our runner reports unused exchanges, kwctl fails on a mismatch). kwctl's
  # offline Sigstore warning is not the policy's.
  ! evaluation_log | grep -qi -e "not found" -e "error" -e "not used"
}

@test "settings as Kubewarden's manifests give them (best-effort) make no counter call" {
  run run_policy pod-create.json pod-create.yml '{"mode":"best-effort"}'
  [ "$status" -eq 0 ]
  [ "$(jq -r '.metadata.annotations["apps.kruise.io/matched-workloadspread"]' <<<"$(patched pod-create.json)")" \
    = '{"name":"web-spread","subset":"zone-b"}' ]
  # Counted by later admissions until the controller's status counts it.
  [ "$(jq -r '.metadata.labels["workloadspread.io/pending"]' <<<"$(patched pod-create.json)")" = true ]
  ! grep -q "unknown binding" "$BATS_TEST_TMPDIR/log"
}

@test "an unknown execution mode is refused with kwctl's message" {
  run --separate-stderr "$KWCTL" run --execution-mode kubewarden --request-path "$DATA/requests/pod-create-dry-run.json" "$WASM"
  [ "$status" -ne 0 ]
  [[ "$stderr" == *'Unknown policy execution mode "kubewarden". Valid values are "kubewarden-wapc", "opa", "gatekeeper"'* ]]
}

@test "kubewarden-wapc is not an execution mode kwctl 1.36 parses: the module runs without -e" {
  run --separate-stderr "$KWCTL" run --execution-mode kubewarden-wapc --request-path "$DATA/requests/pod-create-dry-run.json" "$WASM"
  [ "$status" -ne 0 ]
  [[ "$stderr" == *'possible values: opa, gatekeeper, kubewarden, wasi'* ]]
  run --separate-stderr "$KWCTL" run --request-path "$DATA/requests/pod-create-dry-run.json" "$WASM"
  [ "$status" -eq 0 ]
  [ "$(jq -r .allowed <<<"$output")" = true ]
}
