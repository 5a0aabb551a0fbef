//! Building a node, phase by phase: the configuration with the command line's
//! overrides, the worker lcores, the port and its queues, one partition (engine and
//! server) per worker, the hand-off rings between workers, and the start-up banner.
//! `main` calls them in order; each phase owns one decision.

use crate::worker::{self, Store};
use crate::Args;
use dataplane::control::tenant_sync;
use dataplane::packet::Identity;
use dataplane::server::{Server, TenantRule};
use dataplane::stats::WorkerStats;
use dpdk::{LcoreId, Mbuf, Mempool, Port, PortConfig, PortQueues, RingConsumer, RingProducer};
use kvconf::{Config, ReplRole};
use kvengine::{Engine, EngineConfig, Region};
use kvops::FunctionRegistry;
use std::time::Instant;

/// Errors of the start-up phases.
pub type StartError = Box<dyn std::error::Error>;

/// The configuration as this process runs it, its replication role, and whether the
/// store lives in hugepages.
pub struct Plan {
    pub cfg: Config,
    pub role: ReplRole,
    pub huge: bool,
}

/// Loads the configuration and applies the command line to it.
pub fn plan(args: &Args) -> Result<Plan, StartError> {
    let mut cfg = Config::load(&args.config)?;
    cfg.apply_overrides(
        kvconf::Role::Dataplane,
        &kvconf::Overrides {
            vdev: args.vdev.clone(),
            file_prefix: args.file_prefix.clone(),
            lcores: args.lcores.clone(),
            mem_mb: args.mem_mb,
        },
    );
    if let Some(every) = args.latency_sample_every {
        cfg.server.latency_sample_every = every;
    }
    let role = args.role.unwrap_or(cfg.replication.role);
    cfg.replication.role = role;
    cfg.replication.validate(role)?;
    if role != ReplRole::Standalone {
        // The replication links are ports of this process too.
        let links = cfg.replication.vdevs.clone();
        cfg.dataplane.vdevs.extend(links);
    }
    let engine_mb = cfg.engine.mem_mb as u32;
    let huge = !args.no_huge
        && kvconf::resolve_hugepages(cfg.dataplane.hugepages, cfg.dataplane.memory_mb + engine_mb)?;
    if huge {
        // The store is carved from EAL memory too.
        cfg.dataplane.memory_mb += engine_mb;
    }
    Ok(Plan { cfg, role, huge })
}

/// One worker per EAL lcore (the main lcore, `None`, is worker 0), each owning a key
/// partition (kvwire::partition); a replicated node keeps `repl_lcore` for its
/// replication lcore.
pub fn worker_lcores(repl_lcore: Option<LcoreId>) -> Vec<Option<LcoreId>> {
    std::iter::once(None)
        .chain(
            dpdk::lcore::workers()
                .filter(|l| Some(*l) != repl_lcore)
                .map(Some),
        )
        .collect()
}

/// The mbuf pool: every frame of the MTU fits one mbuf (jumbo frames: 9 KiB mbufs).
pub fn mbuf_pool(cfg: &Config) -> Result<Mempool, StartError> {
    Ok(Mempool::create_pktmbuf(
        "kvd_pool",
        cfg.dataplane.mbufs,
        256,
        kvconf::mbuf_data_room(cfg.server.mtu),
        dpdk::SOCKET_ID_ANY,
    )?)
}

/// The client-facing port with one rx/tx queue pair per worker; with `rx_intr`, Rx
/// interrupts where its PMD has them (`dpdk::RX_INTR_DRIVERS`), for idle workers to
/// sleep on.
pub fn open_port(
    cfg: &Config,
    nw: usize,
    pool: &Mempool,
    rx_intr: bool,
) -> Result<(Port, PortQueues), StartError> {
    let p = &cfg.dataplane;
    let mtu = cfg.server.mtu;
    let port = Port::by_name(&p.port).map_err(|e| format!("port {:?}: {e}", p.port))?;
    let pcfg = PortConfig {
        nb_rxq: nw as u16,
        nb_txq: nw as u16,
        rxd: p.rxd,
        txd: p.txd,
        mtu: (usize::from(mtu) != kvwire::DEFAULT_MTU).then_some(mtu),
        rx_intr,
        ..PortConfig::default()
    };
    let queues = port.configure(&pcfg, pool).map_err(|e| match e.op {
        "rte_eth_dev_set_mtu" => kvconf::mtu_refused(&p.port, mtu, e),
        _ => e.to_string(),
    })?;
    Ok((port, queues))
}

/// The user functions the configuration names, over the built-in catalog.
pub fn functions(cfg: &Config) -> Result<FunctionRegistry, StartError> {
    let mut registry = FunctionRegistry::new();
    registry
        .load(
            cfg.server.functions.iter().map(|f| (f.id, f.name.as_str())),
            kvops::registry::samples::CATALOG,
        )
        .map_err(|e| format!("server.functions: {e}"))?;
    Ok(registry)
}

/// What every partition shares.
pub struct PartitionSpec<'a> {
    pub cfg: &'a Config,
    pub args: &'a Args,
    pub huge: bool,
    pub socket: dpdk::SocketId,
    pub registry: &'a FunctionRegistry,
    pub ooo: bool,
}

impl PartitionSpec<'_> {
    /// The server's address (the same for every partition).
    fn identity(&self) -> Identity {
        let (p, s) = (&self.cfg.dataplane, &self.cfg.server);
        Identity {
            mac: p.mac_bytes(),
            ip: p.ip,
            qpn: s.qpn,
            qkey: s.qkey,
            region_va: s.request_region_va,
            region_len: s.request_region_len,
            mtu: usize::from(s.mtu),
        }
    }

    /// Store memory of one partition: DPDK hugepage memory when the node runs on
    /// hugepages, else the heap.
    fn region(
        &self,
        w: usize,
        bytes: usize,
    ) -> Result<(Region, Option<dpdk::DpdkRegion>), StartError> {
        if !self.huge {
            return Ok((Region::owned(bytes), None));
        }
        let mut m =
            dpdk::malloc::zmalloc_socket(&format!("kvd_store{w}"), bytes, 2 << 20, self.socket)
                .ok_or("cannot allocate the store from DPDK hugepage memory")?;
        // `m` is moved into `Store` beside the engine (declared after it), so it is
        // freed only after the engine that points into it.
        // SAFETY: `m` is a live DPDK allocation of `bytes` bytes nothing else references.
        let r = unsafe { Region::from_raw(m.as_mut_ptr(), m.len()) };
        Ok((r, Some(m)))
    }

    /// Worker `w`'s partition of `nw`: its engine and server.
    fn store(&self, w: usize, nw: usize) -> Result<Store, StartError> {
        let cfg = self.cfg;
        let mem_bytes = (cfg.engine.mem_mb << 20) / nw;
        let ecfg = EngineConfig {
            mem_bytes,
            hash_index_ratio: cfg.engine.hash_index_ratio,
            inline_threshold: cfg.engine.inline_threshold,
            ..EngineConfig::default()
        };
        let (region, mem) = self.region(w, mem_bytes)?;
        let engine = Engine::new(region, &ecfg).map_err(|e| format!("engine config: {e:?}"))?;
        // Starting PSNs of first connections: a per-worker seed from the clock, so a
        // restarted dataplane does not repeat the previous run's PSNs.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ ((w as u64) << 56);
        let transport = dataplane::server::Transport {
            credits: cfg.server.credits,
            replay_cache_bytes: (cfg.server.replay_cache_kb as usize) << 10,
            seed,
            max_opened: cfg.server.max_connections as usize,
            idle_close_s: cfg.server.connection_idle_s,
        };
        let clients: Vec<(u32, u32)> = cfg.clients.iter().map(|c| (c.qpn, c.rkey)).collect();
        let mut server = Server::with_transport(
            self.identity(),
            &clients,
            engine,
            self.ooo,
            self.registry.clone(),
            transport,
        )
        .map_err(|e| format!("server transport config: {e}"))?;
        server.set_partition(w as u32, nw as u32);
        for c in &cfg.clients {
            let origin = c
                .origin()?
                .map(|(mac, ip)| dataplane::server::Origin { mac, ip });
            server.bind_static(c.qpn, origin);
        }
        server.set_station_kv(self.args.station_kv.unwrap_or(cfg.server.station_kv));
        let rules = tenant_rules(&cfg.tenants)?;
        server.set_tenants(rules, cfg.server.anonymous, &WorkerStats::default());
        Ok(Store {
            server,
            _mem: mem,
            role: Box::new(worker::role::Standalone),
            sync: None,
            bell: None,
        })
    }

    /// Every worker's partition; with several, the table transactions spanning them
    /// use (docs/TRANSACTIONS.md); then the `--load` snapshot.
    pub fn stores(&self, nw: usize) -> Result<Vec<Store>, StartError> {
        let mut stores = (0..nw)
            .map(|w| self.store(w, nw))
            .collect::<Result<Vec<_>, _>>()?;
        if nw > 1 && nw <= dataplane::server::MAX_PARTITIONS {
            let table = dataplane::server::PartitionTable::new(nw)?;
            for s in &mut stores {
                s.server.set_partition_table(table.clone())?;
            }
        }
        if let Some(path) = &self.args.load {
            load_snapshot(path, &mut stores)?;
        }
        Ok(stores)
    }
}

/// `--load`: the snapshot's records into the partitions' engines.
fn load_snapshot(path: &std::path::Path, stores: &mut [Store]) -> Result<(), StartError> {
    let t0 = Instant::now();
    let mut engines: Vec<&mut Engine> = stores.iter_mut().map(|s| s.server.engine_mut()).collect();
    let r =
        dataplane::snapshot::load_into(path, &mut engines).map_err(|e| format!("--load: {e}"))?;
    println!(
        "dataplane: loaded {} records ({} keys, {} B, saved by {} partitions) from {} in {} ms",
        r.records,
        r.keys,
        r.bytes,
        r.saved_partitions,
        path.display(),
        t0.elapsed().as_millis()
    );
    Ok(())
}

/// Per worker: its inbox (one multi-producer ring; `None` with a single worker) and
/// its producers into every other worker's inbox.
pub type HandoffRings = Vec<(Option<RingConsumer<Mbuf>>, Vec<Option<RingProducer<Mbuf>>>)>;

/// The hand-off rings between the workers.
pub fn handoff_rings(nw: usize, socket: dpdk::SocketId) -> Result<HandoffRings, StartError> {
    if nw == 1 {
        return Ok(vec![(None, Vec::new())]);
    }
    let mut inboxes = Vec::with_capacity(nw);
    let mut producers: Vec<Vec<Option<RingProducer<Mbuf>>>> = (0..nw).map(|_| Vec::new()).collect();
    for w in 0..nw {
        let ring = dpdk::Ring::<Mbuf>::create(
            &format!("kvd_handoff{w}"),
            4096,
            socket,
            dpdk::RingMode::MpSc,
        )?;
        for (from, prods) in producers.iter_mut().enumerate() {
            prods.push((from != w).then(|| ring.producer()).transpose()?);
        }
        inboxes.push(Some(ring.consumer()?));
    }
    Ok(inboxes.into_iter().zip(producers).collect())
}

/// The start-up lines: port, server, clients and their partitions, station mode and
/// functions.
pub fn print_banner(
    plan: &Plan,
    args: &Args,
    port: &Port,
    nw: usize,
    ooo: bool,
    registry: &FunctionRegistry,
) {
    let (cfg, p) = (&plan.cfg, &plan.cfg.dataplane);
    let store = if plan.huge {
        "hugepages"
    } else {
        "heap (--no-huge)"
    };
    println!(
        "dataplane: port {} ({}) mac {} ip {} qpn {} clients {} store {} MiB on {} mode {} workers {}",
        port.id().0,
        p.port,
        p.mac,
        p.ip,
        cfg.server.qpn,
        cfg.clients.len(),
        cfg.engine.mem_mb,
        store,
        if args.echo { "echo" } else { "kv" },
        nw
    );
    println!(
        "dataplane: server qpn {} qkey {:#x} request region va {:#x} len {}",
        cfg.server.qpn,
        cfg.server.qkey,
        cfg.server.request_region_va,
        cfg.server.request_region_len
    );
    for c in &cfg.clients {
        println!(
            "dataplane: client qpn {} rkey {:#x} partition {}",
            c.qpn,
            c.rkey,
            kvwire::partition::partition_of_qp(c.qpn, nw as u32)
        );
    }
    let functions: Vec<String> = registry
        .iter()
        .map(|(id, name)| format!("{id}={name}"))
        .collect();
    println!(
        "dataplane: reservation station {}, functions: {}",
        if ooo {
            "out of order (data forwarding)"
        } else {
            "stall on conflict (ooo = false)"
        },
        functions.join(" ")
    );
}

/// Says how sleeping workers learn of a packet: the port's Rx interrupt descriptor
/// (net_tap), memif's ring signal armed around each sleep, or the end of a timed sleep
/// (with the reason memif's could not be reached).
pub fn report_rx_intr(port: &dpdk::Port, rx: &[dpdk::RxQueue]) {
    let driver = port.driver_name().unwrap_or_default();
    let Some(q) = rx.first() else { return };
    if q.intr_fd().is_some() {
        println!("dataplane: idle workers wake on Rx interrupts ({driver})");
    } else if driver == "net_memif" {
        match dpdk::MemifRxIntr::new(q) {
            Ok(_) => {
                println!("dataplane: idle workers wake on memif ring signals, armed per sleep")
            }
            Err(why) => println!(
                "dataplane: idle workers wake after timed sleeps: no memif ring signals ({why})"
            ),
        }
    }
}

/// What idle lcores do (`server.idle`, `--idle`; docs/OPERATIONS.md "Idle lcores").
pub fn idle_policy(plan: &Plan, args: &Args) -> dpdk::IdlePolicy {
    let s = &plan.cfg.server;
    let after = args.idle_yield_polls.unwrap_or(s.idle_yield_polls);
    if after == 0 {
        // `idle_yield_polls: 0` is pure busy polling whatever the policy.
        return dpdk::IdlePolicy::Poll;
    }
    match args.idle.unwrap_or(s.idle) {
        kvconf::IdleMode::Poll => dpdk::IdlePolicy::Poll,
        kvconf::IdleMode::Yield => dpdk::IdleBackoff::new(after).policy(),
        kvconf::IdleMode::Adaptive => dpdk::IdlePolicy::Sleep {
            after,
            quiet_us: s.idle_quiet_us,
            min_us: 1,
            max_us: s.idle_sleep_max_us.max(1),
        },
    }
}

/// The worker loop's settings.
pub fn worker_config(
    plan: &Plan,
    args: &Args,
    deadline: Option<Instant>,
) -> Result<worker::WorkerConfig, StartError> {
    let cfg = &plan.cfg;
    let interval = args.stats_interval.unwrap_or(cfg.server.stats_interval_s);
    Ok(worker::WorkerConfig {
        burst: cfg.dataplane.burst,
        drain_us: cfg.server.tx_drain_us,
        echo: args.echo,
        stats_interval: std::time::Duration::from_secs(interval),
        printed: Vec::new(),
        deadline,
        idle: idle_policy(plan, args),
        inject: crate::inject_config(args)?,
        rnr_backlog: args.rnr_backlog.unwrap_or(worker::TX_BACKLOG),
        latency_sample_every: cfg.server.latency_sample_every,
        mtu: usize::from(cfg.server.mtu),
        rx_intr: !args.no_rx_intr,
        rx_sleep_max_us: args
            .idle_sleep_max_rx_us
            .unwrap_or(cfg.server.idle_sleep_max_rx_us),
    })
}

/// The config's tenants as the workers apply them.
pub fn tenant_rules(tenants: &[kvconf::TenantConfig]) -> Result<Vec<TenantRule>, String> {
    tenants.iter().map(tenant_sync::tenant_rule).collect()
}
