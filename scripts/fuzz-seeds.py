#!/usr/bin/env python3
"""Writes seed corpora for the fuzz targets into DIR/<target>/ from the repository's
fixtures (policy requests and sessions, playground examples), so no binary corpus is
committed and the seeds follow the fixtures."""
import json
import pathlib
import sys

import yaml

root = pathlib.Path(__file__).resolve().parent.parent
out = pathlib.Path(sys.argv[1])


def write(target, name, data):
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


for req in sorted((root / "policy/test_data/requests").glob("*.json")):
    write("admission", req.stem, req.read_text())

for session in sorted((root / "policy/test_data/sessions").glob("*.yml")):
    exchanges = yaml.safe_load(session.read_text())
    answers = [e["response"].get("payload", "") for e in exchanges if e.get("type") == "Exchange"]
    write("host_answers", session.stem, b"\0".join(a.encode() for a in answers))

for example in sorted((root / "playground/examples").glob("*.yaml")):
    if example.name.endswith(".nodes.yaml"):
        continue
    docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
    ws = next(d for d in docs if d.get("kind") == "WorkloadSpread")
    write("validation", example.stem, json.dumps(ws))
    for i, subset in enumerate(ws["spec"]["subsets"]):
        if "patch" in subset:
            pod = {"metadata": {"labels": {"app": "web"}},
                   "spec": {"containers": [{"name": "main", "image": "nginx",
                                            "resources": {"requests": {"cpu": "500m"}}}]}}
            write("strategic_merge_patch", f"{example.stem}-{i}",
                  json.dumps(pod) + "\0" + json.dumps(subset["patch"]))

write("strategic_merge_patch", "directives", json.dumps(
    {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}],
              "tolerations": [{"key": "k", "operator": "Exists"}]}}) + "\0" + json.dumps(
    {"spec": {"containers": [{"name": "a", "$patch": "delete"}], "$setElementOrder/containers": [{"name": "b"}],
              "tolerations": [{"key": "j", "operator": "Exists"}]}}))
for name, text in [("full", '{"name":"web","subset":"zone-a","uid":"1f2e"}'),
                   ("no-uid", '{"name":"web","subset":"zone-b"}'),
                   ("empty", '{}')]:
    write("annotation", name, text)
print(f"seeds written to {out}")
