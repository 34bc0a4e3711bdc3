//! Subset status calculation with the creating/deleting windows, the Schedulable
//! condition and rescheduling decisions (reference §4.6, §4.7).

use super::capacity::{
    decide_unschedulable, is_pending_unschedulable, Capacity, Cause, Room, Stuck,
};
use super::{Event, ReconcileOptions};
use crate::admission::reserve::stale::named_by;
use crate::admission::reserve::stale::Sightings;
use crate::admission::reserve::{is_placeholder, PLACEHOLDER_DROP_SECONDS};
use crate::api::v1beta1::{
    SubsetCondition, WorkloadSpread, WorkloadSpreadSubset, WorkloadSpreadSubsetStatus,
};
use crate::api::{CONDITION_SCHEDULABLE, REASON_POD_UNSCHEDULABLE, REASON_SUFFICIENT};
use crate::percent::scaled_value;
use crate::pods::{is_active, matched, name};
use crate::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use std::collections::BTreeSet;

/// The clock difference between a host and this controller that a claim's stamp is
/// trusted within: a claim stamped longer ago than the creating window plus this is gone
/// even if this controller has only just seen it.
pub const CLAIM_CLOCK_MARGIN: SignedDuration = SignedDuration::from_secs(30);

/// A stuck pod to delete: its name, its uid (the delete's precondition) and why.
pub type Reschedule = (String, Option<String>, Cause);

/// The message of a subset's `Schedulable=True` after it came back early on room (#42).
pub const RECOVERED_ON_CAPACITY: &str = "recovered on capacity";
/// Added to the `Schedulable=False` message when a subset failed again after coming back
/// early: its next recovery waits for the whole hold.
pub const EARLY_RECOVERY_FAILED: &str = "the last early recovery failed: held for the whole hold";
/// While a subset is held, its room is read again every this many signal polls.
const HELD_POLL_FACTOR: i32 = 5;

/// What the controller knows of the placeholders of the WorkloadSpread it reconciles.
#[derive(Clone, Copy, Debug)]
pub struct PlaceholderView<'a> {
    /// When this controller first saw each (its own monotonic clock): a placeholder
    /// expires [`StatusCalc::placeholder_window`] after that, never by the holder's stamp.
    pub sightings: &'a Sightings,
    /// The time `sightings` are judged at, on the clock they were observed with.
    pub now: Timestamp,
}

/// Placeholders judged by their holders' stamps: for a reconcile with no history of its
/// own (`reconcile --offline`, the planner, tests).
#[derive(Clone, Debug, Default)]
pub struct StampedPlaceholders {
    sightings: Sightings,
}

impl StampedPlaceholders {
    pub fn of(ws: &WorkloadSpread) -> Self {
        let sightings = ws
            .status
            .as_ref()
            .map(Sightings::from_stamps)
            .unwrap_or_default();
        StampedPlaceholders { sightings }
    }

    /// The view at `now` (the reconcile's wall clock, which the stamps are on).
    pub fn view(&self, now: Timestamp) -> PlaceholderView<'_> {
        PlaceholderView {
            sightings: &self.sightings,
            now,
        }
    }
}

/// Accumulates events, the requeue delay and pods to reschedule during one reconcile.
pub struct StatusCalc<'a> {
    pub ws: &'a WorkloadSpread,
    pub now: Timestamp,
    pub options: &'a ReconcileOptions,
    pub placeholders: PlaceholderView<'a>,
    /// The provisioners' signals and the subsets' room (`Capacity::NONE`: timers only).
    pub capacity: &'a Capacity,
    pub events: Vec<Event>,
    pub requeue: Option<SignedDuration>,
    /// Pods to delete because they stayed unschedulable too long, or because no
    /// capacity comes for them, with why.
    pub unschedulable_pods: Vec<Reschedule>,
    /// Held subsets that came back early because a node has room for the pod.
    pub recovered_on_capacity: usize,
    /// Pods waiting past `rescheduleCriticalSeconds` for capacity a provisioner adds.
    pub waiting_for_capacity: Vec<String>,
    /// Placeholders dropped as expired.
    pub expired_placeholders: usize,
}

impl<'a> StatusCalc<'a> {
    pub fn new(
        ws: &'a WorkloadSpread,
        now: Timestamp,
        options: &'a ReconcileOptions,
        placeholders: PlaceholderView<'a>,
        capacity: &'a Capacity,
    ) -> Self {
        StatusCalc {
            ws,
            now,
            options,
            placeholders,
            capacity,
            events: vec![],
            requeue: None,
            unschedulable_pods: vec![],
            recovered_on_capacity: 0,
            waiting_for_capacity: vec![],
            expired_placeholders: 0,
        }
    }

    fn push_requeue(&mut self, d: SignedDuration) {
        if d.is_positive() && self.requeue.is_none_or(|r| d < r) {
            self.requeue = Some(d);
        }
    }

    /// Time left until `since + window`; `None` when already past.
    fn remaining(&self, since: &Time, window: SignedDuration) -> Option<SignedDuration> {
        let left = window - self.now.duration_since(since.0);
        (!left.is_negative()).then_some(left)
    }

    /// Statuses for all spec subsets (spec order, old statuses matched by name). Empty
    /// when a subset's maxReplicas cannot be scaled (the reference writes nil then).
    pub fn subset_statuses(
        &mut self,
        groups: &super::grouping::SubsetPods,
        pods: &[&Pod],
        old: &[WorkloadSpreadSubsetStatus],
        replicas: i32,
        collect_unschedulable: bool,
    ) -> Vec<WorkloadSpreadSubsetStatus> {
        let n = self.ws.spec.subsets.len();
        let mut out = Vec::with_capacity(n);
        // A pod is in one subset: its entry leaves every subset's creatingPods once it is
        // counted, wherever an admission recorded it (the same request answered by two
        // replicas into different subsets).
        let counted: BTreeSet<String> = groups
            .values()
            .flatten()
            .flat_map(|&p| counted_keys(pods[p]))
            .collect();
        for (i, subset) in self.ws.spec.subsets.iter().enumerate() {
            let members: Vec<&Pod> = groups
                .get(&subset.name)
                .into_iter()
                .flatten()
                .map(|&p| pods[p])
                .collect();
            let old_status = old.iter().find(|s| s.name == subset.name);
            let Some(mut status) =
                self.subset_status(subset, &members, old_status, replicas, &counted)
            else {
                return vec![];
            };
            self.apply_schedulable(
                &mut status,
                subset,
                &members,
                i + 1 == n,
                collect_unschedulable,
            );
            out.push(status);
        }
        out
    }

    fn subset_status(
        &mut self,
        subset: &WorkloadSpreadSubset,
        pods: &[&Pod],
        old: Option<&WorkloadSpreadSubsetStatus>,
        replicas: i32,
        counted: &BTreeSet<String>,
    ) -> Option<WorkloadSpreadSubsetStatus> {
        let max = match &subset.max_replicas {
            None => -1,
            Some(m) => scaled_value(m, replicas).ok().filter(|v| *v >= 0)?,
        };
        let mut status = WorkloadSpreadSubsetStatus {
            name: subset.name.clone(),
            missing_replicas: max,
            ..Default::default()
        };
        let mut old_creating = old.map(|o| o.creating_pods.clone()).unwrap_or_default();
        let old_deleting = old.map(|o| o.deleting_pods.clone()).unwrap_or_default();
        old_creating.retain(|k, _| !counted.contains(k));
        for pod in pods {
            // A pod admitted into a reserved slot of this subset is that slot: counted
            // once, whether or not the host has renamed the placeholder yet. Only where
            // the pod is, and only when its label agrees (a copied annotation names
            // nothing).
            if let Some(placeholder) = named_by(pod) {
                old_creating.remove(placeholder);
            }
            if !is_active(pod) {
                continue;
            }
            status.replicas = status.replicas.saturating_add(1);
            if status.missing_replicas > 0 {
                status.missing_replicas -= 1;
            }
            if let Some(at) = old_deleting.get(name(pod)) {
                self.track_deleting(&mut status, name(pod), at);
            }
        }
        for (key, at) in old_creating {
            self.track_creating(&mut status, &key, at);
        }
        status.conditions = old.map(|o| o.conditions.clone()).unwrap_or_default();
        Some(status)
    }

    fn track_deleting(&mut self, status: &mut WorkloadSpreadSubsetStatus, pod: &str, at: &Time) {
        match self.remaining(at, self.options.deleting_window) {
            None => self.events.push(Event::warning(
                "DeletePodFailed",
                format!(
                    "Pod {}/{pod} was expected to be deleted but it wasn't",
                    self.ws.namespace()
                ),
            )),
            // The pod still runs: its deletion is an intent, kept for the window (the
            // status view, OpenKruise's readers), but no room (docs/semantics.md A11;
            // the reference gave its slot back here, `missing++`).
            Some(left) => {
                status.deleting_pods.insert(pod.to_string(), at.clone());
                self.push_requeue(left);
            }
        }
    }

    /// How long the controller keeps a placeholder no counted pod stands for: the drop
    /// time of a stale one, or the creating window when that is longer — a pod admitted
    /// into it may still be on its way, as for a written claim.
    pub fn placeholder_window(creating: SignedDuration) -> SignedDuration {
        creating.max(SignedDuration::from_secs(PLACEHOLDER_DROP_SECONDS))
    }

    /// Time left for placeholder `key`, measured from when this controller first saw it
    /// (a counted pod naming it has removed it already).
    fn placeholder_left(&self, key: &str) -> Option<SignedDuration> {
        let window = Self::placeholder_window(self.options.creating_window);
        let left = window - self.placeholders.sightings.age(key, self.placeholders.now);
        (!left.is_negative()).then_some(left)
    }

    /// Time left for a pod's claim `key` stamped `at`. With a sighting (the controller),
    /// the claim goes once this controller has seen it for the creating window, on its
    /// own clock (never earlier than the claim was written: a host whose clock is behind
    /// cannot make it go early), or once its stamp is older than the window plus
    /// [`CLAIM_CLOCK_MARGIN`] (a claim left from before this controller started, whatever
    /// a host's clock within the margin). Without one (offline), by the stamp.
    fn claim_left(&self, key: &str, at: &Time) -> Option<SignedDuration> {
        let window = self.options.creating_window;
        let seen = self
            .placeholders
            .sightings
            .seen_for(key, self.placeholders.now);
        let Some(seen) = seen else {
            return self.remaining(at, window);
        };
        let by_stamp = window + CLAIM_CLOCK_MARGIN - self.now.duration_since(at.0);
        let left = (window - seen).min(by_stamp);
        (!left.is_negative()).then_some(left)
    }

    fn track_creating(&mut self, status: &mut WorkloadSpreadSubsetStatus, key: &str, at: Time) {
        let left = match is_placeholder(key) {
            true => self.placeholder_left(key),
            false => self.claim_left(key, &at),
        };
        match left {
            // A dead holder's unused slot: no pod was expected.
            None if is_placeholder(key) => self.expired_placeholders += 1,
            None => self.events.push(Event::warning(
                "CreatePodFailed",
                format!(
                    "Pod {}/{key} was expected to be created but it wasn't",
                    self.ws.namespace()
                ),
            )),
            Some(left) => {
                status.creating_pods.insert(key.to_string(), at);
                if status.missing_replicas > 0 {
                    status.missing_replicas -= 1;
                }
                self.push_requeue(left);
            }
        }
    }

    /// How long a subset stays unschedulable: the configured hold, but at least
    /// `subsets × rescheduleCriticalSeconds`. A pod rescheduled out of subset i may wait
    /// `rescheduleCriticalSeconds` in each later subset before reaching one that runs it;
    /// a hold shorter than that lets subset i recover while the pod is still on its way,
    /// and pods bounce between the first subsets for ever.
    fn effective_hold(&self, critical_seconds: i64) -> SignedDuration {
        let subsets = i64::try_from(self.ws.spec.subsets.len()).unwrap_or(i64::MAX);
        let progress = SignedDuration::from_secs(critical_seconds.saturating_mul(subsets));
        self.options.reschedule_hold.max(progress)
    }

    /// `rescheduleCriticalSeconds` when rescheduling is on (Adaptive, set, > 0).
    fn reschedule_seconds(&self) -> Option<i64> {
        self.ws.spec.schedule_strategy.reschedule_seconds()
    }

    fn apply_schedulable(
        &mut self,
        status: &mut WorkloadSpreadSubsetStatus,
        subset: &WorkloadSpreadSubset,
        pods: &[&Pod],
        is_last: bool,
        collect_unschedulable: bool,
    ) {
        let Some(seconds) = self.reschedule_seconds() else {
            status
                .conditions
                .retain(|c| c.type_ != CONDITION_SCHEDULABLE);
            return;
        };
        if is_last {
            self.set_condition(status, "True", REASON_SUFFICIENT);
            return;
        }
        let (stuck, waiting) = self.timed_out_unschedulable(pods, seconds, collect_unschedulable);
        let unschedulable = !stuck.is_empty();
        let message = stuck
            .iter()
            .find_map(|(_, _, cause)| match cause {
                Cause::NoCapacity { reason, source } => {
                    Some(format!("no capacity: {source} said {reason}"))
                }
                _ => None,
            })
            .unwrap_or_default();
        if collect_unschedulable {
            self.unschedulable_pods.extend(stuck);
        }
        let old = status.condition(CONDITION_SCHEDULABLE).cloned();
        let hold = self.effective_hold(seconds);
        // Hysteresis (#42): a subset that failed again right after coming back on room
        // waits for its whole hold next time.
        let early_failed = old.as_ref().is_some_and(|c| {
            (c.status == "True" && c.message.starts_with(RECOVERED_ON_CAPACITY))
                || (c.status == "False" && c.message.contains(EARLY_RECOVERY_FAILED))
        });
        if unschedulable {
            let message = match (early_failed, message.is_empty()) {
                (false, _) => message,
                (true, true) => EARLY_RECOVERY_FAILED.to_string(),
                (true, false) => format!("{message}; {EARLY_RECOVERY_FAILED}"),
            };
            self.set_condition_with(status, "False", REASON_POD_UNSCHEDULABLE, message);
        } else if let Some(old) = old.as_ref().filter(|c| c.status == "False") {
            let since = old.last_transition_time.as_ref();
            let left = since.and_then(|t| self.remaining(t, hold));
            // Early only past the time a rescheduled pod needs to reach a later subset
            // (`effective_hold`'s floor), with no pod of the subset still waiting, and
            // not right after an early recovery failed.
            let subsets = i64::try_from(self.ws.spec.subsets.len()).unwrap_or(1);
            let floor = SignedDuration::from_secs(seconds.saturating_mul(subsets));
            let past_floor = since.is_some_and(|t| self.remaining(t, floor).is_none());
            let waiting_pods = pods.iter().any(|p| is_pending_unschedulable(p));
            let may_recover_early = past_floor && !waiting_pods && !early_failed;
            let room = self.capacity.rooms.get(&subset.name);
            match (left, room) {
                (Some(_), Some(Room::Fits { node })) if may_recover_early => {
                    let why = format!("node {node} has room for the workload's pod");
                    let message = format!("{RECOVERED_ON_CAPACITY}: {why}");
                    self.recover_with(status, subset, &why, message);
                    self.recovered_on_capacity += 1;
                }
                (Some(left), _) => {
                    // Room is read again while held (new nodes trigger no reconcile).
                    let poll = self.capacity.poll.map(|p| p * HELD_POLL_FACTOR);
                    self.push_requeue(poll.map_or(left, |p| left.min(p)));
                }
                (None, _) => self.recover(status, subset, "its hold ended"),
            }
        } else if let Some(reason) = waiting {
            // Pods wait for capacity a provisioner is adding: say so, still schedulable.
            self.set_condition_with(
                status,
                "True",
                REASON_SUFFICIENT,
                format!("waiting for capacity: {reason}"),
            );
        } else if let Some(old) = old.filter(|c| {
            c.message.starts_with(RECOVERED_ON_CAPACITY)
                && c.last_transition_time
                    .as_ref()
                    .and_then(|t| self.remaining(t, hold))
                    .is_some()
        }) {
            // Say it came back on room for one hold: a failure meanwhile means the room
            // check and the scheduler disagree (`early_failed`).
            self.set_condition_with(status, "True", REASON_SUFFICIENT, old.message);
        } else {
            self.set_condition(status, "True", REASON_SUFFICIENT);
        }
    }

    fn recover(
        &mut self,
        status: &mut WorkloadSpreadSubsetStatus,
        subset: &WorkloadSpreadSubset,
        why: &str,
    ) {
        self.recover_with(status, subset, why, String::new());
    }

    fn recover_with(
        &mut self,
        status: &mut WorkloadSpreadSubsetStatus,
        subset: &WorkloadSpreadSubset,
        why: &str,
        message: String,
    ) {
        self.events.push(Event::normal(
            "RecoverSchedulable",
            format!(
                "Subset {} of WorkloadSpread {}/{} is recovered from unschedulable to schedulable: {why}",
                subset.name,
                self.ws.namespace(),
                self.ws.name()
            ),
        ));
        self.set_condition_with(status, "True", REASON_SUFFICIENT, message);
    }

    /// Pending, unbound pods marked Unschedulable to move now (`capacity::decide_unschedulable`:
    /// past `seconds` since creation, at once when no capacity comes, later while it
    /// comes), and the signal some others wait on.
    fn timed_out_unschedulable(
        &mut self,
        pods: &[&Pod],
        seconds: i64,
        collect_waiting: bool,
    ) -> (Vec<Reschedule>, Option<String>) {
        let window = SignedDuration::from_secs(seconds);
        let mut stuck = Vec::new();
        let mut waiting = None;
        for pod in pods {
            if !is_pending_unschedulable(pod) {
                continue;
            }
            let created = pod
                .metadata
                .creation_timestamp
                .clone()
                .unwrap_or(Time(Timestamp::UNIX_EPOCH));
            let nominated = pod
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.as_deref())
                .is_some_and(|n| !n.is_empty());
            let decision = decide_unschedulable(
                created.0,
                self.now,
                window,
                self.capacity.signals.get(name(pod)),
                nominated,
                self.capacity.wait_bound,
            );
            match decision {
                Stuck::Wait { left, waiting: why } => {
                    // Signals arrive as events, not pod changes: look again soon.
                    let poll = self.capacity.poll.unwrap_or(left);
                    self.push_requeue(left.min(poll));
                    if why.is_some() && collect_waiting {
                        self.waiting_for_capacity.push(name(pod).to_string());
                    }
                    waiting = waiting.or(why);
                }
                Stuck::Move(cause) => {
                    stuck.push((name(pod).to_string(), pod.metadata.uid.clone(), cause))
                }
            }
        }
        (stuck, waiting)
    }

    /// `setWorkloadSpreadSubsetCondition`.
    fn set_condition(&self, status: &mut WorkloadSpreadSubsetStatus, value: &str, reason: &str) {
        self.set_condition_with(status, value, reason, String::new());
    }

    /// With a message (ours: what a provisioner said; the reference writes none).
    fn set_condition_with(
        &self,
        status: &mut WorkloadSpreadSubsetStatus,
        value: &str,
        reason: &str,
        message: String,
    ) {
        let existing = status
            .conditions
            .iter()
            .position(|c| c.type_ == CONDITION_SCHEDULABLE);
        let mut ltt = Some(Time(self.now));
        if let Some(i) = existing {
            let old = &status.conditions[i];
            if old.status == value && old.reason == reason && old.message == message {
                return;
            }
            if old.status == value {
                ltt = old.last_transition_time.clone();
            }
            status.conditions.remove(i);
        }
        status.conditions.push(SubsetCondition {
            type_: CONDITION_SCHEDULABLE.to_string(),
            status: value.to_string(),
            last_transition_time: ltt,
            reason: reason.to_string(),
            message,
            ..Default::default()
        });
    }
}

/// The `creatingPods` keys a counted pod stands for: its generated id and its name (a
/// release records the claim of a pod being deleted under its name, beside its deletion:
/// `counter::apply_release`).
fn counted_keys(pod: &Pod) -> impl Iterator<Item = String> {
    let uid = matched(pod).and_then(|m| m.uid);
    uid.into_iter()
        .chain(std::iter::once(name(pod).to_string()))
}
