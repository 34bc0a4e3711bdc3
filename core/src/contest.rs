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
//! OpenKruise is also seen before it writes: while its WorkloadSpread validation
//! (`vworkloadspread.kb.io` in `kruise-validating-webhook-configuration`) is registered and
//! that configuration carries no hand-over (`workloadspread.io/handed-over`: an upgrade of
//! OpenKruise that puts the webhook back after a hand-over leaves it), OpenKruise owns
//! WorkloadSpreads (its gate on, or off and not handed over yet: then that
//! webhook refuses every spread) and a component stands back from every spread
//! ([`Contests::set_registered`]). `workloadspread-host openkruise hand-over` takes it out;
//! seeing that is the take-over: what is stored then becomes the first sight of every
//! spread, as a restart would take it, and contests found before are dropped.
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

/// OpenKruise's validating webhook configuration, and its WorkloadSpread webhook in it.
pub const OPENKRUISE_CONFIGURATION: &str = "kruise-validating-webhook-configuration";
pub const OPENKRUISE_WEBHOOK: &str = "vworkloadspread.kb.io";
/// The annotation of [`OPENKRUISE_CONFIGURATION`] where `openkruise hand-over` keeps what it
/// took out.
pub const OPENKRUISE_HANDED_OVER: &str = "workloadspread.io/handed-over";

/// OpenKruise's WorkloadSpread validation as [`OPENKRUISE_CONFIGURATION`] shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenKruiseValidation {
    /// Not there (or no such configuration): nothing of OpenKruise owns WorkloadSpreads.
    Absent,
    /// There, never handed over: OpenKruise owns WorkloadSpreads.
    Registered,
    /// There again after a hand-over (an upgrade of OpenKruise put it back): still ours;
    /// it refuses every write of a spread while OpenKruise's gate is off — hand over again.
    Returned,
}

/// Reads the names of the webhooks of [`OPENKRUISE_CONFIGURATION`] and whether it carries
/// [`OPENKRUISE_HANDED_OVER`].
pub fn openkruise_validation<'a>(
    webhooks: impl IntoIterator<Item = &'a str>,
    handed_over: bool,
) -> OpenKruiseValidation {
    match (
        webhooks.into_iter().any(|w| w == OPENKRUISE_WEBHOOK),
        handed_over,
    ) {
        (false, _) => OpenKruiseValidation::Absent,
        (true, false) => OpenKruiseValidation::Registered,
        (true, true) => OpenKruiseValidation::Returned,
    }
}

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
    /// Not a write: OpenKruise's WorkloadSpread validation is registered.
    pub registered: bool,
}

impl Contest {
    /// What to tell the user: who, and what to do (`spread`: which spread, `*` for all;
    /// OpenKruise's registration names none, it holds every one).
    pub fn message(&self, spread: &str) -> String {
        if self.registered {
            return format!(
                "OpenKruise's WorkloadSpread validation ({OPENKRUISE_WEBHOOK} in \
                 {OPENKRUISE_CONFIGURATION}) is registered: OpenKruise owns WorkloadSpreads, so \
                 this component stands back from every one, to not fight. To take over, turn \
                 OpenKruise's WorkloadSpread feature gate off (featureGates=\"WorkloadSpread=false\") \
                 and run `workloadspread-host openkruise hand-over`; see docs/operations.md, \
                 \"Coming from OpenKruise\""
            );
        }
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
            registered: false,
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
/// first sight and as last seen, and the contest once one is found (kept until the spread
/// is deleted, the component restarts or OpenKruise's registration goes away); and whether
/// OpenKruise's WorkloadSpread validation is registered (every spread contested). Bounded
/// by the WorkloadSpreads the component sees.
#[derive(Debug, Default)]
pub struct Contests {
    first: BTreeMap<String, Vec<StatusWrite>>,
    last: BTreeMap<String, Vec<StatusWrite>>,
    contested: BTreeMap<String, Contest>,
    registered: Option<Contest>,
    /// Whether the registration is known (its watch answered once), and the last error
    /// of that watch until it is.
    registration_known: bool,
    registration_error: Option<String>,
}

/// What [`Contests::set_registered`] changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    Unchanged,
    /// OpenKruise's validation appeared: every spread is contested.
    Registered,
    /// It went away (handed over): every spread is the component's again.
    HandedOver,
}

impl Contests {
    /// Records the managedFields of WorkloadSpread `uid` as observed now.
    /// Returns its contest, if there is one (newly found or found before; while
    /// OpenKruise's validation is registered, that).
    pub fn observe(&mut self, uid: &str, entries: &[ManagedFieldsEntry]) -> Option<Observed<'_>> {
        let now = foreign_status_writes(entries);
        let mut new = false;
        match self.first.get(uid) {
            None => {
                self.first.insert(uid.to_string(), now.clone());
            }
            Some(first) if !self.contested.contains_key(uid) => {
                if let Some(c) = contest(first, &now) {
                    self.contested.insert(uid.to_string(), c);
                    new = true;
                }
            }
            Some(_) => {}
        }
        self.last.insert(uid.to_string(), now);
        match &self.registered {
            Some(contest) => Some(Observed {
                contest,
                new: false,
            }),
            None => self
                .contested
                .get(uid)
                .map(|contest| Observed { contest, new }),
        }
    }

    /// Follows whether OpenKruise's WorkloadSpread validation is registered
    /// ([`openkruise_registered`]). When it goes away, the writes last seen of every spread
    /// become its first sight and every contest is dropped (the hand-over is the restart).
    pub fn set_registered(&mut self, registered: bool) -> Registration {
        self.registration_known = true;
        match (registered, self.registered.is_some()) {
            (true, false) => {
                self.registered = Some(Contest {
                    manager: "OpenKruise".into(),
                    at: None,
                    registered: true,
                });
                Registration::Registered
            }
            (false, true) => {
                self.registered = None;
                self.first = self.last.clone();
                self.contested.clear();
                Registration::HandedOver
            }
            _ => Registration::Unchanged,
        }
    }

    /// Records why OpenKruise's registration is not known yet (its watch failed).
    pub fn registration_failed(&mut self, error: String) {
        self.registration_error = Some(error);
    }

    /// Why nothing can be decided yet: OpenKruise's registration not known (`None`: known).
    pub fn registration_unknown(&self) -> Option<String> {
        (!self.registration_known).then(|| {
            let last = self
                .registration_error
                .as_deref()
                .map(|e| format!("; last error: {e}"))
                .unwrap_or_default();
            format!(
                "waiting to know whether OpenKruise owns WorkloadSpreads (the watch of \
                 validatingwebhookconfigurations/{OPENKRUISE_CONFIGURATION}){last}"
            )
        })
    }

    /// OpenKruise's registration, while it holds.
    pub fn registration(&self) -> Option<&Contest> {
        self.registered.as_ref()
    }

    /// The contest of `uid`, if one was found (every spread's while OpenKruise's validation
    /// is registered, seen or not).
    pub fn get(&self, uid: &str) -> Option<&Contest> {
        self.registered.as_ref().or_else(|| self.contested.get(uid))
    }

    /// How many spreads are contested now (every one seen, while OpenKruise's validation
    /// is registered).
    pub fn len(&self) -> usize {
        match self.registered {
            Some(_) => self.first.len(),
            None => self.contested.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every contest found from a write, by uid.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Contest)> {
        self.contested.iter()
    }

    /// Forgets every spread not in `live` (deleted ones).
    pub fn retain(&mut self, live: &dyn Fn(&str) -> bool) {
        self.first.retain(|uid, _| live(uid));
        self.last.retain(|uid, _| live(uid));
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

    /// OpenKruise's validation registered: every spread stands back, seen or not; its
    /// removal (the hand-over) takes what was last seen as first sight and drops the
    /// contests found meanwhile; a later write is a contest again.
    #[test]
    fn the_registration_holds_every_spread_until_handed_over() {
        let at = |s| [entry(Some("kruise-manager"), Some("status"), s)];
        use OpenKruiseValidation::*;
        assert_eq!(openkruise_validation(["mpod.kb.io"], false), Absent);
        assert_eq!(openkruise_validation(["mpod.kb.io"], true), Absent);
        let both = ["vpod.kb.io", OPENKRUISE_WEBHOOK];
        assert_eq!(openkruise_validation(both, false), Registered);
        assert_eq!(openkruise_validation(both, true), Returned);
        let mut c = Contests::default();
        assert!(c.registration_unknown().is_some());
        c.registration_failed("forbidden".into());
        assert!(c
            .registration_unknown()
            .is_some_and(|w| w.contains("forbidden")));
        assert!(c.observe("u1", &at(1)).is_none());
        assert_eq!(c.set_registered(true), Registration::Registered);
        assert!(c.registration_unknown().is_none());
        assert_eq!(c.set_registered(true), Registration::Unchanged);
        assert!(c.get("never-seen").is_some_and(|r| r.registered));
        assert!(c
            .observe("u2", &at(1))
            .is_some_and(|o| !o.new && o.contest.registered));
        // OpenKruise keeps writing while registered (its gate on).
        assert!(c
            .observe("u1", &at(4))
            .is_some_and(|o| o.contest.registered));
        assert_eq!((c.len(), c.iter().count()), (2, 1));
        assert!(c
            .registration()
            .is_some_and(|r| r.message("*").contains("openkruise hand-over")));
        assert_eq!(c.set_registered(false), Registration::HandedOver);
        assert!(c.is_empty() && c.get("u1").is_none() && c.registration().is_none());
        assert!(
            c.observe("u1", &at(4)).is_none(),
            "seen before: first sight"
        );
        assert!(
            c.observe("u1", &at(6)).is_some_and(|o| o.new),
            "written after"
        );
        assert_eq!(c.len(), 1);
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
