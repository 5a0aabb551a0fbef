//! Multi-key transactions (docs/TRANSACTIONS.md), pure Rust, no DPDK types.
//!
//! A transaction is a KV batch that commits all together or not at all, with compare
//! conditions on its reads (`kvwire::payload::TxReader`, docs/PROTOCOL.md §3.4).
//! [`TxExecutor`] runs one on one partition's store: every op in order against the
//! store as the transaction itself changed it so far (a later GET sees an earlier
//! PUT of the same transaction), conditions checked at their GETs, writes kept as
//! post-images in the executor's arena; then, only if nothing failed, the post-images
//! are applied to the store — and undone from the pre-images if the store runs out of
//! memory half way. The caller runs it between two batches of its worker (nothing
//! else touches the partition meanwhile), so transactions on one partition are
//! serializable in their execution order.
//!
//! Nothing allocates after [`TxExecutor::new`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod exec;

pub use exec::{Outcome, TxExecutor, TxStore, ARENA_BYTES};
