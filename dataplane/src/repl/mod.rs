//! Replication in the dataplane (docs/REPLICATION.md): the pieces the worker lcores
//! and the replication lcore run, over the pure logic of the `kvrepl` crate.
//!
//! * [`apply`]: a replica worker applies the records routed to its partition.
//! * [`cluster`]: a node whose role etcd decides (promotion, demotion, fencing).
//! * `completion`: completion records — a master logs each write's response, a
//!   replica keeps them, so a client retrying across a failover gets the answer
//!   instead of a second execution.
//! * [`gate`]: whether a node takes writes (and reads) now: its role, fencing.
//! * [`hold`]: a sync master's held responses, released once the replicas have the
//!   writes.
//! * [`group_route`]: a replica routes records to its workers, transactions whole.
//! * [`link`]: the replication logic's frames in and out, independent of DPDK.
//! * [`scan`]: a master worker's scan of its engine for a full sync.
//! * [`status`]: what the replication lcore publishes for operators.
//! * [`master`], [`replica`]: the replication lcore's logic on each role.
//! * [`worker_log`]: a master worker's tap into its replication log ring.

pub mod apply;
pub mod cluster;
pub(crate) mod completion;
pub mod gate;
pub mod group_route;
pub mod hold;
pub mod link;
pub mod master;
pub mod replica;
pub mod replica_log;
pub mod scan;
pub mod status;
pub mod worker_log;

/// An order-independent digest of an engine's contents: the wrapping sum over its
/// KVs of a 64-bit FNV-1a hash of key, a separator and value. Two nodes with the same
/// KVs (whatever their partitioning) have the same digest; used by the replication
/// tests to compare a replica with its master key by key.
pub fn contents_digest(engine: &kvengine::Engine) -> u64 {
    let mut sum = 0u64;
    engine.for_each(|k, v| {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for &b in k.iter().chain([0xffu8, k.len() as u8].iter()).chain(v) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        sum = sum.wrapping_add(h);
    });
    sum
}
