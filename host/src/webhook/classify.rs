//! What an admission request is, read from the request alone: the classification the
//! pipeline (`admit.rs`) and the re-invocation tokens (`reinvoke.rs`) act on.

use serde_json::Value;

/// A pod CREATE (not a subresource): the requests claims and re-invocation tokens are for.
pub(super) fn pod_create(request: &Value) -> bool {
    let resource = &request["resource"];
    resource["group"] == ""
        && resource["resource"] == "pods"
        && request["subResource"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        && request["operation"] == "CREATE"
}

/// The namespace a pod creation may claim a slot in: not a dry run, and the pod has a
/// controller (unowned pods are never spread). Such creations are rate-limited, by the
/// namespace the policy decides in — the pod's own `metadata.namespace` when it names one
/// (a review POSTed by anyone may give another in `request.namespace`), else the
/// request's.
pub(super) fn may_claim(request: &Value) -> Option<&str> {
    let requested = owned_pod_create(request).filter(|_| !dry_run(request))?;
    let own = request["object"]["metadata"]["namespace"]
        .as_str()
        .filter(|n| !n.is_empty());
    Some(own.unwrap_or(requested))
}

/// The namespace of a pod creation (dry run or not) whose pod has a controller: the
/// requests a WorkloadSpread may spread.
pub(super) fn owned_pod_create(request: &Value) -> Option<&str> {
    let is_pod_create = pod_create(request);
    let owned = request["object"]["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == true));
    (is_pod_create && owned)
        .then(|| request["namespace"].as_str())
        .flatten()
}

/// Whether the API server will store nothing of this request (`dryRun`).
fn dry_run(request: &Value) -> bool {
    request["dryRun"] == true
}

/// Whether the request is about a WorkloadSpread itself (any served version, any
/// operation): its validation reads every WorkloadSpread, contested ones included
/// (`index::ShowingContested`).
pub(super) fn about_workloadspread(request: &Value) -> bool {
    let resource = &request["resource"];
    resource["group"] == "apps.kruise.io" && resource["resource"] == "workloadspreads"
}

/// The namespace of a WorkloadSpread creation (any served version) that is not a dry run.
pub(super) fn workloadspread_created(request: &Value) -> Option<&str> {
    (about_workloadspread(request) && request["operation"] == "CREATE" && !dry_run(request))
        .then(|| request["namespace"].as_str())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The claim limiter counts the namespace the claim is made in: the pod's own, which
    /// a review POSTed by anyone may contradict in `request.namespace` (#40).
    #[test]
    fn claims_are_limited_in_the_pods_own_namespace() {
        let review = |pod_ns: Value, dry_run: bool| {
            json!({"resource": {"group": "", "resource": "pods"}, "operation": "CREATE",
                "namespace": "decoy", "dryRun": dry_run,
                "object": {"metadata": {"namespace": pod_ns,
                    "ownerReferences": [{"controller": true, "kind": "ReplicaSet", "name": "web"}]}}})
        };
        assert_eq!(may_claim(&review(json!("team-a"), false)), Some("team-a"));
        assert_eq!(may_claim(&review(json!(""), false)), Some("decoy"));
        assert_eq!(may_claim(&review(Value::Null, false)), Some("decoy"));
        assert_eq!(may_claim(&review(json!("team-a"), true)), None, "a dry run");
    }
}
