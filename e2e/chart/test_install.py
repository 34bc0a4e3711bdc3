#!/usr/bin/env python3
"""The Helm chart installed for real: images pulled from a registry by a real kubelet, the
host and the controller running as pods, the webhook reached through its Service.

Needs a cluster from `WS_REAL_NODE=1 e2e/cluster/cluster.sh up` (its `env` sets KUBECONFIG,
PATH, WS_REGISTRY and WS_REAL_NODE_NAME) and the images from `make images`; `make chart-e2e` does
all of it. Steps, each asserting what a user would see:

  1. push the images to the loopback registry; `helm install` (Helm SDK) in mode bundled with
     the host (CPU limit = request, 100m) and the controller on the real node (2 replicas
     each) while pods a WorkloadSpread may spread are created in a covered namespace: none
     refused (the host writes the webhooks only once the API server reaches it)
  2. both Deployments Ready, the webhook configurations carry the CA bundle; the image's
     host started cold: /healthz within 2 s, /readyz after at most 1 CPU-second
  3. a v1alpha1 WorkloadSpread (conversion through the in-cluster host) spreads a Deployment
     over three zones of KWOK nodes exactly
  4. a 100-pod scale-out spanning one host pod's deletion: no pod refused, exact counts
  5. the controller's leader pod deleted: another replica takes the Lease; scale-in follows
     the deletion costs the new leader keeps, status converges
  6. /metrics of host and controller through their Services
  7. `helm upgrade` of a value (the host pods roll) while pods keep being created: no failed
     pod create
  8. with no host running, the Fail webhook refuses pods a WorkloadSpread may spread (what an
     orphaned configuration would do to a cluster) and lets unowned pods through (its
     matchConditions); `helm uninstall` runs the pre-delete hook: no webhook configuration is
     left and spreadable pods are created again
"""
import json
import os
import subprocess
import sys
import threading
import time

import helm_python

import startup

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES = os.environ.get("IMAGES_DIR", os.path.join(ROOT, "dist", "images"))
RELEASE_DIR = os.environ.get("RELEASE_DIR", os.path.join(ROOT, "dist", "release"))
SYSTEM_NS = "workloadspread-system"
RELEASE = "ws"
TEST_NS = f"chart-e2e-{os.getpid()}"
MATCHED = "apps.kruise.io/matched-workloadspread"
COST = "controller.kubernetes.io/pod-deletion-cost"
REAL_NODE_TAINT = "workloadspread.test/real-node"


class Failure(Exception):
    pass


def log(msg):
    print(f"[chart-e2e {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def kubectl(*args, stdin=None, check=True, timeout=60):
    p = subprocess.run(["kubectl", "--request-timeout=30s", *args], input=stdin,
                       capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise Failure(f"kubectl {' '.join(args)}: {p.stderr.strip()}")
    return p


def get_json(*args):
    return json.loads(kubectl("get", "-o", "json", *args).stdout)


def apply(obj, namespace=None):
    args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
    kubectl(*args, stdin=json.dumps(obj))


def wait_for(what, check, timeout=120, interval=1.0):
    """Polls `check` until it returns a truthy value; on timeout says what was last seen."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            value, last = check()
        except Failure as e:
            value, last = None, f"error: {e}"
        if value:
            return value
        if time.monotonic() >= deadline:
            raise Failure(f"timed out after {timeout}s waiting for {what}; last seen: {last}")
        time.sleep(interval)


def packaged_chart():
    """The chart as a release publishes it (`make release`), installed as users install it."""
    path = os.environ.get("WS_CHART") or os.path.join(RELEASE_DIR, f"workloadspread-{version()}.tgz")
    if not os.path.isfile(path):
        raise Failure(f"{path} is missing: run `make release` first")
    return path


def version():
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        for line in f:
            if line.startswith("version = "):
                return line.split('"')[1]
    raise Failure("no workspace version in Cargo.toml")


# ------------------------------------------------------------------ 1. install

def push_images(registry, tag):
    refs = {}
    for image in ("host", "controller"):
        layout = os.path.join(IMAGES, image)
        if not os.path.isfile(os.path.join(layout, "index.json")):
            raise Failure(f"{layout} is not an OCI layout: run `make images` first")
        dest = f"{registry}/workloadspread/{image}"
        subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false",
                        f"oci:{layout}:{tag}", f"docker://{dest}:{tag}"],
                       check=True, capture_output=True, text=True)
        refs[image] = dest
    return refs


def on_real_node(node, repository, **extra):
    return {
        "image": {"repository": repository, "pullPolicy": "Always"},
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        **extra,
    }


# Issue #41: the hosts run with a CPU limit equal to their request (what a busy node gives
# them): one that compiled the policy module at start would need minutes to be ready.
HOST_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"},
                  "limits": {"cpu": "100m", "memory": "1Gi"}}


def chart_values(refs, node, **host_extra):
    return {
        "mode": "bundled",
        "host": on_real_node(node, refs["host"], replicas=2, resources=HOST_RESOURCES,
                             **host_extra),
        "controller": on_real_node(node, refs["controller"], replicas=2),
    }


def helm():
    return helm_python.Config(kubeconfig_path=os.environ["KUBECONFIG"], namespace=SYSTEM_NS)


class PodStream:
    """Creates a pod a WorkloadSpread may spread (a ReplicaSet controller: the webhook's
    matchConditions send it to the host) every `period` seconds in namespace `ns`, from
    before `helm install` on, and records every refusal and whether the webhooks were in
    place when each pod was created."""

    def __init__(self, ns, period=0.5):
        self.ns, self.period = ns, period
        self.created = {"before": 0, "after": 0}
        self.refused = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        i = 0
        while not self.stop.is_set():
            configured = webhooks_written()
            p = kubectl("create", "-n", self.ns, "-f", "-", check=False,
                        stdin=json.dumps(probe_pod(f"install-{i}")))
            if p.returncode != 0:
                self.refused.append(p.stderr.strip())
            else:
                self.created["after" if configured else "before"] += 1
            i += 1
            self.stop.wait(self.period)

    def finish(self):
        self.stop.set()
        self.thread.join(timeout=60)


def webhooks_written():
    """Whether both webhook configurations hold webhooks (the host writes them)."""
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        p = kubectl("get", kind, RELEASE, "-o", "json", check=False)
        if p.returncode != 0 or not json.loads(p.stdout).get("webhooks"):
            return False
    return True


def install(values):
    """`helm install` while pods a WorkloadSpread may spread are created in a covered
    namespace (issue #41): none may be refused — the webhooks are written only once the API
    server reaches a host — and creations continue after they are."""
    ns = f"{TEST_NS}-install"
    kubectl("create", "namespace", ns)
    stream = PodStream(ns)
    started = time.monotonic()
    try:
        helm().install(packaged_chart(), RELEASE, values, namespace=SYSTEM_NS,
                       create_namespace=True, wait="watcher", timeout=300)
        took = time.monotonic() - started
        wait_for("the host to write the webhooks", lambda: (webhooks_written(), "not yet"),
                 timeout=120)
        written = time.monotonic() - started
        wait_for("pods created through the webhooks", lambda: (
            stream.created["after"] >= 5, stream.created), timeout=60)
    finally:
        stream.finish()
    if stream.refused:
        raise Failure(f"{len(stream.refused)} pod creates refused around helm install: "
                      f"{stream.refused[:3]}")
    if not stream.created["before"]:
        raise Failure(f"no pod was created before the webhooks were written: {stream.created}")
    log(f"helm install: deployed and Ready in {took:.0f}s, webhooks written after "
        f"{written:.0f}s; pods created meanwhile: {stream.created['before']} before the "
        f"webhooks, {stream.created['after']} through them, none refused")
    kubectl("delete", "namespace", ns, "--wait=false", check=False)


# ------------------------------------------------------------------ 2. ready

def deployment_ready(name):
    d = get_json("deployment", name, "-n", SYSTEM_NS)
    want = d["spec"]["replicas"]
    ready = d["status"].get("readyReplicas", 0)
    return ready == want and d["status"].get("updatedReplicas", 0) == want, f"{ready}/{want} ready"


def check_ready():
    for name in (f"{RELEASE}-host", f"{RELEASE}-controller"):
        wait_for(f"{name} Ready", lambda n=name: deployment_ready(n), timeout=180)
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        config = get_json(kind, RELEASE)
        bundles = [w["clientConfig"].get("caBundle") for w in config["webhooks"]]
        if not all(bundles):
            raise Failure(f"{kind} {RELEASE} lacks a CA bundle: {bundles}")
    pods = host_pods()
    node = os.environ["WS_REAL_NODE_NAME"]
    where = {p["spec"].get("nodeName") for p in pods}
    if where != {node}:
        raise Failure(f"host pods on {where}, want the real node {node}")
    log(f"host and controller Ready on {node}; webhook configurations carry the CA bundle")


def host_pods():
    return [p for p in get_json("pods", "-n", SYSTEM_NS,
                                "-l", "app.kubernetes.io/component=host")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def check_startup():
    """Issue #41: the image's own binary and module, cold cache: /healthz within 2 s of the
    start, /readyz after at most 1 CPU-second (e2e/chart/startup.py)."""
    try:
        figures = startup.measure(os.path.join(IMAGES, "host"))
        startup.check(figures)
    except startup.StartupError as e:
        raise Failure(str(e)) from e
    log(f"host start-up (image's binary and module, cold cache): /healthz after "
        f"{figures['healthz_ms']} ms, /readyz after {figures['readyz_cpu_seconds']} CPU-s "
        f"({figures['readyz_wall_seconds']} s), module {figures['module']}")


# ------------------------------------------------------------------ 3. spread

def zone(name, zone_name, max_replicas=None):
    subset = {"name": name, "requiredNodeSelectorTerm": {"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone_name]}]}}
    if max_replicas is not None:
        subset["maxReplicas"] = max_replicas
    return subset


def create_workload(replicas):
    kubectl("create", "namespace", TEST_NS)
    apply({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
           "metadata": {"name": "web"},
           "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "subsets": [zone("a", "zone-a", 2), zone("b", "zone-b", 3),
                                zone("c", "zone-c")]}}, TEST_NS)
    apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}},
          TEST_NS)


def web_pods():
    return [p for p in get_json("pods", "-n", TEST_NS, "-l", "app=web")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def placement(pods):
    """Subset (from the webhook's annotation) -> zone of the node, counted."""
    counts = {}
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"].get("topology.kubernetes.io/zone")
             for n in get_json("nodes")["items"]}
    for p in pods:
        subset = json.loads(p["metadata"].get("annotations", {}).get(MATCHED, "{}")).get("subset", "-")
        where = nodes.get(p["spec"].get("nodeName"), "unscheduled")
        counts[f"{subset}@{where}"] = counts.get(f"{subset}@{where}", 0) + 1
    return counts


def running(pods):
    return [p for p in pods if p["status"].get("phase") == "Running"]


def wait_spread(want, timeout=180):
    def check():
        pods = web_pods()
        seen = placement(pods)
        return len(running(pods)) == len(pods) and seen == want, seen
    return wait_for(f"placement {want}", check, timeout=timeout)


def subset_status():
    ws = get_json("workloadspread.v1beta1.apps.kruise.io", "web", "-n", TEST_NS)
    return {s["name"]: {"replicas": s.get("replicas", 0), "missing": s.get("missingReplicas"),
                        "creating": len(s.get("creatingPods") or {}),
                        "deleting": len(s.get("deletingPods") or {})}
            for s in ws.get("status", {}).get("subsetStatuses", [])}


def wait_status(want_replicas, timeout=120):
    def check():
        seen = subset_status()
        ok = all(seen.get(k, {}).get("replicas") == v and seen[k]["creating"] == 0
                 and seen[k]["deleting"] == 0 for k, v in want_replicas.items())
        return ok, seen
    return wait_for(f"status replicas {want_replicas}", check, timeout=timeout)


def scale(replicas):
    kubectl("scale", "deployment/web", "-n", TEST_NS, f"--replicas={replicas}")


class ScaleStream:
    """Scales web up by `step` every `period` seconds from `start` to `end` in a thread, so
    pod creates keep arriving through a host replica's termination or a rollout."""

    def __init__(self, start, end, step, period):
        self.targets = list(range(start + step, end, step)) + [end]
        self.period = period
        self.error = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            for replicas in self.targets:
                scale(replicas)
                time.sleep(self.period)
        except Failure as e:
            self.error = e

    def join(self):
        self.thread.join(timeout=len(self.targets) * (self.period + 60))
        if self.error:
            raise self.error


def pod_gone(name):
    return kubectl("get", "pod", name, "-n", SYSTEM_NS, check=False).returncode != 0


def failed_creates(since):
    events = get_json("events", "-n", TEST_NS, "--field-selector", "reason=FailedCreate")["items"]
    return [e.get("message", "") for e in events
            if (e.get("lastTimestamp") or e.get("eventTime") or "") >= since]


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def check_spread():
    create_workload(6)
    wait_spread({"a@zone-a": 2, "b@zone-b": 3, "c@zone-c": 1})
    wait_status({"a": 2, "b": 3, "c": 1})
    log("v1alpha1 WorkloadSpread: 6 pods spread 2/3/1 over zone-a/b/c, status exact")


# ------------------------------------------------------------------ 4. burst + host loss

def check_burst_with_host_loss():
    """100 pods created over ~10 s (5 every 0.5 s) while one host replica is deleted: it
    keeps serving through its preStop delay, stops, and creates continue on the other."""
    since = now_rfc3339()
    started = time.monotonic()
    stream = ScaleStream(6, 106, 5, 0.5)
    victim = wait_for("pods being created", lambda: (
        (host_pods()[0]["metadata"]["name"] if len(web_pods()) >= 20 else None), len(web_pods())),
        timeout=120, interval=0.2)
    kubectl("delete", "pod", victim, "-n", SYSTEM_NS, "--wait=false")
    deleted_at, created_then = time.monotonic(), len(web_pods())
    wait_for(f"host pod {victim} gone", lambda: (pod_gone(victim), "still there"), timeout=120,
             interval=0.2)
    gone_at, created_when_gone = time.monotonic(), len(web_pods())
    stream.join()
    wait_spread({"a@zone-a": 2, "b@zone-b": 3, "c@zone-c": 101}, timeout=300)
    elapsed = time.monotonic() - started
    if created_when_gone >= 106:
        raise Failure(f"all pods were created before host pod {victim} was gone: "
                      f"the scale-out did not span its termination")
    failed = failed_creates(since)
    if failed:
        raise Failure(f"{len(failed)} pod creates failed during the scale-out: {failed[:3]}")
    wait_status({"a": 2, "b": 3, "c": 101})
    log(f"100-pod scale-out with host pod {victim} deleted at {created_then} pods, gone "
        f"{gone_at - deleted_at:.1f}s later at {created_when_gone}: 106 pods 2/3/101 in "
        f"{elapsed:.0f}s, no failed create, status exact")


# ------------------------------------------------------------------ 5. leader failover

def lease_holder():
    lease = get_json("lease", f"{RELEASE}-controller", "-n", SYSTEM_NS)
    return lease["spec"].get("holderIdentity")


def controller_pods():
    return {p["metadata"]["name"] for p in get_json(
        "pods", "-n", SYSTEM_NS, "-l", "app.kubernetes.io/component=controller")["items"]
        if not p["metadata"].get("deletionTimestamp")}


def check_leader_failover():
    leader = wait_for("a controller leader", lambda: (lease_holder(), None))
    started = time.monotonic()
    kubectl("delete", "pod", leader, "-n", SYSTEM_NS, "--wait=false")

    def new_leader():
        holder = lease_holder()
        return (holder if holder and holder != leader and holder in controller_pods() else None,
                holder)
    successor = wait_for("another controller replica to lead", new_leader, timeout=120)
    took = time.monotonic() - started
    # Scale-in by the costs the new leader keeps: zone-c's pods go first (integer subsets
    # keep their maxima), and the status follows.
    scale(10)
    wait_spread({"a@zone-a": 2, "b@zone-b": 3, "c@zone-c": 5}, timeout=180)
    wait_status({"a": 2, "b": 3, "c": 5})
    costs = {p["metadata"]["annotations"].get(COST) for p in web_pods()}
    if None in costs:
        raise Failure(f"pods without a deletion cost after the failover: {costs}")
    log(f"leader {leader} deleted: {successor} leads after {took:.0f}s; scaled to 10: "
        f"2/3/5, status exact, costs {sorted(costs, key=int)}")


# ------------------------------------------------------------------ 6. metrics

def check_metrics():
    host = kubectl("get", "--raw",
                   f"/api/v1/namespaces/{SYSTEM_NS}/services/{RELEASE}-host:8080/proxy/metrics").stdout
    # Issue #41: not on the webhook port (its labels name tenants' namespaces).
    webhook_port = kubectl("get", "--raw", f"/api/v1/namespaces/{SYSTEM_NS}/services/"
                           f"https:{RELEASE}-host:443/proxy/metrics", check=False)
    if webhook_port.returncode == 0 and "workloadspread_host_" in webhook_port.stdout:
        raise Failure("the host serves /metrics on its webhook port")
    controller = kubectl("get", "--raw",
                         f"/api/v1/namespaces/{SYSTEM_NS}/services/{RELEASE}-controller-metrics:8080/proxy/metrics").stdout
    for who, body, want in (("host", host, "workloadspread_host_"),
                            ("controller", controller, "workloadspread_")):
        if want not in body:
            raise Failure(f"{who} /metrics through its Service lacks {want}: {body[:300]}")
    log(f"/metrics through the Services: host {len(host.splitlines())} lines, "
        f"controller {len(controller.splitlines())} lines")


# ------------------------------------------------------------------ 7. upgrade

def check_upgrade(values):
    """`helm upgrade` rolls the host pods while pods keep being created (2 every second)."""
    since = now_rfc3339()
    old_hosts = {p["metadata"]["name"] for p in host_pods()}
    stream = ScaleStream(10, 60, 2, 1.0)
    started = time.monotonic()
    helm().upgrade(packaged_chart(), RELEASE, values, namespace=SYSTEM_NS, wait="watcher",
                   timeout=300)
    took = time.monotonic() - started
    created_by_then = len(web_pods())
    stream.join()
    wait_spread({"a@zone-a": 2, "b@zone-b": 3, "c@zone-c": 55}, timeout=180)
    new_hosts = {p["metadata"]["name"] for p in host_pods()}
    if new_hosts & old_hosts:
        raise Failure(f"helm upgrade did not roll the host pods: {old_hosts} -> {new_hosts}")
    failed = failed_creates(since)
    if failed:
        raise Failure(f"{len(failed)} pod creates failed during helm upgrade: {failed[:3]}")
    wait_status({"a": 2, "b": 3, "c": 55})
    log(f"helm upgrade while scaling 10 -> 60: host pods rolled in {took:.0f}s "
        f"({created_by_then} pods by then), no failed create, 2/3/55")


# ------------------------------------------------------------------ 8. uninstall

def probe_pod(name, owned=True):
    """A pod with a ReplicaSet controller (what a WorkloadSpread may spread: the webhook's
    matchConditions send it to the host), or without one."""
    meta = {"name": name}
    if owned:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "probe",
                                    "uid": "0c0ffee0-0000-4000-8000-000000000001", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "probe"}]}}


def check_uninstall():
    # The control: with the webhook configured and no host behind it, pod creation stops.
    kubectl("scale", f"deployment/{RELEASE}-host", "-n", SYSTEM_NS, "--replicas=0")
    wait_for("no host pod", lambda: (not host_pods(), len(host_pods())), timeout=120)
    refused = kubectl("create", "-n", TEST_NS, "-f", "-", stdin=json.dumps(probe_pod("blocked")),
                      check=False)
    if refused.returncode == 0 or "workloadspread.io" not in refused.stderr:
        raise Failure(f"a pod was created with no host behind the Fail webhook: {refused.stderr}")
    # A pod nothing can spread does not depend on the host (matchConditions).
    kubectl("create", "-n", TEST_NS, "-f", "-", stdin=json.dumps(probe_pod("unowned", owned=False)))
    helm().uninstall(RELEASE, wait="watcher", timeout=180)
    left = [c for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
            for c in get_json(kind)["items"]
            if c["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == RELEASE
            or c["metadata"]["name"] == RELEASE]
    if left:
        raise Failure(f"webhook configurations left after helm uninstall: "
                      f"{[c['metadata']['name'] for c in left]}")
    wait_for("a pod created after uninstall", lambda: (
        kubectl("create", "-n", TEST_NS, "-f", "-", stdin=json.dumps(probe_pod("after")),
                check=False).returncode == 0, "refused"), timeout=60)
    log("no host: spreadable pods refused by the Fail webhook, unowned ones created; helm "
        "uninstall (pre-delete hook): no webhook configuration left, pods created again")


def main():
    for var in ("KUBECONFIG", "WS_REGISTRY", "WS_REAL_NODE_NAME"):
        if not os.environ.get(var):
            print(f"chart-e2e: {var} is not set; run through `make chart-e2e` "
                  f"(a cluster from WS_REAL_NODE=1 e2e/cluster/cluster.sh up)", file=sys.stderr)
            return 2
    started = time.monotonic()
    try:
        tag = version()
        refs = push_images(os.environ["WS_REGISTRY"], tag)
        log(f"pushed {refs['host']}:{tag} and {refs['controller']}:{tag}")
        values = chart_values(refs, os.environ["WS_REAL_NODE_NAME"])
        install(values)
        check_ready()
        check_startup()
        check_spread()
        check_burst_with_host_loss()
        check_leader_failover()
        check_metrics()
        # A value that still fits the memory limit (the host checks at start).
        check_upgrade(chart_values(refs, os.environ["WS_REAL_NODE_NAME"], maxConcurrency=12))
        check_uninstall()
    except (Failure, helm_python.HelmError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or ""
        print(f"FAIL: {e} {detail}", file=sys.stderr)
        diagnostics()
        return 1
    log(f"passed in {time.monotonic() - started:.0f}s")
    return 0


def diagnostics():
    """What a failure needs to be understood: the system pods, their logs, the events."""
    for args in (["get", "pods", "-A", "-o", "wide"],
                 ["get", "events", "-n", SYSTEM_NS, "--sort-by=.lastTimestamp"],
                 ["logs", "-n", SYSTEM_NS, "-l", "app.kubernetes.io/component=host", "--tail=30",
                  "--prefix"],
                 ["logs", "-n", SYSTEM_NS, "-l", "app.kubernetes.io/component=controller",
                  "--tail=30", "--prefix"]):
        p = kubectl(*args, check=False)
        print(f"--- kubectl {' '.join(args)}\n{p.stdout}{p.stderr}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
