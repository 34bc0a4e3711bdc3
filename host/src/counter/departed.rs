//! Releases of pods already gone. A release frees its pod's slot (`deletingPods`) until
//! the controller recounts. One that reaches the status after the controller has
//! recounted without the pod — a DELETE admitted twice (the API server's retried update,
//! a client's retry) or answered late — would free the slot a second time, and the next
//! burst would put one pod too many into the subset (the scenario suite's sequences saw
//! a = 5 of 4 after a scale-in). So every attempt checks, once it has the status it
//! writes on, whether each release's pod is still running, by a consistent read: one
//! terminating or gone is answered "not released" and left to the controller's recount.
//! If the recount is in the status the attempt writes on, the controller saw the pod
//! terminating before that, so the later read sees it too; if the recount lands after,
//! the write conflicts and the next attempt reads again. A read that fails counts as
//! gone: the slot is then freed by the recount — later, never twice.
//!
//! The same read judges the release itself (protocol review F1): one whose WorkloadSpread,
//! subset, version or owner the stored pod contradicts is a forged review, answered "not
//! released" and recorded nowhere (`workloadspread_core::counter::stored`).

use super::{Answer, Committer, Op, Pending, Work};
use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use workloadspread_core::admission::reserve::stale::named_by;
use workloadspread_core::counter::stored::contradiction;
use workloadspread_core::counter::ReleaseResponse;
use workloadspread_core::pods::matched;

impl Committer {
    /// Answers the releases of `batch` whose pods no longer run ("not released") and
    /// returns the rest.
    pub(super) async fn drop_departed(
        &self,
        namespace: &str,
        batch: Vec<Pending>,
        budget: Duration,
    ) -> Vec<Pending> {
        let names: HashSet<&str> = batch.iter().filter_map(release_of).collect();
        if names.is_empty() {
            return batch;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let reads = names.iter().map(|name| {
            let pods = pods.clone();
            async move {
                running(&pods, name, budget)
                    .await
                    .map(|p| (name.to_string(), p))
            }
        });
        let running: HashMap<String, Pod> = join_all(reads).await.into_iter().flatten().collect();
        let mut rest = Vec::with_capacity(batch.len());
        for mut p in batch {
            let mut stored = release_of(&p).and_then(|name| running.get(name));
            if let (Some(pod), Work::Op(Op::Release(r))) = (stored, &mut p.work) {
                // What the API server stored decides where the slot is, not the request
                // (anyone can POST a review): a release the stored pod contradicts
                // records nothing; the rest take its claim key and placeholder.
                if let Some(field) = contradiction(r, pod) {
                    tracing::warn!(
                        namespace,
                        pod = %r.pod.name,
                        subset = %r.subset,
                        version = %r.pod.version,
                        contradicts = field.as_str(),
                        "release contradicted by the stored pod (a forged review?): nothing recorded"
                    );
                    self.metrics.contradicted_releases.inc();
                    stored = None;
                } else {
                    r.generated_uid = matched(pod).and_then(|m| m.uid);
                    r.reservation = named_by(pod).map(str::to_string);
                }
            }
            if stored.is_some() || release_of(&p).is_none() {
                rest.push(p);
                continue;
            }
            let answer = Answer::Release(ReleaseResponse { released: false });
            if let Work::Op(op) = &p.work {
                tracing::debug!(?op, "release not recorded: left to the recount");
                self.record(op, Some(&answer));
            }
            if let Some(reply) = p.reply {
                let _ = reply.send(Ok(answer));
            }
        }
        rest
    }
}

fn release_of(p: &Pending) -> Option<&str> {
    match &p.work {
        Work::Op(Op::Release(r)) => Some(r.pod.name.as_str()),
        _ => None,
    }
}

/// Pod `name` if it exists, is not being deleted and has not finished (a consistent
/// read: no `resourceVersion`); `None` when the read fails or takes longer than
/// `budget`. A finished pod is no replica of the controller's count: recording its
/// deletion would free a slot it no longer holds once the deletion is stored.
async fn running(pods: &Api<Pod>, name: &str, budget: Duration) -> Option<Pod> {
    match tokio::time::timeout(budget, pods.get_opt(name)).await {
        Ok(Ok(Some(pod))) if super::departures::runs(&pod) => Some(pod),
        _ => None,
    }
}
