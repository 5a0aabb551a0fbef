//! `kvclient::Client` following the master (kvclient::follow) against two real
//! server state machines (`Server`, no EAL) behind an in-memory switch that routes
//! frames by destination MAC: a replica that names its master, and the master.

mod common;

use common::{engine, identity, request_params, VecSink, RKEY, SERVER_MAC};
use dataplane::repl::gate::WriteGate;
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use kvclient::{Client, ClientConfig, Config, Error, Op, PacketIo};
use kvwire::{Atomic, MasterHint};
use std::cell::Cell;
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::rc::Rc;
use std::sync::Arc;

const STEP_NS: u64 = 10_000;
const MASTER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
const MASTER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 9);

struct Node {
    mac: [u8; 6],
    ip: Ipv4Addr,
    server: Server,
    gate: Arc<WriteGate>,
    inbox: VecDeque<Vec<u8>>,
    /// A crashed node: takes nothing, answers nothing.
    dead: bool,
}

/// The client's port on a switch with two nodes.
struct Switch {
    nodes: Vec<Node>,
    to_client: VecDeque<Vec<u8>>,
    stats: WorkerStats,
    clock: Rc<Cell<u64>>,
}

impl Switch {
    fn new(qps: &[(u32, u32)]) -> Switch {
        let mut nodes = Vec::new();
        for (mac, ip) in [(SERVER_MAC, common::SERVER_IP), (MASTER_MAC, MASTER_IP)] {
            let mut id = identity();
            id.mac = mac;
            id.ip = ip;
            let mut server = Server::new(id, qps, engine(8 << 20));
            let gate = Arc::new(WriteGate::writable());
            server.set_write_gate(gate.clone());
            nodes.push(Node {
                mac,
                ip,
                server,
                gate,
                inbox: VecDeque::new(),
                dead: false,
            });
        }
        Switch {
            nodes,
            to_client: VecDeque::new(),
            stats: WorkerStats::default(),
            clock: Rc::new(Cell::new(1)),
        }
    }

    /// Node `k` refuses writes, naming node `master` at `epoch`.
    fn make_replica(&self, k: usize, master: usize, epoch: u64) {
        let m = &self.nodes[master];
        self.nodes[k].gate.set_master_hint(Some(MasterHint {
            epoch,
            ip: m.ip,
            mac: m.mac,
            qpn: 1,
        }));
        self.nodes[k].gate.refuse_not_master();
    }

    fn serve(&mut self) {
        for n in &mut self.nodes {
            let frames: Vec<Vec<u8>> = n.inbox.drain(..).collect();
            if frames.is_empty() || n.dead {
                continue;
            }
            let views: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
            let mut tx = VecSink::default();
            n.server.handle_burst(&views, &self.stats, &mut tx);
            self.to_client.extend(tx.sent);
        }
    }

    fn get(&mut self, k: usize, key: &[u8]) -> Option<Vec<u8>> {
        let mut out = vec![0u8; 4096];
        let n = self.nodes[k].server.engine_mut().get(key, &mut out).ok()?;
        Some(out[..n].to_vec())
    }
}

impl PacketIo for Switch {
    fn send(&mut self, frame: &[u8]) -> bool {
        let dst: [u8; 6] = frame[..6].try_into().unwrap();
        for n in &mut self.nodes {
            if n.mac == dst {
                n.inbox.push_back(frame.to_vec());
            }
        }
        true
    }

    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        self.serve();
        self.clock.set(self.clock.get() + STEP_NS);
        let n = self.to_client.len();
        for fr in self.to_client.drain(..) {
            f(&fr);
        }
        n
    }
}

fn client(sw: Switch) -> Client<Switch> {
    client_at(sw, request_params())
}

/// A client sending with `params` (its first node), quick to give a request up.
fn client_at(sw: Switch, params: kvwire::FrameParams) -> Client<Switch> {
    let clock = sw.clock.clone();
    let cfg = ClientConfig {
        transport: Config {
            rto_initial_ns: 300_000,
            rto_max_ns: 2_000_000,
            max_retries: 5,
            ..Config::default()
        },
        ..ClientConfig::default()
    };
    let qps = [(100, RKEY), (101, RKEY)];
    Client::new(sw, cfg, &qps, params, Box::new(move || clock.get()))
}

#[test]
fn writes_refused_by_a_replica_go_to_the_master_it_names_once_each() {
    let qps = [(100, RKEY), (101, RKEY)];
    let mut sw = Switch::new(&qps);
    sw.make_replica(0, 1, 5);
    for n in &mut sw.nodes {
        n.server.engine_mut().put(b"ctr", &0u64.to_le_bytes());
    }
    let mut c = client(sw);
    c.connect().unwrap();
    // Pipelined: puts, fetch-adds and reads on the replica, all in flight at once.
    let mut tickets = Vec::new();
    for i in 0..200u32 {
        let key = format!("k{i}").into_bytes();
        tickets.push(c.submit(Op::Put {
            key,
            value: vec![i as u8; 16],
        }));
    }
    let adds: Vec<_> = (0..100)
        .map(|_| {
            c.submit(Op::UpdateS2S {
                key: b"ctr".to_vec(),
                atomic: Atomic::from_attr(kvwire::func::FETCH_ADD, 0x03).unwrap(),
                param: 1,
                param2: 0,
            })
        })
        .collect();
    let mut originals = Vec::new();
    for t in tickets {
        c.wait(t).unwrap().ok().unwrap();
    }
    for t in adds {
        let v = c.wait(t).unwrap().ok().unwrap();
        originals.push(u64::from_le_bytes(v[..8].try_into().unwrap()));
    }
    originals.sort_unstable();
    assert_eq!(
        originals,
        (0..100).collect::<Vec<_>>(),
        "each fetch-add once"
    );
    assert_eq!(c.redirects(), 1);
    assert_eq!(c.node(), Some((MASTER_MAC, MASTER_IP)));
    // Reads now come from the master too.
    assert_eq!(c.get(b"k7").unwrap(), Some(vec![7u8; 16]));
    let sw = c.io_mut();
    assert_eq!(sw.get(1, b"k199"), Some(vec![199u8; 16]));
    assert_eq!(sw.get(0, b"k199"), None, "the replica changed nothing");
    assert_eq!(sw.get(0, b"ctr"), Some(0u64.to_le_bytes().to_vec()));
    assert_eq!(sw.get(1, b"ctr"), Some(100u64.to_le_bytes().to_vec()));
}

/// A transaction refused by a replica (WRITES_REFUSED, NOT_MASTER with the hint) is
/// sent again at the master it names, once, as a single op would be.
#[test]
fn a_transaction_refused_by_a_replica_commits_at_the_master_it_names() {
    let qps = [(100, RKEY), (101, RKEY)];
    let mut sw = Switch::new(&qps);
    sw.make_replica(0, 1, 5);
    for n in &mut sw.nodes {
        n.server.engine_mut().put(b"a", b"10");
    }
    let mut c = client(sw);
    c.connect().unwrap();
    let cond = [kvclient::TxCondition {
        op: 0,
        expect: Some(b"10".to_vec()),
    }];
    let ops = [
        Op::Get { key: b"a".to_vec() },
        Op::Put {
            key: b"a".to_vec(),
            value: b"9".to_vec(),
        },
    ];
    let out = c.transact(&cond, &ops).unwrap();
    assert!(out.committed(), "{out:?}");
    assert_eq!(c.redirects(), 1);
    assert_eq!(c.node(), Some((MASTER_MAC, MASTER_IP)));
    let sw = c.io_mut();
    assert_eq!(sw.get(1, b"a"), Some(b"9".to_vec()));
    assert_eq!(
        sw.get(0, b"a"),
        Some(b"10".to_vec()),
        "the replica changed nothing"
    );
}

#[test]
fn a_stale_hint_is_reported_and_following_can_be_off() {
    let qps = [(100, RKEY), (101, RKEY)];
    let sw = Switch::new(&qps);
    sw.make_replica(0, 1, 5);
    let clock = sw.clock.clone();
    let cfg = ClientConfig {
        follow_master: false,
        ..ClientConfig::default()
    };
    let mut c = Client::new(
        sw,
        cfg,
        &qps,
        request_params(),
        Box::new(move || clock.get()),
    );
    assert_eq!(
        c.put(b"a", b"1"),
        Err(Error::Status(kvwire::Status::NotMaster))
    );
    assert_eq!(c.redirects(), 0);
}

#[test]
fn a_node_that_stops_answering_makes_the_client_try_the_next_one() {
    let qps = [(100, RKEY), (101, RKEY)];
    let sw = Switch::new(&qps);
    // Node 1 is master, node 0 a replica naming it; the client starts at node 1.
    sw.make_replica(0, 1, 5);
    let mut params = request_params();
    params.dst_mac = MASTER_MAC;
    params.dst_ip = MASTER_IP;
    let mut c = client_at(sw, params);
    c.set_nodes(&[(SERVER_MAC, common::SERVER_IP), (MASTER_MAC, MASTER_IP)]);
    c.put(b"before", b"1").unwrap();
    assert_eq!(c.redirects(), 0, "started at the master");
    // The master crashes; node 0 is elected (epoch 6) and takes writes.
    c.io_mut().nodes[1].dead = true;
    c.io_mut().nodes[0].gate.set_master_hint(None);
    c.io_mut().nodes[0].gate.open();
    // In flight on the dead node: resumed at node 0, which keeps no completion
    // records (not an etcd node) and so starts a new incarnation: outcome unknown,
    // reported, not resent.
    assert_eq!(c.put(b"lost", b"1"), Err(Error::ConnectionLost));
    assert_eq!(c.transport().stats().resume_refused, 1);
    c.put(b"after", b"2").unwrap();
    assert_eq!(c.node(), Some((SERVER_MAC, common::SERVER_IP)));
    assert_eq!(c.io_mut().get(0, b"after"), Some(b"2".to_vec()));
    assert_eq!(c.io_mut().get(0, b"lost"), None);
}
