#!/usr/bin/env bash
# A kwctl as kwctl 1.36 behaves offline, for the kwctl suite (e2e/policy.bats): the runner
# named by KWCTL_RUNNER (workloadspread-host's kwctl-compatible `run`), preceded on stderr
# by the multi-line warning every offline `kwctl run` writes while it fails to fetch the
# Sigstore trust root (/work/shared/spec/build-and-test-environment.md: "Cannot create
# Sigstore trust root…", then "Caused by:" lines containing "error sending request").
# stdout stays the runner's alone, as kwctl's carries only the JSON answer. `make
# kwctl-suite` runs the suite through it: the suite must judge stdout and the policy's
# own log lines, not whatever else the runner writes.
set -uo pipefail
runner="${KWCTL_RUNNER:?set KWCTL_RUNNER to the runner this wrapper stands in front of}"
if [ "${1:-}" = run ]; then
  cat >&2 <<'WARN'
2026-11-25T10:00:00.000000Z  WARN kwctl::verify: Cannot create Sigstore trust root, verification relying on Rekor and Fulcio will fail error=Failed to fetch https://tuf-repo-cdn.sigstore.dev/10.root.json

Caused by:
    0: error sending request for url (https://tuf-repo-cdn.sigstore.dev/10.root.json)
    1: client error (Connect)
    2: dns error: failed to lookup address information: Temporary failure in name resolution
WARN
fi
exec "$runner" "$@"
