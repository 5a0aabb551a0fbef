//! The node's phases, in the order `main` calls them: [`Node::open`] (config, EAL,
//! mbuf pool, port, partitions, replication), [`Control::start`] (counters, slab
//! daemon, telemetry), [`Node::run`] (the workers on their lcores and the replication
//! loop until Ctrl-C or the deadline) and [`Node::finish`] (threads joined, the final
//! report, ports stopped).

use crate::replication::{self, replicator};
use crate::{report, startup, telemetry, worker, Args, QUIT};
use dataplane::control::ControlState;
use dataplane::slab_daemon::SlabDaemon;
use dataplane::stats::WorkerStats;
use dpdk::{Eal, Mempool};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error>;

/// An opened node: its port, partitions and replication, not yet running. Field
/// order is drop order: the EAL goes last.
pub struct Node {
    plan: startup::Plan,
    worker_lcores: Vec<Option<dpdk::LcoreId>>,
    pool: Arc<Mempool>,
    stores: Vec<worker::Store>,
    rings: Option<startup::HandoffRings>,
    queues: Option<dpdk::PortQueues>,
    repl: Option<replication::Replication>,
    port: dpdk::Port,
    _eal: Eal,
}

/// The node's control side: counters, the slab daemon and the control state the
/// telemetry endpoints and the workers share.
pub struct Control {
    stats: Vec<Arc<WorkerStats>>,
    slab: SlabDaemon,
    ctl: Arc<ControlState>,
    wcfg: worker::WorkerConfig,
    deadline: Option<Instant>,
    slab_thread: std::thread::JoinHandle<()>,
}

/// What [`Node::run`] leaves to [`Node::finish`].
pub struct Ran {
    stores: Vec<worker::Store>,
    repl_figures: Option<report::ReplFigures>,
    repl_ports: Option<Vec<dpdk::Port>>,
}

impl Node {
    /// Config and flags, the EAL, the mbuf pool, the port with a queue pair per
    /// worker, each worker's partition (and doorbell), the hand-off rings, and
    /// replication set up (not started).
    pub fn open(args: &Args) -> Result<Node, Error> {
        let plan = startup::plan(args)?;
        let cfg = &plan.cfg;
        let eal_args = cfg
            .dataplane
            .eal_args("dataplane", plan.huge, cfg.server.mtu);
        eprintln!("dataplane: EAL {}", eal_args[1..].join(" "));
        let eal = Eal::init(&eal_args[1..])?;
        ctrlc::set_handler(|| QUIT.store(true, Ordering::Relaxed))?;
        if args.pdump {
            dpdk::pdump::init()?;
        }
        let repl_lcore = replication::lcore(plan.role)?;
        let worker_lcores = startup::worker_lcores(repl_lcore);
        let nw = worker_lcores.len();
        let pool = Arc::new(startup::mbuf_pool(cfg)?);
        let sleeping = matches!(
            startup::idle_policy(&plan, args),
            dpdk::IdlePolicy::Sleep { .. }
        );
        let rx_intr = sleeping && !args.no_rx_intr;
        let (port, queues) = startup::open_port(cfg, nw, &pool, rx_intr)?;
        if rx_intr {
            startup::report_rx_intr(&port, &queues.rx);
        }
        let registry = startup::functions(cfg)?;
        let ooo = args.ooo.unwrap_or(cfg.server.ooo);
        let spec = startup::PartitionSpec {
            cfg,
            args,
            huge: plan.huge,
            socket: port.socket_id(),
            registry: &registry,
            ooo,
        };
        let mut stores = spec.stores(nw)?;
        if nw > 1 && sleeping && !args.no_doorbells {
            give_doorbells(&mut stores)?;
        }
        let rings = startup::handoff_rings(nw, port.socket_id())?;
        startup::print_banner(&plan, args, &port, nw, ooo, &registry);
        let sleeps = !args.no_doorbells && sleeping;
        let repl = replication::setup(cfg, plan.role, repl_lcore, &mut stores, &pool, sleeps)?;
        if let Some(r) = &repl {
            let (role, lcore, links) = (plan.role, r.lcore.0, r.links.len());
            println!("dataplane: replication {role:?} on lcore {lcore}, {links} link(s)");
        }
        Ok(Node {
            plan,
            worker_lcores,
            pool,
            stores,
            rings: Some(rings),
            queues: Some(queues),
            repl,
            port,
            _eal: eal,
        })
    }

    /// Runs the workers (0 on this lcore) and the replication loop until Ctrl-C or
    /// the deadline; the cluster's control thread beside them.
    pub fn run(&mut self, c: &Control, args: &Args) -> Result<Ran, Error> {
        let (Some(queues), Some(rings)) = (self.queues.take(), self.rings.take()) else {
            return Err("the node ran already".into());
        };
        let stores = std::mem::take(&mut self.stores);
        let mut work = assign_work(stores, queues, rings, &c.ctl)?;
        let mut repl = self.repl.take();
        let repl_ports = repl.as_mut().map(|r| std::mem::take(&mut r.ports));
        let repl_log = repl.as_mut().and_then(|r| r.log_writer.take());
        let idle = (c.wcfg.idle, c.wcfg.rx_intr);
        let inline = args.repl_inline;
        // The cluster's control side (etcd): role changes logged, its tenants applied.
        let cluster = repl.as_mut().and_then(|r| r.cluster.take());
        if inline && cluster.is_some() {
            return Err("--repl-inline needs a master without etcd".into());
        }
        let cluster_thread = cluster
            .map(|(handle, view)| {
                replication::spawn_cluster_thread(handle, view, c.ctl.clone(), &QUIT)
            })
            .transpose()?;
        let (role, pool) = (self.plan.role, &self.pool);
        let rr = start_replication(repl, &mut work, role, inline, pool, c.deadline, idle)?;
        let stores = run_workers(work, &self.worker_lcores, pool, &c.stats, c.wcfg.clone())?;
        let frames_lost = match rr.handle {
            Some(h) => h.wait().map_err(|e| format!("replication lcore: {e}"))?,
            None => 0,
        };
        // The replication lcore stopped feeding it: the log file ends synced.
        if let Some((shared, t)) = repl_log {
            shared.stop.store(true, Ordering::Release);
            let _ = t.join();
        }
        // Leaves the cluster (a master's lease is revoked: its successor is elected
        // at once instead of after the lease's TTL).
        if let Some(t) = cluster_thread {
            let _ = t.join();
        }
        let mut repl_figures = rr.figures;
        if let Some(f) = repl_figures.as_mut() {
            f.frames_lost = frames_lost;
        }
        Ok(Ran {
            stores,
            repl_figures,
            repl_ports,
        })
    }

    /// Joins the slab daemon, prints (and writes) the final report, stops the ports.
    pub fn finish(self, c: Control, ran: Ran, args: &Args) -> Result<(), Error> {
        let _ = c.slab_thread.join();
        c.ctl.snapshot().abort("the dataplane stopped");
        report::final_report(&report::Inputs {
            stats: &c.stats,
            stores: &ran.stores,
            repl: ran.repl_figures.as_ref(),
            slab_merges: c.slab.merges(),
            port: &self.port,
            pool: &self.pool,
            latency_sample_every: self.plan.cfg.server.latency_sample_every,
            stats_json: args.stats_json.as_deref(),
        })?;
        drop(ran.stores);
        let _ = self.port.stop();
        for p in ran.repl_ports.into_iter().flatten() {
            let _ = p.stop();
        }
        Ok(())
    }
}

impl Control {
    /// The counters, the slab daemon (its thread started), the control state with the
    /// configured clients and tenants, and the telemetry endpoints; prints "ready".
    pub fn start(node: &Node, args: &Args) -> Result<Control, Error> {
        let cfg = &node.plan.cfg;
        let nw = node.stores.len();
        let stats: Vec<Arc<WorkerStats>> =
            (0..nw).map(|_| Arc::new(WorkerStats::default())).collect();
        let slab = SlabDaemon::new(
            node.stores
                .iter()
                .map(|s| s.server.engine().slab_service())
                .collect(),
        );
        let clients: Vec<(u32, u32)> = cfg.clients.iter().map(|c| (c.qpn, c.rkey)).collect();
        let ctl = ControlState::new(stats.clone(), &clients);
        ctl.set_initial_tenants(startup::tenant_rules(&cfg.tenants)?, cfg.server.anonymous);
        ctl.set_latency_sample_every(cfg.server.latency_sample_every);
        let cfg_json = serde_json::to_value(cfg)?;
        telemetry::register(&ctl, cfg_json, slab.clone(), Arc::clone(&node.pool))?;
        let deadline =
            (args.duration > 0).then(|| Instant::now() + Duration::from_secs(args.duration));
        println!(
            "dataplane ready (mbufs in use {})",
            node.pool.in_use_count()
        );
        let wcfg = startup::worker_config(&node.plan, args, deadline)?;
        let merge_every =
            (args.merge_every_ms > 0).then(|| Duration::from_millis(args.merge_every_ms));
        let slab_thread = slab.spawn(Duration::from_millis(50), merge_every, &QUIT)?;
        Ok(Control {
            stats,
            slab,
            ctl,
            wcfg,
            deadline,
            slab_thread,
        })
    }
}

/// Idle workers sleep on a doorbell the others ring when they hand them requests; a
/// cross-partition transaction's coordinator rings the workers it parks.
fn give_doorbells(stores: &mut [worker::Store]) -> std::io::Result<()> {
    for s in stores {
        let bell = dpdk::Doorbell::new()?;
        let ring = bell.clone();
        s.server.set_park_waker(Box::new(move || ring.ring()));
        s.bell = Some(bell);
    }
    Ok(())
}

/// Pairs each worker's partition with its queue pair, rings and control.
fn assign_work(
    stores: Vec<worker::Store>,
    queues: dpdk::PortQueues,
    rings: startup::HandoffRings,
    ctl: &Arc<ControlState>,
) -> Result<Vec<worker::Work>, Box<dyn std::error::Error>> {
    let nw = stores.len();
    // A worker hands requests to a sleeping owner through its doorbell.
    let bells: Vec<_> = stores.iter().map(|s| s.bell.clone()).collect();
    let (mut rxs, mut txs) = (queues.rx.into_iter(), queues.tx.into_iter());
    let mut work = Vec::with_capacity(nw);
    for (w, (store, (inbox, outboxes))) in stores.into_iter().zip(rings).enumerate() {
        let (Some(rxq), Some(txq)) = (rxs.next(), txs.next()) else {
            return Err("port gave fewer queues than workers".into());
        };
        let handoff = worker::Handoff {
            me: w as u32,
            n: nw as u32,
            inbox,
            outboxes,
            bells: bells.clone(),
        };
        work.push(worker::Work {
            store,
            rxq,
            txq,
            handoff,
            ctl: ctl.worker(w),
        });
    }
    Ok(work)
}

/// The replication loop as it runs: on its lcore (`handle`) or inline in worker 0.
struct ReplRun {
    handle: Option<dpdk::LaunchHandle<u64>>,
    /// Its figures for the report (`frames_lost` set once it stopped).
    figures: Option<report::ReplFigures>,
}

/// Starts the replication loop: on its lcore, or (`--repl-inline`, a master without
/// etcd) polled by worker 0 between its bursts.
fn start_replication(
    repl: Option<replication::Replication>,
    work: &mut [worker::Work],
    role: kvconf::ReplRole,
    inline: bool,
    pool: &Arc<Mempool>,
    deadline: Option<Instant>,
    (idle, rx_intr): (dpdk::IdlePolicy, bool),
) -> Result<ReplRun, Box<dyn std::error::Error>> {
    let mut run = ReplRun {
        handle: None,
        figures: None,
    };
    let Some(r) = repl else {
        return Ok(run);
    };
    run.figures = Some(report::ReplFigures {
        status: r.status.clone(),
        lost: r.lost.clone(),
        apply: r.apply.clone(),
        frames_lost: 0,
    });
    if inline {
        if role != kvconf::ReplRole::Master {
            return Err("--repl-inline needs a master without etcd".into());
        }
        println!("dataplane: replication inline on worker 0 (baseline: no offload)");
        let rep = replicator::Replicator::new(r.links, r.logic, pool.clone())
            .with_status(r.status.clone());
        work[0]
            .store
            .set_role(Box::new(worker::role::InlineMaster(rep)))?;
        return Ok(run);
    }
    let pool = pool.clone();
    let (links, logic, status, bell) = (r.links, r.logic, r.status.clone(), r.bell);
    run.handle = Some(dpdk::lcore::launch_on(r.lcore, move || {
        let rep = replicator::Replicator::new(links, logic, pool).with_status(status);
        replicator::run(rep, &QUIT, deadline, idle, bell, rx_intr)
    })?);
    Ok(run)
}

/// Runs every worker: 1.. on their lcores, 0 here (it alone prints, one labelled line
/// per worker); returns their partitions once all stopped.
fn run_workers(
    work: Vec<worker::Work>,
    lcores: &[Option<dpdk::LcoreId>],
    pool: &Arc<Mempool>,
    stats: &[Arc<WorkerStats>],
    wcfg: worker::WorkerConfig,
) -> Result<Vec<worker::Store>, Box<dyn std::error::Error>> {
    let mut handles = Vec::new();
    let mut main_work = None;
    for (w, one) in work.into_iter().enumerate() {
        match lcores[w] {
            None => main_work = Some(one),
            Some(lcore) => {
                let (pool, st, wc) = (pool.clone(), stats[w].clone(), wcfg.clone());
                handles.push(dpdk::lcore::launch_on(lcore, move || {
                    worker::run(one, &pool, &st, &wc, &QUIT)
                })?);
            }
        }
    }
    let work0 = main_work.ok_or("no worker on the main lcore")?;
    let main_cfg = worker::WorkerConfig {
        printed: stats.to_vec(),
        ..wcfg
    };
    let mut stores = vec![worker::run(work0, pool, &stats[0], &main_cfg, &QUIT)];
    // The main worker stopped (Ctrl-C or deadline): make sure the others stop too.
    QUIT.store(true, Ordering::Relaxed);
    for h in handles {
        stores.push(h.wait().map_err(|e| format!("worker lcore: {e}"))?);
    }
    Ok(stores)
}
