#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM (JSON) of the Rust dependencies of the release binaries.

    sbom.py --out dist/release/workloadspread-VERSION.cdx.json [--package NAME]...

From `cargo metadata --locked` (the dependency graph cargo resolves for the Linux target,
normal dependencies only: what is compiled into the binaries) and Cargo.lock (each crate's
SHA-256 checksum as published). Every component has a purl (pkg:cargo/NAME@VERSION), its
licence expression and its hash; the dependency graph is included. Reproducible: the
serial number derives from Cargo.lock, the timestamp from SOURCE_DATE_EPOCH (default: the
last commit's time). Fails if a registry crate has no checksum.
"""
import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys
import tomllib
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = "x86_64-unknown-linux-gnu"


def source_date_epoch():
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    out = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%ct"],
                         capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--package", action="append",
                    default=None, help="root packages (default: the host and the controller)")
    args = ap.parse_args(argv)
    roots = args.package or ["workloadspread-host", "workloadspread-controller"]
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--locked", "--format-version", "1", "--filter-platform", TARGET],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    with open(os.path.join(ROOT, "Cargo.lock"), "rb") as f:
        lock_bytes = f.read()
    lock = tomllib.loads(lock_bytes.decode())
    checksums = {(p["name"], p["version"]): p.get("checksum") for p in lock["package"]}
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    by_name = {packages[i]["name"]: i for i in nodes if packages[i]["source"] is None}

    # Normal (non-dev, non-build) dependencies reachable from the roots.
    def normal_deps(node):
        for d in node["deps"]:
            if any(k["kind"] is None for k in d["dep_kinds"]):
                yield d["pkg"]

    seen, todo = set(), [by_name[r] for r in roots]
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        todo.extend(normal_deps(nodes[i]))

    def ref(i):
        p = packages[i]
        return f"pkg:cargo/{p['name']}@{p['version']}"

    components = []
    for i in sorted(seen, key=lambda i: (packages[i]["name"], packages[i]["version"])):
        p = packages[i]
        c = {"type": "library" if p["source"] else "application", "bom-ref": ref(i),
             "name": p["name"], "version": p["version"], "purl": ref(i)}
        if p.get("license"):
            c["licenses"] = [{"expression": p["license"]}]
        if p["source"]:
            checksum = checksums.get((p["name"], p["version"]))
            if not checksum:
                sys.exit(f"sbom: {p['name']} {p['version']} has no checksum in Cargo.lock")
            c["hashes"] = [{"alg": "SHA-256", "content": checksum}]
            c["externalReferences"] = [{"type": "distribution",
                                        "url": f"https://crates.io/api/v1/crates/{p['name']}/{p['version']}/download"}]
        components.append(c)
    dependencies = [{"ref": ref(i), "dependsOn": sorted({ref(d) for d in normal_deps(nodes[i])})}
                    for i in sorted(seen, key=ref)]
    version = packages[by_name[roots[0]]]["version"]
    stamp = datetime.datetime.fromtimestamp(source_date_epoch(), datetime.timezone.utc)
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.UUID(bytes=hashlib.sha256(lock_bytes).digest()[:16], version=5)}",
        "version": 1,
        "metadata": {
            "timestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "scripts/sbom.py"}]},
            "component": {"type": "application", "bom-ref": "workloadspread", "name": "workloadspread",
                          "version": version, "licenses": [{"expression": "Apache-2.0"}]},
        },
        "components": components,
        "dependencies": [{"ref": "workloadspread", "dependsOn": sorted(ref(by_name[r]) for r in roots)}]
                        + dependencies,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(bom, f, indent=1, sort_keys=True)
        f.write("\n")
    crates = sum(1 for c in components if c["type"] == "library")
    print(f"sbom: {args.out}: {crates} crates (+{len(components) - crates} of ours), CycloneDX 1.5")
    return 0


if __name__ == "__main__":
    sys.exit(main())
