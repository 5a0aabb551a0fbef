//! KV-Direct replication core: pure Rust, no DPDK, no threads, no clocks.
//!
//! The dataplane drives these pieces from its lcore loops (every call that
//! needs the time takes an explicit `now_ns`, and nothing on the per-record
//! path allocates):
//!
//! * [`record`]: the post-image record codec shared by the replication
//!   stream, snapshots and the replica's log file.
//! * [`log`]: a worker's SPSC log ring to the replication lcore
//!   ([`log_ring`], [`LogProducer::try_push`], [`LogConsumer::drain`]).
//! * [`backlog`]: the ordered stream with byte offsets and its bounded
//!   backlog ([`Backlog`]).
//! * [`segment`] and [`messages`]: the payloads of the replication link's
//!   frames (framed by `kvwire::repl`): stream segments (RDMA WRITE with
//!   Immediate) and control messages (SEND).
//! * [`shipper`] (master, per replica) and [`applier`] (replica): the
//!   reliable segment stream — window, go-back-N, in-order apply.
//! * [`resync`]: partial or full resync, and the full sync's scan stream.
//! * [`replica_state`]: the master's per-replica state machine.
//! * [`progress`]: probes and failure detection, the write gate
//!   (`min_replicas`, `max_lag`, sync quorum), durable worker positions.
//!
//! * [`snapshot`]: the checksummed snapshot file (header, blocks of records,
//!   trailer), its writer and its verify-then-read reader.
//! * [`aof`]: the replica's append-only log file of the same records, with
//!   an fsync policy and torn-tail recovery.
//!
//! The protocol is specified in `docs/REPLICATION.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod aof;
pub mod applier;
pub mod backlog;
pub mod log;
pub mod messages;
pub mod progress;
pub mod record;
pub mod replica_state;
pub mod resync;
pub mod segment;
pub mod shipper;
pub mod snapshot;

pub use applier::{Applier, Outcome, Reply, Sink, SinkError};
pub use backlog::{random_repl_id, Backlog, ReadError};
pub use log::{log_ring, Drained, LogConsumer, LogItem, LogProducer, PushError};
pub use messages::{Control, Hello, Probe, ProbeReply, Progress, Welcome, WelcomeMode};
pub use progress::{DurableCursor, Gate, GateConfig, GateRules, Liveness, Mode, ProbeConfig};
pub use record::{
    Record, RecordError, RecordReader, GROUP_RECORD_LEN, KIND_DELETE, KIND_GROUP, KIND_PUT,
    KIND_QP_STATE, MAX_RECORD_KEY_LEN, MAX_RECORD_LEN, MAX_RECORD_VALUE_LEN, RECORD_HEADER_LEN,
};
pub use replica_state::{ReplicaEvent, ReplicaState};
pub use resync::{decide, Decision, FullSync, ReplIds};
pub use segment::{parse_segment, SegmentHeader, SegmentKind, SEGMENT_HEADER_LEN};
pub use shipper::{Outgoing, ShipError, Shipper, ShipperConfig};
