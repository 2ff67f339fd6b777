//! The plans of calls in flight: each `dotprod`'s plan (its drawn targets
//! and row visits) waits here, by [`CallKey`], for the `adjust` of the same
//! call, within a fixed memory bound; spent plans are kept to draw into
//! again. It never plans or applies anything itself beyond
//! [`PlanCache::take_or_plan`]'s redraw on a miss.

use crate::model::Model;
use crate::plan::Plan;
use colonnade_proto::{Minibatch, ShardError};

/// At most this many bytes of plans wait for their `adjust` (the oldest
/// are dropped when a new one would pass it), and at most this many more
/// wait, spent, to be drawn into again. A 256-input minibatch's plan takes
/// ~250 KB, so hundreds of minibatches in flight fit; a call's worth is
/// bounded by [`colonnade_proto::MAX_CALL_DOTS`] (~120 MB of plan).
pub const PLAN_CACHE_BYTES: usize = 256 << 20;

/// Names a call's plan: its model and lineage, the seed of its first
/// minibatch and its number of minibatches (a worker's calls in flight
/// start at distinct minibatches, whose seeds differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallKey {
    pub fingerprint: u64,
    pub lineage: u64,
    pub seed: u64,
    pub minibatches: u32,
}

/// The plan each `dotprod` drew, by [`CallKey`], until the `adjust` of the
/// same call takes it. An `adjust` that carries its minibatches uses an
/// entry only if it fits them, and draws the plan again on a miss; one that
/// names its call only is answered NOT_FOUND on a miss (the client then sends
/// its minibatches). Its memory is bounded by [`PLAN_CACHE_BYTES`] however
/// many `dotprod`s never see their `adjust`.
#[derive(Default)]
pub struct PlanCache {
    waiting: parking_lot::Mutex<Waiting>,
    /// Plans whose adjust is done, to draw into again (any thread), and
    /// their bytes.
    free: parking_lot::Mutex<(Vec<Plan>, usize)>,
}

#[derive(Default)]
struct Waiting {
    entries: std::collections::HashMap<CallKey, (u64, Plan)>,
    /// Entries in the order they came (with their number), for eviction.
    order: std::collections::VecDeque<(u64, CallKey)>,
    next: u64,
    bytes: usize,
}

impl Waiting {
    /// Takes `key`'s entry out.
    fn take(&mut self, key: &CallKey) -> Option<Plan> {
        let (_, p) = self.entries.remove(key)?;
        self.bytes -= p.heap_bytes();
        Some(p)
    }
}

impl PlanCache {
    /// Holds `plan` for its adjust, evicting the oldest plans beyond
    /// [`PLAN_CACHE_BYTES`] (their dot products are no longer pending).
    pub(crate) fn put(&self, key: CallKey, mut plan: Plan) {
        let bytes = plan.heap_bytes();
        if bytes > PLAN_CACHE_BYTES {
            plan.release();
            return;
        }
        let mut w = self.waiting.lock();
        while w.bytes + bytes > PLAN_CACHE_BYTES {
            let Some((n, old)) = w.order.pop_front() else {
                break;
            };
            if w.entries.get(&old).is_some_and(|(m, _)| *m == n) {
                if let Some(mut p) = w.take(&old) {
                    p.release();
                }
            }
        }
        let n = w.next;
        w.next += 1;
        w.bytes += bytes;
        w.order.push_back((n, key));
        if let Some(mut old) = w.take(&key) {
            old.release();
        }
        w.entries.insert(key, (n, plan));
    }

    /// A plan to draw into: a recycled one when there is.
    pub(crate) fn fresh(&self) -> Plan {
        let mut free = self.free.lock();
        match free.0.pop() {
            Some(p) => {
                free.1 -= p.heap_bytes();
                p
            }
            None => Plan::default(),
        }
    }

    /// Calls whose plan waits for its adjust.
    pub(crate) fn waiting_calls(&self) -> usize {
        self.waiting.lock().entries.len()
    }

    /// Returns a plan whose call is done (or failed: its dot products are
    /// no longer pending).
    pub(crate) fn recycle(&self, mut p: Plan) {
        p.release();
        let bytes = p.heap_bytes();
        let mut free = self.free.lock();
        if free.1 + bytes <= PLAN_CACHE_BYTES {
            free.1 += bytes;
            free.0.push(p);
        }
    }

    /// The plan `key` names, if held (and removed).
    pub(crate) fn remove(&self, key: &CallKey) -> Option<Plan> {
        // Its place in `order` stays until eviction reaches it: `put`
        // skips a key held under a newer number, or no longer held.
        self.waiting.lock().take(key)
    }

    /// The plan of the call `mbs` (key `key`) on `model`: the cached one if
    /// it fits them, else drawn again.
    pub(crate) fn take_or_plan(
        &self,
        model: &Model,
        key: &CallKey,
        mbs: &[Minibatch],
    ) -> Result<Plan, ShardError> {
        if let Some(cached) = self.remove(key) {
            if model.plan_fits(mbs, &cached) {
                return Ok(cached);
            }
            self.recycle(cached);
        }
        let mut p = self.fresh();
        model.plan(mbs, &mut p)?;
        Ok(p)
    }

    /// Bytes of plans held: waiting for their adjust, and spent.
    pub fn bytes(&self) -> usize {
        self.waiting.lock().bytes + self.free.lock().1
    }
}
