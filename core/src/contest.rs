//! Another writer of a WorkloadSpread's status — OpenKruise's manager with its
//! `WorkloadSpread` feature gate still on (its pod webhook records `creatingPods`, its
//! controller the counts), or anything else — found from facts the API server stored:
//! every write of the `status` subresource leaves a managedFields entry naming its
//! manager and the API server's time of the write. A component remembers the entries it
//! saw first for each WorkloadSpread; an entry of another manager that is new, or whose
//! time moved, since then is a write by that manager after this component started. The
//! spread is then *contested*: the component stands back from it (no status, no costs, no
//! injection) and says so, until the other writer is switched off and the component is
//! restarted (`docs/operations.md`, "Coming from OpenKruise").
//!
//! Only the other manager's own writes move its entry's time (another manager taking
//! fields over shrinks its field set, never its time): a changed time is a write, whatever
//! the clock of the API server that took it; no clocks are compared. Writes within the
//! second of the first sight are not told apart from it (managedFields times have
//! one-second resolution); the next write in a later second is.
//!
//! Known limits (`docs/operations.md`): a one-off hand edit of the status (`kubectl edit
//! --subresource=status`) is a rival too, until a restart; and first sight is per process
//! (a replica started after a rival's last write does not count that write).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
use std::collections::BTreeMap;

/// The field managers of this project's components (the prefix of their user agents).
pub const HOST_MANAGER: &str = "workloadspread-host";
pub const CONTROLLER_MANAGER: &str = "workloadspread-controller";
/// The user agent a component of ours sends: the API server names its writes (the
/// managedFields manager) by the part before the `/`.
pub fn user_agent(manager: &str) -> String {
    format!("{manager}/{}", env!("CARGO_PKG_VERSION"))
}

/// What the API server names a client without a user agent: releases before the
/// managers above wrote so, and an upgrade must not read its own old writes as a rival.
pub const UNNAMED_MANAGER: &str = "unknown";

/// A write of the status subresource by a manager that is not ours: one managedFields
/// entry (the API server keeps one per manager, operation and apiVersion).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusWrite {
    pub manager: String,
    pub operation: Option<String>,
    pub api_version: Option<String>,
    pub time: Option<Time>,
}

impl StatusWrite {
    fn same_entry(&self, other: &StatusWrite) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.api_version == other.api_version
    }
}

/// The status writes of other managers recorded in `entries` (a WorkloadSpread's
/// `metadata.managedFields`).
pub fn foreign_status_writes(entries: &[ManagedFieldsEntry]) -> Vec<StatusWrite> {
    entries
        .iter()
        .filter(|e| e.subresource.as_deref() == Some("status"))
        .filter_map(|e| {
            let manager = e.manager.as_deref().unwrap_or(UNNAMED_MANAGER);
            (![HOST_MANAGER, CONTROLLER_MANAGER, UNNAMED_MANAGER].contains(&manager)).then(|| {
                StatusWrite {
                    manager: manager.to_string(),
                    operation: e.operation.clone(),
                    api_version: e.api_version.clone(),
                    time: e.time.clone(),
                }
            })
        })
        .collect()
}

/// Keeps of `entries` only what [`foreign_status_writes`] reads (status entries, without
/// their field sets): what a cache holds instead of the whole managedFields.
pub fn trim_to_status_entries(entries: &mut Vec<ManagedFieldsEntry>) {
    entries.retain(|e| e.subresource.as_deref() == Some("status"));
    for e in entries.iter_mut() {
        e.fields_v1 = None;
    }
}

/// A contested spread: who wrote its status after this component first saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contest {
    pub manager: String,
    /// The API server's time of that write.
    pub at: Option<Time>,
}

impl Contest {
    /// What to tell the user: who, and what to do.
    pub fn message(&self, spread: &str) -> String {
        let at = self
            .at
            .as_ref()
            .map(|t| format!(" at {}", t.0))
            .unwrap_or_default();
        format!(
            "WorkloadSpread {spread} is also written by {}{at} (its status changed after this \
             component started): not spreading it, to not fight. If that is OpenKruise, turn \
             its WorkloadSpread feature gate off (featureGates=\"WorkloadSpread=false\"), then \
             restart this component; see docs/operations.md, \"Coming from OpenKruise\"",
            self.manager
        )
    }
}

/// Whether `now` (the other managers' status writes of one WorkloadSpread as stored now)
/// holds a write that `first` (as this component first saw them) did not: an entry that
/// is new, or whose time changed. Any change, not only a later time: with several API
/// servers the time is the clock of whichever one took the write.
pub fn contest(first: &[StatusWrite], now: &[StatusWrite]) -> Option<Contest> {
    now.iter()
        .find(|w| !first.iter().any(|f| f.same_entry(w) && f.time == w.time))
        .map(|w| Contest {
            manager: w.manager.clone(),
            at: w.time.clone(),
        })
}

/// The key a component remembers a spread by: `namespace/name/uid` (a spread recreated
/// under its name is a new one).
pub fn spread_key(namespace: &str, name: &str, uid: &str) -> String {
    format!("{namespace}/{name}/{uid}")
}

/// The `namespace/name` of a [`spread_key`] (what messages name).
pub fn spread_of(key: &str) -> &str {
    key.rsplit_once('/')
        .map(|(spread, _)| spread)
        .unwrap_or(key)
}

/// A spread's contest as one observation left it.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    pub contest: &'a Contest,
    /// Found by this observation (say so once).
    pub new: bool,
}

/// What a component remembers per WorkloadSpread (by uid): the other managers' writes at
/// first sight, and the contest once one is found (kept until the spread is deleted or the
/// component restarts). Bounded by the WorkloadSpreads the component sees.
#[derive(Debug, Default)]
pub struct Contests {
    first: BTreeMap<String, Vec<StatusWrite>>,
    contested: BTreeMap<String, Contest>,
}

impl Contests {
    /// Records the managedFields of WorkloadSpread `uid` as observed now; returns its
    /// contest, if there is one (newly found or found before).
    pub fn observe(&mut self, uid: &str, entries: &[ManagedFieldsEntry]) -> Option<Observed<'_>> {
        let now = foreign_status_writes(entries);
        let mut new = false;
        match self.first.get(uid) {
            None => {
                self.first.insert(uid.to_string(), now);
            }
            Some(first) if !self.contested.contains_key(uid) => {
                if let Some(c) = contest(first, &now) {
                    self.contested.insert(uid.to_string(), c);
                    new = true;
                }
            }
            Some(_) => {}
        }
        self.contested
            .get(uid)
            .map(|contest| Observed { contest, new })
    }

    /// The contest of `uid`, if one was found.
    pub fn get(&self, uid: &str) -> Option<&Contest> {
        self.contested.get(uid)
    }

    /// How many spreads are contested now.
    pub fn len(&self) -> usize {
        self.contested.len()
    }

    pub fn is_empty(&self) -> bool {
        self.contested.is_empty()
    }

    /// Every contest, by uid.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Contest)> {
        self.contested.iter()
    }

    /// Forgets every spread not in `live` (deleted ones).
    pub fn retain(&mut self, live: &dyn Fn(&str) -> bool) {
        self.first.retain(|uid, _| live(uid));
        self.contested.retain(|uid, _| live(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: Option<&str>, subresource: Option<&str>, second: i64) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: manager.map(str::to_string),
            subresource: subresource.map(str::to_string),
            operation: Some("Update".into()),
            time: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + second).unwrap(),
            )),
            ..Default::default()
        }
    }

    #[test]
    fn only_other_managers_status_writes_count() {
        let entries = [
            entry(Some("kubectl-client-side-apply"), None, 0),
            entry(Some(HOST_MANAGER), Some("status"), 1),
            entry(Some(CONTROLLER_MANAGER), Some("status"), 2),
            entry(Some(UNNAMED_MANAGER), Some("status"), 3),
            entry(None, Some("status"), 3),
            entry(Some("kruise-manager"), Some("status"), 4),
        ];
        let found = foreign_status_writes(&entries);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].manager, "kruise-manager");
    }

    #[test]
    fn a_contest_is_a_write_after_first_sight() {
        let w = |m: &str, s: i64| foreign_status_writes(&[entry(Some(m), Some("status"), s)]);
        // (first sight, now, contested by)
        let cases: [(Vec<StatusWrite>, Vec<StatusWrite>, Option<&str>); 7] = [
            (vec![], vec![], None),
            // OpenKruise wrote before the take-over and never again.
            (w("kruise-manager", 5), w("kruise-manager", 5), None),
            // It wrote again later: its gate is still on.
            (
                w("kruise-manager", 5),
                w("kruise-manager", 9),
                Some("kruise-manager"),
            ),
            // A manager that had never written the status.
            (vec![], w("kruise-manager", 1), Some("kruise-manager")),
            (w("kruise-manager", 5), w("other", 1), Some("other")),
            // An entry that went away (fields taken over) is no write.
            (w("kruise-manager", 5), vec![], None),
            // Written again through an API server whose clock is behind.
            (
                w("kruise-manager", 5),
                w("kruise-manager", 4),
                Some("kruise-manager"),
            ),
        ];
        for (first, now, want) in cases {
            let got = contest(&first, &now);
            assert_eq!(
                got.map(|c| c.manager),
                want.map(str::to_string),
                "{first:?} → {now:?}"
            );
        }
    }

    #[test]
    fn contests_remember_first_sight_and_forget_deleted_spreads() {
        let mut c = Contests::default();
        let old = [entry(Some("kruise-manager"), Some("status"), 5)];
        assert!(c.observe("u1", &old).is_none());
        assert!(c.observe("u1", &old).is_none());
        let newer = [entry(Some("kruise-manager"), Some("status"), 6)];
        let found = c.observe("u1", &newer).unwrap();
        assert!(found.new);
        let found = found.contest.clone();
        assert_eq!(found.manager, "kruise-manager");
        // Sticky: a later observation does not clear it (and does not find it again).
        assert!(c.observe("u1", &[]).is_some_and(|o| !o.new));
        // A spread first seen with a newer entry is not contested by it.
        assert!(c.observe("u2", &newer).is_none());
        assert_eq!(c.len(), 1);
        assert!(found.message("ns/web").contains("WorkloadSpread=false"));
        assert_eq!(spread_of(&spread_key("ns", "web", "u1")), "ns/web");
        c.retain(&|uid| uid == "u2");
        assert!(c.is_empty() && c.get("u1").is_none());
        assert!(
            c.observe("u1", &newer).is_none(),
            "forgotten: first sight again"
        );
    }

    #[test]
    fn trimming_keeps_status_entries_without_fields() {
        let mut entries = vec![
            entry(Some("kubectl"), None, 0),
            ManagedFieldsEntry {
                fields_v1: Some(Default::default()),
                ..entry(Some("kruise-manager"), Some("status"), 1)
            },
        ];
        trim_to_status_entries(&mut entries);
        assert_eq!(entries.len(), 1);
        assert!(entries[0].fields_v1.is_none());
        assert_eq!(foreign_status_writes(&entries).len(), 1);
    }
}
