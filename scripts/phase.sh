#!/usr/bin/env bash
# The time of each phase of `make test` (and of CI's installs before it), so that a slower
# step shows in every run. Records go to the file WS_PHASE_LOG names (nothing is recorded
# when it is unset); `report` prints them as a table, in the order the phases started.
#
#   phase.sh origin          the run starts now (kept if the log already has one)
#   phase.sh begin NAME      NAME starts now
#   phase.sh end NAME        NAME ended now
#   phase.sh report          the table: where each phase ended and how long it took
#
# Background phases (scripts/prebuild.sh) are named "background: ..."; a phase that began
# and never ended (a failed step, or one still running) says so.
set -euo pipefail
log="${WS_PHASE_LOG:-}"
[ -n "$log" ] || exit 0
cmd="${1:-}"
case "$cmd" in
  origin)
    grep -q '^origin' "$log" 2>/dev/null || printf 'origin\t-\t%s\n' "$(date +%s)" >>"$log" ;;
  begin|end)
    [ -n "${2:-}" ] || { echo "usage: $0 $cmd NAME" >&2; exit 2; }
    printf '%s\t%s\t%s\n' "$cmd" "$2" "$(date +%s)" >>"$log" ;;
  report)
    [ -f "$log" ] || exit 0
    python3 - "$log" "$(date +%s)" <<'PY'
import sys

path, now = sys.argv[1], int(sys.argv[2])
# One row per begin (a step make runs twice, as a recursive make's prerequisite, has two),
# closed by the next end of that name.
origin, rows = None, []
for line in open(path, encoding="utf-8"):
    kind, name, at = line.rstrip("\n").split("\t")
    at = int(at)
    if kind == "origin":
        origin = at if origin is None else min(origin, at)
    elif kind == "begin":
        rows.append([name, at, None])
    elif kind == "end":
        open_rows = [r for r in rows if r[0] == name and r[2] is None]
        if open_rows:
            open_rows[-1][2] = at
if not rows:
    sys.exit(0)
origin = min([r[1] for r in rows] + ([origin] if origin is not None else []))
minutes = lambda s: f"{s / 60:.1f}"
width = max([5] + [len(r[0]) for r in rows])
print(f"| {'phase':<{width}} | starts at min | ends at min | took min |")
print(f"|{'-' * (width + 2)}|--------------:|------------:|---------:|")
for name, began, ended in sorted(rows, key=lambda r: r[1]):
    if ended is not None:
        end, took = minutes(ended - origin), minutes(ended - began)
    else:
        end, took = "unfinished", minutes(now - began) + "+"
    print(f"| {name:<{width}} | {minutes(began - origin):>13} | {end:>11} | {took:>8} |")
print(f"total: {minutes(now - origin)} min ({now - origin} s)")
PY
    ;;
  *) echo "usage: $0 origin|begin NAME|end NAME|report" >&2; exit 2 ;;
esac
