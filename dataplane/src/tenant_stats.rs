//! Per-tenant counters of one worker, bounded in number: the first
//! [`TENANT_SERIES`] tenants (by id) have a slot each, the rest share the `other`
//! slot, so a thousand tenants never make a thousand Prometheus series per family.
//! Single writer (the worker), like every counter of [`crate::stats`].

use crate::stats::Counter;
use kvwire::counters::TENANT_FAMILIES;
use std::sync::atomic::{AtomicU32, Ordering};

/// Tenants with series of their own.
pub const TENANT_SERIES: usize = 64;
/// The slot of the tenants beyond [`TENANT_SERIES`].
pub const OTHER: u8 = TENANT_SERIES as u8;
/// No slot (a client without a tenant).
pub const NO_SLOT: u8 = u8::MAX;

/// The counters of one tenant (or of `other`); their names and export are
/// `kvwire::counters::TENANT_FAMILIES`, in the order of [`TenantSlot::values`].
#[derive(Debug, Default)]
pub struct TenantSlot {
    /// The tenant id (0: `other`, or unused).
    pub id: AtomicU32,
    /// Requests served (not refused).
    pub requests: Counter,
    /// Their payload bytes.
    pub request_bytes: Counter,
    /// Ops answered DENIED (ACL or namespace).
    pub denied: Counter,
    /// Requests refused over the tenant's rate (RNR NAK).
    pub over_quota: Counter,
    /// QPs opened.
    pub opens: Counter,
    /// OPENs naming the tenant refused (wrong proof, stale, over the connection quota).
    pub bad_credentials: Counter,
    /// Opened QPs live (a level, set by the worker each control tick).
    pub connections: Counter,
}

impl TenantSlot {
    /// The counters, in the order of `kvwire::counters::TENANT_FAMILIES`.
    pub fn counters(&self) -> [&Counter; TENANT_FAMILIES.len()] {
        [
            &self.requests,
            &self.request_bytes,
            &self.denied,
            &self.over_quota,
            &self.opens,
            &self.bad_credentials,
            &self.connections,
        ]
    }

    /// Their values, in the same order.
    pub fn values(&self) -> [u64; TENANT_FAMILIES.len()] {
        self.counters().map(Counter::get)
    }
}

/// One worker's tenant slots.
#[derive(Debug)]
pub struct TenantStats(pub [TenantSlot; TENANT_SERIES + 1]);

impl Default for TenantStats {
    fn default() -> Self {
        TenantStats(std::array::from_fn(|_| TenantSlot::default()))
    }
}

impl TenantStats {
    /// The slot of the tenant at rule index `i`.
    pub const fn slot_of(i: usize) -> u8 {
        if i < TENANT_SERIES {
            i as u8
        } else {
            OTHER
        }
    }

    /// Slot `s` (`None` for [`NO_SLOT`]).
    #[inline]
    pub fn slot(&self, s: u8) -> Option<&TenantSlot> {
        self.0.get(usize::from(s))
    }

    /// Gives the slots to the tenants `ids` (sorted, as the rules): a slot whose
    /// tenant changes starts from zero, so no tenant inherits another's counts.
    pub fn assign(&self, ids: impl Iterator<Item = u32>) {
        let mut ids = ids;
        for slot in &self.0[..TENANT_SERIES] {
            let id = ids.next().unwrap_or(0);
            if slot.id.load(Ordering::Relaxed) != id {
                slot.id.store(id, Ordering::Relaxed);
                for c in slot.counters() {
                    c.set(0);
                }
            }
        }
    }
}
