//! A release is checked against the pod the API server stored (protocol review F1).
//!
//! Anyone who reaches the webhook can POST an AdmissionReview, so the DELETE review's
//! `oldObject` — and with it the subset, version and owner a release names — is the
//! caller's word. A forged review naming a running zone-a pod "in zone-b" would record an
//! intent in b; the pod's real DELETE would then find its deletion recorded and write
//! nothing for a, and its departure would free a slot in b that the pod never held. The
//! host reads the stored pod before it records a release: when the two disagree on what
//! decides where the slot is, the release records nothing (the controller's recount
//! frees the real slot) — a spill at worst, never an overfill.

use super::ReleaseRequest;
use crate::api::VERSION_IGNORED;
use crate::pods::{controller_uid, matched};
use crate::version::labelled_version;
use k8s_openapi::api::core::v1::Pod;

/// What a release names that the stored pod contradicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contradiction {
    /// The stored pod carries no matched annotation of the release's WorkloadSpread.
    WorkloadSpread,
    /// The stored pod is counted in another subset.
    Subset,
    /// The release's version is none the stored pod's labels give.
    Version,
    /// The stored pod's controller is not the owner the guest checked.
    Owner,
}

impl Contradiction {
    pub fn as_str(self) -> &'static str {
        match self {
            Contradiction::WorkloadSpread => "workloadspread",
            Contradiction::Subset => "subset",
            Contradiction::Version => "version",
            Contradiction::Owner => "owner",
        }
    }
}

/// The first field in which `request` contradicts `stored`, the pod as the API server
/// stored it; `None` when the release may be recorded as asked.
///
/// The version is judged without the guest's settings: the guest sends the version its
/// `versionedKinds` give, which is the stored pod's label-derived version (its
/// `pod-template-hash`, else its short `controller-revision-hash`) or
/// [`VERSION_IGNORED`]; any other is forged. Naming `versionIgnored` for a versioned pod
/// records nothing unless that version's statuses exist (`admission::release` does not
/// create them).
pub fn contradiction(request: &ReleaseRequest, stored: &Pod) -> Option<Contradiction> {
    let Some(annotation) = matched(stored).filter(|m| m.name == request.workload_spread.name)
    else {
        return Some(Contradiction::WorkloadSpread);
    };
    if annotation.subset != request.subset {
        return Some(Contradiction::Subset);
    }
    let labelled = labelled_version(stored.metadata.labels.as_ref());
    if request.pod.version != labelled && request.pod.version != VERSION_IGNORED {
        return Some(Contradiction::Version);
    }
    match (&request.controller_uid, controller_uid(stored)) {
        (Some(uid), Some(o)) if uid == o => None,
        (None, _) => None,
        _ => Some(Contradiction::Owner),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::{PodRef, WorkloadSpreadKey};
    use serde_json::json;

    fn stored() -> Pod {
        serde_json::from_value(json!({"metadata": {
            "name": "web-1", "namespace": "ns",
            "labels": {"app": "web", "pod-template-hash": "h1"},
            "annotations": {"apps.kruise.io/matched-workloadspread":
                "{\"name\":\"web\",\"subset\":\"a\"}"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-h1", "uid": "rs-uid", "controller": true}]}}))
        .unwrap_or_default()
    }

    fn request() -> ReleaseRequest {
        ReleaseRequest {
            workload_spread: WorkloadSpreadKey {
                namespace: "ns".into(),
                name: "web".into(),
                uid: None,
            },
            pod: PodRef {
                name: "web-1".into(),
                version: "h1".into(),
            },
            subset: "a".into(),
            controller_uid: Some("rs-uid".into()),
            ..ReleaseRequest::default()
        }
    }

    #[test]
    fn a_release_is_recorded_only_as_the_stored_pod_says() {
        type Edit = fn(&mut ReleaseRequest);
        let cases: [(&str, Edit, Option<Contradiction>); 8] = [
            ("as stored", |_| {}, None),
            (
                "version ignored",
                |r| r.pod.version = VERSION_IGNORED.into(),
                None,
            ),
            (
                "an old guest sends no owner",
                |r| r.controller_uid = None,
                None,
            ),
            (
                "another subset",
                |r| r.subset = "b".into(),
                Some(Contradiction::Subset),
            ),
            (
                "another WorkloadSpread",
                |r| r.workload_spread.name = "other".into(),
                Some(Contradiction::WorkloadSpread),
            ),
            (
                "a made-up version",
                |r| r.pod.version = "h9".into(),
                Some(Contradiction::Version),
            ),
            (
                "another owner",
                |r| r.controller_uid = Some("other-rs".into()),
                Some(Contradiction::Owner),
            ),
            (
                "an empty version",
                |r| r.pod.version = String::new(),
                Some(Contradiction::Version),
            ),
        ];
        for (what, edit, want) in cases {
            let mut r = request();
            edit(&mut r);
            assert_eq!(contradiction(&r, &stored()), want, "{what}");
        }
    }

    #[test]
    fn a_stored_pod_without_the_annotation_or_owner_releases_nothing() {
        let mut bare = stored();
        bare.metadata.annotations = None;
        assert_eq!(
            contradiction(&request(), &bare),
            Some(Contradiction::WorkloadSpread)
        );
        let mut orphan = stored();
        orphan.metadata.owner_references = None;
        assert_eq!(
            contradiction(&request(), &orphan),
            Some(Contradiction::Owner)
        );
    }
}
