//! WorkloadSpreads another manager writes too (`core::contest`: OpenKruise's manager with
//! its WorkloadSpread gate still on), kept from the events of their watch. The host stands
//! back from such a spread: reads of WorkloadSpreads leave it out, so its pods are admitted
//! as they come (spread by the other webhook, which runs before this one when it is
//! OpenKruise's: configurations are called in name order) and no new claim is made in it
//! (the counter still settles or returns what it reserved before).
//! While OpenKruise's WorkloadSpread validation is registered (`core::contest`), every
//! spread is left out so; until the first answer of that watch, the host is not ready.
//! It says so in the log and in `workloadspread_host_contested_workloadspreads`; the
//! controller records the event on the spread and its `/readyz` names it. Not `/readyz`
//! here: a host out of its Service refuses every covered pod (failurePolicy Fail), which is
//! worse than one spread left to the other writer.

use kube::api::DynamicObject;
use kube::runtime::watcher;
use kube::ResourceExt as _;
use std::collections::HashSet;
use std::sync::Mutex;
use workloadspread_core::contest::{spread_key, spread_of, Contests, Registration};

/// `namespace/name/uid` of a WorkloadSpread.
fn key(o: &DynamicObject) -> String {
    spread_key(
        &o.namespace().unwrap_or_default(),
        &o.name_any(),
        &o.uid().unwrap_or_default(),
    )
}

#[derive(Default)]
struct State {
    contests: Contests,
    /// Keys seen by a relist in progress (what it does not list is forgotten when done).
    relisting: Option<HashSet<String>>,
}

/// The contests found, following the WorkloadSpread watch.
#[derive(Default)]
pub struct ContestIndex {
    state: Mutex<State>,
}

impl ContestIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows one event of the watch (before managedFields are trimmed from the object);
    /// returns how many spreads are contested now.
    pub fn apply(&self, event: &watcher::Event<DynamicObject>) -> usize {
        let mut state = self.lock();
        let observe = |state: &mut State, o: &DynamicObject| {
            let key = key(o);
            if let Some(o) = state.contests.observe(&key, o.managed_fields()) {
                if o.new {
                    tracing::error!("{}", o.contest.message(spread_of(&key)));
                }
            }
            key
        };
        match event {
            watcher::Event::Apply(o) => {
                observe(&mut state, o);
            }
            watcher::Event::Delete(o) => {
                let key = key(o);
                state.contests.retain(&|k| k != key);
            }
            watcher::Event::Init => state.relisting = Some(HashSet::new()),
            watcher::Event::InitApply(o) => {
                let key = observe(&mut state, o);
                if let Some(seen) = state.relisting.as_mut() {
                    seen.insert(key);
                }
            }
            watcher::Event::InitDone => {
                if let Some(seen) = state.relisting.take() {
                    state.contests.retain(&|k| seen.contains(k));
                }
            }
        }
        state.contests.len()
    }

    /// Follows whether OpenKruise's WorkloadSpread validation is registered; returns how
    /// many spreads are contested now.
    pub fn set_registered(&self, registered: bool) -> usize {
        let mut state = self.lock();
        match state.contests.set_registered(registered) {
            Registration::Registered => {
                if let Some(r) = state.contests.registration() {
                    tracing::error!("{}", r.message("*"));
                }
            }
            Registration::HandedOver => tracing::info!(
                "OpenKruise's WorkloadSpread validation is gone (handed over): spreading \
                 every WorkloadSpread from now"
            ),
            Registration::Unchanged => {}
        }
        state.contests.len()
    }

    /// Records why OpenKruise's registration is not known yet.
    pub fn registration_failed(&self, error: String) {
        self.lock().contests.registration_failed(error);
    }

    /// Why reads cannot be decided yet: OpenKruise's registration not known.
    pub fn unknown(&self) -> Option<String> {
        self.lock().contests.registration_unknown()
    }

    /// Follows `o` as read live (not through the watch); whether it is contested now.
    pub fn observe_live(&self, o: &DynamicObject) -> bool {
        let mut state = self.lock();
        let key = key(o);
        match state.contests.observe(&key, o.managed_fields()) {
            Some(found) => {
                if found.new {
                    tracing::error!("{}", found.contest.message(spread_of(&key)));
                }
                true
            }
            None => false,
        }
    }

    /// How many spreads are contested now.
    pub fn len(&self) -> usize {
        self.lock().contests.len()
    }

    /// Whether the host stands back from the spread `namespace/name` (any uid).
    pub fn stands_back_from(&self, namespace: &str, name: &str) -> bool {
        let state = self.lock();
        let spread = format!("{namespace}/{name}");
        state.contests.registration().is_some()
            || state.contests.iter().any(|(k, _)| spread_of(k) == spread)
    }

    /// Whether the host stands back from `o`.
    pub fn is_contested(&self, o: &DynamicObject) -> bool {
        self.lock().contests.get(&key(o)).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ws(uid: &str, status_writer: &str, second: u32) -> DynamicObject {
        serde_json::from_value(
            json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "WorkloadSpread",
            "metadata": {"name": "web", "namespace": "ns", "uid": uid, "managedFields": [
                {"manager": status_writer, "operation": "Update", "subresource": "status",
                 "time": format!("2026-11-28T08:00:{second:02}Z")}]}}),
        )
        .unwrap()
    }

    /// A later status write by another manager makes a spread contested; deletes and
    /// relists that no longer list it forget it.
    #[test]
    fn the_index_follows_the_watch() {
        let index = ContestIndex::default();
        let apply = |o| index.apply(&watcher::Event::Apply(o));
        assert_eq!(apply(ws("u1", "kruise-manager", 1)), 0);
        assert_eq!(apply(ws("u1", "workloadspread-host", 9)), 0);
        assert_eq!(apply(ws("u1", "kruise-manager", 2)), 1);
        assert!(index.is_contested(&ws("u1", "x", 0)));
        assert!(index.stands_back_from("ns", "web") && !index.stands_back_from("ns", "db"));
        assert!(!index.is_contested(&ws("u2", "x", 0)));
        index.apply(&watcher::Event::Delete(ws("u1", "x", 0)));
        assert!(!index.is_contested(&ws("u1", "x", 0)));
        apply(ws("u3", "kruise-manager", 1));
        assert_eq!(apply(ws("u3", "kruise-manager", 5)), 1);
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(ws("u4", "kruise-manager", 1)));
        assert!(
            index.is_contested(&ws("u3", "x", 0)),
            "until the relist is done"
        );
        assert_eq!(index.apply(&watcher::Event::InitDone), 0);
    }

    /// OpenKruise's registration stands back from every spread and holds readiness until
    /// known; the hand-over clears contests found before.
    #[test]
    fn the_registration_holds_every_spread() {
        let index = ContestIndex::default();
        assert!(index.unknown().is_some());
        index.registration_failed("forbidden".into());
        assert!(index.unknown().is_some_and(|w| w.contains("forbidden")));
        index.apply(&watcher::Event::Apply(ws("u1", "kruise-manager", 1)));
        assert_eq!(index.set_registered(false), 0);
        assert!(index.unknown().is_none());
        assert_eq!(
            index.apply(&watcher::Event::Apply(ws("u1", "kruise-manager", 2))),
            1
        );
        index.apply(&watcher::Event::Apply(ws("u2", "kruise-manager", 1)));
        assert_eq!(index.set_registered(true), 2);
        assert!(
            index.is_contested(&ws("u3", "x", 0)),
            "not seen yet, held too"
        );
        assert!(index.stands_back_from("other", "any"));
        assert_eq!(index.set_registered(false), 0);
        assert!(!index.is_contested(&ws("u1", "x", 0)));
        assert!(!index.stands_back_from("ns", "web"));
    }
}
