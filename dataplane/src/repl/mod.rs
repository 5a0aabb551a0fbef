//! Replication in the dataplane (docs/REPLICATION.md): the pieces the worker lcores
//! and the replication lcore run, over the pure logic of the `kvrepl` crate.
//!
//! * [`apply`]: a replica worker applies the records routed to its partition.

pub mod apply;
