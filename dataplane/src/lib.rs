//! The KV-Direct dataplane: request processing ([`server`]) independent of DPDK, so
//! it is tested on any machine, plus per-worker counters ([`stats`]) and the state
//! shared with the control plane ([`control`]). The binary (`main.rs`, `worker.rs`,
//! `telemetry.rs`) moves mbufs between the NIC queues and the server and serves the
//! control plane's telemetry commands.

#![deny(unsafe_code)]

pub mod control;
mod respond;
pub mod server;
pub mod slab_daemon;
pub mod stage;
pub mod stats;
