//! KV-Direct replication core: pure Rust, no DPDK, no threads, no clocks.
//!
//! The dataplane drives these pieces from its lcore loops (every call takes
//! an explicit `now_ns` where time matters, and nothing on the per-record
//! path allocates):
//!
//! * [`record`]: the post-image record codec shared by the replication
//!   stream, snapshots and the replica's log file.
//!
//! The protocol is specified in `docs/REPLICATION.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod applier;
pub mod backlog;
pub mod control;
pub mod log;
pub mod record;
pub mod segment;
pub mod shipper;

pub use record::{
    Record, RecordError, RecordReader, KIND_DELETE, KIND_PUT, KIND_QP_STATE, MAX_RECORD_KEY_LEN,
    MAX_RECORD_LEN, MAX_RECORD_VALUE_LEN, RECORD_HEADER_LEN,
};
