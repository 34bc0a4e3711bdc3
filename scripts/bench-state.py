#!/usr/bin/env python3
"""Cluster state for the best-effort admission benchmark: the fixtures' Deployment `web`
(ReplicaSet web-7d4b9c) and WorkloadSpread `web-spread` in namespace `demo`, with N pods
of the workload as a kubelet reports them (defaulted spec, tolerations, affinity, volumes,
status with conditions, IPs and container statuses), spread over the three subsets, a few
in the states the controller distinguishes. Steady state as best-effort admission sees it
(#21): the WorkloadSpread status the controller wrote counts all but the last PENDING pods,
which still carry the workloadspread.io/pending label a best-effort admission adds.
With --spreads S the namespace holds S WorkloadSpreads: `web-spread` and S-1 others, each
spreading its own Deployment `other-NNNN` over three zones with a status the controller
wrote (#31); the others are listed first, so a lookup that reads them all reads them all.
Usage: bench-state.py N OUT.json [--spreads S]
"""
import json
import sys

RS = "web-7d4b9c"
HASH = "7d4b9c"
# Pods admitted since the controller's last status write (a steady rate's worth).
PENDING = 10


def pod(i, subset, state):
    created = f"2026-11-24T{10 + i // 3600 % 10:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"
    ready_at = f"2026-11-24T11:00:0{(i // 6) % 4}Z"
    scheduled = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": created}

    def conditions(ready):
        return [
            {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": None, "lastTransitionTime": created},
            {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": created},
            {"type": "Ready", "status": ready, "lastProbeTime": None, "lastTransitionTime": ready_at},
            {"type": "ContainersReady", "status": ready, "lastProbeTime": None, "lastTransitionTime": ready_at},
            scheduled,
        ]

    def container_statuses(restarts, ready):
        return [{"name": "main", "state": {"running": {"startedAt": created}}, "lastState": {},
                 "ready": ready, "restartCount": restarts, "image": "registry.example/web:1.27",
                 "imageID": "registry.example/web@sha256:" + "0123456789abcdef" * 4,
                 "containerID": f"containerd://{i:064x}", "started": True,
                 "volumeMounts": [{"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True, "recursiveReadOnly": "Disabled"}]}]

    node = f"node-{subset[-1]}-{i % 7}"
    if state == "running":
        status = {"phase": "Running", "conditions": conditions("True"), "containerStatuses": container_statuses(i % 3, True)}
    elif state == "unschedulable":
        node = None
        status = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                  "lastProbeTime": None, "lastTransitionTime": created,
                  "message": "0/6 nodes are available: 6 Insufficient cpu. preemption: 0/6 nodes are available."}]}
    else:  # not ready
        status = {"phase": "Running", "conditions": conditions("False"), "containerStatuses": container_statuses(1, False)}
    status.update({"qosClass": "Burstable", "startTime": created})
    if node:
        status.update({"hostIP": f"10.0.{i % 7}.{10 + i % 200}", "podIP": f"10.244.{i // 250 % 250}.{i % 250}"})
        status["hostIPs"] = [{"ip": status["hostIP"]}]
        status["podIPs"] = [{"ip": status["podIP"]}]
    spec = {
        "containers": [{
            "name": "main", "image": "registry.example/web:1.27", "imagePullPolicy": "IfNotPresent",
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": [{"name": "ZONE", "value": subset},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10,
                               "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
            "volumeMounts": [{"name": "kube-api-access-x", "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
        "volumes": [{"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
        "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [subset]}]}]}}},
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"{RS}-{i:05d}", "generateName": f"{RS}-", "namespace": "demo",
            "uid": f"{i:08x}-0000-4000-8000-{i:012x}", "resourceVersion": str(1000 + i),
            "creationTimestamp": created,
            "labels": {"app": "web", "pod-template-hash": HASH, "zone": subset[-1]},
            "annotations": {
                "apps.kruise.io/matched-workloadspread": json.dumps({"name": "web-spread", "subset": subset}, separators=(",", ":")),
                "controller.kubernetes.io/pod-deletion-cost": str(999_990 - i % 10),
                "kubectl.kubernetes.io/restartedAt": "2026-11-20T08:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": RS, "uid": "rs-uid",
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": spec,
        "status": status,
    }


def status(subsets, counted, replicas):
    """The status the controller writes for the first `counted` pods (all active)."""
    maxima = {"zone-a": 2, "zone-b": replicas // 2, "zone-c": None}
    statuses = []
    for name, top in maxima.items():
        count = sum(1 for s in subsets[:counted] if s == name)
        missing = -1 if top is None else max(0, top - count)
        statuses.append({"name": name, "replicas": count, "missingReplicas": missing})
    return {"observedGeneration": 1, "subsetStatuses": statuses,
            "versionedSubsetStatuses": {HASH: statuses}}


def zone_subsets(first_max, second_max):
    subsets = []
    for zone, top in (("zone-a", first_max), ("zone-b", second_max), ("zone-c", None)):
        subset = {"name": zone, "requiredNodeSelector": {"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}}
        if top is not None:
            subset["maxReplicas"] = top
        subsets.append(subset)
    subsets[0]["patch"] = {"metadata": {"labels": {"zone": "a"}}}
    return subsets


def other_spread(i):
    """A Deployment `other-NNNN` of 10 replicas and its WorkloadSpread, as the API server
    holds them once the controller counted its pods."""
    name = f"other-{i:04d}"
    labels = {"app": name}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "demo", "uid": f"d-{name}", "generation": 1,
                     "resourceVersion": str(5000 + i), "creationTimestamp": "2026-11-24T09:00:00Z",
                     "labels": labels},
        "spec": {"replicas": 10, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "main", "image": f"registry.example/{name}:1.0"}]}}},
    }
    statuses = [{"name": "zone-a", "replicas": 3, "missingReplicas": 0},
                {"name": "zone-b", "replicas": 5, "missingReplicas": 0},
                {"name": "zone-c", "replicas": 2, "missingReplicas": -1}]
    spread = {
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
        "metadata": {"name": f"{name}-spread", "namespace": "demo", "uid": f"ws-{name}", "generation": 1,
                     "resourceVersion": str(6000 + i), "creationTimestamp": "2026-11-24T09:00:01Z"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                 "subsets": zone_subsets(3, "50%")},
        "status": {"observedGeneration": 1, "subsetStatuses": statuses,
                   "versionedSubsetStatuses": {"5f6d7c": statuses}},
    }
    return [deployment, spread]


def main():
    args = sys.argv[1:]
    spreads = 1
    if "--spreads" in args:
        at = args.index("--spreads")
        spreads = int(args[at + 1])
        del args[at:at + 2]
    n, out = int(args[0]), args[1]
    replicas = n + 10
    half = replicas // 2
    # zone-a full, zone-b one short of its 50 %, the rest in zone-c; the pending pods
    # are spread the same way (the newest pods).
    subsets = ["zone-a"] * 2 + ["zone-b"] * min(n - 2, half - 1)
    subsets += ["zone-c"] * (n - len(subsets))
    subsets = subsets[2:] + subsets[:2] if n > PENDING else subsets
    states = ["running"] * 18 + ["not-ready", "unschedulable"]
    pods = [pod(i, s, states[i % len(states)]) for i, s in enumerate(subsets)]
    counted = max(0, n - PENDING)
    for p in pods[counted:]:
        p["metadata"]["labels"]["workloadspread.io/pending"] = "true"
    workload = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "demo", "uid": "d-uid"},
         "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                  "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "main", "image": "nginx"}]}}}},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet",
         "metadata": {"name": RS, "namespace": "demo", "uid": "rs-uid", "labels": {"app": "web", "pod-template-hash": HASH},
                      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d-uid", "controller": True}]},
         "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web", "pod-template-hash": HASH}},
                  "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": HASH}},
                               "spec": {"containers": [{"name": "main", "image": "nginx"}]}}}},
        {"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
         "metadata": {"name": "web-spread", "namespace": "demo", "uid": "ws-uid", "generation": 1},
         "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                  "subsets": [
                      {"name": "zone-a", "maxReplicas": 2, "patch": {"metadata": {"labels": {"zone": "a"}}},
                       "requiredNodeSelector": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}},
                      {"name": "zone-b", "maxReplicas": "50%",
                       "requiredNodeSelector": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]}},
                      {"name": "zone-c",
                       "requiredNodeSelector": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-c"]}]}}]},
         "status": status(subsets, counted, replicas)},
    ]
    others = [o for i in range(max(0, spreads - 1)) for o in other_spread(i)]
    with open(out, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": others + workload + pods}, f)


if __name__ == "__main__":
    main()
