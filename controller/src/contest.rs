//! Standing back from a WorkloadSpread another manager writes too (`core::contest`):
//! OpenKruise's manager with its WorkloadSpread gate still on, or anything else writing
//! the status. Such a spread gets no status, cost or rescheduling write from this
//! controller; it says so once with a Warning event on the spread, a gauge
//! (`workloadspread_controller_contested_workloadspreads`) and `/readyz` (503 naming the
//! spread, the other manager and what to do), until the spread is deleted or the
//! controller restarts. An event that could not be recorded (this replica was not leading
//! then, or the API server refused it) is tried again at the spread's next reconcile.
//! While OpenKruise's WorkloadSpread validation is registered (`core::contest`), every
//! spread is contested so; its removal (the hand-over) drops every contest
//! ([`Standing::set_registered`]) and the caller reconciles every spread again.

use crate::metrics::Metrics;
use crate::writer::Writer;
use crate::writes::publish_events;
use kube::api::DynamicObject;
use kube::ResourceExt;
use std::collections::HashSet;
use std::sync::Mutex;
use workloadspread_core::contest::{spread_key, spread_of, Contests, Registration};
use workloadspread_core::controller::Event;

/// The contests found so far, keyed `namespace/name/uid`.
#[derive(Default)]
pub struct Standing {
    contests: Mutex<Known>,
}

#[derive(Default)]
struct Known {
    contests: Contests,
    /// The contests whose `Contested` event was recorded.
    announced: HashSet<String>,
}

fn key(object: &DynamicObject) -> String {
    spread_key(
        &object.namespace().unwrap_or_default(),
        &object.name_any(),
        &object.uid().unwrap_or_default(),
    )
}

impl Standing {
    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        self.contests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows whether OpenKruise's WorkloadSpread validation is registered: what changed
    /// (the events are posted again for what is contested from then on), and how many
    /// spreads are contested now.
    pub fn set_registered(&self, registered: bool) -> (Registration, usize) {
        self.set_registered_seeing(registered, std::iter::empty())
    }

    /// As [`Standing::set_registered`], each of `spreads` seen first (as the store holds
    /// it): a hand-over then takes them as their first sight, not what the last reconcile
    /// of each happened to see.
    pub fn set_registered_seeing<'a>(
        &self,
        registered: bool,
        spreads: impl Iterator<Item = &'a DynamicObject>,
    ) -> (Registration, usize) {
        let mut known = self.lock();
        if !registered && known.contests.registration().is_some() {
            for o in spreads {
                known.contests.observe(&key(o), o.managed_fields());
            }
        }
        let change = known.contests.set_registered(registered);
        match change {
            Registration::Registered => {
                if let Some(r) = known.contests.registration() {
                    tracing::error!("{}", r.message("*"));
                }
            }
            Registration::HandedOver => tracing::info!(
                "OpenKruise's WorkloadSpread validation is gone (handed over): reconciling \
                 every WorkloadSpread"
            ),
            Registration::Unchanged => {}
        }
        if change != Registration::Unchanged {
            known.announced.clear();
        }
        (change, known.contests.len())
    }

    /// Records why OpenKruise's registration is not known yet.
    pub fn registration_failed(&self, error: String) {
        self.lock().contests.registration_failed(error);
    }

    /// What `/readyz` says until OpenKruise's registration is known.
    pub fn registration_unknown(&self) -> Option<String> {
        self.lock().contests.registration_unknown()
    }

    /// What `/readyz` says while a spread is contested: which, by whom, what to do.
    pub fn not_ready_reason(&self) -> Option<String> {
        let contests = &self.lock().contests;
        if let Some(r) = contests.registration() {
            return Some(r.message("*"));
        }
        let (key, contest) = contests.iter().next()?;
        let spread = spread_of(key);
        let more = contests.len() - 1;
        Some(if more > 0 {
            format!(
                "{} (and {more} more WorkloadSpreads)",
                contest.message(spread)
            )
        } else {
            contest.message(spread)
        })
    }

    /// Forgets the spreads not in `live` (`namespace/name/uid` keys); returns how many
    /// are contested now.
    pub fn retain(&self, live: &HashSet<String>) -> usize {
        let mut known = self.lock();
        known.contests.retain(&|k| live.contains(k));
        known.announced.retain(|k| live.contains(k));
        known.contests.len()
    }

    /// The `namespace/name/uid` keys of `objects` (what [`Standing::retain`] keeps).
    pub fn keys<'a>(objects: impl Iterator<Item = &'a DynamicObject>) -> HashSet<String> {
        objects.map(key).collect()
    }
}

/// Whether this controller must leave `object` alone; on the first sight of its contest
/// it logs and sets the gauge, and it records the `Contested` event until one is recorded.
pub async fn stands_back(
    object: &DynamicObject,
    standing: &Standing,
    metrics: &Metrics,
    writer: &Writer,
) -> bool {
    let key = key(object);
    let found = {
        let mut known = standing.lock();
        let found = known
            .contests
            .observe(&key, object.managed_fields())
            .map(|o| (o.new, o.contest.message(spread_of(&key))));
        metrics
            .contested
            .set(i64::try_from(known.contests.len()).unwrap_or(i64::MAX));
        found.map(|(new, message)| (new, !known.announced.contains(&key), message))
    };
    let Some((new, unannounced, message)) = found else {
        return false;
    };
    if new {
        tracing::error!("{message}");
    }
    if unannounced && publish_events(object, &[Event::warning("Contested", message)], writer).await
    {
        standing.lock().announced.insert(key);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::Leadership;
    use axum::http::StatusCode;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// An API server for events only: the first POST fails, later ones are stored (the
    /// body echoed); counts them.
    async fn event_sink() -> (String, Arc<AtomicUsize>) {
        let posts = Arc::new(AtomicUsize::new(0));
        let seen = posts.clone();
        let app = axum::Router::new().fallback(move |body: String| {
            let seen = seen.clone();
            async move {
                match seen.fetch_add(1, Ordering::SeqCst) {
                    0 => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
                    _ => (StatusCode::CREATED, body),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, posts)
    }

    fn spread(status_writers: &[&str]) -> DynamicObject {
        let entries: Vec<serde_json::Value> = status_writers
            .iter()
            .map(|m| {
                serde_json::json!({"manager": m, "operation": "Update", "subresource": "status",
                    "apiVersion": "apps.kruise.io/v1alpha1", "time": "2026-11-29T07:00:00Z"})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                "managedFields": entries}}))
        .unwrap()
    }

    /// A `Contested` event the API server did not take is posted again at the next
    /// reconcile, and not again once recorded.
    #[tokio::test]
    async fn the_contested_event_is_posted_until_recorded() {
        let (url, posts) = event_sink().await;
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let recorder = kube::runtime::events::Recorder::new(client.clone(), "test".into());
        let metrics = Arc::new(Metrics::new());
        let writer = Writer::new(
            client,
            recorder,
            Arc::new(Leadership::unelected()),
            metrics.clone(),
        );
        let standing = Standing::default();
        assert!(standing.registration_unknown().is_some());
        standing.registration_failed("forbidden".into());
        assert!(standing
            .registration_unknown()
            .is_some_and(|w| w.contains("forbidden")));
        assert_eq!(standing.set_registered(false).0, Registration::Unchanged);
        assert!(standing.registration_unknown().is_none());
        let ours = spread(&["workloadspread-controller"]);
        assert!(!stands_back(&ours, &standing, &metrics, &writer).await);
        assert_eq!(posts.load(Ordering::SeqCst), 0);
        let rival = spread(&["workloadspread-controller", "kruise-manager"]);
        assert!(stands_back(&rival, &standing, &metrics, &writer).await);
        assert_eq!(posts.load(Ordering::SeqCst), 1, "posted, refused");
        assert!(stands_back(&rival, &standing, &metrics, &writer).await);
        assert_eq!(posts.load(Ordering::SeqCst), 2, "posted again, recorded");
        assert!(stands_back(&rival, &standing, &metrics, &writer).await);
        assert_eq!(posts.load(Ordering::SeqCst), 2, "once recorded, not again");
        assert!(standing.not_ready_reason().is_some());
        // OpenKruise's validation registered: the event again, naming it; handed over:
        // nothing contested, the spread seen then is its first sight.
        assert_eq!(standing.set_registered(true).0, Registration::Registered);
        assert!(stands_back(&rival, &standing, &metrics, &writer).await);
        assert_eq!(
            posts.load(Ordering::SeqCst),
            3,
            "the registration announced"
        );
        assert!(standing
            .not_ready_reason()
            .is_some_and(|r| r.contains("openkruise hand-over")));
        assert_eq!(
            standing.set_registered(false),
            (Registration::HandedOver, 0)
        );
        assert!(!stands_back(&rival, &standing, &metrics, &writer).await);
        assert!(standing.not_ready_reason().is_none());
    }
}
