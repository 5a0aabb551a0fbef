//! The mutation tap: every change a worker applies to its engine, as a *post-image*.
//!
//! A [`MutationSink`] installed on a [`Server`](crate::server::Server)
//! (`set_mutation_sink`) is called after every applied mutation with what the key is
//! now, never with the operation that made it:
//!
//! * a PUT that stored its value → `put(key, value)`;
//! * a DELETE that removed a key → `delete(key)` (one that found nothing: nothing);
//!   so does a COMPARE_DELETE whose value matched (one that did not: nothing);
//! * a read-modify-write op (atomic UPDATE_S2S, vector UPDATE_S2V / UPDATE_V2V, user
//!   functions) → `put(key, stored value after the update)`: the reservation station's
//!   write-back of a chain, so several updates of one key merged into one write give
//!   one post-image (the value they produced together);
//! * a failed op (out of memory, too large, wrong partition, NotFound, ...) changed
//!   nothing and gives nothing.
//!
//! Both execution paths are tapped: a chunk that runs straight through the engine's
//! pipelined batch (PUT/DELETE results, [`TapResults`]) and a chunk that goes through
//! the reservation station (its memory stage, [`TapStage`], sees every write-through,
//! delete and write-back). Post-images arrive in the order the engine applied them, so
//! replaying them in order onto a copy that matched the engine before gives the
//! engine's contents after; replaying one twice changes nothing (a fetch-add
//! replicates as the value it produced).
//!
//! **No applied mutation is ever missing.** Before a request packet is served (its
//! PSN consumed), the server reserves the worst case of that packet's post-images
//! ([`worst_case`]) from the sink's [`MutationSink::room`] as read at the start of the
//! burst; a packet that does not fit is refused like a packet under tx backlog: an
//! RNR NAK, nothing executed, counted as drop `overloaded` and as `tap_full`. The
//! client retries after the RNR timer, by which time the sink's consumer has drained.
//! A sink must therefore hold at least the worst case of the largest packet (see
//! [`worst_case`]; a few hundred KiB covers any MTU-1500 packet) or such a packet is
//! refused forever.
//!
//! Costs: with no sink, one branch per burst, per packet and per chunk. With a sink,
//! one decode pass over the packet's ops for the reservation and one call per
//! post-image; nothing allocates.
//!
//! Users: the snapshot writer (one SPSC ring per worker, `crate::snapshot`) and the
//! replication log (the replication lcore's per-worker ring); [`Tee`] feeds two.

use crate::repl::completion::ClientRecords;
use crate::stage::EngineStage;
use kvengine::{BatchOp, Engine, OpKind};
use kvops::MemoryStage;
use kvwire::{BatchReader, Status};

/// Bytes a sink is charged per post-image on top of its key and value: the record
/// header of `kvrepl::record` (kind, key length, value length).
pub const RECORD_OVERHEAD: usize = kvrepl::RECORD_HEADER_LEN;

/// What one post-image of `klen` key bytes and `vlen` value bytes costs against
/// [`MutationSink::room`].
#[inline]
pub const fn record_cost(klen: usize, vlen: usize) -> usize {
    RECORD_OVERHEAD + klen + vlen
}

/// Where a worker's post-images go. Implementations must not block or allocate (they
/// run on the worker's lcore) and must accept every post-image as long as the total
/// [`record_cost`] since `room()` was read does not exceed what it returned.
pub trait MutationSink: Send {
    /// The total [`record_cost`] of post-images this sink is guaranteed to accept from
    /// now on without its consumer draining anything (a lower bound is fine; wrap-around
    /// slack and framing are the implementation's to subtract).
    fn room(&self) -> usize;

    /// `key` now holds `value`.
    fn put(&mut self, key: &[u8], value: &[u8]);

    /// `key` was deleted.
    fn delete(&mut self, key: &[u8]);

    /// The next post-images, `bytes` of records ([`record_cost`] each), are one
    /// transaction's: a replica applies them together. Costs
    /// `kvrepl::GROUP_RECORD_LEN`. The default ignores it (sinks that do not
    /// replicate).
    fn group(&mut self, _bytes: u32) {}

    /// A completion record of client QP `qpn` (`crate::repl::completion`: the blob, as a
    /// `QP_STATE` record). Costs [`record_cost`]`(4, blob.len())`. The default
    /// ignores it (sinks that do not replicate).
    fn qp_state(&mut self, _qpn: u32, _blob: &[u8]) {}

    /// What this sink takes from now on must reach the replicas after everything
    /// worker `ring`'s sink had taken up to its [`MutationSink::position`]
    /// `position` (a cross-partition transaction wrote there: its response, held
    /// for this sink's position in sync mode, then covers those writes too). The
    /// default ignores it (sinks whose order across workers does not matter).
    fn wait_for(&mut self, _ring: u32, _position: u64) {}

    /// `key`, of another worker's partition, now holds `value`: written by a
    /// cross-partition transaction this worker coordinates, which goes whole into
    /// this worker's replication stream (one group, so a replica applies it at
    /// once); the key's owner takes the local copy ([`MutationSink::local_put`]).
    /// Costs [`record_cost`]. The default ignores it (sinks that do not replicate).
    fn stream_put(&mut self, _key: &[u8], _value: &[u8]) {}

    /// [`MutationSink::stream_put`] for a key that was deleted.
    fn stream_delete(&mut self, _key: &[u8]) {}

    /// `key`, of this worker's partition, now holds `value`, and its replication
    /// record went into another worker's stream (a cross-partition transaction's
    /// coordinator's, [`MutationSink::stream_put`]): only what stays with this
    /// partition (a snapshot) takes it. The default is [`MutationSink::put`]
    /// (sinks that do not replicate).
    fn local_put(&mut self, key: &[u8], value: &[u8]) {
        self.put(key, value)
    }

    /// [`MutationSink::local_put`] for a key that was deleted.
    fn local_delete(&mut self, key: &[u8]) {
        self.delete(key)
    }

    /// Called by the worker between bursts with read access to its engine and its
    /// clients' completion records: a sink that walks them (a full sync's scan) does a
    /// bounded step here. Returns whether it did work. The default does nothing.
    fn tick(&mut self, _engine: &Engine, _clients: &mut dyn ClientRecords) -> bool {
        false
    }

    /// The sink's position after the last post-image it took (a replication log:
    /// its ring position; sync mode holds each response until the replicas have the
    /// stream up to it, `crate::repl::hold`). 0 for sinks without one.
    fn position(&self) -> u64 {
        0
    }

    /// While a snapshot is being taken: the snapshot's own ring, where its scan
    /// records go (and nowhere else: not into a replication log behind it). `None`
    /// for every other sink.
    fn snapshot_ring(&mut self) -> Option<&mut dyn MutationSink> {
        None
    }

    /// A sink that was put in front of another (a snapshot in front of the
    /// replication log) gives that one back when it is removed.
    fn into_inner(self: Box<Self>) -> Option<Box<dyn MutationSink>> {
        None
    }
}

/// Two sinks fed with the same post-images (e.g. a snapshot ring and the replication
/// log); room is the smaller of the two.
pub struct Tee<A, B>(pub A, pub B);

impl<A: MutationSink, B: MutationSink> MutationSink for Tee<A, B> {
    fn room(&self) -> usize {
        self.0.room().min(self.1.room())
    }
    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.0.put(key, value);
        self.1.put(key, value);
    }
    fn delete(&mut self, key: &[u8]) {
        self.0.delete(key);
        self.1.delete(key);
    }
    fn group(&mut self, bytes: u32) {
        self.0.group(bytes);
        self.1.group(bytes);
    }
    fn qp_state(&mut self, qpn: u32, blob: &[u8]) {
        self.0.qp_state(qpn, blob);
        self.1.qp_state(qpn, blob);
    }
    fn wait_for(&mut self, ring: u32, position: u64) {
        self.0.wait_for(ring, position);
        self.1.wait_for(ring, position);
    }
    fn stream_put(&mut self, key: &[u8], value: &[u8]) {
        self.0.stream_put(key, value);
        self.1.stream_put(key, value);
    }
    fn stream_delete(&mut self, key: &[u8]) {
        self.0.stream_delete(key);
        self.1.stream_delete(key);
    }
    fn local_put(&mut self, key: &[u8], value: &[u8]) {
        self.0.local_put(key, value);
        self.1.local_put(key, value);
    }
    fn local_delete(&mut self, key: &[u8]) {
        self.0.local_delete(key);
        self.1.local_delete(key);
    }
    fn tick(&mut self, engine: &Engine, clients: &mut dyn ClientRecords) -> bool {
        let a = self.0.tick(engine, clients);
        self.1.tick(engine, clients) || a
    }
    fn position(&self) -> u64 {
        self.0.position().max(self.1.position())
    }
}

impl<S: MutationSink + ?Sized> MutationSink for Box<S> {
    fn room(&self) -> usize {
        (**self).room()
    }
    fn put(&mut self, key: &[u8], value: &[u8]) {
        (**self).put(key, value)
    }
    fn delete(&mut self, key: &[u8]) {
        (**self).delete(key)
    }
    fn group(&mut self, bytes: u32) {
        (**self).group(bytes)
    }
    fn qp_state(&mut self, qpn: u32, blob: &[u8]) {
        (**self).qp_state(qpn, blob)
    }
    fn wait_for(&mut self, ring: u32, position: u64) {
        (**self).wait_for(ring, position)
    }
    fn stream_put(&mut self, key: &[u8], value: &[u8]) {
        (**self).stream_put(key, value)
    }
    fn stream_delete(&mut self, key: &[u8]) {
        (**self).stream_delete(key)
    }
    fn local_put(&mut self, key: &[u8], value: &[u8]) {
        (**self).local_put(key, value)
    }
    fn local_delete(&mut self, key: &[u8]) {
        (**self).local_delete(key)
    }
    fn tick(&mut self, engine: &Engine, clients: &mut dyn ClientRecords) -> bool {
        (**self).tick(engine, clients)
    }
    fn position(&self) -> u64 {
        (**self).position()
    }
    fn snapshot_ring(&mut self) -> Option<&mut dyn MutationSink> {
        (**self).snapshot_ring()
    }
    fn into_inner(self: Box<Self>) -> Option<Box<dyn MutationSink>> {
        (*self).into_inner()
    }
}

/// The most a request payload's post-images can cost ([`record_cost`] summed): zero
/// for an undecodable payload (nothing of it executes), else over the ops up to the
/// first malformed one (which ends execution):
///
/// * PUT: its key and value; DELETE: its key;
/// * UPDATE_S2S: its key and `width` bytes (an S2S applies only to a value of exactly
///   one element, else `BAD_LENGTH`);
/// * UPDATE_V2V: its key and the Δ's length (it applies only to a value of that length);
/// * UPDATE_S2V: its key and `max_value_len` (the stored vector's length, any);
/// * GET, REDUCE, FILTER: nothing.
///
/// Each op gives at most one post-image (a station chain's write-back follows at least
/// one update and takes the value length of the last one), so this bounds the packet.
/// An MTU-1500 request (1.4 KB of payload) costs at most a few hundred KiB, the most
/// for a packet full of UPDATE_S2V on 1-byte keys.
pub fn worst_case(payload: &[u8], max_value_len: usize) -> usize {
    if kvwire::payload::is_tx_payload(payload) {
        // A transaction: the worst case of its batch (each key at most once per op),
        // and its GROUP record.
        return kvwire::payload::TxReader::new(payload).map_or(0, |t| {
            worst_case(t.batch_bytes(), max_value_len) + kvrepl::GROUP_RECORD_LEN
        });
    }
    let Ok(reader) = BatchReader::new(payload) else {
        return 0;
    };
    let mut total = 0usize;
    for op in reader {
        let Ok(op) = op else { break };
        let cost = kvops::semantics::post_image_bound(&op, max_value_len)
            .map_or(0, |n| record_cost(op.key().len(), n));
        total = total.saturating_add(cost);
    }
    total
}

/// The engine batch's result sink with the tap in front: a successful PUT or DELETE
/// of op `i` (looked up in `bops`) goes to the tap, then the result to `inner`.
pub(crate) struct TapResults<'a, 'o, S, T: ?Sized> {
    pub inner: &'a mut S,
    pub bops: &'a [BatchOp<'o>],
    pub tap: &'a mut T,
}

impl<S: kvengine::ResultSink, T: MutationSink + ?Sized> kvengine::ResultSink
    for TapResults<'_, '_, S, T>
{
    #[inline(always)]
    fn result(&mut self, index: usize, status: kvengine::Status, value: &[u8]) {
        if status == kvengine::Status::Ok {
            if let Some(op) = self.bops.get(index) {
                match op.kind {
                    OpKind::Put => self.tap.put(op.key, op.value),
                    OpKind::Delete => self.tap.delete(op.key),
                    OpKind::Get => {}
                }
            }
        }
        self.inner.result(index, status, value);
    }
}

/// The station's memory stage (the engine) with the tap behind every successful
/// write, delete and write-back.
pub(crate) struct TapStage<'a, T: ?Sized> {
    pub engine: EngineStage<'a>,
    pub tap: &'a mut T,
}

impl<'a, T: MutationSink + ?Sized> TapStage<'a, T> {
    pub fn new(engine: &'a mut Engine, tap: &'a mut T) -> Self {
        TapStage {
            engine: EngineStage(engine),
            tap,
        }
    }
}

impl<T: MutationSink + ?Sized> MemoryStage for TapStage<'_, T> {
    #[inline]
    fn prefetch(&mut self, key: &[u8]) {
        self.engine.prefetch(key);
    }

    #[inline]
    fn read(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, Status> {
        self.engine.read(key, out)
    }

    #[inline]
    fn write(&mut self, key: &[u8], value: &[u8]) -> Status {
        let s = self.engine.write(key, value);
        if s == Status::Ok {
            self.tap.put(key, value);
        }
        s
    }

    #[inline]
    fn delete(&mut self, key: &[u8]) -> Status {
        let s = self.engine.delete(key);
        if s == Status::Ok {
            self.tap.delete(key);
        }
        s
    }

    #[inline]
    fn write_back(&mut self, key: &[u8], value: &[u8]) -> Status {
        let s = self.engine.write_back(key, value);
        if s == Status::Ok {
            self.tap.put(key, value);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvwire::KvOp;
    use kvwire::{func, Atomic, BatchWriter, Width};

    fn payload(ops: &[KvOp<'_>]) -> Vec<u8> {
        let mut buf = vec![0u8; 1440];
        let mut w = BatchWriter::new(&mut buf, 7).unwrap();
        for op in ops {
            w.push(op).unwrap();
        }
        let n = w.finish();
        buf.truncate(n);
        buf
    }

    #[test]
    fn worst_case_charges_each_mutating_op() {
        let at = |width| Atomic {
            func: func::FETCH_ADD,
            width,
            signed: false,
        };
        let p = payload(&[
            KvOp::Get { key: b"g" },
            KvOp::Put {
                key: b"pk",
                value: b"value",
            },
            KvOp::Delete { key: b"ddd" },
            KvOp::UpdateS2S {
                key: b"a",
                atomic: at(Width::W4),
                param: 1,
                param2: 0,
            },
            KvOp::UpdateV2V {
                key: b"v",
                atomic: at(Width::W2),
                delta: &[0u8; 6],
            },
            KvOp::UpdateS2V {
                key: b"s",
                atomic: at(Width::W8),
                param: 1,
                param2: 0,
            },
            KvOp::Reduce {
                key: b"r",
                atomic: at(Width::W8),
                init: 0,
            },
        ]);
        let want = record_cost(2, 5) + record_cost(3, 0) + record_cost(1, 4) + record_cost(1, 6);
        assert_eq!(worst_case(&p, 100), want + record_cost(1, 100));
        assert_eq!(worst_case(&p, 10), want + record_cost(1, 10));
        assert_eq!(worst_case(b"junk", 100), 0);
        assert_eq!(worst_case(&payload(&[]), 100), 0);
        // A malformed op ends the sum (it and what follows never execute).
        let mut bad = payload(&[
            KvOp::Put {
                key: b"k",
                value: b"v",
            },
            KvOp::Put {
                key: b"k2",
                value: b"v2",
            },
        ]);
        let n = bad.len();
        bad.truncate(n - 1);
        assert!(worst_case(&bad, 100) <= record_cost(1, 1));
    }

    #[derive(Default)]
    struct Rec(Vec<(Vec<u8>, Option<Vec<u8>>)>, usize);
    impl MutationSink for Rec {
        fn room(&self) -> usize {
            self.1
        }
        fn put(&mut self, k: &[u8], v: &[u8]) {
            self.0.push((k.to_vec(), Some(v.to_vec())));
        }
        fn delete(&mut self, k: &[u8]) {
            self.0.push((k.to_vec(), None));
        }
    }

    #[test]
    fn tee_feeds_both_and_has_the_smaller_room() {
        let mut t = Tee(Rec(Vec::new(), 5), Box::new(Rec(Vec::new(), 3)));
        assert_eq!(t.room(), 3);
        t.put(b"k", b"v");
        t.delete(b"k");
        assert_eq!(t.0 .0, t.1 .0);
        assert_eq!(t.0 .0.len(), 2);
    }
}
