//! The KV-Direct dataplane: request processing independent of DPDK, so it is tested
//! on any machine, plus per-worker counters ([`stats`]) and the state shared with the
//! control plane ([`control`]). The binary (`main.rs` calling `node.rs`'s phases,
//! `worker.rs` and its roles, `replication.rs`, `telemetry.rs`) moves mbufs between
//! the NIC queues and the server and serves the control plane's telemetry commands.
//! docs/ARCHITECTURE.md traces a request, a replicated write and a transaction through
//! these folders.
//!
//! One request flows one way through the modules:
//!
//! ```text
//! server   admit (wire checks, QP, R_Key) → conn (connected, slot VA, PSN) → decode
//!   ├─ conn      CONNECT → ACCEPT; serve / NAK / RNR NAK / replay by PSN
//!   ├─ chunk     ops of the burst gathered for one engine batch; dependency check
//!   ├─ stage     wire op → station op; the engine as the station's memory stage
//!   └─ respond   results → response frames (built in the response cache) → tx (a TxSink)
//! packet   per-packet types both server and respond use (Identity, PktCtx, Tag)
//! clients  admitted QPs and their connection state (PSNs, replay entries)
//! response_cache  the per-worker response cache (a byte ring of whole frames)
//! tx       TxFrame / TxSink: where response frames go
//! mutation the mutation tap: post-images of applied writes (snapshots, replication)
//! repl     replication: the write gate, completion records, sync holds, apply,
//!          the replication lcore's master and replica logic
//! snapshot save while serving (worker scan + tap → ring → writer thread), --load
//! ```

#![deny(unsafe_code)]

mod chunk;
mod clients;
pub mod control;
pub mod latency;
pub mod mutation;
pub mod packet;
pub mod repl;
mod respond;
mod response_cache;
pub mod server;
pub mod slab_daemon;
pub mod snapshot;
pub mod stage;
pub mod stats;
pub mod tenant_stats;
pub mod tx;
