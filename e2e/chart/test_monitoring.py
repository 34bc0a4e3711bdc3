#!/usr/bin/env python3
"""The chart's monitoring: ServiceMonitors, the PrometheusRule and the Grafana dashboard.

    test_monitoring.py lint    render with monitoring on and off; promtool checks and unit-tests
                               the rendered alert rules (e2e/chart/alerts_test.yaml); the
                               dashboard is valid JSON whose panels all have queries
    test_monitoring.py names   print the metric names the rules and the dashboard use (JSON):
                               the integration suite compares them with a live scrape of the
                               host and the controller
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import helm_python
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_chart import CHART, by_kind, fail, render  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ON = {"mode": "bundled", "monitoring": {
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
    "dashboard": {"enabled": True}}}
METRIC = re.compile(r"\b(workloadspread_[a-z_]+)")


def rendered_rules(docs):
    rules = by_kind(docs, "PrometheusRule")
    if len(rules) != 1:
        fail(f"one PrometheusRule expected, got {len(rules)}")
    return rules[0]["spec"]


def rendered_dashboard(docs):
    maps = [d for d in by_kind(docs, "ConfigMap")
            if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    if len(maps) != 1:
        fail(f"one dashboard ConfigMap (label grafana_dashboard: \"1\") expected, got {len(maps)}")
    (name, text), = maps[0]["data"].items()
    if not name.endswith(".json"):
        fail(f"dashboard key {name} is not a .json file")
    return json.loads(text)


def expressions(rules, dashboard):
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    for p in dashboard["panels"]:
        targets = p.get("targets") or []
        if not targets:
            fail(f"dashboard panel {p.get('title')!r} has no query")
        exprs.extend(t["expr"] for t in targets)
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            exprs.append(v["query"])
    return exprs


def names(exprs):
    found = set()
    for e in exprs:
        for m in METRIC.findall(e):
            # A histogram's series: the family is what the binaries register.
            found.add(re.sub(r"_(bucket|sum|count)$", "", m))
    return sorted(found)


def promtool(rules):
    tool = shutil.which("promtool")
    if not tool:
        fail("promtool is not installed (Debian package prometheus; scripts/install-prereqs.sh)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rules.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(rules, f)
        for args in (["check", "rules", path],):
            out = subprocess.run([tool, *args], capture_output=True, text=True)
            if out.returncode != 0:
                fail(f"promtool {' '.join(args)}: {out.stdout}{out.stderr}")
        tests = open(os.path.join(HERE, "alerts_test.yaml")).read().replace("RULES_FILE", path)
        test_path = os.path.join(tmp, "alerts_test.yaml")
        with open(test_path, "w") as f:
            f.write(tests)
        out = subprocess.run([tool, "test", "rules", test_path], capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"promtool test rules: {out.stdout}{out.stderr}")


def lint():
    result = helm_python.lint(CHART, ON, strict=True)
    problems = [m for m in result["messages"] if m["severity"] >= 2] + result.get("errors", [])
    if problems:
        fail(f"helm lint with monitoring on: {problems}")
    docs = render(ON)
    monitors = by_kind(docs, "ServiceMonitor")
    components = sorted(m["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] for m in monitors)
    if components != ["controller", "host"]:
        fail(f"ServiceMonitors for host and controller expected, got {components}")
    services = by_kind(docs, "Service")
    for m in monitors:
        want = m["spec"]["selector"]["matchLabels"]
        matched = [s for s in services if want.items() <= s["metadata"].get("labels", {}).items()]
        ports = {p["name"] for s in matched for p in s["spec"]["ports"]}
        for ep in m["spec"]["endpoints"]:
            if ep["port"] not in ports:
                fail(f"ServiceMonitor {m['metadata']['name']}: no Service it selects has port {ep['port']} ({ports})")
        if m["metadata"]["labels"].get("release") != "prometheus":
            fail("serviceMonitor.labels are not on the ServiceMonitor")
    rules = rendered_rules(docs)
    with open(os.path.join(CHART, "monitoring", "rules.yaml")) as f:
        if rules != yaml.safe_load(f):
            fail("the PrometheusRule's spec differs from monitoring/rules.yaml")
    promtool(rules)
    dashboard = rendered_dashboard(docs)
    used = names(expressions(rules, dashboard))
    if len(used) < 10:
        fail(f"too few metrics in rules and dashboard: {used}")
    off = render({"mode": "bundled"})
    for kind in ("ServiceMonitor", "PrometheusRule"):
        if by_kind(off, kind):
            fail(f"{kind} rendered with monitoring off")
    if [d for d in by_kind(off, "ConfigMap")
            if d["metadata"].get("labels", {}).get("grafana_dashboard")]:
        fail("the dashboard ConfigMap rendered with monitoring off")
    print(f"monitoring: 2 ServiceMonitors, {sum(len(g['rules']) for g in rules['groups'])} alert rules "
          f"(promtool check + unit tests), dashboard with {len(dashboard['panels'])} panels, "
          f"{len(used)} metrics")


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else "lint"
    if cmd == "lint":
        lint()
    elif cmd == "names":
        docs = render(ON)
        print(json.dumps(names(expressions(rendered_rules(docs), rendered_dashboard(docs)))))
    else:
        fail(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
