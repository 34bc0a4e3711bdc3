//! The reserved slots one host replica holds for one WorkloadSpread
//! (`docs/counter-protocol.md`, *Reserved slots*): which placeholders are unused, which
//! were handed to which pod and still need their settle write, and how fast each subset
//! is claimed (the block size). The status rules are `workloadspread_core::admission::reserve`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloadspread_core::admission::reserve::{placeholder_key, HANDOUT_SECONDS};
use workloadspread_core::admission::Scale;
use workloadspread_core::counter::batch::{Holdings, Taking};
use workloadspread_core::counter::ClaimResponse;
use workloadspread_core::Timestamp;

/// How a replica reserves slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReservePolicy {
    /// Most placeholders held per subset.
    pub max_block: usize,
    /// Unused placeholders of a subset no claim has used for this long are returned.
    pub idle: Duration,
}

impl Default for ReservePolicy {
    fn default() -> Self {
        ReservePolicy {
            max_block: 32,
            idle: Duration::from_secs(2),
        }
    }
}

/// A subset of one pod version.
pub type SlotKey = (String, String);

/// The claims of one subset and this replica's unused placeholders in it.
#[derive(Debug)]
struct Slot {
    /// Unused placeholders, oldest first, with their stamps in the status (this host's
    /// clock when the write that made them was prepared: a write that timed out and
    /// was found landed keeps its stamp, so they are aged from then) and, on this
    /// process's monotonic clock, when their reserve work was asked for (no later than
    /// the write: a step of the wall clock never stretches a hand-out).
    unused: VecDeque<Held>,
    /// Claims answered in the last second (the block size).
    recent: VecDeque<Instant>,
    last_claim: Instant,
    /// A reserve write for this subset is queued or in flight, asked for then.
    refilling: bool,
    refill_asked: Instant,
    /// The last claim's scale: returns and refills are judged with it.
    scale: Scale<'static>,
}

/// An unused placeholder: its key, its stamp in the status, when it was asked for.
#[derive(Clone, Debug)]
struct Held {
    key: String,
    stamp: Timestamp,
    asked: Instant,
}

/// How long after its reserve work was asked for a placeholder may be handed out (on the
/// monotonic clock; its stamp must be younger than that too).
const HANDOUT: Duration = Duration::from_secs(HANDOUT_SECONDS as u64);

/// A placeholder handed to a pod whose settle write has not happened yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handed {
    pub slot: SlotKey,
    pub placeholder: String,
    /// The creatingPods key the placeholder becomes (pod name or generated id).
    pub key: String,
    /// What the claim was answered (a retried request gets it again).
    pub answer: ClaimResponse,
    /// The placeholder's stamp and when it was asked for (it goes back to the unused
    /// ones with them).
    pub stamp: Timestamp,
    pub asked: Instant,
    /// The claim's scale (a settle that frees the placeholder recounts with it).
    pub scale: Scale<'static>,
    /// When it was handed out: a settle that keeps failing is given up after a while
    /// (whoever finds the placeholder stale settles it to the pod that names it).
    pub at: Instant,
    /// Whether a read has shown that the spec it was decided on is the stored one
    /// (`counter::fence`): only then is it answered, and settled.
    pub confirmed: bool,
}

/// Placeholders to give back in one write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Return {
    pub slot: SlotKey,
    pub keys: Vec<String>,
    pub scale: Scale<'static>,
}

/// One replica's reservations for one WorkloadSpread.
#[derive(Debug)]
pub struct Pool {
    holder: String,
    policy: ReservePolicy,
    /// Shared by the process's pools: a key is never reused, even by a pool started
    /// after an earlier one stopped with a return that failed.
    next: Arc<AtomicU64>,
    /// The WorkloadSpread uid the placeholders were written to.
    uid: Option<String>,
    slots: HashMap<SlotKey, Slot>,
    /// By claim key (pod name or generated id).
    handed: HashMap<String, Handed>,
    /// Handed placeholders not yet in a settle write, and since when the oldest waits.
    to_settle: Vec<String>,
    settle_since: Option<Instant>,
    /// Claim keys whose settle write is queued or in flight.
    settling: std::collections::HashSet<String>,
    /// Placeholders given back whose return write has not landed yet: still in the
    /// status, no longer to hand out, but room of ours when choosing a subset.
    returning: Vec<(SlotKey, String)>,
    /// Returns to write again (a failed return, a failed reserve whose keys may have
    /// landed, a placeholder given back to a slot gone idle).
    retry: Vec<Return>,
    /// Failed returns in a row, and when they are next written: a write the API server
    /// keeps refusing (403, 422) backs off instead of coming every tick.
    return_failures: u32,
    retry_after: Option<Instant>,
    /// The host is stopping: nothing more is reserved.
    closing: bool,
}

/// The first and longest wait before a failed return is written again.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(30);

const RATE_WINDOW: Duration = Duration::from_secs(1);

impl Pool {
    pub fn new(holder: String, policy: ReservePolicy, next: Arc<AtomicU64>) -> Self {
        Pool {
            holder,
            policy,
            next,
            uid: None,
            slots: HashMap::new(),
            handed: HashMap::new(),
            to_settle: vec![],
            settle_since: None,
            settling: Default::default(),
            returning: vec![],
            retry: vec![],
            return_failures: 0,
            retry_after: None,
            closing: false,
        }
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Forgets everything when the WorkloadSpread was recreated (its placeholders went
    /// with the old object).
    pub fn track_uid(&mut self, uid: Option<&str>) {
        if self.uid.as_deref() != uid {
            self.slots.clear();
            self.handed.clear();
            self.to_settle.clear();
            self.settle_since = None;
            self.settling.clear();
            self.returning.clear();
            self.retry.clear();
            self.uid = uid.map(str::to_string);
        }
    }

    /// Whether nothing is held or waiting for a write.
    pub fn is_idle(&self) -> bool {
        self.handed.is_empty()
            && self.returning.is_empty()
            && self.slots.values().all(|s| s.unused.is_empty())
    }

    /// Stops reserving (the host is stopping); blocks in flight still land and are
    /// then returned.
    pub fn close(&mut self) {
        self.closing = true;
    }

    /// Whether no reserve write is queued or in flight.
    pub fn quiet(&self) -> bool {
        self.slots.values().all(|s| !s.refilling)
    }

    /// This replica's unused placeholders in `version` young enough to hand out, as
    /// (subset, key).
    pub fn unused(&self, version: &str) -> Vec<(String, String)> {
        self.own(version, true)
    }

    /// This replica's other room in `version`, not to hand out: placeholders whose return
    /// write has not landed, and unused ones too old to hand out (returned next).
    pub fn returning(&self, version: &str) -> Vec<(String, String)> {
        let returning = self
            .returning
            .iter()
            .filter(|((v, _), _)| v == version)
            .map(|((_, subset), k)| (subset.clone(), k.clone()));
        returning.chain(self.own(version, false)).collect()
    }

    fn own(&self, version: &str, young: bool) -> Vec<(String, String)> {
        self.slots
            .iter()
            .filter(|((v, _), _)| v == version)
            .flat_map(|((_, subset), slot)| {
                slot.unused
                    .iter()
                    .filter(move |h| (h.asked.elapsed() < HANDOUT) == young)
                    .map(move |h| (subset.clone(), h.key.clone()))
            })
            .collect()
    }

    /// A return write landed.
    pub fn returned(&mut self, r: &Return) {
        self.returning
            .retain(|(slot, k)| !(*slot == r.slot && r.keys.contains(k)));
        self.return_failures = 0;
    }

    /// A return write failed: the placeholders stay this replica's room, and the return
    /// is tried again after a pause that doubles with each failure in a row (from
    /// [`RETRY_FIRST`] to [`RETRY_MAX`]).
    pub fn return_failed(&mut self, r: Return, now: Instant) {
        self.retry.push(r);
        let pause = RETRY_FIRST.saturating_mul(1 << self.return_failures.min(16));
        self.retry_after = Some(now + pause.min(RETRY_MAX));
        self.return_failures = self.return_failures.saturating_add(1);
    }

    /// A reserve write failed: its keys may have landed all the same; they are given
    /// back (an unclaim of a key that is not there changes nothing).
    pub fn reserve_failed(&mut self, slot: &SlotKey, keys: Vec<String>) {
        let Some(s) = self.slots.get_mut(slot) else {
            return;
        };
        s.refilling = false;
        if keys.is_empty() {
            return;
        }
        self.returning
            .extend(keys.iter().map(|k| (slot.clone(), k.clone())));
        self.retry.push(Return {
            slot: slot.clone(),
            keys,
            scale: s.scale,
        });
    }

    /// The answer a claim already got from a placeholder (a retried request).
    pub fn handed(&self, key: &str) -> Option<&Handed> {
        self.handed.get(key)
    }

    /// Takes the unused placeholder `placeholder` of `slot` (chosen by the claim rules on
    /// a copy that holds it, young enough by its stamp there) for the pod with claim key
    /// `key`; `answer` is completed with it. `None` when it is not unused here.
    pub fn take(
        &mut self,
        slot: &SlotKey,
        placeholder: &str,
        key: &str,
        scale: Scale<'static>,
        answer: ClaimResponse,
    ) -> Option<ClaimResponse> {
        let answer = self.take_unconfirmed(slot, placeholder, key, scale, answer)?;
        self.confirm(key)?;
        Some(answer)
    }

    /// [`Pool::take`] on a copy whose spec is not yet known to be the stored one: held
    /// for the pod, neither answered nor settled until [`Pool::confirm`], given back by
    /// [`Pool::withdraw`].
    pub fn take_unconfirmed(
        &mut self,
        slot: &SlotKey,
        placeholder: &str,
        key: &str,
        scale: Scale<'static>,
        mut answer: ClaimResponse,
    ) -> Option<ClaimResponse> {
        let s = self.slots.get_mut(slot)?;
        let at = s.unused.iter().position(|h| h.key == placeholder)?;
        let Held {
            key: placeholder,
            stamp,
            asked,
        } = s.unused.remove(at)?;
        answer.reservation = Some(placeholder.clone());
        self.handed.insert(
            key.to_string(),
            Handed {
                slot: slot.clone(),
                placeholder,
                key: key.to_string(),
                answer: answer.clone(),
                stamp,
                asked,
                scale,
                at: Instant::now(),
                confirmed: false,
            },
        );
        Some(answer)
    }

    /// The hand-out to `key`, confirmed: its answer, to give; it is settled from now on.
    pub fn confirm(&mut self, key: &str) -> Option<ClaimResponse> {
        let h = self.handed.get_mut(key)?;
        if !h.confirmed {
            h.confirmed = true;
            self.to_settle.push(key.to_string());
            self.settle_since.get_or_insert_with(Instant::now);
        }
        Some(h.answer.clone())
    }

    /// Gives back the hand-out of `placeholder` to `key` unless it was confirmed (and so
    /// maybe answered): the placeholder is unused again. False when nothing was given
    /// back.
    pub fn withdraw(&mut self, key: &str, placeholder: &str) -> bool {
        match self.handed.get(key) {
            Some(h) if !h.confirmed && h.placeholder == placeholder => self.untake(key),
            _ => false,
        }
    }

    /// Undoes [`Pool::take`] for a pod the guest refused: its placeholder is unused
    /// again. False when `key` holds no placeholder, or its settle is already being
    /// written (the placeholder becomes the pod's key, which the caller then unclaims).
    pub fn untake(&mut self, key: &str) -> bool {
        if self.settling.contains(key) {
            return false;
        }
        let Some(h) = self.handed.remove(key) else {
            return false;
        };
        self.to_settle.retain(|k| k != key);
        if self.to_settle.is_empty() {
            self.settle_since = None;
        }
        let held = Held {
            key: h.placeholder.clone(),
            stamp: h.stamp,
            asked: h.asked,
        };
        match self.slots.get_mut(&h.slot) {
            Some(s) => s.unused.push_front(held),
            // The slot went idle meanwhile: give the placeholder back.
            None => {
                self.returning.push((h.slot.clone(), h.placeholder.clone()));
                self.retry.push(Return {
                    slot: h.slot,
                    keys: vec![h.placeholder],
                    scale: h.scale,
                });
            }
        }
        true
    }

    /// Records a claim answered into `slot` (by a placeholder or a write) and returns how
    /// many placeholders to reserve now, if any: the block is the claims of the last
    /// second (at least 1, at most `max_block`), refilled when half of it is used.
    pub fn claimed(
        &mut self,
        slot: &SlotKey,
        scale: Scale<'static>,
        now: Instant,
    ) -> Option<usize> {
        let s = self.slots.entry(slot.clone()).or_insert_with(|| Slot {
            unused: VecDeque::new(),
            recent: VecDeque::new(),
            last_claim: now,
            refilling: false,
            refill_asked: now,
            scale,
        });
        s.last_claim = now;
        s.scale = scale;
        while s
            .recent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > RATE_WINDOW)
        {
            s.recent.pop_front();
        }
        if s.recent.len() < self.policy.max_block {
            s.recent.push_back(now);
        }
        let block = s.recent.len().clamp(1, self.policy.max_block.max(1));
        let want = block.saturating_sub(s.unused.len());
        if self.closing || s.refilling || s.unused.len() * 2 >= block || want == 0 {
            return None;
        }
        s.refilling = true;
        s.refill_asked = now;
        Some(want)
    }

    /// `n` fresh placeholder keys.
    pub fn new_keys(&mut self, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| placeholder_key(&self.holder, self.next.fetch_add(1, Ordering::Relaxed) + 1))
            .collect()
    }

    /// A reserve write for `slot` ended: `keys` (possibly none), with their stamps in
    /// the status, are now held.
    pub fn reserved(&mut self, slot: &SlotKey, keys: Vec<(String, Timestamp)>) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.refilling = false;
            let asked = s.refill_asked;
            s.unused.extend(
                keys.into_iter()
                    .map(|(key, stamp)| Held { key, stamp, asked }),
            );
        }
    }

    /// [`Pool::settles`] once the oldest has waited `delay`: by then the controller has
    /// usually counted the pods through their annotation and removed the placeholders,
    /// so the settle finds nothing to rename and writes nothing.
    pub fn settles_due(&mut self, now: Instant, delay: Duration) -> Vec<Handed> {
        match self.settle_since {
            Some(t) if now.saturating_duration_since(t) >= delay => self.settles(),
            _ => vec![],
        }
    }

    /// Handed placeholders to rename in the next write; they are being settled until
    /// [`Pool::settled`].
    pub fn settles(&mut self) -> Vec<Handed> {
        self.settle_since = None;
        let keys = std::mem::take(&mut self.to_settle);
        self.settling.extend(keys.iter().cloned());
        keys.into_iter()
            .filter_map(|k| self.handed.get(&k).cloned())
            .collect()
    }

    /// Whether `placeholder` is one this replica handed to a pod and has not settled:
    /// never dropped as stale by this replica's own writes.
    pub fn is_handed(&self, placeholder: &str) -> bool {
        self.handed.values().any(|h| h.placeholder == placeholder)
    }

    /// Whether this replica knows `placeholder` (unused, being returned, or handed out).
    pub fn knows(&self, placeholder: &str) -> bool {
        self.is_handed(placeholder)
            || self.returning.iter().any(|(_, k)| k == placeholder)
            || self
                .slots
                .values()
                .any(|s| s.unused.iter().any(|h| h.key == placeholder))
    }

    /// A settle write failed: the placeholders go back to be settled by the next one
    /// (a handed-out placeholder stays this replica's until its pod is recorded), unless
    /// they were handed out longer than `give_up` ago — by then whoever finds them stale
    /// settles them to the pods that name them.
    pub fn settle_failed(&mut self, done: &[Handed], now: Instant, give_up: Duration) {
        for h in done {
            self.settling.remove(&h.key);
            if self.handed.get(&h.key) != Some(h) {
                continue;
            }
            if now.saturating_duration_since(h.at) >= give_up {
                self.handed.remove(&h.key);
                continue;
            }
            self.to_settle.push(h.key.clone());
            self.settle_since.get_or_insert(now);
        }
    }

    /// A settle write ended (written, or the object is gone): the placeholders are the
    /// pods' keys now, or nobody's.
    pub fn settled(&mut self, done: &[Handed]) {
        for h in done {
            self.settling.remove(&h.key);
            if self.handed.get(&h.key).is_some_and(|x| x == h) {
                self.handed.remove(&h.key);
            }
        }
    }

    /// Unused placeholders to give back: those of subsets idle for the policy's idle
    /// time, and those too old to hand out — by their stamp (`clock`: this host's wall
    /// clock, which stamped them) or by when they were asked for (monotonic); and the
    /// returns that failed before. They are no longer held.
    pub fn expired(&mut self, now: Instant, clock: Timestamp) -> Vec<Return> {
        let handout = k8s_openapi::jiff::SignedDuration::from_secs(HANDOUT_SECONDS);
        let idle = self.policy.idle;
        let mut out = match self.retry_after {
            Some(t) if now < t => vec![],
            _ => std::mem::take(&mut self.retry),
        };
        for (key, s) in &mut self.slots {
            let slot_idle = now.saturating_duration_since(s.last_claim) >= idle;
            let old = |h: &Held| {
                clock.duration_since(h.stamp) >= handout
                    || now.saturating_duration_since(h.asked) >= HANDOUT
            };
            let (gone, kept): (Vec<Held>, Vec<Held>) =
                s.unused.drain(..).partition(|h| slot_idle || old(h));
            s.unused = kept.into();
            self.returning
                .extend(gone.iter().map(|h| (key.clone(), h.key.clone())));
            if !gone.is_empty() {
                out.push(Return {
                    slot: key.clone(),
                    keys: gone.into_iter().map(|h| h.key).collect(),
                    scale: s.scale,
                });
            }
        }
        self.slots.retain(|_, s| {
            !s.unused.is_empty()
                || s.refilling
                || now.saturating_duration_since(s.last_claim) < idle
        });
        out
    }

    /// Everything unused, to give back at shutdown.
    pub fn drain(&mut self) -> Vec<Return> {
        let out: Vec<Return> = self
            .slots
            .iter_mut()
            .filter(|(_, s)| !s.unused.is_empty())
            .map(|(key, s)| Return {
                slot: key.clone(),
                keys: s.unused.drain(..).map(|h| h.key).collect(),
                scale: s.scale,
            })
            .collect();
        for r in &out {
            self.returning
                .extend(r.keys.iter().map(|k| (r.slot.clone(), k.clone())));
        }
        out
    }
}

/// What the pool holds, as the counter batch sees and changes it.
impl Holdings for Pool {
    fn holder(&self) -> &str {
        Pool::holder(self)
    }

    fn unused(&self, version: &str) -> Vec<(String, String)> {
        Pool::unused(self, version)
    }

    fn returning(&self, version: &str) -> Vec<(String, String)> {
        Pool::returning(self, version)
    }

    fn handed(&self, claim_key: &str) -> Option<(&ClaimResponse, bool)> {
        Pool::handed(self, claim_key).map(|h| (&h.answer, h.confirmed))
    }

    fn take(&mut self, taking: Taking<'_>, answer: ClaimResponse) -> Option<ClaimResponse> {
        let slot = (taking.version.to_string(), taking.subset.to_string());
        let (placeholder, key, scale) = (taking.placeholder, taking.claim_key, taking.scale);
        match taking.confirmed {
            true => Pool::take(self, &slot, placeholder, key, scale, answer),
            false => Pool::take_unconfirmed(self, &slot, placeholder, key, scale, answer),
        }
    }

    fn untake(&mut self, claim_key: &str) -> bool {
        Pool::untake(self, claim_key)
    }
}

#[cfg(test)]
mod tests;
