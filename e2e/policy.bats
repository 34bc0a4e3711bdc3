#!/usr/bin/env bats
# The policy module under kwctl, with host calls replayed from recorded sessions.
# kwctl offers no counter capability, so the policy runs in best-effort mode here.
# Skipped (with a message) where kwctl is not installed.

setup() {
  ROOT="$(cd "$BATS_TEST_DIRNAME/.." && pwd)"
  DATA="$ROOT/policy/test_data"
  WASM="${WS_POLICY_WASM:-$ROOT/policy/policy.wasm}"
  command -v kwctl >/dev/null || skip "kwctl is not installed (not available from crates.io/PyPI/apt/npm here)"
  [ -f "$WASM" ] || skip "$WASM not built: run make policy"
}

run_policy() {
  local request="$1" session="${2:-}"
  local args=(run --execution-mode kubewarden --allow-context-aware --request-path "$DATA/requests/$request")
  [ -n "$session" ] && args+=(--replay-host-capabilities-interactions "$DATA/sessions/$session")
  kwctl "${args[@]}" "$WASM" 2>/dev/null
}

@test "pod create is injected into the subset with room (best effort)" {
  run run_policy pod-create.json pod-create.yml
  [ "$status" -eq 0 ]
  [[ "$output" == *'"allowed":true'* ]]
  patch="$(echo "$output" | jq -r '.patch | @base64d')"
  [[ "$patch" == *'zone-b'* ]]
  [[ "$patch" == *'apps.kruise.io~1matched-workloadspread'* ]]
}

@test "dry-run pod create is admitted unchanged" {
  run run_policy pod-create-dry-run.json
  [ "$status" -eq 0 ]
  [[ "$output" == *'"allowed":true'* ]]
  [ "$(echo "$output" | jq -r .patch)" = "null" ]
}

@test "invalid WorkloadSpread is rejected with every field error" {
  run run_policy workloadspread-create-invalid.json workloadspread-create-invalid.yml
  [ "$status" -eq 0 ]
  [[ "$output" == *'"allowed":false'* ]]
  [[ "$output" == *'duplicated subset name a'* ]]
  [[ "$output" == *'ScheduleStrategy'* ]]
}
