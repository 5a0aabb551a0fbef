//! The replication settings of the model tests: a master and a replica node on a
//! simulated link, with timers sized for its simulated clock.

use dataplane::repl::master::MasterConfig;
use dataplane::repl::replica::ReplicaConfig;
use kvrepl::progress::{GateConfig, Mode, ProbeConfig};
use kvrepl::resync::ReplIds;
use kvrepl::shipper::ShipperConfig;
use std::net::Ipv4Addr;

/// One simulated millisecond.
pub const MS: u64 = 1_000_000;

/// The master's MAC and IP on the replication link.
pub const MASTER_ADDR: ([u8; 6], Ipv4Addr) = ([2, 0, 0, 0, 0x10, 0], Ipv4Addr::new(10, 77, 0, 1));
/// The replica's MAC and IP on the replication link.
pub const REPLICA_ADDR: ([u8; 6], Ipv4Addr) = ([2, 0, 0, 0, 0x10, 1], Ipv4Addr::new(10, 77, 0, 2));

/// A master (node 1, epoch 1) of stream `stream` in `mode`, taking writes with
/// `min_replicas`; `keep_foreign` as a fixed-role master that started empty has it.
pub fn master_config(
    mode: Mode,
    min_replicas: usize,
    stream: u64,
    keep_foreign: bool,
) -> MasterConfig {
    MasterConfig {
        node_id: 1,
        mac: MASTER_ADDR.0,
        ip: MASTER_ADDR.1,
        epoch: 1,
        ids: ReplIds {
            current: stream,
            previous: None,
        },
        start_offset: 0,
        backlog_bytes: 1 << 20,
        sync_bytes: 1 << 20,
        gate: GateConfig {
            mode,
            min_replicas,
            max_lag_ns: 200 * MS,
        },
        probe: ProbeConfig {
            probe_interval_ns: 20 * MS,
            waiting_time_ns: 60 * MS,
        },
        shipper: ShipperConfig {
            rto_ns: 5 * MS,
            ..ShipperConfig::default()
        },
        chain: false,
        keep_foreign,
    }
}

/// A replica (node 2) of the master at [`MASTER_ADDR`] when `configured_master`, else
/// one that asks by broadcast (an etcd-managed node).
pub fn replica_config(configured_master: bool) -> ReplicaConfig {
    ReplicaConfig {
        node_id: 2,
        mac: REPLICA_ADDR.0,
        ip: REPLICA_ADDR.1,
        master: configured_master.then_some(MASTER_ADDR),
        fallback: Vec::new(),
        waiting_time_ns: 60 * MS,
        ack_interval_ns: 2 * MS,
        hello_interval_ns: 10 * MS,
        slot_size: kvwire::repl::write_imm_payload_capacity(kvwire::DEFAULT_MTU) as u32,
        rkey: 0x1234,
    }
}
