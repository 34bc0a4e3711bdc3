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
import time

import helm_python
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "charts", "workloadspread")
NAMESPACE = "workloadspread-system"

VARIANTS = {
    "bundled": {"mode": "bundled"},
    "bundled-cert-manager": {"mode": "bundled", "tls": {"mode": "certManager"}},
    # Issue #45: taken over from OpenKruise, whose CRD (and conversion) stays its own.
    "openkruise-keep-crd": {"mode": "bundled", "openKruise": {"keepCrd": True}},
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
    # Issue #42: OpenKruise's timers alone, a wait bound, an extra signal.
    "capacity-timers": {"mode": "bundled", "controller": {"capacity": {
        "signals": False, "waitSeconds": 600, "extraSignals": ["QuotaExceeded@my-provisioner=no-capacity"]}}},
    # Security review R4: more signals, each judged by the Event policy too.
    "capacity-extra-signals": {"mode": "bundled", "controller": {"capacity": {
        "extraSignals": ["QuotaExceeded@my-provisioner=no-capacity", "Preempted=capacity-coming"]}}},
    # Issue #30: least privilege, opt-in namespaces, client certificates, digests.
    "custom-workloads-subresources": {
        "mode": "bundled",
        "controller": {"customWorkloads": [
            {"group": "example.io", "kind": "Fleet", "replicasPath": "spec.replicas",
             "subResources": [{"group": "sets.example.io", "kind": "FleetSet"},
                              {"group": "sets.example.io", "kind": "Policy", "resource": "policies"}]}]},
    },
    "scoped-pod-writes": {"mode": "bundled", "controller": {"podWrite": {
        "namespaces": ["team-a", "team-b"], "rescheduling": False}}},
    "opt-in-namespaces": {"mode": "bundled", "webhook": {"namespaceSelector": {
        "matchLabels": {"workloadspread.io/enabled": "true"}}},
        "networkPolicy": {"webhookFrom": [{"ipBlock": {"cidr": "10.0.0.10/32"}}],
                          "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]}},
    "client-certificates": {"mode": "bundled", "tls": {"clientCA": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}},
    "digests": {"mode": "bundled",
                "host": {"image": {"digest": "sha256:" + "a" * 64}},
                "controller": {"image": {"digest": "sha256:" + "b" * 64, "tag": "0.1.0"}}},
    "kubewarden-digest": {"mode": "kubewarden", "kubewarden": {"moduleDigest": "sha256:" + "c" * 64}},
    "no-network-policy": {"mode": "bundled", "networkPolicy": {"enabled": False}},
    "no-pod-metadata-policy": {"mode": "bundled", "podMetadataPolicy": {"enabled": False}},
    # Issue #41: the placement check warns, or is off.
    "placement-warn": {"mode": "bundled", "placementCheck": {"action": "Warn"}},
    "placement-off": {"mode": "kubewarden", "placementCheck": {"action": ""}},
    "priority": {"mode": "bundled", "priorityClassName": "system-cluster-critical"},
}

MATCHED = "apps.kruise.io/matched-workloadspread"
HOLD = "workloadspread.test/hold"
MATCH_CONDITIONS = ["pod-create-with-a-workload-controller", "pod-delete-of-a-matched-pod",
                    "pod-delete-of-a-live-pod"]


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


def webhook_definitions(docs):
    """The webhooks the host writes into the configurations once it serves them (issue #41):
    {"mutating": [...], "validating": [...]} from the host's ConfigMap."""
    found = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "ws-host-webhooks"]
    return yaml.safe_load(found[0]["data"]["webhooks.yaml"]) if found else None


def check_webhooks(name, docs, values):
    configs = by_kind(docs, "MutatingWebhookConfiguration") + by_kind(docs, "ValidatingWebhookConfiguration")
    hooks = configs
    if values["mode"] == "kubewarden":
        if hooks or [d for d in by_kind(docs, "Deployment") if "host" in d["metadata"]["name"]]:
            fail(f"{name}: kubewarden mode must not deploy the host or its webhooks")
        policy = by_kind(docs, "ClusterAdmissionPolicy")
        if len(policy) != 1 or not policy[0]["spec"]["mutating"]:
            fail(f"{name}: expected one mutating ClusterAdmissionPolicy")
        spec = policy[0]["spec"]
        if [c["name"] for c in spec.get("matchConditions", [])] != MATCH_CONDITIONS:
            fail(f"{name}: policy matchConditions {spec.get('matchConditions')}")
        excluded = spec["namespaceSelector"]["matchExpressions"][0]["values"]
        if "kubewarden" not in excluded or NAMESPACE not in excluded:
            fail(f"{name}: the kubewarden and release namespaces must be excluded: {excluded}")
        digest = values.get("kubewarden", {}).get("moduleDigest")
        if digest and spec["module"] != f"registry://ghcr.io/workloadspread/policies/workloadspread@{digest}":
            fail(f"{name}: module {spec['module']} not pinned to {digest}")
        ops = {(tuple(r["resources"]), tuple(r["operations"])) for r in policy[0]["spec"]["rules"]}
        want = {(("pods",), ("CREATE", "DELETE")), (("pods/eviction",), ("CREATE",)),
                (("workloadspreads",), ("CREATE", "UPDATE"))}
        if ops != want:
            fail(f"{name}: policy rules {ops}")
        # policy-server has no counter capability: auto must be written as best-effort.
        settings = policy[0]["spec"]["settings"]
        if isinstance(settings, str):
            settings = json.loads(settings)
        if settings["mode"] != "best-effort" or settings["spreadLookup"] != "list":
            fail(f"{name}: kubewarden settings {settings} (want mode best-effort, spreadLookup list)")
        return
    if len(configs) != 2:
        fail(f"{name}: expected a mutating and a validating configuration, got {len(configs)}")
    # Issue #41: the chart renders the configurations without webhooks (no pod is sent to a
    # host that does not serve yet); the host writes the definitions from its ConfigMap.
    if any("webhooks" in c for c in configs):
        fail(f"{name}: the chart renders webhooks into the configurations: {configs}")
    definitions = webhook_definitions(docs)
    if not definitions:
        fail(f"{name}: no webhook definitions for the host (ConfigMap ws-host-webhooks)")
    hooks = [{"webhooks": definitions["mutating"]}, {"webhooks": definitions["validating"]}]
    host_spec = deployment(docs, "ws-host")
    host_args = host_spec["containers"][0]["args"]
    mounted = {v["name"]: v for v in host_spec["volumes"]}.get("webhooks", {}).get("configMap", {})
    if "--webhook-config=ws" not in host_args or "--webhooks-file=/etc/workloadspread/webhooks.yaml" \
            not in host_args or mounted.get("name") != "ws-host-webhooks":
        fail(f"{name}: the host is not given the webhook definitions: {host_args} {host_spec['volumes']}")
    pod_annotations = [d for d in by_kind(docs, "Deployment")
                       if d["metadata"]["name"] == "ws-host"][0]["spec"]["template"]["metadata"]["annotations"]
    if "checksum/webhooks" not in pod_annotations:
        fail(f"{name}: changed webhook definitions would not roll the hosts: {pod_annotations}")
    # Pods: CREATE/DELETE narrowed by matchConditions, Fail; evictions (which do not carry the
    # pod) Ignore; both write status outside dry runs (NoneOnDryRun); WorkloadSpreads: None.
    want = {
        "pods.workloadspread.io": ([("pods", "CREATE"), ("pods", "DELETE")], "Fail", "NoneOnDryRun", MATCH_CONDITIONS),
        "evictions.workloadspread.io": ([("pods/eviction", "CREATE")], "Ignore", "NoneOnDryRun", []),
        "workloadspreads.workloadspread.io": ([("workloadspreads", "CREATE"), ("workloadspreads", "UPDATE")],
                                              "Fail", "None", []),
    }
    pods_hook = [w for w in definitions["mutating"] if w["name"] == "pods.workloadspread.io"]
    if not pods_hook or pods_hook[0].get("reinvocationPolicy") != "IfNeeded":
        fail(f"{name}: the pod webhook must be re-invoked after later webhooks: {pods_hook}")
    seen = set()
    selector = values.get("webhook", {}).get("namespaceSelector", {})
    for h in hooks:
        for w in h["webhooks"]:
            seen.add(w["name"])
            rules, policy, side_effects, conditions = want.get(w["name"], (None,) * 4)
            got_rules = sorted((r, op) for rule in w["rules"] for r in rule["resources"] for op in rule["operations"])
            got_conditions = [c["name"] for c in w.get("matchConditions", [])]
            if (got_rules, w["failurePolicy"], w["sideEffects"], got_conditions) != (sorted(rules or []), policy, side_effects, conditions) \
                    or w["timeoutSeconds"] != 10:
                fail(f"{name}: webhook {w['name']} settings {w}")
            excluded = w["namespaceSelector"]["matchExpressions"][0]["values"]
            if NAMESPACE not in excluded or "kube-system" not in excluded:
                fail(f"{name}: the release namespace and kube-system must be excluded from the webhook")
            if w["namespaceSelector"].get("matchLabels") != selector.get("matchLabels"):
                fail(f"{name}: webhook.namespaceSelector not applied: {w['namespaceSelector']}")
    if seen != set(want):
        fail(f"{name}: webhooks {sorted(seen)}, want {sorted(want)}")
    cert_manager = values.get("tls", {}).get("mode") == "certManager"
    # Issue #41: the hosts keep the bundle in both modes (an overlap at a CA change), so
    # cert-manager's cainjector must not write it too.
    if any("cert-manager.io/inject-ca-from" in (h["metadata"].get("annotations") or {}) for h in configs) \
            or any(a.startswith("--crd-ca-injection-from") for a in host_args):
        fail(f"{name}: cainjector would fight the hosts over the CA bundle")
    if cert_manager and "--tls-ca-overlap=15m" not in host_args:
        fail(f"{name}: no CA overlap in cert-manager mode: {host_args}")
    if cert_manager:
        certs = {c["metadata"]["name"]: c["spec"] for c in by_kind(docs, "Certificate")}
        issuers = {i["metadata"]["name"]: i["spec"] for i in by_kind(docs, "Issuer")}
        # A CA of our own issues the serving certificate: its renewal keeps the CA bundle.
        if not certs.get("ws-host-ca", {}).get("isCA") or issuers.get("ws-host", {}).get("ca") != {"secretName": "ws-host-ca"}:
            fail(f"{name}: expected a CA Certificate and a CA Issuer: {certs} {issuers}")
        serving = certs.get("ws-host", {})
        if serving.get("duration") != "8760h" or serving.get("issuerRef", {}).get("name") != "ws-host":
            fail(f"{name}: serving Certificate {serving}")
    host = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "ws-host"][0]
    args = host["spec"]["template"]["spec"]["containers"][0]["args"]
    settings = json.loads(next(a for a in args if a.startswith("--settings-json=")).split("=", 1)[1])
    if (settings["mode"] != "auto" or settings["onLookupFailure"] != "reject"
            or settings["spreadLookup"] != "target-name"):
        fail(f"{name}: host settings {settings}")
    # The policy and the controller must follow the same rules.
    want = values.get("settings", {}).get("rules", "planned")
    controller = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "ws-controller"][0]
    controller_args = controller["spec"]["template"]["spec"]["containers"][0]["args"]
    if settings.get("rules") != want or f"--rules={want}" not in controller_args:
        fail(f"{name}: rules {settings.get('rules')!r} / {controller_args} (want {want!r})")
    if not by_kind(docs, "PodDisruptionBudget"):
        fail(f"{name}: no PodDisruptionBudget for the host")


def check_host_secrets():
    """Issue #41 (6): the host may create Secrets in its namespace (RBAC cannot name what is
    created) but the chart's ValidatingAdmissionPolicy refuses it any but its own."""
    ns = f"ws-secrets-{os.getpid()}"
    kubectl("create", "namespace", ns)
    created = []
    try:
        docs = render({"mode": "bundled"}, namespace=ns)
        objs = [d for d in docs if d["kind"] in {"ServiceAccount", "Role", "RoleBinding"}
                and d["metadata"]["name"].startswith("ws-host")]
        policy = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")
                  and d["metadata"]["name"] == "ws-host-secrets"]
        if len(policy) != 2:
            fail(f"no Secret policy for the host: {[d['metadata']['name'] for d in docs]}")
        for d in policy:
            d["metadata"]["name"] += f"-{ns}"
            if d["kind"] == "ValidatingAdmissionPolicyBinding":
                d["spec"]["policyName"] += f"-{ns}"
        created = [(d["kind"], d["metadata"]["name"]) for d in policy]
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objs + policy))
        as_host = [f"--as=system:serviceaccount:{ns}:ws-host", "-n", ns]

        def create(secret, kind="kubernetes.io/tls"):
            return kubectl("create", "secret", "generic", secret, f"--type={kind}",
                           "--from-literal=tls.crt=c", "--from-literal=tls.key=k",
                           "--dry-run=server", *as_host, check=False)
        wait_until("the Secret policy to be enforced", lambda: (
            lambda p: ("may create only its own Secret" in p.stderr, p.stderr.strip() or "created"))(
            create("other")))
        own = create("ws-host-tls")
        if own.returncode != 0:
            fail(f"the host cannot create its own Secret: {own.stderr}")
        # Security review R10: its own name, another type (a token Secret would be minted).
        opaque = create("ws-host-tls", kind="Opaque")
        if "may create only its own Secret" not in opaque.stderr:
            fail(f"the host created its Secret's name with another type: {opaque.stderr or 'created'}")
        print("host Secrets: another Secret, and its own name of another type, refused to the host; its own allowed")
    finally:
        for kind, obj in created:
            kubectl("delete", kind.lower(), obj, "--ignore-not-found", check=False)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


def check_placement(name, docs, values):
    """Issue #41 (5): the placement ValidatingAdmissionPolicy, in both modes, with the
    action placementCheck.action names (none when empty)."""
    action = values.get("placementCheck", {}).get("action", "Deny")
    policies = [d for d in by_kind(docs, "ValidatingAdmissionPolicy")
                if d["metadata"]["name"].endswith("-placement")]
    bindings = [d for d in by_kind(docs, "ValidatingAdmissionPolicyBinding")
                if d["metadata"]["name"].endswith("-placement")]
    if not action:
        if policies or bindings:
            fail(f"{name}: placementCheck.action empty still renders {policies + bindings}")
        return
    if len(policies) != 1 or len(bindings) != 1:
        fail(f"{name}: expected one placement policy and binding, got {len(policies)}/{len(bindings)}")
    spec, binding = policies[0]["spec"], bindings[0]["spec"]
    if spec["paramKind"] != {"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread"} \
            or spec["failurePolicy"] != "Ignore":
        fail(f"{name}: placement policy {spec}")
    want = ["Deny"] if action == "Deny" else ["Warn", "Audit"]
    if binding["validationActions"] != want or binding["policyName"] != policies[0]["metadata"]["name"] \
            or binding["paramRef"] != {"selector": {}, "parameterNotFoundAction": "Allow"}:
        fail(f"{name}: placement binding {binding} (want actions {want})")
    excluded = binding["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"]
    if NAMESPACE not in excluded:
        fail(f"{name}: the placement binding must exclude the release namespace: {excluded}")


def deployment(docs, name):
    found = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == name]
    return found[0]["spec"]["template"]["spec"] if found else None


def rules_of(docs, kind, name):
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"] == name]
    return found[0]["rules"] if found else []


def grants(rules, group, resource, verb):
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def parse_mib(quantity):
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[:-len(suffix)]) * factor
    return float(quantity) / (1 << 20)


def check_security(name, docs, values):
    """Issue #30: least privilege, network policy, probes off the webhook port, memory fit,
    the uninstall hook, client certificates, digests."""
    bundled = values["mode"] == "bundled"
    for d in by_kind(docs, "ClusterRole") + by_kind(docs, "Role"):
        for r in d["rules"]:
            if "*" in r["resources"] or "*" in r["verbs"] or "*" in r["apiGroups"]:
                fail(f"{name}: {d['kind']} {d['metadata']['name']} grants a wildcard: {r}")
    controller = rules_of(docs, "ClusterRole", "ws-controller")
    host = rules_of(docs, "ClusterRole", "ws-host")
    for w in values.get("controller", {}).get("customWorkloads", []):
        kinds = [w] + w.get("subResources", [])
        for k in kinds:
            plural = k.get("resource") or k["kind"].lower() + "s"
            for who, rules in [("controller", controller)] + ([("host", host)] if bundled else []):
                if not grants(rules, k["group"], plural, "watch"):
                    fail(f"{name}: {who} cannot watch {plural}.{k['group']}")
    pod_write = values.get("controller", {}).get("podWrite", {})
    reschedule = pod_write.get("rescheduling", True)
    pod_rules = [r for r in controller if "pods" in r["resources"]]
    namespaces = pod_write.get("namespaces", [])
    want_verbs = ["patch"] + (["delete"] if reschedule else [])
    if namespaces:
        if pod_rules[0]["verbs"] != ["get", "list", "watch"]:
            fail(f"{name}: scoped pod writes still granted cluster-wide: {pod_rules}")
        roles = {d["metadata"]["namespace"]: d["rules"] for d in by_kind(docs, "Role")
                 if d["metadata"]["name"] == "ws-controller-pods"}
        bindings = {d["metadata"]["namespace"] for d in by_kind(docs, "RoleBinding")
                    if d["metadata"]["name"] == "ws-controller-pods"}
        if set(roles) != set(namespaces) or bindings != set(namespaces) \
                or any(r[0]["verbs"] != want_verbs for r in roles.values()):
            fail(f"{name}: pod write Roles {roles} / bindings {bindings}, want {want_verbs} in {namespaces}")
    elif pod_rules[0]["verbs"] != ["get", "list", "watch"] + want_verbs:
        fail(f"{name}: controller pod verbs {pod_rules[0]['verbs']}")
    ctl = deployment(docs, "ws-controller")["containers"][0]
    if ("--no-reschedule" in ctl["args"]) == reschedule:
        fail(f"{name}: --no-reschedule must follow controller.podWrite.rescheduling ({ctl['args']})")
    for d in by_kind(docs, "Deployment"):
        component = d["metadata"]["name"].split("-")[-1]
        digest = values.get(component, {}).get("image", {}).get("digest")
        image = d["spec"]["template"]["spec"]["containers"][0]["image"]
        if digest and not image.endswith("@" + digest):
            fail(f"{name}: {component} image {image} not pinned to {digest}")
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind(docs, "NetworkPolicy")}
    network = values.get("networkPolicy", {})
    if not network.get("enabled", True):
        if policies:
            fail(f"{name}: networkPolicy.enabled false still renders {sorted(policies)}")
    else:
        want = {"ws-controller"} | ({"ws-host"} if bundled else set())
        if set(policies) != want:
            fail(f"{name}: NetworkPolicies {sorted(policies)}, want {sorted(want)}")
        if bundled:
            ingress = policies["ws-host"]["ingress"]
            by_port = {r["ports"][0]["port"]: r.get("from") for r in ingress}
            if set(by_port) != {"https", "health"} or by_port["https"] != network.get("webhookFrom") \
                    or by_port["health"] != network.get("metricsFrom"):
                fail(f"{name}: host NetworkPolicy ingress {ingress}")
    if not bundled:
        return
    spec = deployment(docs, "ws-host")
    c = spec["containers"][0]
    args = dict(a.split("=", 1) for a in c["args"][1:] if "=" in a)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe not in c or c[probe]["httpGet"]["port"] != "health" \
                or c[probe]["httpGet"].get("scheme", "HTTP") != "HTTP":
            fail(f"{name}: {probe} must use the plain health port: {c.get(probe)}")
    # Issue #41: /tmp bounded, the priority class passed to both components.
    cache = {v["name"]: v for v in spec["volumes"]}["cache"]
    if not cache.get("emptyDir", {}).get("sizeLimit"):
        fail(f"{name}: the host's /tmp has no sizeLimit: {cache}")
    for component in ("ws-host", "ws-controller"):
        got = deployment(docs, component).get("priorityClassName")
        if got != (values.get("priorityClassName") or None):
            fail(f"{name}: {component} priorityClassName {got!r}, want {values.get('priorityClassName')!r}")
    # Issue #41: the module precompiled in the image is loaded, not compiled at start.
    if args.get("--precompiled-dir") != "/policy/precompiled":
        fail(f"{name}: the host is not pointed at the precompiled module: {args}")
    env = {e["name"]: e for e in c.get("env", [])}
    if args.get("--memory-limit-mib") != "$(MEMORY_LIMIT_MIB)" or \
            env.get("MEMORY_LIMIT_MIB", {}).get("valueFrom", {}).get("resourceFieldRef", {}).get("resource") != "limits.memory":
        fail(f"{name}: the host is not told its memory limit: {args} {env}")
    # The host refuses to start unless its evaluations fit the limit (host/src/webhook/limits.rs).
    concurrency, guest = int(args["--max-concurrency"]), int(args["--max-memory-mib"])
    request = int(args["--max-request-bytes"]) / (1 << 20)
    connections = int(args.get("--max-connections", 512)) + int(args.get("--health-max-connections", 64))
    need = concurrency * (guest + 3 * min(request, 1)) + min(concurrency, 2) * 3 * max(request - 1, 0) \
        + max(32, 2 * request) + 2 * request + connections * 192 / 1024 + 192
    limit = parse_mib(c["resources"]["limits"]["memory"])
    if need > limit:
        fail(f"{name}: concurrency x memory needs {need} MiB > the {limit} MiB limit")
    client_ca = values.get("tls", {}).get("clientCA")
    mounts = {m["name"] for m in c.get("volumeMounts", [])}
    if bool(client_ca) != ("--client-ca-file" in args and "client-ca" in mounts):
        fail(f"{name}: tls.clientCA and --client-ca-file disagree: {args} {mounts}")
    identities = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--client-cert-identity=")]
    if identities != (["kube-apiserver"] if client_ca else []):
        fail(f"{name}: the API server's certificate identity is not pinned: {identities}")
    if client_ca:
        cm = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "ws-host-client-ca"]
        if not cm or cm[0]["data"]["ca.crt"].strip() != client_ca.strip():
            fail(f"{name}: client CA ConfigMap {cm}")
    # Before the host goes, a pre-delete hook removes the webhook configurations.
    jobs = [j for j in by_kind(docs, "Job") if j["metadata"]["name"] == "ws-uninstall"]
    if len(jobs) != 1:
        fail(f"{name}: no uninstall hook Job")
    job = jobs[0]
    if job["metadata"]["annotations"].get("helm.sh/hook") != "pre-delete":
        fail(f"{name}: uninstall Job is not a pre-delete hook: {job['metadata']}")
    job_args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    if job_args[:2] != ["uninstall", "--webhook-config=ws"]:
        fail(f"{name}: uninstall Job args {job_args}")
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        objs = [d for d in by_kind(docs, kind) if d["metadata"]["name"] == "ws-uninstall"]
        if not objs or int(objs[0]["metadata"]["annotations"]["helm.sh/hook-weight"]) >= \
                int(job["metadata"]["annotations"]["helm.sh/hook-weight"]):
            fail(f"{name}: {kind} ws-uninstall must be a hook created before the Job")
    uninstall = rules_of(docs, "ClusterRole", "ws-uninstall")
    if any(not r.get("resourceNames") for r in uninstall):
        fail(f"{name}: the uninstall hook's rights must name their objects: {uninstall}")


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
        check_security(name, docs, values)
        check_pod_metadata_policy(name, docs, values)
        check_capacity_event_policy(name, docs, values)
        check_placement(name, docs, values)
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
    def conversion_args(values):
        docs = render(values)
        host = deployment(docs, "ws-host")["containers"][0]["args"]
        hook = [a for j in by_kind(docs, "Job") for c in j["spec"]["template"]["spec"]["containers"]
                for a in c["args"]]
        return [a for a in host + hook if a.startswith("--conversion-")]
    if len(conversion_args(VARIANTS["bundled"])) != 4:
        fail(f"the host and its uninstall hook must manage the CRD's conversion: {conversion_args(VARIANTS['bundled'])}")
    if conversion_args(VARIANTS["openkruise-keep-crd"]):
        fail("openKruise.keepCrd: the CRD's conversion must stay OpenKruise's")
    capacity_args = controller_args(VARIANTS["capacity-timers"])
    if "--no-capacity-signals" in default_args or "--capacity-wait-seconds=0" not in default_args:
        fail(f"capacity signals must be on by default, with no wait bound: {default_args}")
    want = ["--no-capacity-signals", "--capacity-wait-seconds=600",
            "--capacity-signal=QuotaExceeded@my-provisioner=no-capacity"]
    if any(a not in capacity_args for a in want):
        fail(f"controller.capacity not passed: {capacity_args}")
    role = [d for d in by_kind(render(VARIANTS["bundled"]), "ClusterRole") if d["metadata"]["name"] == "ws-controller"][0]
    if not grants(role["rules"], "", "events", "list"):
        fail("the controller cannot list the provisioners' pod events")
    custom = render(VARIANTS["custom-workloads"])
    role = [d for d in by_kind(custom, "ClusterRole") if d["metadata"]["name"] == "ws-controller"][0]
    if not any("example.io" in r["apiGroups"] for r in role["rules"]):
        fail("custom workload group not readable by the controller")
    # deploy/kubewarden/ (applied by hand) carries the chart's match conditions verbatim.
    [chart_policy] = by_kind(render(VARIANTS["kubewarden"]), "ClusterAdmissionPolicy")
    with open(os.path.join(ROOT, "deploy", "kubewarden", "cluster-admission-policy.yaml")) as f:
        manual = yaml.safe_load(f)
    if manual["spec"].get("matchConditions") != chart_policy["spec"]["matchConditions"]:
        fail("deploy/kubewarden/cluster-admission-policy.yaml matchConditions differ from the chart's")
    custom = render(VARIANTS["custom-workloads-subresources"])
    settings = json.loads(next(a for a in deployment(custom, "ws-host")["containers"][0]["args"]
                               if a.startswith("--settings-json=")).split("=", 1)[1])
    if any("resource" in w or any("resource" in k for k in w.get("subResources", []))
           for w in settings["customWorkloads"]):
        fail(f"the chart-only `resource` names leak into the policy settings: {settings}")


def capacity_event_policies(docs):
    ours = lambda d: "-capacity-events-" in d["metadata"]["name"]  # noqa: E731
    return ([d for d in by_kind(docs, "ValidatingAdmissionPolicy") if ours(d)],
            [d for d in by_kind(docs, "ValidatingAdmissionPolicyBinding") if ours(d)])


def check_capacity_event_policy(name, docs, values):
    """Security review R4: with capacity signals on (the default), one policy per Event API
    judges the (reason, reporter) pairs the controller reads — its defaults and the extra
    signals — and lets only the configured posters create them; with signals off, none."""
    policies, bindings = capacity_event_policies(docs)
    capacity = values.get("controller", {}).get("capacity", {})
    if not capacity.get("signals", True):
        if policies or bindings:
            fail(f"{name}: capacity signals off still render the Event policy")
        return
    if len(policies) != 2 or len(bindings) != 2:
        fail(f"{name}: want two capacity Event policies and bindings, got {len(policies)}, {len(bindings)}")
    groups = sorted(p["spec"]["matchConstraints"]["resourceRules"][0]["apiGroups"][0] for p in policies)
    if groups != ["", "events.k8s.io"]:
        fail(f"{name}: the Event policies must cover both Event APIs: {groups}")
    wanted = [["NotTriggerScaleUp", "cluster-autoscaler"], ["Nominated", "karpenter"]]
    for extra in capacity.get("extraSignals", []):
        left = extra.split("=", 1)[0]
        reason, _, source = left.partition("@")
        wanted.append([reason, source])
    for p in policies:
        signal = next(v["expression"] for v in p["spec"]["variables"] if v["name"] == "signal")
        for pair in wanted:
            if json.dumps(pair, separators=(",", ":")) not in signal:
                fail(f"{name}: the Event policy does not judge {pair}: {signal}")
        posters = p["spec"]["validations"][0]["expression"]
        if "system:serviceaccount:kube-system:cluster-autoscaler" not in posters:
            fail(f"{name}: cluster-autoscaler is not among the default posters: {posters}")
    for b in bindings:
        if b["spec"]["validationActions"] != ["Deny"]:
            fail(f"{name}: the Event policy binding does not deny")


def check_capacity_event_policy_applied():
    """Security review R4 on the API server: a capacity signal posted by someone else is
    refused, the same Event from cluster-autoscaler's service account is accepted, and
    other Events (another reason, the scheduler's FailedScheduling, none) pass."""
    ns = f"ws-events-{os.getpid()}"
    kubectl("create", "namespace", ns)
    created = []
    try:
        policies, bindings = capacity_event_policies(render({"mode": "bundled"}))
        for d in policies + bindings:
            d["metadata"]["name"] += f"-{ns}"
            if d["kind"] == "ValidatingAdmissionPolicyBinding":
                d["spec"]["policyName"] += f"-{ns}"
                # This namespace only: other tests' Events are not this test's to judge.
                d["spec"]["matchResources"] = {"namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": ns}}}
            created.append((d["kind"], d["metadata"]["name"]))
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(policies + bindings))
        autoscaler = "system:serviceaccount:kube-system:cluster-autoscaler"
        intruder = f"system:serviceaccount:{ns}:intruder"
        kubectl("create", "role", "post-events", "-n", ns, "--verb=create",
                "--resource=events,events.events.k8s.io")
        kubectl("create", "rolebinding", "post-events", "-n", ns, "--role=post-events",
                "--serviceaccount=kube-system:cluster-autoscaler", f"--serviceaccount={ns}:intruder")

        def post(user, reason, reporter=None, api="v1"):
            if api == "v1":
                event = {"apiVersion": "v1", "kind": "Event",
                         "metadata": {"generateName": "signal-", "namespace": ns},
                         "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns, "uid": "u-1"},
                         "message": "forged?", "type": "Normal"}
                if reporter:
                    event["source"] = {"component": reporter}
            else:
                event = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                         "metadata": {"generateName": "signal-", "namespace": ns},
                         "regarding": {"kind": "Pod", "name": "p", "namespace": ns, "uid": "u-1"},
                         "eventTime": "2026-01-01T00:00:00.000000Z", "action": "Scheduling",
                         "reportingController": reporter or "someone", "reportingInstance": "i",
                         "type": "Normal", "note": "forged?"}
            if reason:
                event["reason"] = reason
            return kubectl("create", "-f", "-", "--dry-run=server", f"--as={user}",
                           stdin=json.dumps(event), check=False)
        refusal = "is a capacity signal"
        wait_until("the capacity Event policy to be enforced", lambda: (
            lambda p: (refusal in p.stderr, p.stderr.strip() or "created"))(
            post(intruder, "NotTriggerScaleUp", "cluster-autoscaler")))
        cases = [
            (intruder, "NotTriggerScaleUp", "cluster-autoscaler", "v1", False),
            (intruder, "Nominated", "karpenter", "events.k8s.io/v1", False),
            (autoscaler, "NotTriggerScaleUp", "cluster-autoscaler", "v1", True),
            (autoscaler, "TriggeredScaleUp", "cluster-autoscaler", "events.k8s.io/v1", True),
            (intruder, "Started", "kubelet", "v1", True),
            (intruder, "FailedScheduling", "default-scheduler", "v1", True),
            (intruder, None, None, "v1", True),
        ]
        for user, reason, reporter, api, allowed in cases:
            p = post(user, reason, reporter, api)
            if (p.returncode == 0) != allowed:
                fail(f"{api} Event {reason}@{reporter} by {user}: "
                     f"{'refused' if p.returncode else 'accepted'}, want {'accepted' if allowed else 'refused'}: "
                     f"{p.stderr.strip()}")
            if not allowed and refusal not in p.stderr:
                fail(f"{api} Event {reason}@{reporter} refused for another reason: {p.stderr.strip()}")
        print(f"capacity Events: {len(cases)} cases (signals from others refused, the provisioner's and other Events accepted)")
    finally:
        for kind, obj in created:
            kubectl("delete", kind.lower(), obj, "--ignore-not-found", check=False)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


def check_pod_metadata_policy(name, docs, values):
    """Issue #40: the ValidatingAdmissionPolicy that keeps a pod's WorkloadSpread metadata
    the controller's: on by default in every mode, its expression the shared file, the
    controller's own service account the only writer, bound to the webhook's namespaces."""
    ours = lambda d: d["metadata"]["name"].endswith("-pod-metadata.workloadspread.io")  # noqa: E731
    policies = [d for d in by_kind(docs, "ValidatingAdmissionPolicy") if ours(d)]
    bindings = [d for d in by_kind(docs, "ValidatingAdmissionPolicyBinding") if ours(d)]
    if not values.get("podMetadataPolicy", {}).get("enabled", True):
        if policies or bindings:
            fail(f"{name}: podMetadataPolicy.enabled=false still renders the policy")
        return
    if len(policies) != 1 or len(bindings) != 1:
        fail(f"{name}: want one pod metadata policy and binding, got {len(policies)}, {len(bindings)}")
    policy, binding = policies[0], bindings[0]
    with open(os.path.join(CHART, "files", "pod-metadata.cel")) as f:
        expression = f.read()
    if policy["spec"]["validations"][0]["expression"] != expression:
        fail(f"{name}: the policy's expression is not files/pod-metadata.cel")
    [sa] = [d for d in by_kind(docs, "ServiceAccount") if d["metadata"]["name"] == "ws-controller"]
    writer = f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    [condition] = policy["spec"]["matchConditions"]
    if json.dumps(writer) not in condition["expression"]:
        fail(f"{name}: the policy does not exempt the controller ({writer}): {condition}")
    if policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"] != ["UPDATE"]:
        fail(f"{name}: the policy must judge pod UPDATEs only")
    if binding["spec"]["policyName"] != policy["metadata"]["name"] or \
            binding["spec"]["validationActions"] != ["Deny"]:
        fail(f"{name}: the binding does not deny with the policy")
    # The pod webhook: in the host's definitions (bundled) or Kubewarden's policy.
    definitions = webhook_definitions(docs) or {}
    webhooks = list(definitions.get("mutating", []))
    webhooks += [{"name": "pods.kubewarden", "namespaceSelector": d["spec"]["namespaceSelector"]}
                 for d in by_kind(docs, "ClusterAdmissionPolicy")]
    selectors = [w["namespaceSelector"] for w in webhooks if w["name"].startswith("pods.")]
    if not selectors:
        fail(f"{name}: no pod webhook to compare the pod metadata policy's namespaces with")
    if selectors and binding["spec"]["matchResources"]["namespaceSelector"] != selectors[0]:
        fail(f"{name}: the binding's namespaces differ from the pod webhook's")


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


def wait_until(what, check, timeout=60):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        ok, last = check()
        if ok:
            return last
        time.sleep(0.5)
    fail(f"timed out after {timeout}s waiting for {what}; last: {last}")


def check_scoped_pod_writes():
    """controller.podWrite: pod patch only in the named namespaces, no delete without
    rescheduling (the ClusterRole keeps read access)."""
    ns = f"ws-scoped-{os.getpid()}"
    team = f"{ns}-team"
    cluster_scoped = []
    kubectl("create", "namespace", ns)
    kubectl("create", "namespace", team)
    try:
        docs = render({"mode": "bundled", "controller": {"podWrite": {"namespaces": [team], "rescheduling": False}}},
                      namespace=ns)
        rbac = [d for d in docs if d["kind"] in {"ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                                  "ClusterRoleBinding"} and "controller" in d["metadata"]["name"]]
        for d in rbac:
            if d["kind"].startswith("Cluster"):
                d["metadata"]["name"] += f"-{ns}"
                cluster_scoped.append((d["kind"], d["metadata"]["name"]))
            if d["kind"] == "ClusterRoleBinding":
                d["roleRef"]["name"] += f"-{ns}"
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
        ctl = "ws-controller"
        checks = [("patch", team, True), ("patch", "default", False), ("delete", team, False),
                  ("delete", "default", False), ("list", "default", True)]
        for verb, target, want in checks:
            got = can_i(ns, ctl, verb, "pods", target)
            if got != want:
                fail(f"scoped controller can {verb} pods in {target}: {got}, want {want}")
        print(f"apply: scoped pod writes: {len(checks)} permission checks ok")
    finally:
        for n in (ns, team):
            kubectl("delete", "namespace", n, "--wait=false", check=False)
        for kind, name in cluster_scoped:
            kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)


def check_match_conditions():
    """Issue #30 (2): the chart's pod webhook with no host answering it (a closed port: the
    host scaled to 0). Pods that cannot belong to a WorkloadSpread still come and go: a
    DaemonSet's pod is created, an unowned pod is created, a pod without the matched
    annotation is deleted and evicted. A pod a WorkloadSpread may spread is refused
    (failurePolicy Fail), and so is deleting a pod carrying the matched annotation."""
    ns = f"ws-match-{os.getpid()}"
    name = f"ws-match-{os.getpid()}"
    label = {"workloadspread.test/match-conditions": ns}
    values = {"mode": "bundled", "webhook": {"namespaceSelector": {"matchLabels": label}}}
    definitions = webhook_definitions(render(values, namespace=f"{ns}-release"))
    config = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
              "metadata": {"name": name}, "webhooks": definitions["mutating"]}
    for w in config["webhooks"]:
        w["clientConfig"] = {"url": "https://127.0.0.1:1/mutate"}
    kubectl("create", "namespace", ns)
    kubectl("label", "namespace", ns, f"workloadspread.test/match-conditions={ns}")

    def pod(pod_name, owner=None, annotations=None, finalizers=None):
        meta = {"name": pod_name, "namespace": ns, "annotations": annotations or {}}
        if owner:
            meta["ownerReferences"] = [owner]
        if finalizers:
            meta["finalizers"] = finalizers
        return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                           "spec": {"containers": [{"name": "c", "image": "busybox"}]}})

    rs_owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                "uid": "6d0a5d62-0000-4000-8000-000000000001", "controller": True}
    matched = {MATCHED: '{"name":"web","subset":"a"}'}
    try:
        for p, annotations in [("plain-delete", None), ("plain-evict", None), ("annotated", matched),
                               ("finished", matched)]:
            kubectl("create", "-f", "-", stdin=pod(p, annotations=annotations))
        # Issue #41 (4): a matched pod already terminating (held by a finalizer) and one whose
        # containers finished: the policy releases nothing for either.
        kubectl("create", "-f", "-", stdin=pod("terminating", annotations=matched, finalizers=[HOLD]))
        kubectl("delete", "pod", "-n", ns, "terminating", "--wait=false")
        kubectl("patch", "pod", "-n", ns, "finished", "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"phase": "Succeeded"}}))
        kubectl("apply", "-f", "-", stdin=json.dumps(config))
        # Enforced once a pod that can be spread is refused (the API server's webhook cache lags).
        wait_until("the webhook configuration to be enforced", lambda: (
            lambda p: ("failed calling webhook" in p.stderr, p.stderr.strip() or "created"))(
            kubectl("create", "--dry-run=server", "-f", "-", check=False, stdin=pod("probe", rs_owner))))
        ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": ns},
              "spec": {"selector": {"matchLabels": {"app": "agent"}},
                       "template": {"metadata": {"labels": {"app": "agent"}},
                                    "spec": {"nodeSelector": {"kubernetes.io/hostname": "node-a-1"},
                                             "tolerations": [{"operator": "Exists"}],
                                             "containers": [{"name": "c", "image": "busybox"}]}}}}
        kubectl("apply", "-f", "-", stdin=json.dumps(ds))
        wait_until("the DaemonSet's pod", lambda: (
            lambda out: (bool(out.strip()), out.strip()))(
            kubectl("get", "pods", "-n", ns, "-l", "app=agent", "-o", "name").stdout))
        kubectl("create", "-f", "-", stdin=pod("unowned"))
        kubectl("delete", "pod", "-n", ns, "plain-delete", "--wait=false")
        eviction = json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                               "metadata": {"name": "plain-evict", "namespace": ns}})
        kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/plain-evict/eviction", "-f", "-",
                stdin=eviction)
        for p in ("terminating", "finished"):
            deleted = kubectl("delete", "pod", "-n", ns, p, "--wait=false", check=False)
            if deleted.returncode != 0:
                fail(f"deleting the {p} matched pod with no host running was refused: {deleted.stderr}")
        refused_create = kubectl("create", "-f", "-", check=False, stdin=pod("spread", rs_owner))
        refused_delete = kubectl("delete", "pod", "-n", ns, "annotated", "--wait=false", check=False)
        for what, p in [("creating a pod a WorkloadSpread may spread", refused_create),
                        ("deleting a pod with the matched annotation", refused_delete)]:
            if p.returncode == 0 or "pods.workloadspread.io" not in p.stderr:
                fail(f"{what} with no host running was not refused by the webhook: {p.stdout} {p.stderr}")
        print("match conditions: with no host answering, a DaemonSet pod and an unowned pod were "
              "created, a plain pod deleted and another evicted, a terminating and a finished "
              "matched pod deleted; a spreadable pod and a running matched pod's deletion were "
              "refused")
    finally:
        kubectl("patch", "pod", "-n", ns, "terminating", "--type=json", "-p",
                json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]), check=False)
        kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found", check=False)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


def check_placement_policy():
    """Issue #41 (5): the chart's ValidatingAdmissionPolicy on the API server. A pod whose
    matched annotation names a subset with a required node selector is refused unless every
    term of its final node affinity holds that selector — also when a mutating policy
    removed it after the pod was sent (a MutatingAdmissionPolicy here, where served); other
    subsets, other WorkloadSpreads and unannotated pods pass; with action Warn the pod is
    admitted with a warning. Checked with server-side dry runs (admission runs, nothing is
    stored)."""
    ns = f"ws-placement-{os.getpid()}"
    suffix = f"-{ns}"
    created = []
    kubectl("create", "namespace", ns)
    try:
        ws = {"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
              "metadata": {"name": "web", "namespace": ns},
              "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web"},
                       "subsets": [{"name": "a", "requiredNodeSelector": {"matchExpressions": [
                           {"key": "topology.kubernetes.io/zone", "operator": "In",
                            "values": ["zone-a"]}]}},
                                   {"name": "b"}]}}
        kubectl("apply", "-f", "-", stdin=json.dumps(ws))

        def policy(action):
            docs = render({"mode": "bundled", "placementCheck": {"action": action}},
                          namespace=f"{ns}-release")
            objs = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
            for d in objs:
                d["metadata"]["name"] += suffix
                if d["kind"] == "ValidatingAdmissionPolicyBinding":
                    d["spec"]["policyName"] += suffix
                    # This namespace only: other tests' pods are not this policy's.
                    d["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {
                        "kubernetes.io/metadata.name": ns}}}
            return objs

        def pod(name, subset="a", ws_name="web", zone="zone-a", labels=None):
            spec = {"containers": [{"name": "c", "image": "busybox"}]}
            if zone:
                spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}}
            annotations = {MATCHED: json.dumps({"name": ws_name, "subset": subset}, separators=(",", ":"))}
            return json.dumps({"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": name, "namespace": ns, "annotations": annotations,
                                            "labels": labels or {}},
                               "spec": spec})

        def dry_run(manifest):
            return kubectl("create", "--dry-run=server", "-f", "-", check=False, stdin=manifest)

        objs = policy("Deny")
        created += [(d["kind"], d["metadata"]["name"]) for d in objs]
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objs))
        lacking = "lacks the subset's required node selector"
        wait_until("the placement policy to be enforced", lambda: (
            lambda p: (lacking in p.stderr, p.stderr.strip() or "created"))(dry_run(pod("probe", zone=None))))
        cases = [("holds the subset's term", pod("ok"), True),
                 ("another zone", pod("elsewhere", zone="zone-b"), False),
                 ("no affinity", pod("bare", zone=None), False),
                 ("a subset without a required selector", pod("in-b", subset="b", zone=None), True),
                 ("another WorkloadSpread", pod("other", ws_name="other", zone=None), True)]
        for what, manifest, allowed in cases:
            p = dry_run(manifest)
            if (p.returncode == 0) != allowed or (not allowed and lacking not in p.stderr):
                fail(f"placement policy, {what}: allowed={p.returncode == 0}, want {allowed}: {p.stderr}")
        # A mutating policy that strips the node affinity after the pod is sent.
        served = kubectl("api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name").stdout
        stripped = "not served"
        if "mutatingadmissionpolicies" in served:
            strip = [{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
                      "metadata": {"name": f"strip{suffix}"},
                      "spec": {"matchConstraints": {"resourceRules": [{
                          "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                          "operations": ["CREATE"]}]},
                          "matchConditions": [{"name": "labelled", "expression":
                                               "has(object.metadata.labels) && 'strip' in object.metadata.labels"}],
                          "failurePolicy": "Fail", "reinvocationPolicy": "Never",
                          "mutations": [{"patchType": "JSONPatch", "jsonPatch": {
                              "expression": "[JSONPatch{op: 'remove', path: '/spec/affinity'}]"}}]}},
                     {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
                      "metadata": {"name": f"strip{suffix}"},
                      "spec": {"policyName": f"strip{suffix}", "matchResources": {"namespaceSelector": {
                          "matchLabels": {"kubernetes.io/metadata.name": ns}}}}}]
            created += [(d["kind"], d["metadata"]["name"]) for d in strip]
            kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(strip))
            wait_until("the stripping policy to be enforced", lambda: (
                lambda p: (lacking in p.stderr, p.stderr.strip() or "created"))(
                dry_run(pod("stripped", labels={"strip": "yes"}))))
            stripped = "refused"
        # Warn: admitted, with the warning.
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(policy("Warn")))
        warned = wait_until("the policy to warn instead", lambda: (
            lambda p: (p.returncode == 0 and lacking in p.stderr, p.stderr.strip()))(dry_run(pod("warned", zone=None))))
        print(f"placement policy: {len(cases)} pods checked against their subset's required node "
              f"selector; affinity stripped by a MutatingAdmissionPolicy: {stripped}; action Warn "
              f"admits with {warned.splitlines()[0][:60]!r}...")
    finally:
        for kind, name in created:
            kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


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
            # Issue #41: the API server reaching a host through the Service, that Service only.
            (host, "get", "services/proxy", ns, f"https:{host}:443", True),
            (host, "get", "services/proxy", ns, "https:other:443", False),
            (host, "create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", None, None, False),
            # Whether OpenKruise owns WorkloadSpreads: its validating configuration, read only.
            (host, "watch", "validatingwebhookconfigurations.admissionregistration.k8s.io", None,
             "kruise-validating-webhook-configuration", True),
            (ctl, "watch", "validatingwebhookconfigurations.admissionregistration.k8s.io", None,
             "kruise-validating-webhook-configuration", True),
            (ctl, "update", "validatingwebhookconfigurations.admissionregistration.k8s.io", None,
             "kruise-validating-webhook-configuration", False),
            (ctl, "get", "validatingwebhookconfigurations.admissionregistration.k8s.io", None, "other", False),
        ]
        for sa, verb, resource, target, name, want in checks:
            got = can_i(ns, sa, verb, resource, target or ns, name)
            if got != want:
                fail(f"{sa} can {verb} {resource}{'/' + name if name else ''} in {target}: {got}, want {want}")
        print(f"apply: CRD and RBAC accepted; {len(checks)} permission checks ok")
        uninstall = f"{release}-uninstall"
        checks = [
            (uninstall, "delete", "mutatingwebhookconfigurations.admissionregistration.k8s.io", None, release, True),
            (uninstall, "delete", "validatingwebhookconfigurations.admissionregistration.k8s.io", None, release, True),
            (uninstall, "delete", "mutatingwebhookconfigurations.admissionregistration.k8s.io", None, "other", False),
            (uninstall, "patch", "customresourcedefinitions.apiextensions.k8s.io", None,
             "workloadspreads.apps.kruise.io", True),
            (uninstall, "delete", "pods", "default", None, False),
            (host, "watch", "mutatingwebhookconfigurations.admissionregistration.k8s.io", None, release, True),
            (host, "update", "secrets", ns, f"{host}-tls", True),
            (host, "watch", "customresourcedefinitions.apiextensions.k8s.io", None,
             "workloadspreads.apps.kruise.io", True),
            (host, "update", "customresourcedefinitions.apiextensions.k8s.io", None,
             "workloadspreads.apps.kruise.io", False),
        ]
        for sa, verb, resource, target, name, want in checks:
            got = can_i(ns, sa, verb, resource, target or ns, name)
            if got != want:
                fail(f"{sa} can {verb} {resource}{'/' + name if name else ''} in {target}: {got}, want {want}")
        print(f"apply: CRD and RBAC accepted; {len(checks)} more permission checks ok (uninstall hook)")
        check_scoped_pod_writes()
        check_match_conditions()
        check_placement_policy()
        check_host_secrets()
        check_capacity_event_policy_applied()
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
        for kind, name in cluster_scoped:
            kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)


if __name__ == "__main__":
    {"lint": lint, "apply": apply}[sys.argv[1] if len(sys.argv) > 1 else "lint"]()
