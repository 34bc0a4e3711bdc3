#!/usr/bin/env bash
# CI's wall time (`make test`): the compile-heavy work that the steps of `make test` need
# later starts in the background, first of all, at the lowest CPU and I/O priority: it takes
# the cores that the steps in front leave idle (a crate compiling on one core, links, the
# integration tests waiting on the cluster). What it builds, in the order it is needed:
#   * the control plane: etcd, KWOK, kube-apiserver, -controller-manager, -scheduler and
#     kubectl (`e2e/cluster/cluster.sh install`, Go; the integration tests' `cluster.sh up`
#     waits for it on the install lock instead of building them a second time);
#   * the real node's kubelet and kube-proxy (`cluster.sh install-node`, for the chart e2e);
#   * the playground's wasm-bindgen CLI (`scripts/build-playground.sh --tools-only`);
#   * the fuzz targets (`scripts/fuzz.sh --build-only`).
# The steps that need the last two take the same locks as their builds here: one that comes
# first waits for the build under way instead of starting a second one beside it.
# The images of `make test` are made of the binaries its tests built (Makefile,
# IMAGE_PROFILE), so no release build of wasmtime is needed here.
# The later steps run exactly as they would without it and find the work done. A failure
# here fails nothing: the step that needs the work does it again and fails on its own.
#   prebuild.sh start   launch (no-op when one is running)
#   prebuild.sh wait    wait for it and say how it went
#   prebuild.sh stop    stop it (CI's exit trap: no build outlives the run)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${WS_CACHE_DIR:-$HOME/.cache/workloadspread}"
state="$cache/prebuild"
log() { echo "[prebuild] $*" >&2; }
# Whether the recorded process runs and is this script's `work` (a pid file left by an
# earlier run may name a process that reused the number).
running() {
  local pid cmd
  pid=$(cat "$state/pid" 2>/dev/null) || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline") || return 1
  [[ $cmd == *"prebuild.sh work"* ]]
}

# part NAME CMD...: one part of the work, its time in the phase log (scripts/phase.sh).
part() {
  local name="$1"; shift
  echo "$name"
  bash "$root/scripts/phase.sh" begin "background: $name"
  "$@" || status=1
  bash "$root/scripts/phase.sh" end "background: $name"
}

work() {
  set +e
  local started status=0
  started=$(date +%s)
  part "control plane: etcd, KWOK, Kubernetes (Go)" bash "$root/e2e/cluster/cluster.sh" install
  part "the real node's kubelet and kube-proxy (Go)" bash "$root/e2e/cluster/cluster.sh" install-node
  part "wasm-bindgen CLI" bash "$root/scripts/build-playground.sh" --tools-only
  part "fuzz targets" bash "$root/scripts/fuzz.sh" --build-only
  echo "$status $(( $(date +%s) - started ))" > "$state/done"
  rm -f "$state/pid"
}

case "${1:-}" in
  start)
    mkdir -p "$state"
    if running; then log "already running (pid $(cat "$state/pid"))"; exit 0; fi
    rm -f "$state/done" "$state/pid"
    cd "$root"
    # Detached, its output in a file: make does not wait for it, nor a closed terminal stop it.
    prio=(nice -n 19)
    if command -v ionice >/dev/null; then prio+=(ionice -c3); fi
    # Its own process group (job control), so that `stop` ends its cargo and rustc too —
    # in this session, not a new one (setsid): with the kernel's autogroup, sessions share
    # the CPU equally and `nice` would count only within its own.
    set -m
    nohup "${prio[@]}" bash "$0" work > "$state/log" 2>&1 < /dev/null &
    echo $! > "$state/pid"
    set +m
    log "started in the background (pid $!, log $state/log)"
    ;;
  work) work ;;
  wait)
    [ -f "$state/pid" ] || [ -f "$state/done" ] || { log "was not started"; exit 0; }
    waited=$(date +%s)
    while ! [ -f "$state/done" ] && running; do sleep 5; done
    if ! [ -f "$state/done" ]; then
      log "stopped before it finished; the steps that need its work do it themselves"
      exit 0
    fi
    read -r status seconds < "$state/done"
    if [ "$status" = 0 ]; then
      log "done in ${seconds}s (waited $(( $(date +%s) - waited ))s for it here)"
    else
      log "a part failed after ${seconds}s; the step that needs it will do it again. Its log:"
      tail -30 "$state/log" >&2
    fi
    ;;
  stop)
    if running; then
      pid=$(cat "$state/pid")
      kill -TERM -- "-$pid" 2>/dev/null || true
      log "stopped (pid $pid)"
    fi
    rm -f "$state/pid"
    ;;
  *) echo "usage: $0 start|wait|stop" >&2; exit 2 ;;
esac
