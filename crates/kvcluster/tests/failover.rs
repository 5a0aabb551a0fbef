//! Election, fencing and switchover with nodes in this process against a real etcd.
//! (tests/sigstop.rs does the same with nodes as child processes stopped by signals.)

mod common;

use std::time::Duration;

use common::*;
use kvcluster::{discover_master, mono_now_ns, ClusterEvent, FenceReason, MasterInfo, Role};

const MS: u64 = 1_000_000;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn is_replica_of(e: &ClusterEvent, id: u32, epoch: u64) -> bool {
    matches!(e, ClusterEvent::BecameReplica { master, epoch: ep } if master.id == id && *ep == epoch)
}

fn is_master(e: &ClusterEvent) -> bool {
    matches!(e, ClusterEvent::BecameMaster { .. })
}

#[test]
fn first_node_becomes_master_at_epoch_1_and_others_follow() {
    let etcd = Etcd::start();
    let c = "first";
    let eps = etcd.endpoints();
    assert_eq!(discover_master(&eps, c, secs(2.0)).unwrap(), None);

    let mut n1 = Node::start(config(&etcd, c, 1), 0);
    n1.wait_for("BecameMaster{1}", secs(5.0), |e| {
        *e == ClusterEvent::BecameMaster { epoch: 1 }
    });
    assert_eq!(n1.view.state(), (Role::Master, 1));
    assert!(n1.view.may_ack_writes(mono_now_ns()));
    assert_eq!(n1.view.write_epoch(mono_now_ns()), Some(1));
    let m1 = MasterInfo {
        id: 1,
        epoch: 1,
        addr: addr(1),
    };
    assert_eq!(n1.view.master(), Some(m1));
    assert_eq!(discover_master(&eps, c, secs(2.0)).unwrap(), Some(m1));

    let mut n2 = Node::start(config(&etcd, c, 2), 0);
    n2.wait_for("BecameReplica{1,1}", secs(5.0), |e| is_replica_of(e, 1, 1));
    assert_eq!(n2.view.state(), (Role::Replica, 1));
    assert!(!n2.view.may_ack_writes(mono_now_ns()));
    assert_eq!(n2.view.master(), Some(m1));

    // A graceful leave revokes the lease: the replica takes over without waiting a TTL.
    let t0 = mono_now_ns();
    n1.handle.shutdown();
    let e = n2.wait_for("BecameMaster{2}", secs(3.0), |e| {
        *e == ClusterEvent::BecameMaster { epoch: 2 }
    });
    let took = e.at_ns - t0;
    eprintln!("graceful leave -> new master in {:.1} ms", ms(took));
    assert!(took < TTL_MS * MS, "took {:.1} ms", ms(took));
    let m2 = discover_master(&eps, c, secs(2.0)).unwrap().unwrap();
    assert_eq!((m2.id, m2.epoch, m2.addr), (2, 2, addr(2)));
}

/// The master's control thread freezes (no lease renewals) while its lcores go on. The
/// fence closes before etcd deletes the leader key; the replica with the highest offset
/// (not the lowest id) wins epoch 2 within TTL + 1 s; the old master, resumed, learns
/// epoch 2, becomes a replica and never acknowledges at epoch 1 again.
#[test]
fn stalled_master_is_fenced_before_its_lease_lapses_and_the_best_replica_takes_over() {
    let etcd = Etcd::start();
    let c = "stall";
    let mut n1 = Node::start(config(&etcd, c, 1), 500);
    n1.wait_for("BecameMaster{1}", secs(5.0), |e| {
        *e == ClusterEvent::BecameMaster { epoch: 1 }
    });
    let mut n2 = Node::start(config(&etcd, c, 2), 50);
    let mut n3 = Node::start(config(&etcd, c, 3), 100);
    n2.wait_for("BecameReplica{1,1}", secs(5.0), |e| is_replica_of(e, 1, 1));
    n3.wait_for("BecameReplica{1,1}", secs(5.0), |e| is_replica_of(e, 1, 1));
    let watch = LeaderWatch::start(&etcd, c);
    let poller = FencePoller::start(n1.view.clone());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !poller.yes_times().is_empty(),
        "the master never allowed a write"
    );

    let t_pause = mono_now_ns();
    n1.handle.pause();
    std::thread::sleep(Duration::from_millis(50)); // let an iteration in flight finish
    let deadline = n1.view.fence_deadline_ns();

    let t_del = watch
        .wait_for(secs(3.0), |c| *c == LeaderChange::Delete)
        .expect("the leader key was never deleted");
    let new = n3.wait_for("BecameMaster{2}", secs(3.0), |e| {
        *e == ClusterEvent::BecameMaster { epoch: 2 }
    });
    let first_no = poller
        .first_no_after(t_pause)
        .expect("the fence never closed");
    let last_yes_1 = poller
        .yes_times()
        .iter()
        .filter(|(_, e)| *e == 1)
        .map(|(t, _)| *t)
        .max()
        .unwrap();
    eprintln!(
        "pause +0; fence deadline +{:.1} ms; first refusal +{:.1} ms; last yes +{:.1} ms; \
         leader key deleted +{:.1} ms; node 3 master at epoch 2 +{:.1} ms",
        ms(deadline - t_pause),
        ms(first_no - t_pause),
        ms(last_yes_1 - t_pause),
        ms(t_del - t_pause),
        ms(new.at_ns - t_pause)
    );
    assert!(last_yes_1 < deadline && first_no >= deadline);
    assert!(
        first_no < t_del,
        "may_ack_writes was still true when the leader key went"
    );
    assert!(t_del < new.at_ns);
    assert!(
        new.at_ns - t_pause <= (TTL_MS + 1000) * MS,
        "failover took {:.1} ms",
        ms(new.at_ns - t_pause)
    );
    n2.wait_for("BecameReplica{3,2}", secs(2.0), |e| is_replica_of(e, 3, 2));
    assert!(
        !n2.saw(is_master),
        "the lower-offset replica won: {:?}",
        n2.events
    );

    n1.handle.resume();
    n1.wait_for("BecameReplica{3,2}", secs(3.0), |e| is_replica_of(e, 3, 2));
    assert!(n1.saw(|e| matches!(e, ClusterEvent::Fenced { epoch: 1, .. })));
    assert_eq!(n1.view.state(), (Role::Replica, 2));
    assert_eq!(n1.view.master_id(), Some(3));
    std::thread::sleep(Duration::from_millis(200));
    let late: Vec<_> = poller
        .yes_times()
        .into_iter()
        .filter(|(t, _)| *t >= t_del)
        .collect();
    assert!(
        late.is_empty(),
        "old master allowed writes after the lease lapsed: {late:?}"
    );
    assert!(!n1.saw(|e| matches!(e, ClusterEvent::BecameMaster { epoch } if *epoch != 1)));
    let m = discover_master(&etcd.endpoints(), c, secs(2.0))
        .unwrap()
        .unwrap();
    assert_eq!((m.id, m.epoch), (3, 2));
}

/// A crashed master (control thread gone, lease not revoked): the best replica takes over
/// after the TTL.
#[test]
fn crashed_master_is_replaced_after_the_ttl() {
    let etcd = Etcd::start();
    let c = "crash";
    let mut n1 = Node::start(config(&etcd, c, 1), 10);
    n1.wait_for("BecameMaster{1}", secs(5.0), |e| {
        *e == ClusterEvent::BecameMaster { epoch: 1 }
    });
    let mut n2 = Node::start(config(&etcd, c, 2), 7);
    let mut n3 = Node::start(config(&etcd, c, 3), 9);
    n2.wait_for("BecameReplica{1,1}", secs(5.0), |e| is_replica_of(e, 1, 1));
    n3.wait_for("BecameReplica{1,1}", secs(5.0), |e| is_replica_of(e, 1, 1));
    let t0 = mono_now_ns();
    n1.handle.abandon();
    let e = n3.wait_for("BecameMaster{2}", secs(3.0), |e| {
        *e == ClusterEvent::BecameMaster { epoch: 2 }
    });
    eprintln!("crash -> new master in {:.1} ms", ms(e.at_ns - t0));
    assert!(e.at_ns - t0 <= (TTL_MS + 1000) * MS);
    n2.wait_for("BecameReplica{3,2}", secs(2.0), |e| is_replica_of(e, 3, 2));
    assert!(!n2.saw(is_master));
}

#[test]
fn planned_switchover_waits_for_the_target_then_hands_over() {
    let etcd = Etcd::start();
    let c = "switch";
    let eps = etcd.endpoints();
    let mut n1 = Node::start(config(&etcd, c, 1), 200);
    n1.wait_for("BecameMaster{1}", secs(5.0), |e| {
        *e == ClusterEvent::BecameMaster { epoch: 1 }
    });
    let mut n2 = Node::start(config(&etcd, c, 2), 150);
    let mut n3 = Node::start(config(&etcd, c, 3), 100);
    n2.wait_for("BecameReplica{1,1}", secs(5.0), |e| is_replica_of(e, 1, 1));
    n3.wait_for("BecameReplica{1,1}", secs(5.0), |e| is_replica_of(e, 1, 1));
    let poller = FencePoller::start(n1.view.clone());
    std::thread::sleep(Duration::from_millis(100));

    n1.handle.request_switchover(Some(2));
    let fenced = n1.wait_for("Fenced{1, Handover}", secs(2.0), |e| {
        *e == ClusterEvent::Fenced {
            epoch: 1,
            reason: FenceReason::Handover,
        }
    });
    assert!(!n1.view.may_ack_writes(mono_now_ns()));
    // The target is behind: nothing moves until it catches up.
    std::thread::sleep(Duration::from_millis(400));
    let m = discover_master(&eps, c, secs(2.0)).unwrap().unwrap();
    assert_eq!((m.id, m.epoch), (1, 1));
    assert!(!n2.saw(is_master));

    n2.view.set_offset(200);
    n2.wait_for("BecameMaster{2}", secs(3.0), |e| {
        *e == ClusterEvent::BecameMaster { epoch: 2 }
    });
    n1.wait_for("BecameReplica{2,2}", secs(3.0), |e| is_replica_of(e, 2, 2));
    n3.wait_for("BecameReplica{2,2}", secs(3.0), |e| is_replica_of(e, 2, 2));
    assert!(!n3.saw(is_master));
    assert!(
        poller
            .yes_times()
            .iter()
            .all(|(t, e)| *t < fenced.at_ns && *e == 1),
        "the old master allowed a write after it fenced itself for the handover"
    );
    drop(poller);

    // A switchover whose target never catches up is called off: the master resumes at
    // the same epoch.
    n2.handle.request_switchover(Some(3));
    n2.wait_for("Fenced{2, Handover}", secs(2.0), |e| {
        *e == ClusterEvent::Fenced {
            epoch: 2,
            reason: FenceReason::Handover,
        }
    });
    let aborted = n2.wait_for("SwitchoverAborted", secs(4.0), |e| {
        matches!(
            e,
            ClusterEvent::SwitchoverAborted {
                target: Some(3),
                ..
            }
        )
    });
    let until = std::time::Instant::now() + secs(2.0);
    while !n2.view.may_ack_writes(mono_now_ns()) && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(n2.view.state(), (Role::Master, 2), "{aborted:?}");
    assert!(n2.view.may_ack_writes(mono_now_ns()));
    let m = discover_master(&eps, c, secs(2.0)).unwrap().unwrap();
    assert_eq!((m.id, m.epoch), (2, 2));
    assert!(!n3.saw(is_master));

    // Unknown target: refused at once, the master keeps serving.
    n2.handle.request_switchover(Some(42));
    n2.wait_for("SwitchoverAborted{42}", secs(2.0), |e| {
        matches!(
            e,
            ClusterEvent::SwitchoverAborted {
                target: Some(42),
                ..
            }
        )
    });
    assert!(n2.view.may_ack_writes(mono_now_ns()));
}

/// etcd itself freezes: the master's fence closes by time alone (its control thread is
/// stuck waiting on etcd, the lcores are not). When etcd comes back the leases have
/// expired and a master is elected at a new epoch.
#[test]
fn frozen_etcd_fences_the_master_by_time_alone() {
    let etcd = Etcd::start();
    let c = "frozen";
    let mut n1 = Node::start(config(&etcd, c, 1), 5);
    n1.wait_for("BecameMaster{1}", secs(5.0), |e| {
        *e == ClusterEvent::BecameMaster { epoch: 1 }
    });
    let mut n2 = Node::start(config(&etcd, c, 2), 5);
    n2.wait_for("BecameReplica{1,1}", secs(5.0), |e| is_replica_of(e, 1, 1));
    let poller = FencePoller::start(n1.view.clone());
    std::thread::sleep(Duration::from_millis(100));
    let pid = etcd.pid() as libc::pid_t;
    let t_stop = mono_now_ns();
    // SAFETY: kill(2) on the etcd child this test started; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    std::thread::sleep(Duration::from_millis(TTL_MS + 300));
    let first_no = poller.first_no_after(t_stop);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let first_no = first_no.expect("the fence stayed open with etcd frozen");
    eprintln!(
        "etcd frozen +0; fence closed +{:.1} ms",
        ms(first_no - t_stop)
    );
    assert!(first_no - t_stop <= TTL_MS * MS);
    n1.wait_for("Fenced{1}", secs(3.0), |e| {
        matches!(e, ClusterEvent::Fenced { epoch: 1, .. })
    });
    // Both leases lapsed while etcd was frozen: after it returns, one node is master at
    // epoch 2 (the preferred one among those that re-registered within the election
    // wait) and the other follows it.
    let until = std::time::Instant::now() + secs(5.0);
    let settled = loop {
        let (s1, s2) = (n1.view.state(), n2.view.state());
        let m1 = n1.view.master_id();
        let m2 = n2.view.master_id();
        match (s1, s2) {
            ((Role::Master, 2), (Role::Replica, 2)) if m2 == Some(1) => break Some(1),
            ((Role::Replica, 2), (Role::Master, 2)) if m1 == Some(2) => break Some(2),
            _ if std::time::Instant::now() > until => break None,
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    n1.drain();
    n2.drain();
    let winner = settled.unwrap_or_else(|| {
        panic!(
            "no master at epoch 2 after etcd returned: {:?} / {:?}",
            n1.events, n2.events
        )
    });
    eprintln!("after the etcd freeze node {winner} is master at epoch 2");
    let loser = if winner == 1 { &mut n2 } else { &mut n1 };
    assert!(!loser.saw(|e| matches!(e, ClusterEvent::BecameMaster { epoch: 2 })));
}

#[test]
fn a_node_appended_behind_a_chain_ranks_after_the_others_in_the_election() {
    // A chain: node 1 (rank 0) the head, node 2 (rank 1) behind it, and node 3,
    // configured at rank 0 (a head that came back) but appended behind node 2 by the
    // data plane. On equal offsets the election must pick node 2 — the one right
    // behind the dead head — not node 3 (with its configured rank 0 it would win).
    let etcd = Etcd::start();
    let c = "appended";
    let mut n1 = Node::start(config(&etcd, c, 1).with_rank(0), 500);
    n1.wait_for("BecameMaster{1}", secs(5.0), is_master);
    let mut n2 = Node::start(config(&etcd, c, 2).with_rank(1), 500);
    n2.wait_for("BecameReplica{1,1}", secs(5.0), |e| is_replica_of(e, 1, 1));
    let mut n3 = Node::start(config(&etcd, c, 3).with_rank(0), 500);
    n3.wait_for("BecameReplica{1,1}", secs(5.0), |e| is_replica_of(e, 1, 1));
    n3.view.note_appended();
    // Its next member record carries the new rank (published within an interval).
    std::thread::sleep(secs(0.3));
    n1.handle.shutdown();
    n2.wait_for("BecameMaster{2}", secs(5.0), |e| {
        *e == ClusterEvent::BecameMaster { epoch: 2 }
    });
    n3.wait_for("BecameReplica{2,2}", secs(5.0), |e| is_replica_of(e, 2, 2));
    assert!(!n3.saw(is_master), "the appended node must not win the tie");
}
