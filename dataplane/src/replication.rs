//! Start-up of replication (config `replication`, `--role`): the replication lcore,
//! its links' ports, the rings between it and the workers, the write gate, and the
//! telemetry commands under `/kvd/replication`.

pub mod replicator;

use crate::worker::role::Replica;
use crate::worker::Store;
use dataplane::repl::apply::{Applier, ApplyStats, CompletionKeeper};
use dataplane::repl::cluster::{ClusterNode, ClusterParts};
use dataplane::repl::gate::WriteGate;
use dataplane::repl::link::ReplLogic;
use dataplane::repl::master::{MasterConfig, MasterNode};
use dataplane::repl::replica::{ReplicaConfig, ReplicaNode};
use dataplane::repl::replica_log::{self, LogShared, LogStart};
use dataplane::repl::scan::ScanShared;
use dataplane::repl::status::ReplStatus;
use dataplane::repl::worker_log::ReplLog;
use dpdk::{LcoreId, Mempool, Port, PortConfig};
use kvcluster::records::DataState;
use kvconf::{Config, ReplMode, ReplRole};
use kvrepl::log::log_ring;
use kvrepl::progress::{GateConfig, Mode, ProbeConfig};
use kvrepl::resync::ReplIds;
use kvrepl::shipper::ShipperConfig;
use replicator::Link;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Bytes of each worker's ring to or from the replication lcore.
const WORKER_RING_BYTES: usize = 4 << 20;
/// Bytes of a full sync's scan buffer on a master.
const SYNC_BUFFER_BYTES: usize = 16 << 20;
/// HELLO period of a replica that is not connected.
const HELLO_INTERVAL_MS: u64 = 100;
const MS: u64 = 1_000_000;

/// What the binary launches for replication.
pub struct Replication {
    /// The replication lcore.
    pub lcore: LcoreId,
    /// Its links' queues.
    pub links: Vec<Link>,
    /// Master or replica logic.
    pub logic: Box<dyn ReplLogic + Send>,
    /// What it publishes.
    pub status: Arc<ReplStatus>,
    /// Post-images a master worker's ring refused (a bug if not 0).
    pub lost: Arc<AtomicU64>,
    /// Replica workers' apply counters.
    pub apply: Vec<Arc<ApplyStats>>,
    /// With etcd: the control thread (dropping it leaves the cluster) and its view.
    pub cluster: Option<(kvcluster::ClusterHandle, Arc<kvcluster::ClusterView>)>,
    /// The links' ports, stopped at exit once their queues are gone (a memif port
    /// left started races its peer's disconnect in the EAL's cleanup).
    pub ports: Vec<Port>,
    /// A replica's log file writer: stop it (`stop`) and join it after the
    /// replication lcore stopped, so the file ends synced.
    pub log_writer: Option<LogWriter>,
    /// What the replication lcore sleeps on when idle (`server.idle: adaptive`),
    /// rung by the workers' log rings.
    pub bell: Option<Arc<dpdk::Doorbell>>,
}

/// The EAL lcore the replication lcore runs on: the last one (so the workers keep the
/// first ones), or an error when there is none to spare.
pub fn lcore(role: ReplRole) -> Result<Option<LcoreId>, String> {
    if kvconf::ReplicationSection::lcores_for(role) == 0 {
        return Ok(None);
    }
    dpdk::lcore::workers().last().map(Some).ok_or_else(|| {
        "replication needs one more lcore than the workers (e.g. dataplane.lcores \"0,1\")"
            .to_string()
    })
}

use kvcluster::name_hash as node_hash;

/// Sets up the replication side of a `role` node over `stores` (its workers): ports,
/// rings, gate. `None` for a standalone node.
pub fn setup(
    cfg: &Config,
    role: ReplRole,
    lcore: Option<LcoreId>,
    stores: &mut [Store],
    pool: &Mempool,
    sleeps: bool,
) -> Result<Option<Replication>, Box<dyn std::error::Error>> {
    let Some(lcore) = lcore else { return Ok(None) };
    let r = &cfg.replication;
    let link_addr = r.link.as_ref().ok_or("replication.link is missing")?;
    let mac = kvconf::parse_mac(&link_addr.mac)?;
    let status = Arc::new(ReplStatus::default());
    // Completion records before the log file, which may hold some.
    if let Some(etcd) = &r.etcd {
        for s in stores.iter_mut() {
            s.server.set_completion_records(etcd.completion_records);
        }
    }
    // The log file first: a corrupt one stops the start before any link is up.
    let (log, log_writer) = replica_log_setup(cfg, role, stores, &status)?;
    let (links, names, ports) = open_links(&r.vdevs, pool)?;
    let _ = status.link_names.set(names.clone());
    let gate = Arc::new(WriteGate::writable());
    for s in stores.iter_mut() {
        s.server.set_write_gate(gate.clone());
    }
    let node_id = node_hash(&r.node_id);
    let mut parts = LogicParts {
        mc: master_config(cfg, node_id, mac, link_addr.ip),
        rc: replica_config(cfg, node_id, mac, link_addr.ip)?,
        links: links.len(),
        names,
        gate,
        status: status.clone(),
        lost: Arc::new(AtomicU64::new(0)),
        apply: Vec::new(),
        log,
        // Idle lcores sleep (`server.idle: adaptive`): their producers wake them.
        bell: if sleeps {
            Some(dpdk::Doorbell::new()?)
        } else {
            None
        },
    };
    let (logic, cluster): (Box<dyn ReplLogic + Send>, _) = match &r.etcd {
        Some(etcd) => {
            let (node, cluster) = cluster_logic(cfg, etcd, role, stores, &mut parts)?;
            (node, Some(cluster))
        }
        None => match fixed_logic(cfg, role, stores, &mut parts)? {
            Some(node) => (node, None),
            None => return Ok(None),
        },
    };
    register_telemetry(&status, cluster.as_ref().map(|(_, v)| v.clone()))?;
    let bells = parts
        .bell
        .iter()
        .map(|b| ("replication".to_string(), b.clone()));
    let worker_bells = stores
        .iter()
        .enumerate()
        .filter_map(|(k, s)| s.bell.as_ref().map(|b| (format!("worker{k}"), b.clone())));
    let _ = status.bells.set(bells.chain(worker_bells).collect());
    Ok(Some(Replication {
        lcore,
        links,
        logic,
        status,
        lost: parts.lost,
        apply: parts.apply,
        cluster,
        ports,
        log_writer,
        bell: parts.bell,
    }))
}

/// The links (queues), their names and their ports.
type OpenedLinks = (Vec<Link>, Vec<String>, Vec<Port>);

/// The etcd control thread (dropping it leaves the cluster) and its view.
type Cluster = (kvcluster::ClusterHandle, Arc<kvcluster::ClusterView>);

/// Opens the replication links' ports, one queue pair each. A memif client dials
/// its server only when its port starts: its port is started here if the peer is
/// up, else later by the replication lcore, which also redials it whenever the link
/// dies (the peer may come back).
fn open_links(vdevs: &[String], pool: &Mempool) -> Result<OpenedLinks, Box<dyn std::error::Error>> {
    let (mut links, mut names, mut ports) = (Vec::new(), Vec::new(), Vec::new());
    for v in vdevs {
        let name = v.split(',').next().unwrap_or(v);
        let port = Port::by_name(name).map_err(|e| format!("replication port {name:?}: {e}"))?;
        let memif_client = v.starts_with("net_memif") && v.split(',').any(|kv| kv == "role=client");
        let q = port.configure(
            &PortConfig {
                nb_rxq: 1,
                nb_txq: 1,
                rxd: 1024,
                txd: 1024,
                start: !memif_client,
                ..PortConfig::default()
            },
            pool,
        )?;
        let (Some(mut rxq), Some(mut txq)) = (q.rx.into_iter().next(), q.tx.into_iter().next())
        else {
            return Err(format!("replication port {name:?} gave no queue").into());
        };
        let socket = crate::replication::replicator::memif_socket(v);
        let started =
            !memif_client || dial_at_start(name, &port, socket.as_deref(), &mut rxq, &mut txq);
        links.push(Link {
            rxq,
            txq,
            redial: memif_client.then_some((port, socket)),
            started,
        });
        names.push(name.to_string());
        ports.push(port);
    }
    Ok((links, names, ports))
}

/// At start-up a memif client dials its peer at once when the peer's socket is
/// there (nodes are started in order, each once the one before is ready); later
/// dials wait for the peer to settle (`replicator::peer_settled`). Whether the port
/// started.
fn dial_at_start(
    name: &str,
    port: &Port,
    socket: Option<&std::path::Path>,
    rxq: &mut dpdk::RxQueue,
    txq: &mut dpdk::TxQueue,
) -> bool {
    let there = socket.is_none_or(std::path::Path::exists);
    match there.then(|| port.restart(rxq, txq)) {
        Some(Ok(())) => true,
        Some(Err(e)) => {
            eprintln!(
                "dataplane: replication link {name}: peer not reachable yet ({e}); \
                 the replication lcore dials it again"
            );
            false
        }
        None => {
            eprintln!(
                "dataplane: replication link {name}: peer not up; the replication \
                 lcore dials it once it is (up for {} s)",
                crate::replication::replicator::PEER_SETTLE_S
            );
            false
        }
    }
}

/// What the replication logic of either kind is built from.
struct LogicParts {
    mc: MasterConfig,
    rc: ReplicaConfig,
    /// Number of links.
    links: usize,
    names: Vec<String>,
    gate: Arc<WriteGate>,
    status: Arc<ReplStatus>,
    /// Post-images the workers' log rings refused.
    lost: Arc<AtomicU64>,
    /// Replica workers' apply counters (filled by `replica_rings`).
    apply: Vec<Arc<ApplyStats>>,
    log: Option<LogStart>,
    /// The replication lcore's doorbell (idle lcores sleep): the workers' log rings
    /// ring it, and each replica worker gets its own, rung by its apply ring.
    bell: Option<Arc<dpdk::Doorbell>>,
}

/// An etcd-managed node: its role decided by etcd. Every worker keeps both a log
/// ring (master) and an apply ring (replica); the node starts as a replica with no
/// master. A node that can fail over logs (as master) and keeps (as replica)
/// completion records (turned on by [`setup`]), so a client's retry across a failover
/// is not executed twice.
fn cluster_logic(
    cfg: &Config,
    etcd: &kvconf::EtcdSection,
    role: ReplRole,
    stores: &mut [Store],
    p: &mut LogicParts,
) -> Result<(Box<dyn ReplLogic + Send>, Cluster), Box<dyn std::error::Error>> {
    let r = &cfg.replication;
    // Only the master answers reads (docs/FAILOVER.md "What clients do").
    p.gate.set_reads_follow_writes(!r.replica_reads);
    let (logs, scans) = master_rings(stores, &p.lost, r.mode, &p.bell);
    let (rings, consumed) = replica_rings(stores, &mut p.apply, p.bell.is_some())?;
    let addr = kvcluster::NodeAddr {
        mac: kvconf::parse_mac(&cfg.dataplane.mac)?,
        ip: cfg.dataplane.ip,
        qpn: cfg.server.qpn,
    };
    let size = etcd_size(etcd, r.vdevs.len());
    let ccfg = kvcluster::ClusterConfig::new(
        etcd.endpoints.clone(),
        &etcd.cluster,
        cluster_id(&r.node_id),
        addr,
    )
    .with_lease_ttl_ms(etcd.lease_ttl_ms)
    // Who may be elected, and when (docs/FAILOVER.md "Election safety"): every
    // node is linked to every other, so the links say the cluster's size.
    .with_quorum(size, etcd_quorum(etcd, r, size))
    .with_rank(election_rank(r, role));
    let (handle, view) = kvcluster::ClusterHandle::start(ccfg)?;
    // A chain node relays its stream to its successor while it is a replica
    // (as in a fixed chain); elected, it becomes the head.
    let relay = (r.topology == kvconf::Topology::Chain).then(|| {
        let rs = Arc::new(ReplStatus::default());
        let _ = rs.link_names.set(p.names.clone());
        let _ = p.status.relay.set(rs.clone());
        (relay_config(&p.mc), rs)
    });
    let node = ClusterNode::new(ClusterParts {
        master: p.mc.clone(),
        replica: p.rc.clone(),
        links: p.links,
        logs,
        scans,
        rings,
        consumed,
        gate: p.gate.clone(),
        status: p.status.clone(),
        view: view.clone(),
        log: p.log.take(),
        relay,
    })?;
    Ok((Box::new(node), (handle, view)))
}

/// The election rank: a chain node's position (its configured predecessors: on
/// equal offsets the dead head's successor is elected before the nodes behind it);
/// in a star the configured master first (it wins the cluster's first election),
/// the replicas after it, equal among themselves.
fn election_rank(r: &kvconf::ReplicationSection, role: ReplRole) -> u32 {
    if r.topology == kvconf::Topology::Chain {
        (usize::from(r.master.is_some()) + r.fallback.len()) as u32
    } else {
        u32::from(role != ReplRole::Master)
    }
}

/// A node whose role the configuration fixes; `None` for a standalone one.
fn fixed_logic(
    cfg: &Config,
    role: ReplRole,
    stores: &mut [Store],
    p: &mut LogicParts,
) -> Result<Option<Box<dyn ReplLogic + Send>>, Box<dyn std::error::Error>> {
    let r = &cfg.replication;
    match role {
        ReplRole::Master => {
            // A fixed master that starts with nothing (restarted after a crash
            // without --load) must not erase its replicas' data.
            let empty = stores
                .iter()
                .all(|s| s.server.engine().stats().stored_kvs == 0);
            let mc = MasterConfig {
                keep_foreign: empty,
                ..p.mc.clone()
            };
            let (logs, scans) = master_rings(stores, &p.lost, r.mode, &p.bell);
            let node = MasterNode::new(
                mc,
                p.links,
                logs,
                scans,
                p.status.clone(),
                p.gate.clone(),
                0,
            )?;
            Ok(Some(Box::new(node)))
        }
        ReplRole::Replica => {
            let (rings, consumed) = replica_rings(stores, &mut p.apply, p.bell.is_some())?;
            let mut node = ReplicaNode::new(
                p.rc.clone(),
                p.links,
                rings,
                consumed,
                p.status.clone(),
                p.gate.clone(),
            )?;
            if r.topology == kvconf::Topology::Chain {
                node.set_relay(fixed_relay(stores, p)?);
            }
            if let Some(LogStart { feed, resume }) = p.log.take() {
                node.set_log(feed);
                if let Some((id, epoch, offset)) = resume {
                    node.resume_at(id, epoch, offset, DataState::Loaded);
                }
            }
            Ok(Some(Box::new(node)))
        }
        ReplRole::Standalone => Ok(None),
    }
}

/// A fixed chain node's relay of what it applies to its successor. Its workers' log
/// rings carry only scans (a successor's full sync): their live logging stays
/// paused.
fn fixed_relay(
    stores: &mut [Store],
    p: &LogicParts,
) -> Result<MasterNode, Box<dyn std::error::Error>> {
    let (logs, scans) = master_rings(stores, &p.lost, ReplMode::Async, &p.bell);
    for s in &scans {
        s.paused.store(true, std::sync::atomic::Ordering::Release);
    }
    let rs = Arc::new(ReplStatus::default());
    let _ = rs.link_names.set(p.names.clone());
    let relay = MasterNode::new(
        relay_config(&p.mc),
        p.links,
        logs,
        scans,
        rs.clone(),
        Arc::new(WriteGate::writable()),
        0,
    )?
    .into_relay();
    let _ = p.status.relay.set(rs);
    Ok(relay)
}

/// `/kvd/replication` (the status) and `/kvd/replication/failover` (a planned
/// switchover, with etcd).
fn register_telemetry(
    status: &Arc<ReplStatus>,
    view: Option<Arc<kvcluster::ClusterView>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let st = status.clone();
    dpdk::telemetry::register_cmd(
        "/kvd/replication",
        "Replication: role, epoch, stream offsets, per link the peer's state, offsets, lag, syncs",
        move |_, d| crate::telemetry::json_into(d, &st.to_json()),
    )?;
    dpdk::telemetry::register_cmd(
        "/kvd/replication/failover",
        "Planned switchover to a replica (needs etcd). Param: node name (or none: the best replica)",
        move |params, d| {
            let Some(v) = &view else {
                let _ = d.add_str(
                    "error",
                    "planned switchover needs leadership in etcd (replication.etcd is not set)",
                );
                return;
            };
            if v.role() != kvcluster::Role::Master {
                let _ = d.add_str("error", "this node is not the master");
                return;
            }
            let p = Some(params.trim()).filter(|p| !p.is_empty());
            v.request_switchover(p.map(cluster_id));
            let _ = d.add_str("requested", p.unwrap_or("any"));
        },
    )?;
    Ok(())
}

/// A replica log's writer thread, with what it publishes.
type LogWriter = (Arc<LogShared>, std::thread::JoinHandle<()>);

/// With `replication.log_file` on a node that can be a replica: loads the file into
/// the engines (a corrupt file is an error: the dataplane does not start) and starts
/// its writer thread. Returns the feed with the position to resume from.
fn replica_log_setup(
    cfg: &Config,
    role: ReplRole,
    stores: &mut [Store],
    status: &Arc<ReplStatus>,
) -> Result<(Option<LogStart>, Option<LogWriter>), String> {
    let r = &cfg.replication;
    let Some(path) = &r.log_file else {
        return Ok((None, None));
    };
    if r.etcd.is_none() && role != ReplRole::Replica {
        println!("dataplane: replication.log_file is a replica's: not used by a fixed {role:?}");
        return Ok((None, None));
    }
    let policy = match r.fsync {
        kvconf::FsyncPolicy::Always => kvrepl::aof::FsyncPolicy::Always,
        kvconf::FsyncPolicy::Everysec => kvrepl::aof::FsyncPolicy::EverySec,
        kvconf::FsyncPolicy::No => kvrepl::aof::FsyncPolicy::No,
    };
    let opened = replica_log::open(path, policy)?;
    let mut resume = None;
    let mut current = None;
    if let Some(o) = opened {
        let t0 = std::time::Instant::now();
        // Completion records go to the worker serving their QP, as the replication
        // lcore routes them (`repl::group_route`).
        let (mut engines, mut keepers): (Vec<_>, Vec<_>) = stores
            .iter_mut()
            .map(|s| {
                let (engine, _, keeper) = s.server.apply_parts();
                (engine, keeper)
            })
            .unzip();
        let n = keepers.len() as u32;
        let mut restore = |qpn: u32, blob: &[u8]| {
            if let Some(k) = keepers.get_mut((qpn % n.max(1)) as usize) {
                k.record(qpn, blob);
            }
        };
        let rep = dataplane::snapshot::load_log_into(path, &mut engines, &mut restore)
            .map_err(|e| format!("replica log: {e}"))?;
        let (id, epoch, offset) = o.position;
        println!(
            "dataplane: replica log {}: loaded {} records ({} keys) in {} ms; stream {id:016x} epoch {epoch} offset {offset}{}",
            path.display(),
            rep.records,
            rep.keys,
            t0.elapsed().as_millis(),
            if o.truncated_bytes > 0 {
                format!(" (cut a torn last block of {} B)", o.truncated_bytes)
            } else {
                String::new()
            }
        );
        if id != 0 {
            resume = Some(o.position);
        }
        current = Some(o.writer);
    }
    let (feed, thread) =
        replica_log::spawn_writer(path.clone(), policy, stores.len() as u32, current)
            .map_err(|e| format!("replica log writer: {e}"))?;
    let shared = feed.shared().clone();
    let _ = status.log.set((path.display().to_string(), shared.clone()));
    Ok((Some(LogStart { feed, resume }), Some((shared, thread))))
}

/// The node's id in etcd ([`kvcluster::node_id_from_name`]).
pub fn cluster_id(name: &str) -> u32 {
    kvcluster::node_id_from_name(name)
}

/// The master's settings from the config (epoch 1, a new stream from offset 0;
/// a promoted node sets its own).
fn master_config(
    cfg: &Config,
    node_id: u64,
    mac: kvwire::MacAddr,
    ip: std::net::Ipv4Addr,
) -> MasterConfig {
    let r = &cfg.replication;
    MasterConfig {
        node_id,
        mac,
        ip,
        epoch: 1,
        ids: ReplIds {
            current: kvrepl::backlog::random_repl_id(),
            previous: None,
        },
        start_offset: 0,
        backlog_bytes: (r.backlog_mb as usize) << 20,
        sync_bytes: SYNC_BUFFER_BYTES,
        gate: GateConfig {
            mode: match r.mode {
                ReplMode::Async => Mode::Async,
                ReplMode::Sync => Mode::Sync,
            },
            min_replicas: r.min_replicas as usize,
            max_lag_ns: r.max_lag_ms * MS,
        },
        probe: ProbeConfig {
            probe_interval_ns: r.probe_interval_ms * MS,
            waiting_time_ns: r.waiting_time_ms * MS,
        },
        shipper: ShipperConfig::default(),
        chain: r.topology == kvconf::Topology::Chain,
        keep_foreign: false,
    }
}

/// The replica's settings from the config. With etcd the master is found by
/// broadcasting HELLO on every link (whoever is master answers).
/// A chain replica's relay: it ships what it applies on to its successor, whatever
/// the chain's write mode (the head's gate decides when a write is answered).
fn relay_config(mc: &MasterConfig) -> MasterConfig {
    let mut c = mc.clone();
    c.gate.mode = kvrepl::progress::Mode::Async;
    c.gate.min_replicas = 0;
    c.chain = false;
    c
}

fn replica_config(
    cfg: &Config,
    node_id: u64,
    mac: kvwire::MacAddr,
    ip: std::net::Ipv4Addr,
) -> Result<ReplicaConfig, Box<dyn std::error::Error>> {
    let r = &cfg.replication;
    let chain = r.topology == kvconf::Topology::Chain;
    // With etcd a star's replicas ask whoever answers (the elected master); a
    // chain's follow their predecessor as configured.
    let master = match (&r.master, &r.etcd) {
        (Some(m), None) => Some((kvconf::parse_mac(&m.mac)?, m.ip)),
        (Some(m), Some(_)) if chain => Some((kvconf::parse_mac(&m.mac)?, m.ip)),
        _ => None,
    };
    let mut fallback: Vec<_> = r
        .fallback
        .iter()
        .map(|a| Ok((kvconf::parse_mac(&a.mac)?, a.ip)))
        .collect::<Result<_, kvconf::ConfigError>>()?;
    if chain && r.etcd.is_some() && master.is_some() {
        // The head may have been elected anywhere down the chain: when every
        // predecessor is silent, ask whoever answers (the head, or a relay, which
        // redirects down to the tail).
        fallback.push(([0xff; 6], std::net::Ipv4Addr::BROADCAST));
    }
    Ok(ReplicaConfig {
        node_id,
        mac,
        ip,
        master,
        fallback,
        waiting_time_ns: r.waiting_time_ms * MS,
        ack_interval_ns: r.ack_interval_ms * MS,
        hello_interval_ns: HELLO_INTERVAL_MS * MS,
        slot_size: kvwire::repl::write_imm_payload_capacity(kvwire::DEFAULT_MTU) as u32,
        rkey: (kvrepl::backlog::random_repl_id() as u32) | 1,
    })
}

/// The waker of a ring whose consumer sleeps on `bell`.
fn waker(bell: &Option<Arc<dpdk::Doorbell>>) -> Option<kvrepl::log::Waker> {
    bell.clone()
        .map(|b| Arc::new(move || b.ring()) as kvrepl::log::Waker)
}

/// Gives every worker a log ring into the replication lcore (a master's tap); the
/// rings wake the replication lcore on `bell`.
fn master_rings(
    stores: &mut [Store],
    lost: &Arc<AtomicU64>,
    mode: ReplMode,
    bell: &Option<Arc<dpdk::Doorbell>>,
) -> (Vec<kvrepl::log::LogConsumer>, Vec<Arc<ScanShared>>) {
    let (mut logs, mut scans) = (Vec::new(), Vec::new());
    for s in stores.iter_mut() {
        let (mut p, c) = log_ring(WORKER_RING_BYTES);
        p.set_waker(waker(bell));
        let shared = Arc::new(ScanShared::default());
        s.server.set_mutation_sink(Some(Box::new(ReplLog::new(
            p,
            shared.clone(),
            lost.clone(),
        ))));
        if mode == ReplMode::Sync {
            s.sync = Some(shared.clone());
        }
        logs.push(c);
        scans.push(shared);
    }
    (logs, scans)
}

/// Gives every worker an apply ring from the replication lcore (a replica's); with
/// `sleeps`, each worker sleeps on a doorbell its ring rings.
fn replica_rings(
    stores: &mut [Store],
    apply: &mut Vec<Arc<ApplyStats>>,
    sleeps: bool,
) -> std::io::Result<(Vec<kvrepl::log::LogProducer>, Vec<Arc<ApplyStats>>)> {
    let (mut rings, mut consumed, mut appliers) = (Vec::new(), Vec::new(), Vec::new());
    for s in stores.iter_mut() {
        let (mut p, c) = log_ring(WORKER_RING_BYTES);
        if sleeps {
            if s.bell.is_none() {
                s.bell = Some(dpdk::Doorbell::new()?);
            }
            p.set_waker(waker(&s.bell));
        }
        let st = Arc::new(ApplyStats::default());
        appliers.push(Applier::new(c, st.clone()));
        rings.push(p);
        consumed.push(st.clone());
        apply.push(st);
    }
    for (s, mut a) in stores.iter_mut().zip(appliers) {
        // A transaction spanning partitions waits in one ring for the others.
        a.set_peers(consumed.clone());
        s.set_role(Box::new(Replica(a)))
            .map_err(std::io::Error::other)?;
    }
    Ok((rings, consumed))
}

/// The cluster's control-side thread (not an lcore): prints the control thread's
/// events (role changes), applies the cluster's tenants from etcd as they change
/// (`dataplane::control::tenant_sync`), and at `quit` leaves the cluster gracefully (dropping
/// the handle revokes the lease).
pub fn spawn_cluster_thread(
    handle: kvcluster::ClusterHandle,
    view: Arc<kvcluster::ClusterView>,
    control: Arc<dataplane::control::ControlState>,
    quit: &'static std::sync::atomic::AtomicBool,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("kvd-cluster".into())
        .spawn(move || {
            let mut tenants = dataplane::control::tenant_sync::TenantSync::default();
            while !quit.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(ev) = handle.next_event(std::time::Duration::from_millis(100)) {
                    println!("dataplane: cluster: {:?}", ev.event);
                }
                tenants.poll(&view, &control);
            }
            handle.shutdown();
        })
}

/// The cluster's size: `replication.etcd.nodes`, else the replication links + 1.
fn etcd_size(etcd: &kvconf::EtcdSection, links: usize) -> u32 {
    etcd.nodes
        .unwrap_or_else(|| u32::try_from(links + 1).unwrap_or(u32::MAX))
}

/// The election quorum: `replication.etcd.election_quorum`, else the one the
/// replication mode makes safe ([`kvcluster::election::quorum_for`]).
fn etcd_quorum(etcd: &kvconf::EtcdSection, r: &kvconf::ReplicationSection, size: u32) -> u32 {
    etcd.election_quorum.unwrap_or_else(|| {
        let sync = (r.mode == ReplMode::Sync).then_some(r.min_replicas);
        kvcluster::election::quorum_for(size, sync)
    })
}
