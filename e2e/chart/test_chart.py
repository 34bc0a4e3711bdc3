#!/usr/bin/env python3
"""Helm chart checks with the real Helm SDK (PyPI helm-python-sdk).

    test_chart.py lint      lint and render every mode; assert the manifests' contract
    test_chart.py apply     (needs KUBECONFIG) apply the CRD and the rendered RBAC to a
                            real API server and check least privilege with `kubectl auth can-i`;
                            check that the built binaries accept every flag the chart passes
"""
import json
import os
import subprocess
import sys
import tempfile

import helm_python
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "charts", "workloadspread")
NAMESPACE = "workloadspread-system"

VARIANTS = {
    "bundled": {"mode": "bundled"},
    "bundled-cert-manager": {"mode": "bundled", "tls": {"mode": "certManager"}},
    "kubewarden": {"mode": "kubewarden"},
    "custom-workloads": {
        "mode": "bundled",
        "controller": {"customWorkloads": [
            {"group": "example.io", "kind": "Fleet", "replicasPath": "spec.replicas"}]},
    },
    "reference-rules": {"mode": "bundled", "settings": {"rules": "reference"}},
    "host-tuning": {"mode": "bundled", "host": {"evaluateUnrelated": True,
                                                "namespaceCacheGraceSeconds": 5}},
    "rebalance": {"mode": "bundled", "controller": {"rebalance": {
        "enabled": True, "maxEvictions": 3, "intervalSeconds": 10}}},
}


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def render(values, namespace=NAMESPACE):
    out = helm_python.Chart.load(CHART).render(values, name="ws", namespace=namespace)
    docs = []
    for _, text in sorted(out.items()):
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def check_workloads(name, docs):
    for d in by_kind(docs, "Deployment"):
        spec = d["spec"]["template"]["spec"]
        who = f"{name}: Deployment {d['metadata']['name']}"
        if not spec["securityContext"].get("runAsNonRoot"):
            fail(f"{who} may run as root")
        for c in spec["containers"]:
            sc = c["securityContext"]
            if sc.get("allowPrivilegeEscalation") is not False or not sc.get("readOnlyRootFilesystem"):
                fail(f"{who}: container {c['name']} is not restricted: {sc}")
            if sc.get("capabilities", {}).get("drop") != ["ALL"]:
                fail(f"{who}: capabilities not dropped")
            if not c.get("resources", {}).get("requests"):
                fail(f"{who}: no resource requests")
            if not (c.get("livenessProbe") and c.get("readinessProbe")):
                fail(f"{who}: probes missing")


def check_webhooks(name, docs, values):
    hooks = by_kind(docs, "MutatingWebhookConfiguration") + by_kind(docs, "ValidatingWebhookConfiguration")
    if values["mode"] == "kubewarden":
        if hooks or [d for d in by_kind(docs, "Deployment") if "host" in d["metadata"]["name"]]:
            fail(f"{name}: kubewarden mode must not deploy the host or its webhooks")
        policy = by_kind(docs, "ClusterAdmissionPolicy")
        if len(policy) != 1 or not policy[0]["spec"]["mutating"]:
            fail(f"{name}: expected one mutating ClusterAdmissionPolicy")
        ops = {(tuple(r["resources"]), tuple(r["operations"])) for r in policy[0]["spec"]["rules"]}
        want = {(("pods",), ("CREATE", "DELETE")), (("pods/eviction",), ("CREATE",)),
                (("workloadspreads",), ("CREATE", "UPDATE"))}
        if ops != want:
            fail(f"{name}: policy rules {ops}")
        # policy-server has no counter capability: auto must be written as best-effort.
        settings = policy[0]["spec"]["settings"]
        if isinstance(settings, str):
            settings = json.loads(settings)
        if settings["mode"] != "best-effort":
            fail(f"{name}: kubewarden settings {settings} (want mode best-effort)")
        return
    if len(hooks) != 2:
        fail(f"{name}: expected a mutating and a validating configuration, got {len(hooks)}")
    for h in hooks:
        for w in h["webhooks"]:
            if w["sideEffects"] != "None" or w["failurePolicy"] != "Fail" or w["timeoutSeconds"] != 10:
                fail(f"{name}: webhook {w['name']} settings {w}")
            excluded = w["namespaceSelector"]["matchExpressions"][0]["values"]
            if NAMESPACE not in excluded:
                fail(f"{name}: the release namespace must be excluded from its own webhook")
    cert_manager = values.get("tls", {}).get("mode") == "certManager"
    annotated = all("cert-manager.io/inject-ca-from" in (h["metadata"].get("annotations") or {}) for h in hooks)
    if cert_manager != annotated:
        fail(f"{name}: cert-manager CA injection annotation mismatch")
    if cert_manager and not by_kind(docs, "Certificate"):
        fail(f"{name}: no Certificate")
    host = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "ws-host"][0]
    args = host["spec"]["template"]["spec"]["containers"][0]["args"]
    settings = json.loads(next(a for a in args if a.startswith("--settings-json=")).split("=", 1)[1])
    if settings["mode"] != "auto" or settings["onLookupFailure"] != "reject":
        fail(f"{name}: host settings {settings}")
    # The policy and the controller must follow the same rules.
    want = values.get("settings", {}).get("rules", "planned")
    controller = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "ws-controller"][0]
    controller_args = controller["spec"]["template"]["spec"]["containers"][0]["args"]
    if settings.get("rules") != want or f"--rules={want}" not in controller_args:
        fail(f"{name}: rules {settings.get('rules')!r} / {controller_args} (want {want!r})")
    if not by_kind(docs, "PodDisruptionBudget"):
        fail(f"{name}: no PodDisruptionBudget for the host")


def crates_version():
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        for line in f:
            if line.startswith("version = "):
                return line.split('"')[1]
    fail("no workspace version in Cargo.toml")


def check_versions():
    """Images are tagged with the crates' version (make images); the chart's appVersion is
    the default tag, so the three must agree."""
    version = crates_version()
    chart = helm_python.Chart.load(CHART)
    app_version = chart.metadata["appVersion"]
    if app_version != version:
        fail(f"Chart.yaml appVersion {app_version!r} != crates' version {version!r}")
    for d in by_kind(render({"mode": "bundled"}), "Deployment"):
        image = d["spec"]["template"]["spec"]["containers"][0]["image"]
        if not image.endswith(f":{version}"):
            fail(f"{d['metadata']['name']}: default image {image} is not tagged {version}")
    print(f"versions: crates, appVersion and default image tags are {version}")


def lint():
    result = helm_python.lint(CHART)
    problems = [m for m in result["messages"] if m["severity"] >= 2] + result.get("errors", [])
    if problems:
        fail(f"helm lint: {problems}")
    print(f"helm lint: ok ({len(result['messages'])} info messages)")
    for name, values in VARIANTS.items():
        docs = render(values)
        check_workloads(name, docs)
        check_webhooks(name, docs, values)
        kinds = sorted({d["kind"] for d in docs})
        print(f"render {name}: {len(docs)} objects ({', '.join(kinds)})")
    check_versions()
    def controller_args(values):
        d = [d for d in by_kind(render(values), "Deployment") if d["metadata"]["name"] == "ws-controller"][0]
        return d["spec"]["template"]["spec"]["containers"][0]["args"]
    default_args, rebalance_args = controller_args(VARIANTS["bundled"]), controller_args(VARIANTS["rebalance"])
    if "--rebalance" in default_args or "--rebalance-max-evictions=1" not in default_args:
        fail(f"rebalancing must be opt-in by default: {default_args}")
    want = ["--rebalance", "--rebalance-max-evictions=3", "--rebalance-interval-seconds=10"]
    if any(a not in rebalance_args for a in want):
        fail(f"controller.rebalance not passed: {rebalance_args}")
    custom = render(VARIANTS["custom-workloads"])
    role = [d for d in by_kind(custom, "ClusterRole") if d["metadata"]["name"] == "ws-controller"][0]
    if not any("example.io" in r["apiGroups"] for r in role["rules"]):
        fail("custom workload group not readable by the controller")


def kubectl(*args, check=True, stdin=None):
    p = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True)
    if check and p.returncode != 0:
        fail(f"kubectl {' '.join(args)}: {p.stderr}")
    return p


def can_i(namespace, sa, verb, resource, target_ns=None, name=None):
    resource, _, sub = resource.partition("/")
    target = f"{resource}/{name}" if name else resource
    args = ["auth", "can-i", verb, target, f"--as=system:serviceaccount:{namespace}:{sa}"]
    args += ["-n", target_ns or namespace]
    if sub:
        args.append(f"--subresource={sub}")
    return kubectl(*args, check=False).stdout.strip() == "yes"


BINARIES = {"ws-host": "workloadspread-host", "ws-controller": "workloadspread-controller"}


def check_flags_accepted():
    """Every `--flag` a rendered container passes is one its binary's subcommand knows
    (a typo would otherwise surface as a crash-looping pod)."""
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    checked = 0
    for name, values in VARIANTS.items():
        for d in by_kind(render(values), "Deployment"):
            binary = os.path.join(target, "debug", BINARIES[d["metadata"]["name"]])
            if not os.access(binary, os.X_OK):
                fail(f"{binary} not built (run `cargo build --bins` first)")
            args = d["spec"]["template"]["spec"]["containers"][0]["args"]
            subcommand, flags = args[0], {a.split("=", 1)[0] for a in args[1:]}
            usage = subprocess.run([binary, subcommand, "--help"], capture_output=True, text=True, check=True).stdout
            known = {w.rstrip(",.") for w in usage.split() if w.startswith("--")}
            unknown = sorted(flags - known)
            if unknown:
                fail(f"{name}: {d['metadata']['name']} passes {unknown}, unknown to `{BINARIES[d['metadata']['name']]} {subcommand}`")
            checked += len(flags)
    print(f"flags: {checked} rendered flags accepted by the binaries")


def apply():
    check_flags_accepted()
    if not os.environ.get("KUBECONFIG"):
        print("SKIP apply: KUBECONFIG not set")
        return
    ns = f"ws-chart-{os.getpid()}"
    release = "ws"
    kubectl("apply", "-f", os.path.join(CHART, "crds", "workloadspreads.yaml"))
    kubectl("create", "namespace", ns)
    cluster_scoped = []
    try:
        docs = render({"mode": "bundled"}, namespace=ns)
        rbac_kinds = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
        rbac = [d for d in docs if d["kind"] in rbac_kinds]
        # Cluster-scoped names get a unique suffix so parallel runs do not collide.
        for d in rbac:
            if d["kind"].startswith("Cluster"):
                d["metadata"]["name"] += f"-{ns}"
                cluster_scoped.append((d["kind"], d["metadata"]["name"]))
            if d["kind"] == "ClusterRoleBinding":
                d["roleRef"]["name"] += f"-{ns}"
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump_all(rbac, f)
        kubectl("apply", "-f", f.name)
        host, ctl = f"{release}-host", f"{release}-controller"
        checks = [
            (ctl, "update", "workloadspreads.apps.kruise.io/status", "default", None, True),
            (ctl, "patch", "pods", "default", None, True),
            (ctl, "delete", "pods", "default", None, True),
            (ctl, "create", "pods/eviction", "default", None, True),
            (host, "create", "pods/eviction", "default", None, False),
            (ctl, "create", "events.events.k8s.io", "default", None, True),
            (ctl, "update", "leases.coordination.k8s.io", ns, ctl, True),
            (ctl, "update", "leases.coordination.k8s.io", ns, "someone-else", False),
            (ctl, "get", "secrets", "default", None, False),
            (ctl, "update", "deployments.apps", "default", None, False),
            (host, "update", "workloadspreads.apps.kruise.io/status", "default", None, True),
            (host, "list", "replicasets.apps", "default", None, True),
            (host, "delete", "pods", "default", None, False),
            (host, "get", "secrets", ns, f"{host}-tls", True),
            (host, "get", "secrets", ns, "other", False),
            (host, "get", "secrets", "default", None, False),
            (host, "update", "mutatingwebhookconfigurations.admissionregistration.k8s.io", None, release, True),
            (host, "update", "mutatingwebhookconfigurations.admissionregistration.k8s.io", None, "other", False),
            (host, "patch", "customresourcedefinitions.apiextensions.k8s.io", None,
             "workloadspreads.apps.kruise.io", True),
            (host, "patch", "customresourcedefinitions.apiextensions.k8s.io", None, "other.example.com", False),
        ]
        for sa, verb, resource, target, name, want in checks:
            got = can_i(ns, sa, verb, resource, target or ns, name)
            if got != want:
                fail(f"{sa} can {verb} {resource}{'/' + name if name else ''} in {target}: {got}, want {want}")
        print(f"apply: CRD and RBAC accepted; {len(checks)} permission checks ok")
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
        for kind, name in cluster_scoped:
            kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)


if __name__ == "__main__":
    {"lint": lint, "apply": apply}[sys.argv[1] if len(sys.argv) > 1 else "lint"]()
