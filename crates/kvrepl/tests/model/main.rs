//! Model test: a master (workers with log rings, the replication lcore's
//! backlog, full-sync scan stream, shippers, probes, write gate) and N
//! replicas (appliers into HashMaps), joined by seeded lossy, duplicating,
//! reordering links carrying real kvwire frames. A random workload of puts
//! and deletes runs while replicas restart (partial resync) and vanish for
//! long outages (full sync). Checked: every replica converges to the
//! master's data; and whenever a replica that is past its last full sync's
//! end stands at live offset `o`, its data is exactly the master's stream
//! replayed up to `o`.

use kvrepl::applier::{Outcome, Reply, Sink, SinkError};
use kvrepl::messages::{Control, Hello, Probe, ProbeReply, Progress, ReplicaReport, Welcome};
use kvrepl::progress::{GateConfig, LivenessAction, Mode, ProbeConfig, ReplicaView};
use kvrepl::replica_state::{ReplicaEvent, ReplicaState};
use kvrepl::shipper::ShipError;
use kvrepl::*;
use kvwire::repl::{
    emit_send, emit_write_imm_headers, parse_repl_frame, write_imm_frame_len,
    write_imm_payload_capacity, ReplFrame, WriteImmFields, WRITE_IMM_HEADER_LEN,
};
use kvwire::transport::{emit_ack, rnr_timer_micros, NakCode, Syndrome};
use kvwire::{finalize, FrameParams};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::Ipv4Addr;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const STEP: u64 = 100 * US;
const MTU: usize = 1500;
type Map = HashMap<Vec<u8>, Vec<u8>>;

#[derive(Default)]
struct MapSink(Map);

impl Sink for MapSink {
    fn clear(&mut self) {
        self.0.clear();
    }
    fn apply(&mut self, rec: Record<'_>) -> Result<(), SinkError> {
        match rec {
            Record::Put { key, value } => {
                self.0.insert(key.to_vec(), value.to_vec());
            }
            Record::Delete { key } => {
                self.0.remove(key);
            }
            Record::QpState { .. } | Record::Group { .. } => {}
        }
        Ok(())
    }
}

/// Faults of a link.
#[derive(Clone, Copy)]
struct Faults {
    loss: f64,
    dup: f64,
    max_delay: u64,
}

/// One direction of a link: frames delivered after a random delay.
#[derive(Default)]
struct Link {
    q: BinaryHeap<Reverse<(u64, u64, Vec<u8>)>>,
    seq: u64,
}

impl Link {
    fn send(&mut self, now: u64, frame: &[u8], rng: &mut SmallRng, f: Faults) {
        if rng.gen_bool(f.loss) {
            return;
        }
        let copies = if rng.gen_bool(f.dup) { 2 } else { 1 };
        for _ in 0..copies {
            self.seq += 1;
            let t = now + rng.gen_range(0..=f.max_delay);
            self.q.push(Reverse((t, self.seq, frame.to_vec())));
        }
    }
    fn due(&mut self, now: u64) -> Option<Vec<u8>> {
        if self.q.peek().is_some_and(|Reverse((t, _, _))| *t <= now) {
            return self.q.pop().map(|Reverse((_, _, f))| f);
        }
        None
    }
}

fn params() -> FrameParams {
    FrameParams::new(
        [2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2],
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        0xc000,
    )
}

fn send_ctl(link: &mut Link, now: u64, m: &Control, rng: &mut SmallRng, f: Faults) {
    let mut p = [0u8; kvrepl::messages::MAX_CONTROL_LEN];
    let n = m.encode_into(&mut p).unwrap();
    let mut buf = [0u8; 256];
    let len = emit_send(&mut buf, &params(), 7, 0, &p[..n]).unwrap();
    link.send(now, &buf[..len], rng, f);
}

#[derive(Clone, Debug)]
enum Rec {
    Put(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
}

mod master;
mod replica;

use master::Master;
use replica::Replica;

/// Keys whose values differ between two maps.
fn differing(a: &Map, b: &Map) -> usize {
    let mut keys: Vec<&Vec<u8>> = a.keys().chain(b.keys()).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter().filter(|k| a.get(*k) != b.get(*k)).count()
}

/// The master's data as of live offset `o`: the stream replayed up to it.
fn replay(history: &[(u64, Rec)], o: u64) -> Map {
    let mut m = Map::new();
    for (at, rec) in history {
        if *at >= o {
            break;
        }
        match rec {
            Rec::Put(k, v) => {
                m.insert(k.clone(), v.clone());
            }
            Rec::Del(k) => {
                m.remove(k);
            }
        }
    }
    m
}

// A benchmark or test scenario read top to bottom: exempt from the function-length
// guard (Cargo.toml [workspace.lints]), which is for library and binary code.
#[allow(clippy::too_many_lines)]
fn run(seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let n = 3;
    let mut m = Master::new(2, n, 96 * 1024);
    let mut reps: Vec<Replica> = (0..n).map(|_| Replica::new()).collect();
    for r in &mut reps {
        r.reconnect(0, &mut rng);
    }
    let mut to_rep: Vec<Link> = (0..n).map(|_| Link::default()).collect();
    let mut to_master: Vec<Link> = (0..n).map(|_| Link::default()).collect();
    let lossy = Faults {
        loss: 0.03,
        dup: 0.02,
        max_delay: 2 * MS,
    };
    let (mut restarts, mut outages, mut exact_checks) = (0u32, 0u32, 0u32);
    let mut completed = Vec::new();
    let mut seen_complete = 0u32;
    let workload_end = 3_000 * MS;
    let mut now = 0u64;
    loop {
        let load = now < workload_end;
        if load {
            for _ in 0..rng.gen_range(0..4) {
                m.write(&mut rng);
            }
            // Faults: a restart (the replica keeps its data and offset) or a
            // long outage (the backlog moves on without it).
            for (i, r) in reps.iter_mut().enumerate() {
                if now < r.down_until || now < 200 * MS {
                    continue;
                }
                let x: f64 = rng.gen();
                if x < 0.0004 {
                    restarts += 1;
                    r.down_until = now + rng.gen_range(1..20) * MS;
                    let until = r.down_until;
                    r.reconnect(until, &mut rng);
                } else if x < 0.0006 && i != 0 {
                    outages += 1;
                    r.down_until = now + rng.gen_range(200..600) * MS;
                }
            }
        }
        m.scan();
        m.drain();
        m.sessions();
        if m.fs.is_active() && m.fs.complete() && m.fs.session() != seen_complete {
            seen_complete = m.fs.session();
            let end = m.backlog.end();
            for r in 0..n {
                if m.reps[r].member {
                    completed.push((r, end));
                }
            }
        }
        for (r, link) in to_master.iter_mut().enumerate() {
            while let Some(fr) = link.due(now) {
                m.on_frame(r, &fr, now, &mut to_rep[r], &mut rng, lossy);
            }
        }
        for (r, link) in to_rep.iter_mut().enumerate() {
            m.tick(r, now, link, &mut rng, lossy);
        }
        let views: Vec<ReplicaView> = m
            .reps
            .iter()
            .map(|x| ReplicaView {
                online: x.state.counted(),
                acked: x.acked,
                last_ack_ns: x.last_ack_ns,
            })
            .collect();
        let gate = m.gate.evaluate(now, views);
        assert!(gate.quorum_offset == 0 || gate.quorum_offset <= m.backlog.end());
        for (r, rep) in reps.iter_mut().enumerate() {
            while let Some(fr) = to_rep[r].due(now) {
                if now >= rep.down_until {
                    rep.on_frame(&fr, now, &mut to_master[r], &mut rng, lossy);
                }
            }
            if now >= rep.down_until {
                rep.tick(now, &mut to_master[r], &mut rng, lossy);
            }
        }
        // Members of a completed scan session are exact from its end on
        // once they apply the SNAPSHOT_END (their WELCOME Full cleared it).
        completed.retain(|&(r, end)| {
            if reps[r].applier.applied_live().is_some() && reps[r].exact_from.is_none() {
                reps[r].exact_from = Some(end);
                false
            } else {
                m.reps[r].member
            }
        });
        if now % (100 * MS) == 0 {
            for rep in &reps {
                if let (Some(o), Some(x)) = (rep.applier.applied_live(), rep.exact_from) {
                    if o >= x {
                        let want = replay(&m.history, o);
                        assert!(
                            rep.sink.0 == want,
                            "seed {seed} at {now}: replica at {o}: {} keys differ",
                            differing(&rep.sink.0, &want)
                        );
                        exact_checks += 1;
                    }
                }
            }
        }
        now += STEP;
        if !load {
            let end = m.backlog.end();
            let done = reps.iter().enumerate().all(|(r, rep)| {
                rep.applier.applied_live() == Some(end) && m.reps[r].state == ReplicaState::Online
            });
            if done {
                break;
            }
            assert!(
                now < workload_end + 20_000 * MS,
                "seed {seed}: no convergence: {:?}",
                reps.iter()
                    .zip(&m.reps)
                    .map(|(r, x)| (
                        r.applier.applied_live(),
                        r.applier.report(),
                        x.state,
                        x.shipper.stats()
                    ))
                    .collect::<Vec<_>>()
            );
        }
    }
    let want = m.data();
    for (r, rep) in reps.iter().enumerate() {
        assert!(
            rep.sink.0 == want,
            "seed {seed}: replica {r} diverged: {} keys differ",
            differing(&rep.sink.0, &want)
        );
    }
    let partials: u32 = m.reps.iter().map(|x| x.partials).sum();
    let fulls: u32 = m.reps.iter().map(|x| x.fulls).sum();
    let resent: u64 = m.reps.iter().map(|x| x.shipper.stats().resent).sum();
    let segments: u64 = m.reps.iter().map(|x| x.shipper.stats().segments).sum();
    let timeouts: u64 = m.reps.iter().map(|x| x.shipper.stats().timeouts).sum();
    let naks: u64 = m.reps.iter().map(|x| x.shipper.stats().naks).sum();
    eprintln!(
        "seed {seed}: {} records, {} bytes, {} evicted, restarts {restarts}, outages {outages}, partial {partials}, full {fulls}, sessions {}, segments {segments}, resent {resent}, timeouts {timeouts}, naks {naks}, exact checks {exact_checks}, refused {}",
        m.history.len(), m.backlog.end(), m.backlog.evicted_records(), m.sessions, m.refused
    );
    assert!(
        partials > n as u32,
        "seed {seed}: restarts resynced partially"
    );
    assert!(fulls > n as u32, "seed {seed}: outages needed full syncs");
    assert!(m.backlog.evicted_records() > 0);
    assert!(resent > 0);
    assert!(exact_checks > 0);
    let gate = m.gate.evaluate(
        now,
        m.reps.iter().map(|x| ReplicaView {
            online: x.state.counted(),
            acked: x.acked,
            last_ack_ns: now,
        }),
    );
    assert!(gate.writes_allowed);
}

#[test]
fn replicas_converge_under_faults() {
    for seed in [1, 2, 3] {
        run(seed);
    }
}
