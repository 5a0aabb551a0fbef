//! Replica groups on Raft (docs/FAILOVER.md): each group of nodes that hold the same
//! data runs raft-rs (TiKV's `raft` crate: `RawNode`, `Ready`, no I/O of its own),
//! driven by [`group::Group`] with our storage and the rules our state machine needs
//! (a leader executes writes before it logs them; snapshots are scans logged as
//! entries; reads within a lease).
//!
//! * [`store`]: the log as raft-rs reads it; snapshots as scans.
//! * [`durable`]: what survives a crash, per fsync policy; [`file`]: it in a file.
//! * [`entry`]: what an entry carries.
//! * [`group`]: the driver: persist before dependent messages, apply committed
//!   entries, the write and read gates, divergence.
//! * [`sim`]: the deterministic simulation of whole groups (seeded network faults,
//!   crashes that keep what each fsync policy made durable, disk loss, freezes,
//!   clock drift, leadership transfers, membership changes) and its checks.
//! * [`lin`]: a linearizability checker for the simulation's and the nemesis's
//!   histories.
//! * [`wire`]: what members send each other over a replication link (HELLO, Raft
//!   messages in fragments).

#![warn(missing_docs)]

pub mod durable;
pub mod entry;
pub mod file;
pub mod group;
pub mod lin;
pub mod sim;
pub mod store;
pub mod wire;

pub use durable::{Durable, FsyncPolicy, MemDisk, Recovered};
pub use group::{Fsm, Group, GroupConfig, Outbox};
