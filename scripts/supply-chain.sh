#!/usr/bin/env bash
# `make supply-chain`: cargo-deny over the workspace (deny.toml).
#   licences, bans (wildcards refused, duplicate versions counted), sources: always;
#   advisories: against the RustSec database — fetched from GitHub, or the copy named by
#   WS_ADVISORY_DB (a clone of github.com/RustSec/advisory-db). Where neither is possible
#   the check says so on stderr and in its last line (it is never skipped quietly), and
#   WS_REQUIRE_ADVISORIES=1 makes that an error.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
deny="$(command -v cargo-deny || true)"
[ -n "$deny" ] || { echo "supply-chain: cargo-deny is not installed (scripts/install-prereqs.sh installs it)" >&2; exit 1; }
out="$(mktemp)"; trap 'rm -f "$out"' EXIT
"$deny" --locked check licenses bans sources 2>"$out" || { cat "$out" >&2; exit 1; }
dups="$(grep -c '^warning\[duplicate\]' "$out" || true)"
echo "supply-chain: licences, bans, sources ok ($dups crates in more than one version)"

if [ -n "${WS_ADVISORY_DB:-}" ]; then
  # cargo-deny 0.20 reads the default database from DB_PATH/advisory-db-3157b0e258782691.
  dbs="$(mktemp -d)"; trap 'rm -f "$out"; rm -rf "$dbs"' EXIT
  ln -s "$(cd "$WS_ADVISORY_DB" && pwd)" "$dbs/advisory-db-3157b0e258782691"
  sed "s|^\[advisories\]|[advisories]\ndb-path = \"$dbs\"|" deny.toml >"$dbs/deny.toml"
  "$deny" --locked --offline --config "$dbs/deny.toml" check advisories 2>"$out" \
    || { cat "$out" >&2; exit 1; }
  echo "supply-chain: advisories ok (database $WS_ADVISORY_DB)"
elif timeout 120 "$deny" --locked check advisories 2>"$out"; then
  echo "supply-chain: advisories ok (RustSec database fetched)"
elif grep -q "failed to fetch advisory database" "$out"; then
  grep -m1 "failed to fetch advisory database" "$out" >&2 || true
  msg="supply-chain: ADVISORIES NOT CHECKED: the RustSec database could not be fetched (no route to GitHub); set WS_ADVISORY_DB to a clone of it"
  echo "$msg" >&2
  [ "${WS_REQUIRE_ADVISORIES:-}" = 1 ] && exit 1
  echo "$msg"
else
  cat "$out" >&2
  exit 1
fi
