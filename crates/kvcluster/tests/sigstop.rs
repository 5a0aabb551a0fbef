//! Failover with every node a separate process (`kvcluster-node`), stopped and killed
//! for real with SIGSTOP / SIGCONT / SIGKILL. All times are CLOCK_MONOTONIC, which the
//! children and this test share.

mod common;

use std::time::Duration;

use common::proc::*;
use common::*;
use kvcluster::mono_now_ns;

const MS: u64 = 1_000_000;

/// Split-brain check: SIGSTOP the master past its lease, SIGCONT it. It acknowledges no
/// write at epoch 1 once its leader key is gone, and rejoins as a replica of the new
/// master, which is the replica with the highest offset.
#[test]
fn sigstopped_master_acks_nothing_at_the_old_epoch_and_rejoins_as_replica() {
    let etcd = Etcd::start();
    let c = "stop";
    let watch = LeaderWatch::start(&etcd, c);
    let n1 = NodeProc::spawn(&etcd, c, 1, 0, true);
    n1.wait_event("BecameMaster", &[("epoch", 1)], Duration::from_secs(5));
    let n2 = NodeProc::spawn(&etcd, c, 2, 50, false);
    let n3 = NodeProc::spawn(&etcd, c, 3, 100, false);
    for n in [&n2, &n3] {
        n.wait_event(
            "BecameReplica",
            &[("master", 1), ("epoch", 1)],
            Duration::from_secs(5),
        );
    }
    wait_until("the master's first acks", Duration::from_secs(3), || {
        !n1.acks().is_empty()
    });

    let t_stop = mono_now_ns();
    n1.signal(libc::SIGSTOP);
    let t_new = n3.wait_event("BecameMaster", &[("epoch", 2)], Duration::from_secs(3));
    let t_del = watch
        .wait_for(Duration::from_secs(1), |c| *c == LeaderChange::Delete)
        .expect("leader key deletion not seen");
    n2.wait_event(
        "BecameReplica",
        &[("master", 3), ("epoch", 2)],
        Duration::from_secs(2),
    );
    std::thread::sleep(Duration::from_millis(300)); // the new master serves a while
    let t_cont = mono_now_ns();
    n1.signal(libc::SIGCONT);
    let t_rejoin = n1.wait_event(
        "BecameReplica",
        &[("master", 3), ("epoch", 2)],
        Duration::from_secs(3),
    );
    std::thread::sleep(Duration::from_millis(200));

    let acks1 = n1.acks();
    let last_ack_1 = acks1
        .iter()
        .filter(|a| a.0 == 1)
        .map(|a| a.2)
        .max()
        .expect("no acks at epoch 1");
    eprintln!(
        "SIGSTOP +0: last ack at epoch 1 {:+.1} ms, leader key deleted +{:.1} ms, node 3 \
         master at epoch 2 +{:.1} ms; SIGCONT +{:.1} ms, old master a replica +{:.1} ms",
        (last_ack_1 as i64 - t_stop as i64) as f64 / 1e6,
        ms(t_del - t_stop),
        ms(t_new - t_stop),
        ms(t_cont - t_stop),
        ms(t_rejoin - t_stop)
    );
    assert!(
        acks1.iter().all(|&(e, _, last)| e == 1 && last < t_del),
        "the old master acknowledged after its leader key was deleted: {acks1:?}"
    );
    assert!(t_del < t_new);
    assert!(
        t_new - t_stop <= (TTL_MS + 1000) * MS,
        "failover took {:.1} ms",
        ms(t_new - t_stop)
    );
    assert!(
        !n2.saw_event("BecameMaster"),
        "the lower-offset replica won"
    );
    assert!(n3
        .acks()
        .iter()
        .all(|&(e, first, _)| e == 2 && first > t_del));
    assert!(!n3.acks().is_empty(), "the new master acknowledged nothing");
}

/// kill -9 of the master: the replica with the highest offset (here the lower id) is
/// master at epoch 2 within TTL + 1 s.
#[test]
fn sigkilled_master_is_replaced_by_the_highest_offset_replica() {
    let etcd = Etcd::start();
    let c = "kill";
    let mut n1 = NodeProc::spawn(&etcd, c, 1, 0, true);
    n1.wait_event("BecameMaster", &[("epoch", 1)], Duration::from_secs(5));
    let n2 = NodeProc::spawn(&etcd, c, 2, 100, false);
    let n3 = NodeProc::spawn(&etcd, c, 3, 50, false);
    for n in [&n2, &n3] {
        n.wait_event(
            "BecameReplica",
            &[("master", 1), ("epoch", 1)],
            Duration::from_secs(5),
        );
    }
    let t_kill = mono_now_ns();
    n1.signal(libc::SIGKILL);
    let _ = n1.child.wait();
    let t_new = n2.wait_event("BecameMaster", &[("epoch", 2)], Duration::from_secs(3));
    eprintln!(
        "SIGKILL +0: node 2 master at epoch 2 +{:.1} ms",
        ms(t_new - t_kill)
    );
    assert!(t_new - t_kill <= (TTL_MS + 1000) * MS);
    n3.wait_event(
        "BecameReplica",
        &[("master", 2), ("epoch", 2)],
        Duration::from_secs(2),
    );
    assert!(!n3.saw_event("BecameMaster"));
}
