//! Replication in the dataplane (docs/REPLICATION.md): the pieces the worker lcores
//! and the replication lcore run, over the pure logic of the `kvrepl` crate.
//!
//! * [`apply`]: a replica worker applies the records routed to its partition.
//! * [`link`]: the replication logic's frames in and out, independent of DPDK.
//! * [`scan`]: a master worker's scan of its engine for a full sync.
//! * [`status`]: what the replication lcore publishes for operators.

pub mod apply;
pub mod link;
pub mod master;
pub mod replica;
pub mod scan;
pub mod status;
