//! Role changes of etcd-managed nodes (`repl::cluster::ClusterNode`), without DPDK and
//! without etcd: two nodes, each one worker (engine, mutation tap into its log ring,
//! applier of its apply ring) and the replication logic, joined by an in-memory link;
//! the test plays the control thread by setting each node's `ClusterView`. Checked key
//! by key: a replica follows the first master; after a failover the promoted node
//! takes writes and continues the stream, the demoted one refuses writes, resyncs
//! fully and ends with the new master's contents; a master whose fence deadline
//! passed refuses writes. Along the way, what each node tells the election about its
//! data (`ClusterView::data`: docs/FAILOVER.md "Election safety").

mod common;

use common::Rng;

use dataplane::mutation::MutationSink;
use dataplane::repl::apply::{Applier, ApplyStats};
use dataplane::repl::cluster::{ClusterNode, ClusterParts};
use dataplane::repl::gate::WriteGate;
use dataplane::repl::link::{ReplLogic, VecLinks};
use dataplane::repl::master::MasterConfig;
use dataplane::repl::replica::ReplicaConfig;
use dataplane::repl::scan::{NoClients, ScanShared};
use dataplane::repl::status::ReplStatus;
use dataplane::repl::worker_log::ReplLog;
use kvcluster::records::DataState;
use kvcluster::{ClusterView, MasterInfo, NodeAddr, Role};
use kvengine::Engine;
use kvrepl::log::log_ring;
use kvrepl::progress::Mode;
use kvwire::Status;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

const MS: u64 = 1_000_000;
const STEP_NS: u64 = 100_000;

/// One node: its worker and its replication logic.
struct Node {
    engine: Engine,
    tap: ReplLog,
    applier: Applier,
    logic: ClusterNode,
    gate: Arc<WriteGate>,
    status: Arc<ReplStatus>,
    view: Arc<ClusterView>,
    out: VecLinks,
    id: u32,
}

impl Node {
    fn new(k: u8) -> Node {
        let (lp, lc) = log_ring(1 << 20);
        let (ap, ac) = log_ring(1 << 20);
        let shared = Arc::new(ScanShared::default());
        let stats = Arc::new(ApplyStats::default());
        let gate = Arc::new(WriteGate::writable());
        let status = Arc::new(ReplStatus::default());
        let view = Arc::new(ClusterView::new(u32::from(k) + 1));
        let mac = [2, 0, 0, 0, 0x10, k];
        let ip = Ipv4Addr::new(10, 77, 0, k + 1);
        let master = MasterConfig {
            node_id: u64::from(k) + 1,
            mac,
            ip,
            ..common::repl::master_config(Mode::Async, 0, 1, false)
        };
        let replica = ReplicaConfig {
            node_id: u64::from(k) + 1,
            mac,
            ip,
            master: None,
            fallback: Vec::new(),
            waiting_time_ns: 60 * MS,
            ack_interval_ns: 2 * MS,
            hello_interval_ns: 10 * MS,
            slot_size: kvwire::repl::write_imm_payload_capacity(kvwire::DEFAULT_MTU) as u32,
            rkey: 0x1234 + u32::from(k),
        };
        let logic = ClusterNode::new(ClusterParts {
            master,
            replica,
            links: 1,
            logs: vec![lc],
            scans: vec![shared.clone()],
            rings: vec![ap],
            consumed: vec![stats.clone()],
            gate: gate.clone(),
            status: status.clone(),
            view: view.clone(),
            log: None,
            relay: None,
        })
        .unwrap();
        Node {
            engine: common::engine(4 << 20),
            tap: ReplLog::new(lp, shared, Arc::new(AtomicU64::new(0))),
            applier: Applier::new(ac, stats),
            logic,
            gate,
            status,
            view,
            out: VecLinks::new(1600),
            id: u32::from(k) + 1,
        }
    }

    fn info(&self, epoch: u64) -> MasterInfo {
        MasterInfo {
            id: self.id,
            epoch,
            addr: NodeAddr {
                mac: [2, 0, 0, 0, 0, self.id as u8],
                ip: Ipv4Addr::new(10, 0, 0, self.id as u8),
                qpn: 1,
            },
        }
    }

    /// A random write as the worker does it: refused by the gate, or applied and its
    /// post-image tapped. Returns whether it was taken.
    fn write(&mut self, rng: &mut Rng, keys: u64) -> bool {
        if self.gate.write_status() != Status::Ok || self.tap.room() < 4096 {
            return false;
        }
        let k = format!("key{}", rng.below(keys)).into_bytes();
        let v = vec![rng.below(256) as u8; 1 + rng.below(40) as usize];
        assert_eq!(self.engine.put(&k, &v), kvengine::Status::Ok);
        self.tap.put(&k, &v);
        true
    }

    /// The worker's between-bursts work.
    fn worker(&mut self) {
        self.tap.tick(&self.engine, &mut NoClients);
        self.applier
            .apply(&mut self.engine, Some(&mut self.tap), 1024);
    }

    fn contents(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = BTreeMap::new();
        self.engine.for_each(|k, v| {
            m.insert(k.to_vec(), v.to_vec());
        });
        m
    }

    fn st(&self) -> serde_json::Value {
        self.status.to_json()
    }
}

struct World {
    n: [Node; 2],
    now: u64,
    rng: Rng,
}

impl World {
    fn step(&mut self, writer: Option<usize>, writes: usize) -> usize {
        self.now += STEP_NS;
        let mut taken = 0;
        if let Some(w) = writer {
            for _ in 0..writes {
                taken += usize::from(self.n[w].write(&mut self.rng, 2000));
            }
        }
        for i in 0..2 {
            let n = &mut self.n[i];
            n.worker();
            n.logic.poll(self.now, &mut n.out);
        }
        for i in 0..2 {
            let frames = std::mem::take(&mut self.n[i].out.frames);
            let peer = &mut self.n[1 - i];
            for (_, f) in frames {
                peer.logic.on_frames(0, &[&f], self.now, &mut peer.out);
            }
        }
        taken
    }

    /// Steps until master `m`'s one replica is online with the whole stream, plus a
    /// few rounds for the replica's worker to apply it.
    fn settle(&mut self, m: usize) {
        for _ in 0..200_000 {
            self.step(None, 0);
            let s = self.n[m].st();
            if s["role"] == "master"
                && s["peers"]["0"]["state"] == "online"
                && s["peers"]["0"]["acked_offset"] == s["offset"]
            {
                for _ in 0..50 {
                    self.step(None, 0);
                }
                return;
            }
        }
        panic!(
            "node{m} never had its replica in sync: {} / {}",
            self.n[m].st(),
            self.n[1 - m].st()
        );
    }
}

fn far_deadline() -> u64 {
    kvcluster::mono_now_ns() + 3600 * 1_000_000_000
}

#[test]
fn failover_promotes_continues_and_resyncs_the_old_master() {
    let mut w = World {
        n: [Node::new(0), Node::new(1)],
        now: 0,
        rng: Rng(0x9e37_79b9),
    };
    // Before etcd says anything, nobody takes writes, and nobody holds data.
    assert_eq!(w.step(Some(0), 10), 0, "a node with no role refused writes");
    for n in &w.n {
        assert_eq!(n.view.data(), (0, DataState::None));
    }

    // Epoch 1: node 0 master, node 1 its replica.
    let m0 = w.n[0].info(1);
    w.n[0]
        .view
        .set_for_test(Role::Master, 1, far_deadline(), Some(m0));
    w.n[1].view.set_for_test(Role::Replica, 1, 0, Some(m0));
    let mut taken = 0;
    for _ in 0..3000 {
        taken += w.step(Some(0), 4);
    }
    assert!(taken > 5000, "master took {taken} writes");
    assert_eq!(w.step(Some(1), 10), 0, "the replica refused writes");
    w.settle(0);
    assert_eq!(
        w.n[0].contents(),
        w.n[1].contents(),
        "epoch 1: replica equals master"
    );
    let end1 = w.n[0].st()["offset"].as_u64().unwrap();
    assert!(end1 > 0);
    // The master's data and the fully synced replica's are Live copies of epoch 1.
    assert_eq!(w.n[0].view.data(), (1, DataState::Live));
    assert_eq!(w.n[1].view.data(), (1, DataState::Live));
    assert_eq!(
        w.n[1].view.offset(),
        end1,
        "the replica's offset for the election"
    );

    // Failover to node 1 at epoch 2 (node 0 is told it is a replica of node 1).
    let m1 = w.n[1].info(2);
    w.n[1]
        .view
        .set_for_test(Role::Master, 2, far_deadline(), Some(m1));
    w.n[0].view.set_for_test(Role::Replica, 2, 0, Some(m1));
    let mut old_master_none = false;
    for _ in 0..20 {
        w.step(None, 0);
        // Demoted, it resyncs fully: its data is worth nothing until that completes.
        old_master_none |= w.n[0].view.data() == (0, DataState::None);
    }
    assert!(
        old_master_none,
        "the demoted master never said its data was being replaced"
    );
    assert_eq!(w.n[1].view.data(), (2, DataState::Live));
    let s1 = w.n[1].st();
    assert_eq!(s1["role"], "master", "{s1}");
    assert_eq!(s1["epoch"], 2);
    assert_eq!(s1["promotions"], 1);
    // The new master continues the old stream's offsets.
    assert!(s1["offset"].as_u64().unwrap() >= end1, "{s1}");
    assert_eq!(w.step(Some(0), 10), 0, "the demoted master refuses writes");
    let mut taken = 0;
    for _ in 0..2000 {
        taken += w.step(Some(1), 4);
    }
    assert!(taken > 4000, "new master took {taken} writes");
    w.settle(1);
    let s0 = w.n[0].st();
    assert_eq!(s0["role"], "replica", "{s0}");
    assert_eq!(s0["demotions"], 1);
    assert_eq!(s0["epoch"], 2);
    assert_eq!(
        w.n[1].contents(),
        w.n[0].contents(),
        "the old master ends with the new master's contents"
    );
    assert_eq!(
        w.n[0].view.data(),
        (2, DataState::Live),
        "resynced: Live again"
    );

    // The fence: the new master's lease deadline passes; its gate closes at the next
    // poll, whatever min-replicas says.
    w.n[1]
        .view
        .set_for_test(Role::Master, 2, kvcluster::mono_now_ns(), Some(m1));
    w.step(None, 0);
    assert_eq!(w.n[1].gate.write_status(), Status::NotMaster);
    assert_eq!(w.step(Some(1), 10), 0, "a fenced master refuses writes");
}

#[test]
fn a_planned_switchover_resumes_the_old_master_by_partial_resync() {
    let mut w = World {
        n: [Node::new(0), Node::new(1)],
        now: 0,
        rng: Rng(0x1234_5678),
    };
    let m0 = w.n[0].info(1);
    w.n[0]
        .view
        .set_for_test(Role::Master, 1, far_deadline(), Some(m0));
    w.n[1].view.set_for_test(Role::Replica, 1, 0, Some(m0));
    for _ in 0..2000 {
        w.step(Some(0), 4);
    }
    w.settle(0);
    // The handover: the master is fenced first (its offset stops moving, the target
    // catches up), then the target is elected.
    w.n[0].view.set_for_test(Role::Fenced, 1, 0, Some(m0));
    w.step(None, 0); // the replication lcore's next poll closes the gate
    for _ in 0..200 {
        assert_eq!(w.step(Some(0), 2), 0, "a fenced master refuses writes");
    }
    assert_eq!(w.n[0].st()["role"], "fenced");
    // Long enough (in real time) for the fence to count as quiet.
    std::thread::sleep(std::time::Duration::from_millis(20));
    for _ in 0..50 {
        w.step(None, 0);
    }
    let s0 = w.n[0].st();
    assert_eq!(
        s0["peers"]["0"]["acked_offset"], s0["offset"],
        "target caught up: {s0}"
    );
    // (Node 1's status slot 0 counted its own syncs as a replica; compare after.)
    let before = w.n[1].st()["peers"]["0"].clone();
    let m1 = w.n[1].info(2);
    w.n[1]
        .view
        .set_for_test(Role::Master, 2, far_deadline(), Some(m1));
    w.n[0].view.set_for_test(Role::Replica, 2, 0, Some(m1));
    for _ in 0..1000 {
        w.step(Some(1), 4);
    }
    w.settle(1);
    let s1 = w.n[1].st();
    let n = |v: &serde_json::Value, f: &str| v[f].as_u64().unwrap();
    let p = &s1["peers"]["0"];
    assert_eq!(
        n(p, "partial_syncs"),
        n(&before, "partial_syncs") + 1,
        "{s1}"
    );
    assert_eq!(
        n(p, "full_syncs"),
        n(&before, "full_syncs"),
        "no full sync: {s1}"
    );
    assert_eq!(w.n[1].contents(), w.n[0].contents());
}

/// A master an operator forced (it may lack acknowledged writes) cannot wipe a replica
/// holding data: its full sync is refused and counted (`diverged`), the data kept.
/// The same master elected by the rule is followed (control): the replica is resynced.
#[test]
fn a_replica_holding_data_refuses_a_full_sync_from_a_forced_master() {
    for forced in [true, false] {
        let mut w = World {
            n: [Node::new(0), Node::new(1)],
            now: 0,
            rng: Rng(0x5eed_0001),
        };
        let m0 = w.n[0].info(1);
        w.n[0]
            .view
            .set_for_test(Role::Master, 1, far_deadline(), Some(m0));
        w.n[1].view.set_for_test(Role::Replica, 1, 0, Some(m0));
        for _ in 0..1000 {
            w.step(Some(0), 4);
        }
        w.settle(0);
        let held = w.n[1].contents();
        assert!(held.len() > 100);
        // Node 0 dies and comes back empty; it is made master at epoch 2.
        w.n[0] = Node::new(0);
        let m0 = w.n[0].info(2);
        w.n[0]
            .view
            .set_for_test(Role::Master, 2, far_deadline(), Some(m0));
        w.n[1].view.set_for_test(Role::Replica, 2, 0, Some(m0));
        if forced {
            w.n[1].view.set_forced_epoch(2);
        }
        for _ in 0..3000 {
            w.step(None, 0);
        }
        let st = w.n[1].st();
        if forced {
            assert_eq!(
                w.n[1].contents(),
                held,
                "the forced master wiped the replica"
            );
            assert!(st["diverged"].as_u64().unwrap() > 0, "{st}");
            assert_eq!(w.n[1].view.data(), (1, DataState::Live));
        } else {
            assert!(
                w.n[1].contents().is_empty(),
                "the elected master's copy is empty"
            );
            assert_eq!(st["diverged"], 0, "{st}");
        }
    }
}
