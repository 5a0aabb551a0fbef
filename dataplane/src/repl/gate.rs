//! The write gate: whether this node takes writes now, shared by the control side
//! (the replication lcore, the etcd control thread) and read by every worker once
//! per burst.
//!
//! A standalone dataplane is always writable. A replica refuses every write with
//! `NOT_MASTER`, naming the master when it knows it; a master refuses writes with
//! `NOT_MASTER` once it may no longer acknowledge them (its etcd lease may lapse), and
//! with `NOT_ENOUGH_REPLICAS` while fewer than `min_replicas` replicas are in sync.
//! With [`WriteGate::set_reads_follow_writes`] (the nodes of an etcd-managed cluster,
//! unless `replication.replica_reads`), a node that refuses writes `NOT_MASTER` refuses
//! reads the same way: a replica's data lags the master's acknowledgements (it
//! acknowledges a segment once it is in its workers' rings, before they apply it), and a
//! fenced master's may lag a newer master's, so only the master answers reads and a
//! client's read never returns less than a write acknowledged before it. Otherwise
//! reads are never refused. Only atomics: the workers never wait on the writers.
//!
//! **The fence.** A master elected through etcd may acknowledge writes only until its
//! lease could expire (docs/FAILOVER.md, "Write fencing"). The control side copies
//! that deadline into the gate ([`WriteGate::set_fence_deadline`]); every burst the
//! worker compares it with a fresh CLOCK_MONOTONIC reading (a vDSO call, no system
//! call). So a master frozen past its lease (SIGSTOP, a VM pause) refuses writes from
//! its very first burst after it resumes, before its replication lcore or control
//! thread has run at all.

use kvwire::{MasterHint, Status, MASTER_HINT_LEN};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

const WRITABLE: u32 = 0;
const NOT_MASTER: u32 = 1;
const NOT_ENOUGH_REPLICAS: u32 = 2;

/// Shared write permission and the master hint of `NOT_MASTER` results.
#[derive(Debug, Default)]
pub struct WriteGate {
    state: AtomicU32,
    /// Hint fields; `hint_epoch` 0 = master unknown. Written with the epoch last and
    /// read epoch-first-and-last, so a reader never combines two hints.
    hint_epoch: AtomicU64,
    hint_ip: AtomicU32,
    /// MAC (6 B) and QPN (2 B), little-endian packed.
    hint_mac_qpn: AtomicU64,
    /// CLOCK_MONOTONIC ns from which writes are refused with `NOT_MASTER`; 0: no
    /// fence (a node without etcd).
    fence_deadline_ns: AtomicU64,
    /// Reads are refused whenever writes are refused `NOT_MASTER`.
    reads_follow_writes: AtomicBool,
    /// This node follows a master (a replica): see [`WriteGate::is_master`].
    following: AtomicBool,
}

impl WriteGate {
    /// A writable gate (a standalone node or a master in good standing).
    pub fn writable() -> WriteGate {
        WriteGate::default()
    }

    /// Lets writes through.
    pub fn open(&self) {
        self.state.store(WRITABLE, Ordering::Release);
    }

    /// Refuses writes with `NOT_MASTER` (a replica or a fenced master).
    pub fn refuse_not_master(&self) {
        self.state.store(NOT_MASTER, Ordering::Release);
    }

    /// Refuses writes with `NOT_ENOUGH_REPLICAS`.
    pub fn refuse_not_enough_replicas(&self) {
        self.state.store(NOT_ENOUGH_REPLICAS, Ordering::Release);
    }

    /// Makes writes refused (`NOT_MASTER`) from CLOCK_MONOTONIC time `deadline_ns`
    /// on, whatever the state says; 0 lifts the fence. Only a node elected through etcd sets it.
    pub fn set_fence_deadline(&self, deadline_ns: u64) {
        self.fence_deadline_ns.store(deadline_ns, Ordering::Release);
    }

    /// Records whether this node follows a master (its replica role began) or not
    /// (its master role began).
    pub fn set_following(&self, following: bool) {
        self.following.store(following, Ordering::Release);
    }

    /// Whether this node has been the master since it last followed one: the
    /// requests its client connections carry were executed here, so its response
    /// cache is the truth about them — also while it refuses writes for want of
    /// replicas or because it was fenced (a fenced master may still full-sync a
    /// replica). A standalone node is its own master.
    pub fn is_master(&self) -> bool {
        !self.following.load(Ordering::Acquire)
    }

    /// The status every write gets now: `Ok` means writes go through.
    #[inline]
    pub fn write_status(&self) -> Status {
        match self.state.load(Ordering::Acquire) {
            WRITABLE => {
                let d = self.fence_deadline_ns.load(Ordering::Acquire);
                if d != 0 && kvcluster::mono_now_ns() >= d {
                    Status::NotMaster
                } else {
                    Status::Ok
                }
            }
            NOT_ENOUGH_REPLICAS => Status::NotEnoughReplicas,
            _ => Status::NotMaster,
        }
    }

    /// Makes reads refused `NOT_MASTER` whenever writes are (see the module docs).
    pub fn set_reads_follow_writes(&self, on: bool) {
        self.reads_follow_writes.store(on, Ordering::Release);
    }

    /// Whether reads are refused when `write_status` (this burst's) is `NOT_MASTER`.
    #[inline]
    pub fn refuses_reads(&self, write_status: Status) -> bool {
        write_status == Status::NotMaster && self.reads_follow_writes.load(Ordering::Relaxed)
    }

    /// Records where the master is (`None`: unknown).
    pub fn set_master_hint(&self, hint: Option<MasterHint>) {
        self.hint_epoch.store(0, Ordering::Release);
        let Some(h) = hint else { return };
        let mut mq = [0u8; 8];
        mq[..6].copy_from_slice(&h.mac);
        mq[6..].copy_from_slice(&h.qpn.to_le_bytes());
        self.hint_ip.store(u32::from(h.ip), Ordering::Release);
        self.hint_mac_qpn
            .store(u64::from_le_bytes(mq), Ordering::Release);
        self.hint_epoch.store(h.epoch.max(1), Ordering::Release);
    }

    /// The master hint as a `NOT_MASTER` value into `out`: its length, 0 when the
    /// master is unknown (or the hint changed while it was read).
    pub fn master_hint(&self, out: &mut [u8; MASTER_HINT_LEN]) -> usize {
        let epoch = self.hint_epoch.load(Ordering::Acquire);
        if epoch == 0 {
            return 0;
        }
        let ip = self.hint_ip.load(Ordering::Acquire);
        let mq = self.hint_mac_qpn.load(Ordering::Acquire).to_le_bytes();
        if self.hint_epoch.load(Ordering::Acquire) != epoch {
            return 0;
        }
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&mq[..6]);
        *out = MasterHint {
            epoch,
            ip: Ipv4Addr::from(ip),
            mac,
            qpn: u16::from_le_bytes([mq[6], mq[7]]),
        }
        .encode();
        MASTER_HINT_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_follow_writes_only_when_asked_and_only_not_master() {
        let g = WriteGate::writable();
        g.refuse_not_master();
        assert!(!g.refuses_reads(g.write_status()), "off by default");
        g.set_reads_follow_writes(true);
        assert!(g.refuses_reads(g.write_status()), "a replica refuses reads");
        g.refuse_not_enough_replicas();
        assert!(!g.refuses_reads(g.write_status()), "the master reads on");
        g.open();
        assert!(!g.refuses_reads(g.write_status()));
        g.set_fence_deadline(1);
        assert!(
            g.refuses_reads(g.write_status()),
            "a fenced master refuses reads"
        );
    }

    #[test]
    fn states_and_hint() {
        let g = WriteGate::writable();
        assert_eq!(g.write_status(), Status::Ok);
        g.refuse_not_enough_replicas();
        assert_eq!(g.write_status(), Status::NotEnoughReplicas);
        assert!(g.is_master(), "short of replicas, still the master");
        g.refuse_not_master();
        assert_eq!(g.write_status(), Status::NotMaster);
        assert!(g.is_master(), "fenced, still the last master");
        g.set_following(true);
        assert!(!g.is_master(), "a replica");
        let mut b = [0u8; MASTER_HINT_LEN];
        assert_eq!(g.master_hint(&mut b), 0);
        let h = MasterHint {
            epoch: 3,
            ip: Ipv4Addr::new(10, 1, 2, 3),
            mac: [2, 0, 0, 0, 0, 9],
            qpn: 1,
        };
        g.set_master_hint(Some(h));
        assert_eq!(g.master_hint(&mut b), MASTER_HINT_LEN);
        assert_eq!(MasterHint::decode(&b), Some(h));
        g.set_master_hint(None);
        assert_eq!(g.master_hint(&mut b), 0);
        g.open();
        assert_eq!(g.write_status(), Status::Ok);
    }

    #[test]
    fn fence_closes_by_time_alone() {
        let g = WriteGate::writable();
        let now = kvcluster::mono_now_ns();
        g.set_fence_deadline(now + 10_000_000_000);
        assert_eq!(g.write_status(), Status::Ok);
        g.set_fence_deadline(now);
        assert_eq!(g.write_status(), Status::NotMaster, "deadline passed");
        assert!(g.is_master(), "its cache still holds what it executed");
        g.refuse_not_enough_replicas();
        assert_eq!(g.write_status(), Status::NotEnoughReplicas);
        g.open();
        g.set_fence_deadline(0);
        assert_eq!(g.write_status(), Status::Ok, "fence lifted");
    }
}
