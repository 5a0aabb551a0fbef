//! [`ClusterView`]: what the lcores read (role, epoch, master, the write fence) and
//! write (their stream offset, a switchover request), with plain atomics only.
//!
//! One writer, the control thread, updates the view; any number of lcores read it. No
//! read ever blocks, allocates or makes a system call.

use std::collections::BTreeMap;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::records::DataState;
use crate::NodeAddr;

/// A node's role as the lcores see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Neither master nor following a known master: starting up, lease lost, between
    /// masters, or a master that stopped acknowledging writes (lease not renewed in time,
    /// planned switchover, superseded). Writes are refused.
    Fenced,
    /// Following the master named by [`ClusterView::master`]; writes are refused with a
    /// status naming it.
    Replica,
    /// Elected master at [`ClusterView::epoch`]. Writes may be acknowledged only while
    /// [`ClusterView::may_ack_writes`] says so.
    Master,
}

impl Role {
    fn code(self) -> u64 {
        match self {
            Role::Fenced => 0,
            Role::Replica => 1,
            Role::Master => 2,
        }
    }

    fn from_code(c: u64) -> Role {
        match c {
            2 => Role::Master,
            1 => Role::Replica,
            _ => Role::Fenced,
        }
    }
}

/// The master of the cluster as known to this node or found in etcd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MasterInfo {
    /// The master's node id.
    pub id: u32,
    /// The epoch it was elected at.
    pub epoch: u64,
    /// Where it serves.
    pub addr: NodeAddr,
}

/// How many times [`ClusterView::master`] retries a read that raced an update.
const MASTER_READ_TRIES: usize = 8;

/// The lock-free shared state between the control thread and the lcores.
///
/// `state` packs `epoch << 2 | role`, so role and epoch are always read together.
/// The master slot is a sequence lock with a single writer: readers retry a bounded
/// number of times and never wait for the writer.
#[derive(Debug)]
pub struct ClusterView {
    node_id: u32,
    state: AtomicU64,
    fence_deadline_ns: AtomicU64,
    master_seq: AtomicU64,
    master_id: AtomicU64,
    master_epoch: AtomicU64,
    master_w0: AtomicU64,
    master_w1: AtomicU64,
    offset: AtomicU64,
    switchover: AtomicU64,
    keepalives: AtomicU64,
    /// 1 once the node was appended behind a chain's tail.
    appended: AtomicU64,
    /// `hist << 2 | DataState::code`: what the node's data is worth to an election.
    data: AtomicU64,
    /// `have << 32 | need` while the election waits for a quorum (or, first
    /// election, for every node); 0 otherwise.
    quorum_wait: AtomicU64,
    /// The epoch of the current master when an operator forced its election; 0
    /// otherwise.
    forced_epoch: AtomicU64,
    /// The cluster's tenant records (`Keys::tenants`: id → the stored JSON) and a
    /// generation bumped on each change. Control side only (a lock, never on the
    /// request path): the dataplane's control thread applies them.
    tenants: Mutex<(u64, BTreeMap<u32, Vec<u8>>)>,
}

/// `switchover` value for "to the best replica".
const SWITCHOVER_ANY: u64 = u64::MAX;

impl ClusterView {
    /// A view of node `node_id`: fenced, epoch 0, no master known.
    pub fn new(node_id: u32) -> Self {
        ClusterView {
            node_id,
            state: AtomicU64::new(Role::Fenced.code()),
            fence_deadline_ns: AtomicU64::new(0),
            master_seq: AtomicU64::new(0),
            master_id: AtomicU64::new(0),
            master_epoch: AtomicU64::new(0),
            master_w0: AtomicU64::new(0),
            master_w1: AtomicU64::new(0),
            offset: AtomicU64::new(0),
            switchover: AtomicU64::new(0),
            keepalives: AtomicU64::new(0),
            appended: AtomicU64::new(0),
            data: AtomicU64::new(0),
            quorum_wait: AtomicU64::new(0),
            forced_epoch: AtomicU64::new(0),
            tenants: Mutex::new((0, BTreeMap::new())),
        }
    }

    /// This node's id.
    pub fn node_id(&self) -> u32 {
        self.node_id
    }

    /// Publishes the cluster's tenant records as etcd now holds them; the generation
    /// moves only when they changed.
    pub(crate) fn publish_tenants(&self, records: &BTreeMap<u32, Vec<u8>>) {
        let mut t = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        if t.1 != *records {
            t.0 += 1;
            t.1.clone_from(records);
        }
    }

    /// The generation of the tenant records (0: none seen yet), cheap to poll.
    pub fn tenants_generation(&self) -> u64 {
        self.tenants.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// The cluster's tenant records (id, stored JSON) and their generation.
    pub fn tenants(&self) -> (u64, Vec<(u32, Vec<u8>)>) {
        let t = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        (t.0, t.1.iter().map(|(id, v)| (*id, v.clone())).collect())
    }

    /// Role and epoch, read together.
    #[inline]
    pub fn state(&self) -> (Role, u64) {
        let s = self.state.load(Ordering::Acquire);
        (Role::from_code(s & 3), s >> 2)
    }

    /// This node's role.
    #[inline]
    pub fn role(&self) -> Role {
        self.state().0
    }

    /// The epoch this node serves as master or follows as replica (0: none yet).
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.state().1
    }

    /// The epoch to stamp on a write this node may acknowledge now, or `None` when it
    /// must not acknowledge writes. `now_ns` is [`crate::mono_now_ns`] (CLOCK_MONOTONIC),
    /// read by the caller no earlier than the start of the burst it decides for; the
    /// fence margin covers the time from that reading to the transmit.
    ///
    /// `Some` only while this node is master and `now_ns` is before the fence deadline:
    /// the send time of the last lease renewal etcd answered, plus the lease TTL, minus
    /// the margin. docs/FAILOVER.md argues why the lease (and so the leader key) cannot
    /// have expired, and no other master can exist, while this holds.
    #[inline]
    pub fn write_epoch(&self, now_ns: u64) -> Option<u64> {
        let (role, epoch) = self.state();
        if role == Role::Master && now_ns < self.fence_deadline_ns.load(Ordering::Acquire) {
            Some(epoch)
        } else {
            None
        }
    }

    /// Whether this node may acknowledge a write now (see [`ClusterView::write_epoch`]).
    #[inline]
    pub fn may_ack_writes(&self, now_ns: u64) -> bool {
        self.write_epoch(now_ns).is_some()
    }

    /// The current fence deadline (CLOCK_MONOTONIC ns; 0 when not master).
    pub fn fence_deadline_ns(&self) -> u64 {
        self.fence_deadline_ns.load(Ordering::Acquire)
    }

    /// The master this node knows of (itself when master), or `None` when there is none
    /// (no leader in etcd, not yet known) or, very rarely, when every bounded retry raced
    /// an update: the caller then treats the master as unknown for this packet.
    pub fn master(&self) -> Option<MasterInfo> {
        for _ in 0..MASTER_READ_TRIES {
            let s1 = self.master_seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let id = self.master_id.load(Ordering::Relaxed);
            let epoch = self.master_epoch.load(Ordering::Relaxed);
            let w0 = self.master_w0.load(Ordering::Relaxed);
            let w1 = self.master_w1.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            let s2 = self.master_seq.load(Ordering::Relaxed);
            if s1 != s2 {
                continue;
            }
            if id == 0 {
                return None;
            }
            return Some(MasterInfo {
                id: id as u32,
                epoch,
                addr: NodeAddr::from_words(w0, w1),
            });
        }
        None
    }

    /// The master's node id (see [`ClusterView::master`]).
    pub fn master_id(&self) -> Option<u32> {
        self.master().map(|m| m.id)
    }

    /// Publishes this node's stream offset: the replica's applied offset or the master's
    /// acknowledged offset. The control thread copies it into the member key every
    /// `publish_interval_ms`; the election compares it.
    #[inline]
    pub fn set_offset(&self, offset: u64) {
        self.offset.store(offset, Ordering::Release);
    }

    /// The offset last passed to [`ClusterView::set_offset`].
    pub fn offset(&self) -> u64 {
        self.offset.load(Ordering::Acquire)
    }

    /// Publishes what the node's data is worth to an election: the epoch of the
    /// master whose stream it follows (`hist`) and its [`DataState`]. Must be
    /// lowered (to `None`) before the data is, e.g. before a full sync starts
    /// replacing it, and raised only once the data is there.
    #[inline]
    pub fn set_data(&self, hist: u64, state: DataState) {
        let hist = if state == DataState::None { 0 } else { hist };
        self.data.store(hist << 2 | state.code(), Ordering::Release);
    }

    /// The value last passed to [`ClusterView::set_data`] (`(0, None)` at first).
    pub fn data(&self) -> (u64, DataState) {
        let d = self.data.load(Ordering::Acquire);
        (d >> 2, DataState::from_code(d & 3))
    }

    /// While the cluster has no master and the election cannot go on: `(have,
    /// need)` — data-holding members reported and the quorum (or, before the first
    /// election, members reported and the cluster's size). The cluster is
    /// unavailable for writes until enough of them are back (docs/FAILOVER.md).
    pub fn quorum_wait(&self) -> Option<(u32, u32)> {
        let w = self.quorum_wait.load(Ordering::Relaxed);
        (w != 0).then_some(((w >> 32) as u32, w as u32))
    }

    /// The epoch of the cluster's current master if an operator forced its election
    /// (`ctlplane replication force-elect`), else 0. Such a master may lack
    /// acknowledged writes: a replica holding data does not let it replace them.
    pub fn forced_epoch(&self) -> u64 {
        self.forced_epoch.load(Ordering::Acquire)
    }

    /// Sets [`ClusterView::forced_epoch`]: the control thread, or a test.
    #[doc(hidden)]
    pub fn set_forced_epoch(&self, epoch: u64) {
        self.forced_epoch.store(epoch, Ordering::Release);
    }

    pub(crate) fn set_quorum_wait(&self, w: Option<(u32, u32)>) {
        let v = w.map_or(0, |(have, need)| {
            u64::from(have) << 32 | u64::from(need.max(1))
        });
        self.quorum_wait.store(v, Ordering::Relaxed);
    }

    /// Tells the control thread that this chain node joined behind the chain's tail
    /// (it followed a REDIRECT down the chain): from then on its member record's rank
    /// is one more than the highest rank of the other members, so the election
    /// prefers, on equal offsets, the nodes before it in the chain
    /// (`MemberRecord::rank`).
    pub fn note_appended(&self) {
        self.appended.store(1, Ordering::Relaxed);
    }

    /// Whether [`ClusterView::note_appended`] was called.
    pub fn appended(&self) -> bool {
        self.appended.load(Ordering::Relaxed) != 0
    }

    /// Asks the control thread for a planned switchover to `target` (or to the live
    /// replica with the highest offset). Ignored unless this node is master.
    pub fn request_switchover(&self, target: Option<u32>) {
        let v = target.map_or(SWITCHOVER_ANY, u64::from);
        self.switchover.store(v, Ordering::Release);
    }

    /// Lease renewals etcd has answered so far.
    pub fn keepalives(&self) -> u64 {
        self.keepalives.load(Ordering::Relaxed)
    }

    // ---- control-thread side ----

    /// Takes a pending switchover request: `Some(None)` = any target.
    pub(crate) fn take_switchover(&self) -> Option<Option<u32>> {
        match self.switchover.swap(0, Ordering::AcqRel) {
            0 => None,
            SWITCHOVER_ANY => Some(None),
            v => Some(u32::try_from(v).ok()),
        }
    }

    /// Becomes master at `epoch` with write fence `deadline_ns`. The deadline is stored
    /// before the state, so a reader that sees the new state sees the new deadline.
    pub(crate) fn set_master(&self, epoch: u64, deadline_ns: u64) {
        self.fence_deadline_ns.store(deadline_ns, Ordering::Release);
        self.state
            .store(epoch << 2 | Role::Master.code(), Ordering::Release);
    }

    /// Moves the write fence (master only; never called with an earlier deadline while
    /// the same mastership lasts).
    pub(crate) fn set_deadline(&self, deadline_ns: u64) {
        self.fence_deadline_ns.store(deadline_ns, Ordering::Release);
    }

    /// Leaves the master role (or any role) for `role` at `epoch`: the deadline is
    /// cleared first, so no reader can pair the old master state with a live deadline
    /// after this returns.
    pub(crate) fn set_non_master(&self, role: Role, epoch: u64) {
        debug_assert!(role != Role::Master);
        self.fence_deadline_ns.store(0, Ordering::Release);
        self.state
            .store(epoch << 2 | role.code(), Ordering::Release);
    }

    /// Sets (or clears) the master slot.
    pub(crate) fn set_master_info(&self, m: Option<MasterInfo>) {
        let s = self.master_seq.load(Ordering::Relaxed);
        self.master_seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        match m {
            Some(m) => {
                let (w0, w1) = m.addr.to_words();
                self.master_id.store(u64::from(m.id), Ordering::Relaxed);
                self.master_epoch.store(m.epoch, Ordering::Relaxed);
                self.master_w0.store(w0, Ordering::Relaxed);
                self.master_w1.store(w1, Ordering::Relaxed);
            }
            None => self.master_id.store(0, Ordering::Relaxed),
        }
        self.master_seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// Test hook (not for production code: only the control thread writes the view):
    /// sets role, epoch, fence deadline and master as the control thread would, so a
    /// test can drive a node's role changes without etcd.
    #[doc(hidden)]
    pub fn set_for_test(
        &self,
        role: Role,
        epoch: u64,
        deadline_ns: u64,
        master: Option<MasterInfo>,
    ) {
        self.set_master_info(master);
        if role == Role::Master {
            self.set_master(epoch, deadline_ns);
        } else {
            self.set_non_master(role, epoch);
        }
    }

    pub(crate) fn count_keepalive(&self) {
        self.keepalives.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    fn info(id: u32, epoch: u64) -> MasterInfo {
        MasterInfo {
            id,
            epoch,
            addr: NodeAddr {
                mac: [2, 0, 0, 0, 0, id as u8],
                ip: Ipv4Addr::new(10, 0, 0, id as u8),
                qpn: id * 3,
            },
        }
    }

    #[test]
    fn fence_semantics() {
        let v = ClusterView::new(1);
        assert_eq!(v.state(), (Role::Fenced, 0));
        assert!(!v.may_ack_writes(0));
        v.set_master(1, 1_000);
        assert_eq!(v.write_epoch(999), Some(1));
        assert_eq!(v.write_epoch(1_000), None);
        v.set_deadline(2_000);
        assert!(v.may_ack_writes(1_500));
        v.set_non_master(Role::Replica, 2);
        assert_eq!(v.state(), (Role::Replica, 2));
        assert!(!v.may_ack_writes(0));
        assert_eq!(v.fence_deadline_ns(), 0);
    }

    #[test]
    fn data_and_quorum_wait() {
        let v = ClusterView::new(1);
        assert_eq!(v.data(), (0, DataState::None));
        v.set_data(7, DataState::Live);
        assert_eq!(v.data(), (7, DataState::Live));
        v.set_data(7, DataState::None);
        assert_eq!(v.data(), (0, DataState::None));
        v.set_data(u64::MAX >> 2, DataState::Loaded);
        assert_eq!(v.data(), (u64::MAX >> 2, DataState::Loaded));
        assert_eq!(v.quorum_wait(), None);
        v.set_quorum_wait(Some((0, 2)));
        assert_eq!(v.quorum_wait(), Some((0, 2)));
        v.set_quorum_wait(None);
        assert_eq!(v.quorum_wait(), None);
    }

    #[test]
    fn switchover_requests() {
        let v = ClusterView::new(1);
        assert_eq!(v.take_switchover(), None);
        v.request_switchover(Some(3));
        assert_eq!(v.take_switchover(), Some(Some(3)));
        assert_eq!(v.take_switchover(), None);
        v.request_switchover(None);
        assert_eq!(v.take_switchover(), Some(None));
    }

    /// A reader racing the single writer never sees a torn master slot: every value it
    /// returns is one the writer stored as a whole. (Under a writer that never pauses a
    /// reader may get `None` every time: bounded retries, never a wait.)
    #[test]
    fn master_slot_is_never_torn() {
        let v = Arc::new(ClusterView::new(1));
        let w = {
            let v = v.clone();
            std::thread::spawn(move || {
                for i in 1..50_000u32 {
                    v.set_master_info(Some(info(i % 250 + 1, u64::from(i % 250 + 1))));
                    // Gaps between updates, as in real use (a write per role change), so
                    // reads also get through, not only race.
                    let t = std::time::Instant::now();
                    while t.elapsed() < std::time::Duration::from_micros(2) {
                        std::hint::spin_loop();
                    }
                }
            })
        };
        let mut seen = 0u64;
        while !w.is_finished() {
            if let Some(m) = v.master() {
                assert_eq!(m, info(m.id, u64::from(m.id)), "torn read");
                seen += 1;
            }
        }
        w.join().unwrap();
        assert!(seen > 0);
        v.set_master_info(None);
        assert_eq!(v.master(), None);
    }
}
