//! Purging a removed tenant's namespace (docs/PROTOCOL.md §6.8, "Removal"): when a
//! tenant is removed without `--keep-data`, every worker that takes writes deletes
//! the keys of its namespace from its partition, a bounded step per loop iteration
//! (serving goes on in between), each delete through the mutation tap so replicas
//! delete it too. A worker that takes no writes (a replica) deletes nothing itself:
//! its master's deletes reach it through the replication stream.
//!
//! A purge is named by the control plane's sequence number; the worker reports each
//! one done with the keys it deleted (`ControlState::purge_done`), and the tenant id
//! cannot be added again until every worker did.

use super::Server;
use crate::mutation::record_cost;
use crate::stats::WorkerStats;
use kvengine::{ScanCursor, ScanStep};
use kvwire::tenant;
use std::collections::VecDeque;

/// Buckets scanned per step: sequential lines, a few microseconds.
const BUCKETS_PER_STEP: usize = 64;

/// One purge in progress or queued.
#[derive(Clone, Copy, Debug)]
struct Job {
    seq: u64,
    id: u32,
    cursor: ScanCursor,
    deleted: u64,
}

/// A finished purge: its sequence number, the tenant id and the keys this worker
/// deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PurgeDone {
    /// The control plane's sequence number of the purge.
    pub seq: u64,
    /// The tenant whose namespace was purged.
    pub id: u32,
    /// Keys deleted here.
    pub deleted: u64,
}

/// A worker's purges: the queue, the highest sequence number taken, and the keys of
/// one step (collected by the scan, deleted after it).
#[derive(Debug, Default)]
pub(crate) struct Purges {
    queue: VecDeque<Job>,
    taken: u64,
    keys: Vec<u8>,
    lens: Vec<u8>,
}

impl Purges {
    /// Whether a purge is queued or running.
    #[inline]
    pub fn active(&self) -> bool {
        !self.queue.is_empty()
    }
}

impl Server {
    /// Takes the purges `wanted` (sequence number, tenant id) it has not taken yet.
    /// Allocates: call it between bursts (`set_tenants`' caller).
    pub fn request_purges(&mut self, wanted: &[(u64, u32)]) {
        for &(seq, id) in wanted {
            if seq > self.purges.taken {
                self.purges.taken = seq;
                self.purges.queue.push_back(Job {
                    seq,
                    id,
                    cursor: ScanCursor::START,
                    deleted: 0,
                });
            }
        }
    }

    /// Whether a purge is queued or running ([`Server::purge_step`] to advance it).
    #[inline]
    pub fn purge_active(&self) -> bool {
        self.purges.active()
    }

    /// One bounded step of the oldest purge: scans [`BUCKETS_PER_STEP`] buckets and
    /// deletes the keys of the tenant's namespace found there (logged as deletes when
    /// the tap has room for them; otherwise the step waits for the next call). The
    /// purge when it finished. A worker that takes no writes finishes at once with
    /// nothing deleted.
    pub fn purge_step(&mut self, stats: &WorkerStats) -> Option<PurgeDone> {
        let job = *self.purges.queue.front()?;
        if !self.took_writes() {
            self.purges.queue.pop_front();
            return Some(PurgeDone {
                seq: job.seq,
                id: job.id,
                deleted: 0,
            });
        }
        let prefix = tenant::namespace(job.id);
        let Purges { keys, lens, .. } = &mut self.purges;
        keys.clear();
        lens.clear();
        let step = self.engine.scan(job.cursor, BUCKETS_PER_STEP, |k, _| {
            if k.len() > prefix.len() && k.starts_with(&prefix) {
                keys.extend_from_slice(k);
                // Keys are at most 255 bytes (the wire's key_len).
                lens.push(k.len() as u8);
            }
        });
        let cost: usize = lens.iter().map(|&l| record_cost(usize::from(l), 0)).sum();
        if let Some(t) = &self.tap {
            if t.room() < cost {
                return None; // the replication log drains first
            }
        }
        let mut at = 0;
        let mut deleted = 0;
        for &l in lens.iter() {
            let k = &keys[at..at + usize::from(l)];
            at += usize::from(l);
            if self.engine.delete(k) == kvengine::Status::Ok {
                deleted += 1;
                if let Some(t) = self.tap.as_deref_mut() {
                    t.delete(k);
                }
            }
        }
        stats.purged_keys.add(deleted);
        let job = self.purges.queue.front_mut()?;
        job.deleted += deleted;
        match step {
            ScanStep::More(c) => {
                job.cursor = c;
                None
            }
            ScanStep::Done => {
                let j = self.purges.queue.pop_front()?;
                Some(PurgeDone {
                    seq: j.seq,
                    id: j.id,
                    deleted: j.deleted,
                })
            }
        }
    }
}
