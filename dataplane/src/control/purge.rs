//! Purges of removed tenants' namespaces, on the control side (the workers' side is
//! `crate::server::purge`): a removal without `--keep-data` queues a purge under a
//! sequence number with the admission state; every worker runs it and reports it
//! done ([`WorkerControl::report_purge`]); once all have, the purge is finished, its
//! count of deleted keys is kept for `ctlplane tenants remove` to print, and the
//! tenant id may be added again (before, `add_tenant` refuses it: a new tenant must
//! never read the old one's keys).

use super::{lock, Admission, ControlState, WorkerControl};
use crate::server::PurgeDone;
use std::sync::atomic::Ordering;

/// Finished purges kept for status queries.
const FINISHED_KEPT: usize = 64;

/// A purge every worker finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PurgeReport {
    /// Its sequence number.
    pub seq: u64,
    /// The tenant whose namespace was purged.
    pub id: u32,
    /// Keys deleted, over all workers.
    pub deleted: u64,
}

/// Where a purge stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PurgeStatus {
    /// Workers still running it: (workers done, workers).
    Running(usize, usize),
    /// Every worker finished.
    Finished(PurgeReport),
    /// No such purge (or too old to be remembered).
    Unknown,
}

impl ControlState {
    /// Queues a purge of tenant `id`'s namespace (under the admission lock `a`); its
    /// sequence number. The caller bumps the generation.
    pub(super) fn queue_purge(a: &mut Admission, id: u32) -> u64 {
        a.purge_seq += 1;
        a.purges.push((a.purge_seq, id));
        a.purge_seq
    }

    /// Collects what the workers finished; a purge every worker finished leaves the
    /// queue for the finished list.
    fn settle_purges(&self, a: &mut Admission) {
        let done: Vec<Vec<PurgeDone>> = self
            .workers
            .iter()
            .map(|w| lock(&w.purged).clone())
            .collect();
        let n = self.workers.len();
        let mut finished = Vec::new();
        a.purges.retain(|&(seq, id)| {
            let reports: Vec<u64> = done
                .iter()
                .filter_map(|w| w.iter().find(|d| d.seq == seq).map(|d| d.deleted))
                .collect();
            if reports.len() < n {
                return true;
            }
            finished.push(PurgeReport {
                seq,
                id,
                deleted: reports.iter().sum(),
            });
            false
        });
        for r in &finished {
            for w in &self.workers {
                lock(&w.purged).retain(|d| d.seq != r.seq);
            }
        }
        a.finished_purges.extend(finished);
        let excess = a.finished_purges.len().saturating_sub(FINISHED_KEPT);
        a.finished_purges.drain(..excess);
    }

    /// Whether tenant `id`'s namespace is being purged (it may not be added again
    /// until the purge finished).
    pub(super) fn purging(&self, a: &mut Admission, id: u32) -> bool {
        self.settle_purges(a);
        a.purges.iter().any(|&(_, p)| p == id)
    }

    /// Where purge `seq` stands.
    pub fn purge_status(&self, seq: u64) -> PurgeStatus {
        let mut a = lock(&self.admission);
        self.settle_purges(&mut a);
        if let Some(r) = a.finished_purges.iter().find(|r| r.seq == seq) {
            return PurgeStatus::Finished(*r);
        }
        if !a.purges.iter().any(|&(s, _)| s == seq) {
            return PurgeStatus::Unknown;
        }
        let done = self
            .workers
            .iter()
            .filter(|w| lock(&w.purged).iter().any(|d| d.seq == seq))
            .count();
        PurgeStatus::Running(done, self.workers.len())
    }

    /// Queues a purge of the namespace of `id`, which must not be a tenant now (an
    /// operator's cleanup: a purge the master did not finish before a failover, or
    /// data kept with `--keep-data`); its sequence number and the new generation.
    pub fn purge_namespace(&self, id: u32) -> Result<(u64, u64), super::TenantError> {
        if id == 0 || id > kvwire::tenant::MAX_TENANT_ID {
            return Err(super::TenantError::BadId(id));
        }
        let mut a = lock(&self.admission);
        if a.tenants.iter().any(|t| t.id == id) {
            return Err(super::TenantError::Exists(id, String::new()));
        }
        let seq = Self::queue_purge(&mut a, id);
        Ok((seq, self.generation.fetch_add(1, Ordering::AcqRel) + 1))
    }
}

impl WorkerControl {
    /// Reports purge `done` finished on this worker; `false` if the report could not
    /// be taken now (the control plane holds the list: report again next time).
    pub fn report_purge(&self, done: PurgeDone) -> bool {
        match self.ctl.workers[self.id].purged.try_lock() {
            Ok(mut l) => {
                l.push(done);
                true
            }
            Err(_) => false,
        }
    }
}
