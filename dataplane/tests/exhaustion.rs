//! Memory exhaustion through the real request path: request frames built with kvwire
//! go through `Server::handle_burst` (the engine's batch and, where noted, the
//! reservation station), responses are parsed back and compared with a `HashMap`
//! model. Stores are small (512 KiB .. 4 MiB) so they fill in milliseconds.
//!
//! What each test proves:
//!
//! * [`fill_until_out_of_memory_keeps_every_acknowledged_key`]: PUTs of distinct keys
//!   with values in every slab class (and inline) are answered OK until the slab is
//!   gone, then OUT_OF_MEMORY; never any other status, no drop, no panic. Every
//!   acknowledged key reads back its exact value, every refused key is absent (the
//!   engine's contract: an out-of-memory PUT changes nothing). Once every class has
//!   been refused, the whole slab area is in allocated blocks (no free block left in
//!   the worker cache or the shared pool, no frontier): the store said "full" only
//!   when it was. A replace of the same class still succeeds in place at full, also
//!   through the reservation station, which answers OUT_OF_MEMORY for a new key.
//! * [`deletes_free_space_for_as_many_bytes`]: DELETE answers OK for stored keys and
//!   NOT_FOUND for refused ones; the space comes back. The bound: a deleted KV frees
//!   exactly its block of size class `2^c >= header + key + value`, and the allocation
//!   path never merges, so the freed space is reusable as blocks of the same classes.
//!   Storing, per freed block, a new KV of the largest size that class holds (inserted
//!   from the largest class down, so no refill splits a block a later PUT needs) must
//!   succeed every time, which stores at least the freed bytes (more by at most each
//!   block's rounding slack). After that the store is exactly full again.
//! * [`one_class_fills_all_slabs_smaller_split_larger_needs_merge`]: the allocator's
//!   design (docs/ENGINE.md, "Slab allocator"): free blocks split down to smaller
//!   classes on demand, but merge up only in the lazy merge. A 256 B class fills the
//!   whole slab with no waste; then neither 128 B nor 1 KiB records fit. After deleting
//!   3/4 of them, 1 KiB still does not fit (no merge on the alloc path) while the
//!   128 B class gets exactly two blocks per freed 256 B block, including the ones
//!   still in the worker's cache (before this test, those were refused: fixed in
//!   `WorkerCache::refill`, see crates/kvengine/tests/exhaustion.rs). After deleting everything, 1 KiB fits only once the
//!   control path's merge ran (`control::merge_now`: the worker flushes its cache,
//!   then the slab daemon merges), and then exactly `slab / 1 KiB` times.
//! * [`chained_index_fills_then_refuses_cleanly`]: a 64-bucket index under ~40 k inline
//!   KVs: buckets chain (chained buckets come from the 64 B class) until no chained
//!   bucket can be allocated; the first OUT_OF_MEMORY comes only once every slab unit
//!   is a chained bucket. Everything stored stays readable; in-place replaces and
//!   delete + re-put of the same key still succeed at full; deleting everything
//!   gives every chained bucket back.
//!
//! Every exchange ([`Rig::exec`]) also checks the framing: every response frame
//! parses (ICRC included), is addressed to the client, carries the next response PSN,
//! the request's batch id and the right first index; each request is answered by its
//! frames' results exactly once per op, in order, and nothing is dropped.

mod common;

use common::{connect, identity, total_drops, Client, RKEY, SERVER_QPN, W};
use dataplane::server::Server;
use dataplane::slab_daemon::SlabDaemon;
use dataplane::stats::WorkerStats;
use kvengine::{Engine, EngineConfig, Region};
use kvwire::{parse_response, psn, BatchWriter, KvOp, ResponseReader, Status};
use std::collections::HashMap;

const QPN: u32 = 17;
/// Every key is 8 bytes (distinct by construction, see [`key`]).
const KEY_LEN: usize = 8;
/// Request payload bytes: the buffer `common::request_to` encodes into.
const PAYLOAD: usize = 1440;
/// PUTs per fill round.
const ROUND: usize = 256;
/// Inline threshold of every store (key + value bytes).
const INLINE: usize = 20;

/// A seeded splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// The `i`-th key: a bijection of `i`, so keys never repeat.
fn key(i: u64) -> Vec<u8> {
    i.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes().to_vec()
}

/// Record header bytes for an 8 B key and a `vlen` value (docs/ENGINE.md).
fn hdr(vlen: usize) -> usize {
    2 + 2 * usize::from(vlen >= 512)
}

/// Largest value an 8 B key can have in a slab block of `bytes`.
fn max_value(bytes: usize) -> usize {
    bytes - KEY_LEN - hdr(bytes - KEY_LEN - 2)
}

/// Slab class index (block `32 << c`) of an 8 B key with a `vlen` value; `None`
/// when it is stored inline.
fn class_of(vlen: usize) -> Option<usize> {
    let total = KEY_LEN + vlen;
    (total > INLINE).then(|| {
        (hdr(vlen) + total)
            .next_power_of_two()
            .max(32)
            .trailing_zeros() as usize
            - 5
    })
}

/// Value lengths of "class" `k`: 0 inline, `c + 1` slab class `c` (exact boundaries).
/// Inline KVs take two 5 B slots (at most 10 B): a bucket then overflows only past
/// five keys, so the mixed stores below never chain (wider inline KVs made a bucket
/// of four keys overflow now and then; chaining is the last test's subject).
fn value_len(k: usize, rng: &mut Rng) -> usize {
    let (lo, hi) = match k {
        0 => (1, 2),
        1 => (INLINE - KEY_LEN + 1, max_value(32)),
        _ => (max_value(16 << (k - 1)) + 1, max_value(32 << (k - 1))),
    };
    lo + rng.below(hi - lo + 1)
}

/// An op owning its bytes.
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Get(Vec<u8>),
    Del(Vec<u8>),
}

impl Op {
    fn wire(&self) -> KvOp<'_> {
        match self {
            Op::Put(k, v) => KvOp::Put { key: k, value: v },
            Op::Get(k) => KvOp::Get { key: k },
            Op::Del(k) => KvOp::Delete { key: k },
        }
    }
}

/// A server with one connected client, and what went over the wire so far.
struct Rig {
    server: Server,
    client: Client,
    stats: WorkerStats,
    /// Requests sent (the next request's number and batch id).
    sent: u32,
    /// PSN the next response frame must carry.
    resp_psn: u32,
}

impl Rig {
    fn new(mem: usize, hash_index_ratio: f64) -> Rig {
        let cfg = EngineConfig {
            mem_bytes: mem,
            hash_index_ratio,
            inline_threshold: INLINE,
            ..EngineConfig::default()
        };
        let engine = Engine::new(Region::owned(mem), &cfg).expect("engine");
        let mut server = Server::new(identity(), &[(QPN, RKEY)], engine);
        let client = connect(&mut server, QPN, RKEY);
        let resp_psn = client.accept.response_psn;
        Rig {
            server,
            client,
            stats: WorkerStats::default(),
            sent: 0,
            resp_psn,
        }
    }

    fn engine(&self) -> &Engine {
        self.server.engine()
    }

    /// Bytes of slab memory (the region past the primary buckets).
    fn slab_bytes(&self) -> u64 {
        let st = self.engine().stats();
        st.region_bytes - st.hash_buckets * 64
    }

    /// Sends `ops` packed into as few requests as fit, in bursts of the client's
    /// window; checks the framing of every response and returns one result per op.
    fn exec(&mut self, ops: &[Op]) -> Vec<(Status, Vec<u8>)> {
        let wire: Vec<KvOp<'_>> = ops.iter().map(Op::wire).collect();
        let mut reqs = Vec::new();
        let mut scratch = [0u8; PAYLOAD];
        let mut i = 0;
        while i < wire.len() {
            let mut w = BatchWriter::new(&mut scratch, 0).expect("header");
            let start = i;
            while i < wire.len() && w.push(&wire[i]).is_ok() {
                i += 1;
            }
            assert!(i > start, "op {i} fits no request");
            reqs.push(start..i);
        }
        let mut out = Vec::with_capacity(ops.len());
        for burst in reqs.chunks(usize::from(W)) {
            let first = self.sent;
            let frames: Vec<Vec<u8>> = (first..)
                .zip(burst)
                .map(|(n, r)| self.client.request(&wire[r.clone()], n, n))
                .collect();
            let answers = common::run(&mut self.server, &self.stats, &frames);
            let mut answers = answers.iter();
            for (id, r) in (first..).zip(burst) {
                let mut got = 0;
                loop {
                    let f = answers
                        .next()
                        .unwrap_or_else(|| panic!("request {id} unanswered"));
                    let resp = parse_response(f).expect("well-formed response (ICRC included)");
                    assert_eq!((resp.dest_qp, resp.src_qp), (QPN, SERVER_QPN));
                    assert_eq!(resp.psn, self.resp_psn, "response PSNs in sequence");
                    self.resp_psn = psn::add(self.resp_psn, 1);
                    let rr = ResponseReader::new(resp.payload).expect("response header");
                    assert_eq!(rr.batch_id(), id, "responses in request order");
                    assert_eq!(usize::from(rr.first_index()), got, "request {id}");
                    let more = rr.more();
                    for x in rr {
                        let x = x.expect("well-formed result");
                        out.push((x.status, x.value.to_vec()));
                        got += 1;
                    }
                    if !more {
                        break;
                    }
                }
                assert_eq!(got, r.len(), "request {id}: exactly one result per op");
            }
            assert!(answers.next().is_none(), "a frame nobody asked for");
            self.sent += burst.len() as u32;
        }
        assert_eq!(total_drops(&self.stats), 0, "nothing dropped");
        assert_eq!(self.stats.requests.get(), u64::from(self.sent));
        out
    }

    /// Asserts that no free slab block is left anywhere: worker cache, shared pool
    /// lists, frontier; so every slab byte is in an allocated block.
    fn assert_slab_all_allocated(&self) {
        let st = self.engine().stats();
        assert_eq!(st.frontier_bytes, 0);
        let mut allocated = 0;
        for (c, cs) in st.classes[..st.nclasses].iter().enumerate() {
            assert_eq!((cs.worker_cached, cs.shared_free), (0, 0), "class {c}");
            allocated += cs.allocated * cs.class_bytes as u64;
        }
        assert_eq!(allocated, self.slab_bytes(), "every slab byte allocated");
    }
}

/// A [`Rig`] with the model of its store: what is stored (`model`) and keys that
/// must be absent (refused or deleted).
struct Store {
    rig: Rig,
    model: HashMap<Vec<u8>, Vec<u8>>,
    absent: Vec<Vec<u8>>,
    next_key: u64,
    rng: Rng,
}

impl Store {
    fn new(mem: usize, hash_index_ratio: f64, seed: u64) -> Store {
        Store {
            rig: Rig::new(mem, hash_index_ratio),
            model: HashMap::new(),
            absent: Vec::new(),
            next_key: 0,
            rng: Rng(seed),
        }
    }

    /// PUTs new keys with random values of lengths `vlens`; returns the keys and
    /// statuses (only OK or OUT_OF_MEMORY allowed) and applies them to the model.
    fn put_new(&mut self, vlens: impl IntoIterator<Item = usize>) -> Vec<(Vec<u8>, Status)> {
        let ops: Vec<Op> = vlens
            .into_iter()
            .map(|len| {
                self.next_key += 1;
                Op::Put(key(self.next_key), self.rng.bytes(len))
            })
            .collect();
        let res = self.rig.exec(&ops);
        let mut out = Vec::with_capacity(ops.len());
        for (op, (s, v)) in ops.into_iter().zip(res) {
            let Op::Put(k, val) = op else { unreachable!() };
            assert!(v.is_empty(), "a PUT result carries no value");
            match s {
                Status::Ok => assert!(self.model.insert(k.clone(), val).is_none()),
                Status::OutOfMemory => self.absent.push(k.clone()),
                other => panic!("PUT answered {other:?}"),
            }
            out.push((k, s));
        }
        out
    }

    /// The status of one PUT of a new key with a `vlen`-byte value.
    fn probe(&mut self, vlen: usize) -> Status {
        self.put_new([vlen])[0].1
    }

    /// Fills with values of every "class" of [`value_len`] until a round of
    /// [`ROUND`] PUTs stores no slab record (inline KVs may still fit the index).
    fn fill(&mut self) {
        for _ in 0..1000 {
            let lens: Vec<usize> = (0..ROUND)
                .map(|_| {
                    let k = self.rng.below(7);
                    value_len(k, &mut self.rng)
                })
                .collect();
            let st = self.put_new(lens.iter().copied());
            let refused = st.iter().any(|r| r.1 == Status::OutOfMemory);
            let mut slab_ok = lens.iter().zip(&st);
            if refused && !slab_ok.any(|(l, r)| class_of(*l).is_some() && r.1 == Status::Ok) {
                return;
            }
        }
        panic!("the store never filled");
    }

    /// One more PUT per slab class of the mixed stores (32 B .. 1 KiB), each refused:
    /// afterwards no class has a free block anywhere.
    fn assert_full(&mut self) {
        for c in 0..6 {
            let s = self.probe(max_value(32 << c));
            assert_eq!(s, Status::OutOfMemory, "class {c}");
        }
    }

    /// Fills with `vlen`-byte values until a PUT is refused; returns the keys stored.
    fn fill_class(&mut self, vlen: usize) -> Vec<Vec<u8>> {
        let mut stored = Vec::new();
        loop {
            let st = self.put_new([vlen; ROUND]);
            let ok = st.iter().take_while(|r| r.1 == Status::Ok).count();
            assert!(
                st[ok..].iter().all(|r| r.1 == Status::OutOfMemory),
                "one class: once refused, always"
            );
            stored.extend(st.into_iter().take(ok).map(|r| r.0));
            if ok < ROUND {
                return stored;
            }
        }
    }

    /// Deletes `keys` (all stored), checking every status.
    fn delete(&mut self, keys: &[Vec<u8>]) {
        let ops: Vec<Op> = keys.iter().map(|k| Op::Del(k.clone())).collect();
        assert!(self.rig.exec(&ops).iter().all(|r| r.0 == Status::Ok));
        for k in keys {
            self.model.remove(k).expect("was stored");
            self.absent.push(k.clone());
        }
    }

    /// The stored keys, sorted.
    fn keys(&self) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.model.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Reads back every stored key (exact value) and every absent one (NOT_FOUND),
    /// checks the engine's live counts against the model and its invariants.
    fn verify(&mut self) {
        let keys = self.keys();
        let ops: Vec<Op> = keys
            .iter()
            .chain(&self.absent)
            .map(|k| Op::Get(k.clone()))
            .collect();
        let res = self.rig.exec(&ops);
        for (k, (s, v)) in keys.iter().zip(&res) {
            assert_eq!(*s, Status::Ok, "acknowledged key {k:02x?} lost");
            assert_eq!(v, &self.model[k], "key {k:02x?} has another value");
        }
        for (k, (s, _)) in self.absent.iter().zip(&res[keys.len()..]) {
            assert_eq!(*s, Status::NotFound, "key {k:02x?} should be absent");
        }
        let st = self.rig.engine().stats();
        assert_eq!(st.stored_kvs, self.model.len() as u64);
        let bytes: usize = self.model.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert_eq!(st.stored_kv_bytes, bytes as u64);
        self.rig.engine().check_invariants().unwrap();
    }
}

/// The 4 MiB mixed-size store of tests 1 and 2, full to the last block.
fn full_mixed_store(seed: u64) -> Store {
    // 32768 buckets for ~7 k keys: no bucket chains, the slab holds records only.
    let mut s = Store::new(4 << 20, 0.5, seed);
    s.fill();
    s.assert_full();
    let (st, refused) = (s.rig.engine().stats(), s.absent.len() as u64);
    assert_eq!(st.chained_buckets, 0, "the index did not chain");
    assert_eq!(st.ops.put_oom, refused, "one engine refusal per status");
    assert_eq!(s.rig.stats.op_errors.get(), refused);
    s
}

#[test]
fn fill_until_out_of_memory_keeps_every_acknowledged_key() {
    let mut s = full_mixed_store(1);
    s.rig.assert_slab_all_allocated();
    for c in [None, Some(0), Some(3), Some(5)] {
        let n = s.model.values().filter(|v| class_of(v.len()) == c).count();
        assert!(n > 50, "class {c:?}: {n} stored");
    }
    s.verify();
    // At full, a replace needing the same block is done in place, straight or through
    // the reservation station (on for repeated keys), which refuses a new key too.
    let (old, vlen) = s
        .model
        .iter()
        .find(|(_, v)| class_of(v.len()) == Some(4))
        .map(|(k, v)| (k.clone(), v.len()))
        .unwrap();
    s.rig.server.set_station_kv(true);
    s.next_key += 1;
    let new = key(s.next_key);
    let (v1, v2) = (s.rng.bytes(vlen), s.rng.bytes(vlen));
    let res = s.rig.exec(&[
        Op::Put(new.clone(), v1.clone()),
        Op::Put(new.clone(), v2),
        Op::Get(new.clone()),
        Op::Put(old.clone(), v1.clone()),
        Op::Get(old.clone()),
    ]);
    let statuses: Vec<Status> = res.iter().map(|r| r.0).collect();
    let (ok, oom) = (Status::Ok, Status::OutOfMemory);
    assert_eq!(statuses, [oom, oom, Status::NotFound, ok, ok]);
    assert_eq!(res[4].1, v1);
    s.model.insert(old, v1);
    s.absent.push(new);
    s.rig.server.set_station_kv(false);
    s.verify();
}

#[test]
fn deletes_free_space_for_as_many_bytes() {
    let mut s = full_mixed_store(2);
    let victims: Vec<Vec<u8>> = s
        .keys()
        .into_iter()
        .filter(|_| s.rng.below(3) == 0)
        .collect();
    let refused: Vec<Vec<u8>> = s.absent.iter().take(20).cloned().collect();
    let ops: Vec<Op> = victims
        .iter()
        .chain(&refused)
        .map(|k| Op::Del(k.clone()))
        .collect();
    let res = s.rig.exec(&ops);
    let (hit, miss) = res.split_at(victims.len());
    assert!(hit.iter().all(|r| r.0 == Status::Ok));
    assert!(miss.iter().all(|r| r.0 == Status::NotFound));
    // What each deleted KV held: its value length, hence its class or slot count.
    let mut freed: Vec<usize> = victims
        .iter()
        .map(|k| s.model.remove(k).unwrap().len())
        .collect();
    s.absent.extend(victims);
    s.verify();
    // Per freed KV a new one of the largest size its block (or inline slot run)
    // holds, largest class first. Inline: the same slot count (5 B slots).
    freed.sort_by_key(|&v| std::cmp::Reverse(class_of(v).map_or(0, |c| c + 1)));
    let biggest = |v: usize| match class_of(v) {
        Some(c) => max_value(32 << c),
        None => (KEY_LEN + v).div_ceil(5) * 5 - KEY_LEN,
    };
    let freed_bytes: usize = freed.iter().map(|v| KEY_LEN + v).sum();
    let lens: Vec<usize> = freed.iter().map(|&v| biggest(v)).collect();
    let stored_bytes: usize = lens.iter().map(|v| KEY_LEN + v).sum();
    let st = s.put_new(lens);
    assert!(st.iter().all(|r| r.1 == Status::Ok), "freed block lost");
    assert!(stored_bytes >= freed_bytes);
    println!(
        "deleted {} KVs ({freed_bytes} B), stored {} KVs ({stored_bytes} B) in their blocks",
        freed.len(),
        st.len()
    );
    // The same blocks were taken again: the store is exactly full once more.
    s.assert_full();
    s.rig.assert_slab_all_allocated();
    s.verify();
}

#[test]
fn one_class_fills_all_slabs_smaller_split_larger_needs_merge() {
    // 1 MiB: 4096 buckets (no chaining for ~6 k keys), 768 KiB of slab.
    let mut s = Store::new(1 << 20, 0.25, 3);
    let slab = s.rig.slab_bytes();
    let (v128, v256, v1k) = (max_value(128), max_value(256), max_value(1024));
    assert_eq!([v128, v256, v1k].map(class_of), [Some(2), Some(3), Some(5)]);
    let big = s.fill_class(v256);
    assert_eq!(big.len() as u64, slab / 256, "one class, whole slab");
    s.rig.assert_slab_all_allocated();
    assert_eq!(s.probe(v128), Status::OutOfMemory, "nothing left to split");
    assert_eq!(s.probe(v1k), Status::OutOfMemory);
    assert_eq!(s.probe(2), Status::Ok, "inline KVs need no slab");

    // Free 3/4 of the 256 B blocks: the smaller class splits every one of them, those
    // the worker still caches included; the larger class gets none without a merge.
    let (gone, kept): (Vec<Vec<u8>>, Vec<Vec<u8>>) =
        big.into_iter().partition(|_| s.rng.below(4) != 0);
    s.delete(&gone);
    let cached = s.rig.engine().stats().classes[3].worker_cached;
    assert!(cached > 0, "freed blocks still cached");
    assert_eq!(
        s.probe(v1k),
        Status::OutOfMemory,
        "no merge on the alloc path"
    );
    let small = s.fill_class(v128);
    assert_eq!(small.len(), 2 * gone.len(), "two per freed block");
    s.rig.assert_slab_all_allocated();
    s.verify();

    // Free every slab record: 1 KiB still needs the merge, then fills the slab.
    s.delete(&kept);
    s.delete(&small);
    assert_eq!(s.probe(v1k), Status::OutOfMemory, "free, but not merged");
    dataplane::control::merge_now(s.rig.server.engine_mut());
    let merged = SlabDaemon::new(vec![s.rig.engine().slab_service()]).merge_all();
    assert!(merged.merged_pairs > 0);
    let large = s.fill_class(v1k);
    assert_eq!(large.len() as u64, slab / 1024, "merged back whole");
    s.rig.assert_slab_all_allocated();
    s.verify();
}

#[test]
fn chained_index_fills_then_refuses_cleanly() {
    // 512 KiB with 64 primary buckets: 10 B KVs (two 5 B slots, five per bucket) chain
    // ~130 buckets deep before the 64 B class runs out.
    let mem = 512 << 10;
    let mut s = Store::new(mem, 64.0 * 64.0 / mem as f64, 4);
    assert_eq!(s.rig.engine().stats().hash_buckets, 64);
    let slab_units = s.rig.slab_bytes() / 64;
    let mut first_full = None;
    for round in 0.. {
        assert!(round < 1000, "never filled");
        let st = s.put_new([2; 2 * ROUND]);
        if first_full.is_none() && st.iter().any(|r| r.1 == Status::OutOfMemory) {
            // The first refusal came only once every slab unit was a chained bucket.
            let es = s.rig.engine().stats();
            assert_eq!(es.chained_buckets, slab_units);
            assert_eq!(es.classes[1].allocated, slab_units);
            s.rig.assert_slab_all_allocated();
            first_full = Some(s.model.len());
        }
        if st.iter().all(|r| r.1 == Status::OutOfMemory) {
            break;
        }
    }
    println!(
        "{} KVs at the first refusal, {} at the end, {slab_units} chained buckets",
        first_full.unwrap(),
        s.model.len()
    );
    s.verify();
    // At full: in-place replaces, and delete + re-put of the same key, still succeed.
    let keys = s.keys();
    let some: Vec<Vec<u8>> = keys.iter().step_by(97).cloned().collect();
    let mut ops: Vec<Op> = some
        .iter()
        .map(|k| Op::Put(k.clone(), s.rng.bytes(2)))
        .collect();
    ops.extend(some.iter().map(|k| Op::Del(k.clone())));
    ops.extend(some.iter().map(|k| Op::Put(k.clone(), s.rng.bytes(2))));
    let res = s.rig.exec(&ops);
    assert!(
        res.iter().all(|r| r.0 == Status::Ok),
        "at full, no new block"
    );
    for op in &ops[2 * some.len()..] {
        if let Op::Put(k, v) = op {
            s.model.insert(k.clone(), v.clone());
        }
    }
    s.verify();
    // Deleting everything gives every chained bucket back.
    s.delete(&keys);
    let es = s.rig.engine().stats();
    assert_eq!((es.stored_kvs, es.chained_buckets), (0, 0));
    assert!(es.classes.iter().all(|c| c.allocated == 0));
    s.verify();
}
