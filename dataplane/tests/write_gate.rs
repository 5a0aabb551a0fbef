//! The write gate (replication): a replica or fenced master answers writes
//! `NOT_MASTER` with the master hint and serves reads; a master short of replicas
//! answers `NOT_ENOUGH_REPLICAS`; nothing refused is executed.

mod common;

use common::{connect, identity, results, run, RKEY};
use dataplane::repl::gate::WriteGate;
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use kvwire::{Atomic, KvOp, MasterHint, Status};
use std::net::Ipv4Addr;
use std::sync::Arc;

const QPN: u32 = 17;

#[test]
fn refused_writes_change_nothing_and_reads_go_on() {
    let mut s = Server::new(identity(), &[(QPN, RKEY)], common::engine(1 << 20));
    let gate = Arc::new(WriteGate::writable());
    s.set_write_gate(gate.clone());
    let c = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let put = |v: &'static [u8]| KvOp::Put {
        key: b"k",
        value: v,
    };
    let add = KvOp::UpdateS2S {
        key: b"k",
        atomic: Atomic::from_attr(kvwire::func::FETCH_ADD, 0x03).unwrap(),
        param: 1,
        param2: 0,
    };

    // Writable: the PUT lands.
    let out = run(&mut s, &st, &[c.request(&[put(b"12345678")], 1, 0)]);
    assert_eq!(results(&out[0]), vec![(Status::Ok, vec![])]);

    // A replica that knows its master: writes get NOT_MASTER + the hint, reads go on.
    let hint = MasterHint {
        epoch: 4,
        ip: Ipv4Addr::new(10, 0, 0, 1),
        mac: [2, 0, 0, 0, 0, 1],
        qpn: 1,
    };
    gate.set_master_hint(Some(hint));
    gate.refuse_not_master();
    let ops = [
        put(b"zzzzzzzz"),
        KvOp::Get { key: b"k" },
        add,
        KvOp::Delete { key: b"k" },
        // The key's own value: it would delete.
        KvOp::CompareDelete {
            key: b"k",
            expected: b"12345678",
        },
    ];
    let out = run(&mut s, &st, &[c.request(&ops, 2, 1)]);
    let h = hint.encode().to_vec();
    assert_eq!(
        results(&out[0]),
        vec![
            (Status::NotMaster, h.clone()),
            (Status::Ok, b"12345678".to_vec()),
            (Status::NotMaster, h.clone()),
            (Status::NotMaster, h.clone()),
            (Status::NotMaster, h),
        ]
    );

    // Master unknown: an empty hint.
    gate.set_master_hint(None);
    let out = run(&mut s, &st, &[c.request(&[put(b"y")], 3, 2)]);
    assert_eq!(results(&out[0]), vec![(Status::NotMaster, vec![])]);

    // Short of replicas.
    gate.refuse_not_enough_replicas();
    let out = run(
        &mut s,
        &st,
        &[c.request(&[put(b"y"), KvOp::Get { key: b"k" }], 4, 3)],
    );
    assert_eq!(
        results(&out[0]),
        vec![
            (Status::NotEnoughReplicas, vec![]),
            (Status::Ok, b"12345678".to_vec())
        ]
    );

    // Open again: writes land; nothing refused before changed the value.
    gate.open();
    let out = run(
        &mut s,
        &st,
        &[c.request(&[add, KvOp::Get { key: b"k" }], 5, 4)],
    );
    let r = results(&out[0]);
    assert_eq!(r[0], (Status::Ok, b"12345678".to_vec()));
    assert_eq!(r[1].0, Status::Ok);
    assert_ne!(r[1].1, b"12345678".to_vec());
}
