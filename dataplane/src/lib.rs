//! The KV-Direct dataplane: request processing independent of DPDK, so it is tested
//! on any machine, plus per-worker counters ([`stats`]) and the state shared with the
//! control plane ([`control`]). The binary (`main.rs`, `worker.rs`, `telemetry.rs`)
//! moves mbufs between the NIC queues and the server and serves the control plane's
//! telemetry commands.
//!
//! One request flows one way through the modules:
//!
//! ```text
//! server   admit (wire checks, QP, R_Key) → conn (connected, slot VA, PSN) → decode
//!   ├─ conn      CONNECT → ACCEPT; serve / NAK / RNR NAK / replay by PSN
//!   ├─ chunk     ops of the burst gathered for one engine batch; dependency check
//!   ├─ stage     wire op → station op; the engine as the station's memory stage
//!   └─ respond   results → response frames (built in the replay cache) → tx (a TxSink)
//! packet   per-packet types both server and respond use (Identity, PktCtx, Tag)
//! clients  admitted QPs and their connection state (PSNs, replay entries)
//! replay   the per-worker response cache (a byte ring of whole frames)
//! tx       TxFrame / TxSink: where response frames go
//! mutation the mutation tap: post-images of applied writes (snapshots, replication)
//! snapshot save while serving (worker scan + tap → ring → writer thread), --load
//! ```

#![deny(unsafe_code)]

mod chunk;
mod clients;
mod completion;
pub mod control;
pub mod gate;
pub mod hold;
pub mod latency;
pub mod mutation;
pub mod packet;
pub mod repl;
mod replay;
mod respond;
pub mod server;
pub mod slab_daemon;
pub mod snapshot;
pub mod stage;
pub mod stats;
pub mod tenant_stats;
pub mod tx;
