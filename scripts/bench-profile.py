#!/usr/bin/env python3
"""Where the CPU of an admitted pod goes, from the profiles of a `make bench` run.

Usage: bench-profile.py <profile dir> <admission output>

<profile dir> holds what `WS_BENCH_PROFILE` wrote (host/benches/admission/profile.rs):
the API server's pprof profile per row (`<row>-c<n>.pprof`) and a `perf record` of the
host and the controller (`<row>-c<n>-<process>.perf`). <admission output> is the table the
unprofiled run printed: a profile gives shares, and the row's CPU per pod of that run turns
them into milliseconds per pod (a profiler running skews what it measures).

Prints two markdown tables: the API server's CPU per pod by what it served, injection floor
against host + controller; and the host's and the controller's CPU per pod by where it ran
(our code, the kernel, libc, the guest's compiled code), with each one's top functions.
"""

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

FLOOR = "no-op webhook answering with our patch"
OURS = "host + controller (defaults)"

# What a sample of the API server served, by the frames of its stack: the first category
# whose pattern a frame matches, categories in this order.
API_CATEGORIES = [
    ("garbage collection", r"^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge)"),
    ("mutating webhook calls (TLS, JSON, patch)", r"admission/plugin/webhook/mutating\."),
    ("validating webhook calls", r"admission/plugin/webhook/validating\."),
    ("watches (fan-out, encoding, sending)", r"(storage/cacher\.|handlers\.(\(\*WatchServer\)|handleWatch|serveWatch))"),
    ("WorkloadSpread status writes", r"\(\*crdHandler\)\.serveStatus"),
    ("other WorkloadSpread requests (the fence's GETs)", r"\(\*crdHandler\)\.serveResource"),
    ("creates (pods, events)", r"handlers\.CreateResource"),
    ("updates (leases, other status)", r"handlers\.UpdateResource"),
    ("patches", r"handlers\.PatchResource"),
    ("gets", r"handlers\.GetResource"),
    ("lists", r"handlers\.ListResource"),
    ("deletes", r"handlers\.(DeleteResource|DeleteCollection)"),
    ("etcd client", r"(go\.etcd\.io/etcd/client|google\.golang\.org/grpc)"),
    ("request chain (TLS, HTTP, authn, authz, flow control, audit)", r"^(net/http|golang\.org/x/net/http2|crypto/tls|k8s\.io/apiserver/pkg/(server/filters|endpoints/filters))"),
]


def row_file(label, concurrency, suffix=""):
    name = re.sub(r"[^A-Za-z0-9]", "-", label)
    return f"{name}-c{concurrency}{suffix}"


def table_rows(admission):
    """(label, concurrency) -> (API server CPU per pod, ours per pod) in ms, from the table."""
    rows = {}
    for line in admission.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 13 or not cells[1].isdigit():
            continue
        ms = lambda c: float(c.split()[0]) if c.endswith("ms") else None
        rows[(cells[0], int(cells[1]))] = (ms(cells[10]), ms(cells[11]))
    return rows


def api_shares(path):
    """Category -> share of the profile's CPU, from `go tool pprof -traces`."""
    out = subprocess.run(
        ["go", "tool", "pprof", "-traces", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout
    totals = defaultdict(float)
    patterns = [(name, re.compile(p)) for name, p in API_CATEGORIES]
    for block in out.split("-----------+-------------------------------------------------------")[1:]:
        lines = [l for l in block.strip().splitlines() if l.strip()]
        if not lines:
            continue
        first = lines[0].split()
        value = parse_duration(first[0])
        frames = [first[1]] + [l.strip() for l in lines[1:]]
        category = "other"
        for name, pattern in patterns:
            if any(pattern.search(f) for f in frames):
                category = name
                break
        totals[category] += value
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in totals.items()}


def parse_duration(text):
    m = re.fullmatch(r"([0-9.]+)(ns|us|µs|ms|s)", text)
    if not m:
        return 0.0
    scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]
    return float(m.group(1)) * scale


def perf_report(path, sort):
    out = subprocess.run(
        ["perf", "report", "-i", str(path), "--no-children", "--sort", sort, "--stdio", "-q"],
        check=True, capture_output=True, text=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*([0-9.]+)%\s+(.*\S)", line)
        if m:
            rows.append((float(m.group(1)) / 100.0, m.group(2)))
    return rows


def samples(path):
    """The samples `perf` took of the process (at a fixed rate: its CPU time)."""
    out = subprocess.run(
        ["perf", "report", "-i", str(path), "--stdio", "-q", "--sort", "pid", "-n", "--no-children"],
        check=True, capture_output=True, text=True,
    ).stdout
    return sum(int(l.split()[1]) for l in out.splitlines() if re.match(r"\s*[0-9.]+%\s+\d+", l))


def where(dso):
    if "kernel" in dso:
        return "kernel (system calls, scheduling, network)"
    if re.search(r"lib(c|m|pthread)[.-]", dso):
        return "libc (malloc, free, memcpy)"
    if dso.startswith("workloadspread"):
        return "our code"
    return "the guest's compiled code and other"


def main():
    profiles, admission = Path(sys.argv[1]), Path(sys.argv[2]).read_text()
    rows = table_rows(admission)
    for c in (1, 64):
        floor_file = profiles / (row_file(FLOOR, c) + ".pprof")
        ours_file = profiles / (row_file(OURS, c) + ".pprof")
        floor_cpu, ours_cpu = rows.get((FLOOR, c), (None,))[0], rows.get((OURS, c), (None,))[0]
        if not (floor_file.exists() and ours_file.exists() and floor_cpu and ours_cpu):
            print(f"(no API server profiles of concurrency {c})\n")
            continue
        floor, ours = api_shares(floor_file), api_shares(ours_file)
        print(f"API server CPU per admitted pod at concurrency {c}, by what it served (the row's CPU per pod of the unprofiled run split by its profile's shares):\n")
        print("| served | injection floor | host + controller | more for us |")
        print("|---|---:|---:|---:|")
        names = [n for n, _ in API_CATEGORIES] + ["other"]
        for n in names:
            a, b = floor.get(n, 0.0) * floor_cpu, ours.get(n, 0.0) * ours_cpu
            if max(a, b) >= 0.005:
                print(f"| {n} | {a:.2f} ms | {b:.2f} ms | {b - a:+.2f} ms |")
        print(f"| all | {floor_cpu:.2f} ms | {ours_cpu:.2f} ms | {ours_cpu - floor_cpu:+.2f} ms |\n")
    for c in (1, 64):
        ours_cpu = rows.get((OURS, c), (None, None))[1]
        files = {p: profiles / (row_file(OURS, c, f"-{p}") + ".perf") for p in ("host", "controller")}
        if not ours_cpu or not all(f.exists() for f in files.values()):
            print(f"(no perf profiles of host + controller at concurrency {c})\n")
            continue
        counts = {p: samples(f) for p, f in files.items()}
        total = sum(counts.values()) or 1
        print(f"Host and controller CPU per admitted pod at concurrency {c} ({ours_cpu:.2f} ms together in the unprofiled run), split by `perf` samples:\n")
        print("| process | where | per pod | top functions (share of the process) |")
        print("|---|---|---:|---|")
        for p, f in files.items():
            own = ours_cpu * counts[p] / total
            groups = defaultdict(float)
            for share, dso in perf_report(f, "dso"):
                groups[where(dso)] += share
            top = ", ".join(
                f"`{sym[:60]}` {share * 100:.1f} %"
                for share, sym in perf_report(f, "sym")[:5]
            )
            first = True
            for g, share in sorted(groups.items(), key=lambda kv: -kv[1]):
                print(f"| {p if first else ''} | {g} | {own * share:.2f} ms | {top if first else ''} |")
                first = False
        print()


if __name__ == "__main__":
    main()
