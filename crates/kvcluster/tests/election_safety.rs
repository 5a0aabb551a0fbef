//! Election safety (issue 29, docs/FAILOVER.md "Election safety") with every node a
//! `kvcluster-node` process, frozen and killed for real: a node holding no data is never
//! elected, and the election waits for a quorum of data-holding members — also after
//! etcd lost every key — instead of electing whoever is alive.
//!
//! The clusters model `mode: sync, min_replicas: 1` with three nodes: size 3, quorum 2.

mod common;

use std::time::Duration;

use common::proc::*;
use common::*;

const SAFE: [&str; 4] = ["--size", "3", "--quorum", "2"];

fn start3(etcd: &Etcd, c: &str) -> (NodeProc, NodeProc, NodeProc) {
    let n1 = NodeProc::spawn_with(etcd, c, 1, 0, true, &SAFE);
    let n2 = NodeProc::spawn_with(etcd, c, 2, 0, false, &SAFE);
    let n3 = NodeProc::spawn_with(etcd, c, 3, 0, false, &SAFE);
    // The first election waits for all three; equal offsets: the lowest id wins.
    n1.wait_event("BecameMaster", &[("epoch", 1)], Duration::from_secs(5));
    for n in [&n2, &n3] {
        n.wait_event(
            "BecameReplica",
            &[("master", 1), ("epoch", 1)],
            Duration::from_secs(5),
        );
    }
    // Their records say Live at epoch 1 (published within 50 ms).
    std::thread::sleep(Duration::from_millis(300));
    (n1, n2, n3)
}

/// Issue 29's schedule on a fresh cluster `c`: kill -9 node 3, freeze the data holders
/// (nodes 1 and 2) past their leases, restart node 3 empty. Returns the three, nodes 1
/// and 2 still frozen.
fn freeze_holders_restart_empty(etcd: &Etcd, c: &str) -> (NodeProc, NodeProc, NodeProc) {
    let watch = LeaderWatch::start(etcd, c);
    let (n1, n2, mut n3) = start3(etcd, c);
    n3.signal(libc::SIGKILL);
    let _ = n3.child.wait();
    n1.signal(libc::SIGSTOP);
    n2.signal(libc::SIGSTOP);
    watch
        .wait_for(Duration::from_secs(4), |c| *c == LeaderChange::Delete)
        .expect("the frozen master's leader key was not deleted");
    let n3 = NodeProc::spawn_with(etcd, c, 3, 0, false, &SAFE);
    (n1, n2, n3)
}

/// Issue 29, hole 1: kill -9 a replica, freeze the two data holders past their leases,
/// restart the killed node empty. Before, it was elected at epoch 2 with offset 0 and
/// the others, on SIGCONT, followed it (and were wiped). Now nobody is elected while
/// only the empty node reports; on SIGCONT a data holder is, and the empty node
/// follows it.
#[test]
fn an_empty_restarted_node_is_never_elected_over_frozen_data_holders() {
    let etcd = Etcd::start();
    let c = "empty";
    let (n1, n2, n3) = freeze_holders_restart_empty(&etcd, c);
    std::thread::sleep(Duration::from_millis(3000));
    assert!(
        !n3.saw_event("BecameMaster"),
        "the empty node was elected: {:?}",
        n3.events()
    );
    n1.signal(libc::SIGCONT);
    n2.signal(libc::SIGCONT);
    // The old master has the highest offset (it grew while master).
    n1.wait_event("BecameMaster", &[("epoch", 2)], Duration::from_secs(5));
    n3.wait_event(
        "BecameReplica",
        &[("master", 1), ("epoch", 2)],
        Duration::from_secs(3),
    );
    n2.wait_event(
        "BecameReplica",
        &[("master", 1), ("epoch", 2)],
        Duration::from_secs(3),
    );
    assert!(!n3.saw_event("BecameMaster"));
}

/// Issue 29, the second schedule: a stale replica (node 3, frozen while node 2 kept
/// acknowledging), etcd wiped and restarted empty, the master killed. The stale node
/// comes back first and alone: before, it was elected at once; now it waits for a
/// quorum, and once node 2 (the holder) is back, node 2 is elected.
#[test]
fn after_an_etcd_wipe_a_stale_node_waits_for_the_data_holder() {
    let mut etcd = Etcd::start();
    let c = "wipe";
    let (n1, mut n2, n3) = start3(&etcd, c);
    n3.signal(libc::SIGSTOP);
    // Node 2 acknowledged up to offset 500 of epoch 1's stream, node 3 only 0.
    n2.command("offset 500");
    std::thread::sleep(Duration::from_millis(300));
    n2.signal(libc::SIGSTOP);
    etcd.wipe_and_restart();
    n1.signal(libc::SIGKILL);
    n3.signal(libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(3000));
    assert!(
        !n3.saw_event("BecameMaster"),
        "the stale node was elected without the holder: {:?}",
        n3.events()
    );
    // The stale node lost its session to the wiped etcd and says when it is back.
    n3.wait_event("EtcdReconnected", &[], Duration::from_secs(5));
    n2.signal(libc::SIGCONT);
    // Epochs are never reused: the nodes remember epoch 1, so the next is 2.
    n2.wait_event("BecameMaster", &[("epoch", 2)], Duration::from_secs(5));
    n2.wait_event("EtcdReconnected", &[], Duration::from_secs(5));
    n3.wait_event(
        "BecameReplica",
        &[("master", 2), ("epoch", 2)],
        Duration::from_secs(3),
    );
    assert!(!n3.saw_event("BecameMaster"));
}

/// The operator's way out of a quorum that will not come back: a forced election
/// names the empty node, which is then elected alone (and the others follow it).
#[test]
fn a_forced_election_elects_the_named_node_whatever_it_holds() {
    let etcd = Etcd::start();
    let c = "force";
    let (n1, n2, n3) = freeze_holders_restart_empty(&etcd, c);
    std::thread::sleep(Duration::from_millis(1000));
    assert!(!n3.saw_event("BecameMaster"));
    // Not a live member, or a cluster with a master: refused.
    assert!(kvcluster::force_election(&etcd.endpoints(), c, 9, Duration::from_secs(2)).is_err());
    let epoch = kvcluster::force_election(&etcd.endpoints(), c, 3, Duration::from_secs(2))
        .expect("force election");
    assert_eq!(epoch, 1);
    n3.wait_event("BecameMaster", &[("epoch", 2)], Duration::from_secs(3));
    n1.signal(libc::SIGCONT);
    n2.signal(libc::SIGCONT);
    for n in [&n1, &n2] {
        n.wait_event(
            "BecameReplica",
            &[("master", 3), ("epoch", 2)],
            Duration::from_secs(5),
        );
    }
    assert!(kvcluster::force_election(&etcd.endpoints(), c, 1, Duration::from_secs(2)).is_err());
}
