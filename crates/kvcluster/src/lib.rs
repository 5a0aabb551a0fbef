//! Cluster control plane of the KV-Direct appliance: membership, leader election and
//! write fencing through etcd (issue 14, item 7; docs/FAILOVER.md).
//!
//! A node starts a control thread with [`ClusterHandle::start`]. The thread runs a
//! current-thread tokio runtime with the `etcd-client` crate: it keeps the node's lease
//! alive, publishes the node's member key, watches the cluster, campaigns when the master
//! is gone and it is the preferred replica, and carries out planned switchovers. The
//! dataplane's lcores never wait on it: they read the [`ClusterView`] (plain atomics) —
//! role, epoch, master address, and [`ClusterView::may_ack_writes`], the write fence — and
//! write their stream offset and switchover requests into it. The dataplane's own
//! control thread polls [`ClusterHandle::try_event`] for role changes.
//!
//! Clients find the master with [`discover_master`].
//!
//! ```no_run
//! use kvcluster::{ClusterConfig, ClusterHandle, NodeAddr, mono_now_ns};
//! let addr = NodeAddr { mac: [2, 0, 0, 0, 0, 1], ip: "10.0.0.1".parse().unwrap(), qpn: 1 };
//! let cfg = ClusterConfig::new(vec!["http://127.0.0.1:2379".into()], "demo", 1, addr);
//! let (handle, view) = ClusterHandle::start(cfg).unwrap();
//! // on an lcore, once per burst:
//! if let Some(epoch) = view.write_epoch(mono_now_ns()) {
//!     // apply and acknowledge writes, stamped with `epoch`
//! }
//! # drop(handle);
//! ```

mod config;
mod discover;
pub mod election;
mod handle;
pub mod records;
mod session;
mod tenants;
mod view;

pub use config::{name_hash, node_id_from_name, ClusterConfig, Keys, NodeAddr};
pub use discover::{
    chain_order, discover_master, discover_master_async, force_election, list_members,
};
pub use handle::ClusterHandle;
pub use tenants::{delete_tenant, list_tenants, put_tenant};
pub use view::{ClusterView, MasterInfo, Role};

use std::fmt;

/// Errors of the cluster control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterError {
    /// A configuration value is out of range.
    Config(String),
    /// etcd could not be reached or answered with an error.
    Etcd(String),
    /// A value in etcd is malformed.
    Decode(String),
    /// The control thread could not be started.
    Thread(String),
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::Config(m) => write!(f, "cluster config: {m}"),
            ClusterError::Etcd(m) => write!(f, "etcd: {m}"),
            ClusterError::Decode(m) => write!(f, "malformed value in etcd: {m}"),
            ClusterError::Thread(m) => write!(f, "control thread: {m}"),
        }
    }
}

impl std::error::Error for ClusterError {}

/// Why a master stopped acknowledging writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FenceReason {
    /// The fence deadline passed before a lease renewal was answered (the mastership may
    /// come back if a later renewal succeeds before the lease expires).
    LeaseNotRenewed,
    /// etcd said the lease is gone.
    LeaseLost,
    /// A planned switchover is under way or done.
    Handover,
    /// The leader key is no longer this node's, or a higher epoch exists.
    Superseded,
    /// The control thread was stopped.
    Stopped,
}

/// A role change or notice from the control thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterEvent {
    /// This node won an election (or regained its fence after a late renewal) and may
    /// acknowledge writes at `epoch` while [`ClusterView::may_ack_writes`] holds.
    BecameMaster {
        /// The epoch to stamp on writes.
        epoch: u64,
    },
    /// This node follows `master` at `epoch`.
    BecameReplica {
        /// The master.
        master: MasterInfo,
        /// Its epoch.
        epoch: u64,
    },
    /// This node was master at `epoch` and no longer acknowledges writes.
    Fenced {
        /// The epoch it served.
        epoch: u64,
        /// Why.
        reason: FenceReason,
    },
    /// A planned switchover did not happen; the master (if still master) goes on.
    SwitchoverAborted {
        /// The requested target (`None`: any).
        target: Option<u32>,
        /// Why.
        reason: String,
    },
    /// etcd could not be reached or failed; the control thread retries with back-off.
    EtcdUnavailable {
        /// The error.
        error: String,
    },
    /// A session is up again after [`ClusterEvent::EtcdUnavailable`]: etcd answered,
    /// the lease is kept alive and the cluster prefix watched.
    EtcdReconnected {
        /// Failed attempts since the last session.
        failures: u32,
    },
}

/// An event with the CLOCK_MONOTONIC time it was raised at ([`mono_now_ns`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedEvent {
    /// When, in [`mono_now_ns`] nanoseconds.
    pub at_ns: u64,
    /// What.
    pub event: ClusterEvent,
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of the write fence. It is system-wide, so
/// times taken in different processes on one machine compare. (A vDSO call, no system
/// call; an lcore reads it once per burst, or converts its TSC reading to it.)
#[inline]
pub fn mono_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn mono_clock_moves_forward() {
        let a = super::mono_now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = super::mono_now_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
    }
}
