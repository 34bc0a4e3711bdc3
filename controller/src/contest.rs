//! Standing back from a WorkloadSpread another manager writes too (`core::contest`):
//! OpenKruise's manager with its WorkloadSpread gate still on, or anything else writing
//! the status. Such a spread gets no status, cost or rescheduling write from this
//! controller; it says so once with a Warning event on the spread, a gauge
//! (`workloadspread_controller_contested_workloadspreads`) and `/readyz` (503 naming the
//! spread, the other manager and what to do), until the spread is deleted or the
//! controller restarts.

use crate::metrics::Metrics;
use crate::writer::Writer;
use crate::writes::publish_events;
use kube::api::DynamicObject;
use kube::ResourceExt;
use std::collections::HashSet;
use std::sync::Mutex;
use workloadspread_core::contest::{spread_key, spread_of, Contests};
use workloadspread_core::controller::Event;

/// The contests found so far, keyed `namespace/name/uid`.
#[derive(Default)]
pub struct Standing {
    contests: Mutex<Contests>,
}

fn key(object: &DynamicObject) -> String {
    spread_key(
        &object.namespace().unwrap_or_default(),
        &object.name_any(),
        &object.uid().unwrap_or_default(),
    )
}

impl Standing {
    fn lock(&self) -> std::sync::MutexGuard<'_, Contests> {
        self.contests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What `/readyz` says while a spread is contested: which, by whom, what to do.
    pub fn not_ready_reason(&self) -> Option<String> {
        let contests = self.lock();
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
        let mut contests = self.lock();
        contests.retain(&|k| live.contains(k));
        contests.len()
    }

    /// The `namespace/name/uid` keys of `objects` (what [`Standing::retain`] keeps).
    pub fn keys<'a>(objects: impl Iterator<Item = &'a DynamicObject>) -> HashSet<String> {
        objects.map(key).collect()
    }
}

/// Whether this controller must leave `object` alone; on the first sight of its contest
/// it logs, records the event and sets the gauge.
pub async fn stands_back(
    object: &DynamicObject,
    standing: &Standing,
    metrics: &Metrics,
    writer: &Writer,
) -> bool {
    let key = key(object);
    let found = {
        let mut contests = standing.lock();
        let found = contests
            .observe(&key, object.managed_fields())
            .map(|o| o.new.then(|| o.contest.message(spread_of(&key))));
        metrics
            .contested
            .set(i64::try_from(contests.len()).unwrap_or(i64::MAX));
        found
    };
    let Some(new) = found else {
        return false;
    };
    if let Some(message) = new {
        tracing::error!("{message}");
        publish_events(object, &[Event::warning("Contested", message)], writer).await;
    }
    true
}
