//! The KV-Direct dataplane: request processing ([`server`]) independent of DPDK, so
//! it is tested on any machine, plus per-worker counters ([`stats`]). The binary
//! (`main.rs`, `worker.rs`) moves mbufs between the NIC queues and the server.

#![deny(unsafe_code)]

pub mod server;
pub mod slab_daemon;
pub mod stage;
pub mod stats;
