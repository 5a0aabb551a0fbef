//! `kvcluster-node`: one cluster node without a dataplane, for the failover tests (run as
//! a child process and stopped with SIGSTOP / SIGKILL for real) and for trying the control
//! plane by hand against `scripts/etcd.sh`.
//!
//! It joins the cluster and prints one JSON line per event. A thread plays the lcores:
//! every millisecond it asks the view whether it may acknowledge a write and, as master,
//! "acknowledges" one (the offset grows by one with `--grow`); it prints the acknowledged
//! writes per epoch in chunks of at most 100 ms: `{"t":..,"ack_epoch":E,"acks":N,
//! "first":T0,"last":T1}`. Each acknowledgement is decided on a clock read after the work
//! and checked again just before it is counted, as an lcore checks just before transmit.
//! All times are CLOCK_MONOTONIC ns (comparable across processes).
//!
//! Its data, for the election (`MemberRecord::data`): the node starts with none
//! (`--data none`: a node started empty) or a live copy of epoch `--hist`'s stream (`--data
//! live`); following a master counts as an instant sync (Live at the master's epoch), and
//! a master's data is Live at its own epoch.
//!
//! Commands on standard input: `offset N`, `switchover [ID]`, `quit` (end of input does
//! not stop the node; SIGTERM/SIGKILL do).

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kvcluster::records::DataState;
use kvcluster::{
    mono_now_ns, ClusterConfig, ClusterEvent, ClusterHandle, ClusterView, NodeAddr, Role,
};
use serde_json::json;

#[derive(Parser)]
#[command(about = "A kvcluster node without a dataplane (tests, demos)")]
struct Args {
    /// etcd client URL(s), comma-separated.
    #[arg(long, default_value = "http://127.0.0.1:2379")]
    endpoints: String,
    /// Cluster name.
    #[arg(long, default_value = "demo")]
    cluster: String,
    /// Node id (≥ 1).
    #[arg(long)]
    id: u32,
    /// Advertised MAC (default 02:00:00:00:00:ID).
    #[arg(long)]
    mac: Option<String>,
    /// Advertised IPv4 address (default 10.0.0.ID).
    #[arg(long)]
    ip: Option<std::net::Ipv4Addr>,
    /// Advertised queue pair number.
    #[arg(long, default_value_t = 1)]
    qpn: u32,
    /// Lease TTL in ms (whole seconds).
    #[arg(long, default_value_t = 2000)]
    ttl_ms: u64,
    /// Fence margin in ms.
    #[arg(long, default_value_t = 100)]
    margin_ms: u64,
    /// Election wait in ms.
    #[arg(long, default_value_t = 500)]
    election_wait_ms: u64,
    /// Offset publish interval in ms.
    #[arg(long, default_value_t = 100)]
    publish_ms: u64,
    /// Initial stream offset.
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// As master, grow the offset by one per acknowledged write.
    #[arg(long)]
    grow: bool,
    /// The cluster's size (the first election waits for this many nodes).
    #[arg(long, default_value_t = 1)]
    size: u32,
    /// Live reporters an election needs.
    #[arg(long, default_value_t = 1)]
    quorum: u32,
    /// The data the node starts with: none, loaded, live.
    #[arg(long, default_value = "none")]
    data: String,
    /// The epoch whose stream the starting data follows.
    #[arg(long, default_value_t = 0)]
    hist: u64,
}

fn out(v: serde_json::Value) {
    println!("{v}");
}

fn main() {
    let a = Args::parse();
    let mac = match a.mac.as_deref() {
        Some(m) => match NodeAddr::parse_mac(m) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("kvcluster-node: {e}");
                std::process::exit(2);
            }
        },
        None => [2, 0, 0, 0, 0, a.id as u8],
    };
    let ip =
        a.ip.unwrap_or(std::net::Ipv4Addr::new(10, 0, 0, a.id as u8));
    let endpoints = a.endpoints.split(',').map(str::to_string).collect();
    let mut cfg = ClusterConfig::new(
        endpoints,
        &a.cluster,
        a.id,
        NodeAddr {
            mac,
            ip,
            qpn: a.qpn,
        },
    )
    .with_lease_ttl_ms(a.ttl_ms)
    .with_quorum(a.size, a.quorum);
    let data = match a.data.as_str() {
        "none" => DataState::None,
        "loaded" => DataState::Loaded,
        "live" => DataState::Live,
        d => {
            eprintln!("kvcluster-node: --data {d:?}: none, loaded or live");
            std::process::exit(2);
        }
    };
    cfg.fence_margin_ms = a.margin_ms;
    cfg.election_wait_ms = a.election_wait_ms;
    cfg.publish_interval_ms = a.publish_ms;
    let (handle, view) = match ClusterHandle::start(cfg) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("kvcluster-node: {e}");
            std::process::exit(2);
        }
    };
    view.set_offset(a.offset);
    view.set_data(a.hist, data);
    out(json!({"t": mono_now_ns(), "started": a.id, "pid": std::process::id()}));

    let quit = Arc::new(AtomicBool::new(false));
    let lcore = {
        let (view, quit, grow) = (view.clone(), quit.clone(), a.grow);
        std::thread::spawn(move || fake_lcore(&view, &quit, grow))
    };
    let stdin = {
        let (view, quit) = (view.clone(), quit.clone());
        std::thread::spawn(move || commands(&view, &quit))
    };
    while !quit.load(Ordering::Acquire) {
        if let Some(ev) = handle.next_event(Duration::from_millis(50)) {
            let t = ev.at_ns;
            out(match ev.event {
                ClusterEvent::BecameMaster { epoch } => {
                    json!({"t": t, "event": "BecameMaster", "epoch": epoch})
                }
                ClusterEvent::BecameReplica { master, epoch } => json!({
                    "t": t, "event": "BecameReplica", "master": master.id, "epoch": epoch,
                    "master_addr": master.addr.to_string(),
                }),
                ClusterEvent::Fenced { epoch, reason } => {
                    json!({"t": t, "event": "Fenced", "epoch": epoch, "reason": format!("{reason:?}")})
                }
                ClusterEvent::SwitchoverAborted { target, reason } => {
                    json!({"t": t, "event": "SwitchoverAborted", "target": target, "reason": reason})
                }
                ClusterEvent::EtcdUnavailable { error } => {
                    json!({"t": t, "event": "EtcdUnavailable", "error": error})
                }
                ClusterEvent::EtcdReconnected { failures } => {
                    json!({"t": t, "event": "EtcdReconnected", "failures": failures})
                }
            });
        }
    }
    let _ = lcore.join();
    drop(stdin);
    handle.shutdown();
}

/// Plays the lcores: one write per millisecond while the fence allows it.
fn fake_lcore(view: &ClusterView, quit: &AtomicBool, grow: bool) {
    // (epoch, acks, first, last) of the chunk being collected.
    let mut chunk: Option<(u64, u64, u64, u64)> = None;
    let flush = |c: &mut Option<(u64, u64, u64, u64)>| {
        if let Some((e, n, first, last)) = c.take() {
            out(
                json!({"t": mono_now_ns(), "ack_epoch": e, "acks": n, "first": first, "last": last}),
            );
        }
    };
    while !quit.load(Ordering::Acquire) {
        let decided = view.write_epoch(mono_now_ns()).and_then(|e| {
            // ... the burst's work would be here; check again on a fresh clock just
            // before "transmit" and count the ack at that time.
            let t = mono_now_ns();
            (view.write_epoch(t) == Some(e)).then_some((e, t))
        });
        match (decided, chunk) {
            (Some((e, t)), Some((ce, n, first, _))) if ce == e && t < first + 100_000_000 => {
                chunk = Some((e, n + 1, first, t));
            }
            (Some((e, t)), _) => {
                flush(&mut chunk);
                chunk = Some((e, 1, t, t));
            }
            (None, _) => flush(&mut chunk),
        }
        if decided.is_some() && grow {
            view.set_offset(view.offset() + 1);
        }
        // A master's data follows its own epoch; a replica is taken to sync at once.
        let (role, epoch) = view.state();
        if role != Role::Fenced && epoch > 0 && view.data() != (epoch, DataState::Live) {
            view.set_data(epoch, DataState::Live);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    flush(&mut chunk);
}

fn commands(view: &ClusterView, quit: &AtomicBool) {
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["offset", n] => match n.parse() {
                Ok(n) => view.set_offset(n),
                Err(_) => eprintln!("kvcluster-node: bad offset {n:?}"),
            },
            ["switchover"] => view.request_switchover(None),
            ["switchover", id] => match id.parse() {
                Ok(id) => view.request_switchover(Some(id)),
                Err(_) => eprintln!("kvcluster-node: bad node id {id:?}"),
            },
            ["quit"] => {
                quit.store(true, Ordering::Release);
                break;
            }
            [] => {}
            _ => eprintln!("kvcluster-node: commands: offset N | switchover [ID] | quit"),
        }
    }
    // End of input alone does not stop the node (it may run with stdin closed).
}
