//! Request processing, independent of DPDK: request frames in, response frames out.
//!
//! The worker loop hands [`Server::handle_burst`] the frames of one rx burst. For each
//! frame the server checks, in order: the wire format (kvwire's `parse_request`,
//! ICRC included), the destination MAC/IP, the client's QP, its R_Key, the RETH
//! address range, and the PSN. Admitted frames' KV batches are decoded in place (keys
//! and values stay in the rx buffers) and the operations of the whole burst are
//! executed in chunks of [`CHUNK`]:
//!
//! * a chunk of GET/PUT/DELETE runs straight through the engine's pipelined batch (which
//!   prefetches across packets and executes repeated keys in order) and its results
//!   stream into the responses — unless `station_kv` is on and a key repeats;
//! * any other chunk (a read-modify-write op — atomic, vector update, reduce, filter — or,
//!   with `station_kv`, a key seen twice) goes through the per-worker reservation station
//!   (`kvops::Station`, docs/OPERATIONS.md), which orders dependent ops, forwards values
//!   between them and merges their updates into one write-back — or, with `ooo = false`,
//!   stalls on each conflict. Its completions (by chain, not in arrival order) are
//!   collected in a per-chunk result buffer and then emitted in op order.
//!
//! Results go into response frames in op order; a request whose results do not fit in
//! one frame is answered with several (the MORE flag and `first_index` tell the client).
//!
//! Every frame that is not answered is counted under a [`DropReason`]; every op that
//! is answered with an error is counted under its status.

use crate::chunk::{Chunk, ChunkDeps, CHUNK};
use crate::clients::{ClientTable, PsnVerdict};
use crate::packet::{Identity, PktCtx, Source, Tag, MAX_BURST, RESPONSE_UDP_SRC_PORT};
use crate::respond::{Ctx, EngineSink, Responder};
use crate::stage::EngineStage;
use crate::stats::WorkerStats;
use crate::tx::TxSink;
use arrayvec::ArrayVec;
use kvengine::{BatchOp, Engine};
use kvops::{FunctionRegistry, Station, StationConfig};
use kvwire::partition::partition_of_hash;
use kvwire::{parse_request, response_payload_capacity, BatchReader, DropReason, KvOp, Status};

/// The station's key hash: the engine's, so the station and the engine agree.
type KeyHash = fn(&[u8]) -> u64;

/// Results of one station chunk by op index: status, offset and length in the arena.
struct StationResults {
    slots: Box<[(Status, u32, u32)]>,
    /// Result bytes; `CHUNK × max_value_len`, so every op's result fits.
    arena: Box<[u8]>,
}

/// Request processing state of one worker: identity, clients, engine, reservation
/// station, counters.
pub struct Server {
    id: Identity,
    /// Admitted clients and their sequence state.
    clients: ClientTable,
    engine: Engine,
    station: Station<KeyHash>,
    results: StationResults,
    /// This worker's partition and the number of partitions (`kvwire::partition`).
    partition: u32,
    partitions: u32,
    /// Send GET/PUT/DELETE chunks with a repeated key through the station too.
    station_kv: bool,
    /// Dependencies within the chunk being built.
    deps: Box<ChunkDeps>,
    /// The payload of the response frame being built (`respond`).
    resp: Box<[u8]>,
}

impl Server {
    /// A server over `engine` admitting `clients` as (QPN, R_Key) pairs, with an
    /// out-of-order reservation station and only the built-in functions.
    pub fn new(id: Identity, clients: &[(u32, u32)], engine: Engine) -> Server {
        Self::with_station(id, clients, engine, true, FunctionRegistry::new())
    }

    /// A server whose reservation station runs out of order (`ooo`) or stalls on
    /// conflicts, resolving function IDs through `registry`.
    pub fn with_station(
        id: Identity,
        clients: &[(u32, u32)],
        engine: Engine,
        ooo: bool,
        registry: FunctionRegistry,
    ) -> Server {
        let mtu = id.mtu;
        let max_value_len = engine.max_value_len().max(8);
        let cfg = StationConfig {
            ooo,
            max_batch: CHUNK,
            max_value_len,
        };
        let station = Station::new(cfg, kvengine::key_hash as KeyHash, registry)
            .expect("CHUNK and max_value_len are within the station's limits");
        Server {
            id,
            clients: ClientTable::new(clients),
            engine,
            station,
            results: StationResults {
                slots: vec![(Status::Ok, 0, 0); CHUNK].into_boxed_slice(),
                arena: vec![0; CHUNK * max_value_len].into_boxed_slice(),
            },
            partition: 0,
            partitions: 1,
            station_kv: false,
            deps: Box::new(ChunkDeps::new()),
            // An MTU that leaves less than a header and one bare result answers nothing
            // (each response counted as `mtu_too_small`) rather than exceed the MTU.
            resp: vec![0; response_payload_capacity(mtu)].into_boxed_slice(),
        }
    }

    /// With `on`, a chunk of GET/PUT/DELETE in which a key repeats also goes through
    /// the reservation station (data forwarding between those ops); off (the default),
    /// only chunks with a read-modify-write op do, and repeated keys of plain ops are
    /// left to the engine's batch, which executes them in order and was measured
    /// faster (docs/OPERATIONS.md, results/ooo.json).
    pub fn set_station_kv(&mut self, on: bool) {
        self.station_kv = on;
    }

    /// Makes this server partition `me` of `n`: ops whose key belongs to another
    /// partition are answered `WRONG_PARTITION` (`kvwire::partition`).
    pub fn set_partition(&mut self, me: u32, n: u32) {
        self.partitions = n.max(1);
        self.partition = me.min(self.partitions - 1);
    }

    /// The reservation station (for its counters and configuration).
    pub fn station(&self) -> &Station<fn(&[u8]) -> u64> {
        &self.station
    }

    /// The storage engine (for stats).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The storage engine, mutable (slow-path maintenance such as slab merging).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// Replaces the admitted clients with `clients` (QPN, R_Key) between bursts.
    /// A client whose QPN stays keeps its PSN state (and takes the new R_Key); a
    /// removed one is forgotten, so its frames drop as `UnknownQp` from the next
    /// burst on; a new one starts fresh. Allocates: call it off the hot path.
    pub fn set_clients(&mut self, clients: &[(u32, u32)]) {
        self.clients.set(clients);
    }

    /// Checks a frame up to the batch payload; returns the request and client index.
    fn admit<'f>(&mut self, frame: &'f [u8]) -> Result<(kvwire::Request<'f>, usize), DropReason> {
        let req = parse_request(frame)?;
        if (req.dst_mac != self.id.mac && req.dst_mac != [0xff; 6]) || req.dst_ip != self.id.ip {
            return Err(DropReason::WrongDestination);
        }
        let ci = self
            .clients
            .find(req.dest_qp)
            .ok_or(DropReason::UnknownQp)?;
        let client = &self.clients.as_slice()[ci];
        if client.rkey != req.rkey {
            return Err(DropReason::BadRKey);
        }
        let len = req.payload.len() as u64;
        let inside = req.va >= self.id.region_va
            && req
                .va
                .checked_add(len)
                .is_some_and(|end| end <= self.id.region_va + self.id.region_len);
        if !inside {
            return Err(DropReason::BadVa);
        }
        Ok((req, ci))
    }

    /// Processes one rx burst (at most [`MAX_BURST`] frames; any beyond are ignored):
    /// every frame is answered through `tx` or counted under a [`DropReason`].
    pub fn handle_burst<T: TxSink>(&mut self, frames: &[&[u8]], stats: &WorkerStats, tx: &mut T) {
        let frames = &frames[..frames.len().min(MAX_BURST)];
        // At most one entry per frame, so never more than MAX_BURST.
        let mut pkts = ArrayVec::<PktCtx, MAX_BURST>::new();
        let mut chunk = Chunk::new();
        // The responder borrows the payload buffer for the whole burst while `self` is
        // borrowed by each step; taking the box out (and back) moves no bytes.
        let mut resp = std::mem::take(&mut self.resp);
        let mut out = Responder::new(&mut resp, tx);

        for frame in frames {
            stats.rx_packets.inc();
            let (req, ci) = match self.admit(frame) {
                Ok(x) => x,
                Err(why) => {
                    stats.drop(why);
                    continue;
                }
            };
            match self.clients.as_mut_slice()[ci].accept_psn(req.psn) {
                PsnVerdict::Serve => {}
                PsnVerdict::Gap => stats.psn_gaps.inc(), // counted, still served
                PsnVerdict::Duplicate => {
                    stats.drop(DropReason::PsnDuplicate);
                    continue;
                }
            }
            let reader = match BatchReader::new(req.payload) {
                Ok(r) => r,
                Err(_) => {
                    stats.drop(DropReason::BadPayload);
                    continue;
                }
            };
            stats.requests.inc();
            let pkt = pkts.len() as u8;
            pkts.push(PktCtx {
                params: req.reply_params(self.id.mac, self.id.ip, RESPONSE_UDP_SRC_PORT),
                client: ci as u16,
                batch_id: reader.batch_id(),
            });
            if reader.op_count() == 0 {
                if chunk.tags.is_full() {
                    self.flush(&mut chunk, &pkts, stats, &mut out);
                }
                chunk.tags.push(Tag {
                    pkt,
                    src: Source::Empty,
                });
                continue;
            }
            let mut reader = reader;
            loop {
                // The GET/PUT/DELETE run first (the decoder's state in registers), then
                // the op that ended it through the iterator.
                reader.plain_ops(|op| {
                    if chunk.tags.is_full() {
                        self.flush(&mut chunk, &pkts, stats, &mut out);
                    }
                    let src = self.stage(&mut chunk, op);
                    chunk.tags.push(Tag { pkt, src });
                });
                let Some(item) = reader.next() else { break };
                if chunk.tags.is_full() {
                    self.flush(&mut chunk, &pkts, stats, &mut out);
                }
                let src = match item {
                    Ok(op) => self.stage(&mut chunk, op),
                    // The failing op is answered; later ops are not executed.
                    Err(e) => Source::Immediate(e.status()),
                };
                chunk.tags.push(Tag { pkt, src });
                if matches!(
                    src,
                    Source::Immediate(Status::Malformed | Status::UnknownOpcode)
                ) {
                    break;
                }
            }
        }
        if !chunk.tags.is_empty() {
            self.flush(&mut chunk, &pkts, stats, &mut out);
        }
        out.close(
            &mut Ctx {
                clients: self.clients.as_mut_slice(),
                id: &self.id,
                pkts: &pkts,
                stats,
            },
            false,
        );
        // `out` borrowed `resp` until here.
        self.resp = resp;
    }

    /// Adds a decoded op to the chunk (the caller made room) and says where its result
    /// comes from: the engine/station, or `WRONG_PARTITION` for another partition's key.
    #[inline(always)]
    fn stage<'f>(&mut self, chunk: &mut Chunk<'f>, op: KvOp<'f>) -> Source {
        let (bop, rich) = match op {
            KvOp::Get { key } => (BatchOp::get(key), None),
            KvOp::Put { key, value } => (BatchOp::put(key, value), None),
            KvOp::Delete { key } => (BatchOp::delete(key), None),
            o => (BatchOp::get(o.key()), Some(o)),
        };
        let sharded = self.partitions > 1;
        let repeats = self.station_kv && !self.deps.dependent;
        if sharded || repeats {
            let hash = kvengine::key_hash(bop.key);
            if sharded && partition_of_hash(hash, self.partitions) != self.partition {
                return Source::Immediate(Status::WrongPartition);
            }
            if repeats && rich.is_none() {
                self.deps.note_repeat(bop.key, hash, &chunk.bops);
            }
        }
        if let Some(r) = rich {
            chunk.rich.push((chunk.bops.len() as u16, r));
            self.deps.dependent = true;
        }
        chunk.bops.push(bop);
        Source::Engine
    }

    /// Runs one chunk — straight through the engine when no dependency was found, else
    /// through the reservation station — writes the results (executed and immediate)
    /// into responses in chunk order, and empties the chunk.
    fn flush<T: TxSink>(
        &mut self,
        chunk: &mut Chunk<'_>,
        pkts: &[PktCtx],
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        stats.batches.inc();
        if self.deps.dependent {
            self.flush_station(chunk, pkts, stats, out);
        } else {
            self.flush_engine(chunk, pkts, stats, out);
        }
        chunk.clear();
        self.deps.reset();
    }

    /// A chunk of independent GET/PUT/DELETE: the engine's pipelined batch, results
    /// streamed into the responses. The op counters come from the engine's own
    /// counters, once per chunk, so the per-result step only encodes.
    fn flush_engine<T: TxSink>(
        &mut self,
        chunk: &Chunk<'_>,
        pkts: &[PktCtx],
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        let Server {
            id,
            clients,
            engine,
            ..
        } = self;
        let before = engine.op_counters();
        let mut sink = EngineSink {
            out,
            ctx: Ctx {
                clients: clients.as_mut_slice(),
                id,
                pkts,
                stats,
            },
            tags: &chunk.tags,
            next_tag: 0,
            run_left: 0,
            run_pkt: 0,
        };
        engine.execute_batch(&chunk.bops, &mut sink);
        sink.finish();
        let after = engine.op_counters();
        stats.gets.add(after.gets - before.gets);
        stats.puts.add(after.puts - before.puts);
        stats.deletes.add(after.deletes - before.deletes);
        stats.get_hits.add(after.get_hits - before.get_hits);
        // A batch answers an error status exactly for a refused op or a PUT out of
        // memory (`Engine::execute_batch`).
        stats
            .op_errors
            .add((after.refused - before.refused) + (after.put_oom - before.put_oom));
    }

    /// A chunk with dependencies: the reservation station over the engine. Its
    /// completions come by chain, so they are collected by op index first and then
    /// emitted in chunk order.
    fn flush_station<T: TxSink>(
        &mut self,
        chunk: &Chunk<'_>,
        pkts: &[PktCtx],
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        stats.station_chunks.inc();
        let ops = chunk.station_ops();
        let tags = &chunk.tags[..];
        let Server {
            id,
            clients,
            engine,
            station,
            results,
            ..
        } = self;
        let StationResults { slots, arena } = results;
        let mut used = 0usize;
        let mut sink = |i: usize, status: Status, value: &[u8]| {
            let end = used + value.len();
            let r = match arena.get_mut(used..end) {
                Some(dst) => {
                    dst.copy_from_slice(value);
                    let r = (status, used as u32, value.len() as u32);
                    used = end;
                    r
                }
                // Cannot happen (the arena holds CHUNK results of max_value_len bytes),
                // but input from the wire must never panic the worker: answer INTERNAL.
                None => (Status::Internal, 0, 0),
            };
            if let Some(e) = slots.get_mut(i) {
                *e = r;
            }
        };
        station.process_batch(&ops, &mut EngineStage(engine), &mut sink);
        let st = station.stats();
        stats.forwarded.set(st.forwarded);
        stats.merged.set(st.merged);
        stats.write_backs.set(st.write_backs);
        stats.stalls.set(st.stalls);

        let mut ctx = Ctx {
            clients: clients.as_mut_slice(),
            id,
            pkts,
            stats,
        };
        let mut next_tag = 0usize;
        for (op, &(status, off, len)) in ops.iter().zip(slots.iter()) {
            out.drain_immediates(&mut ctx, tags, &mut next_tag);
            let Some(t) = tags.get(next_tag) else { break };
            count_station_op(stats, op, status);
            let value = arena
                .get(off as usize..off as usize + len as usize)
                .unwrap_or_default();
            out.result(&mut ctx, t.pkt, status, value);
            next_tag += 1;
        }
        out.drain_immediates(&mut ctx, tags, &mut next_tag);
    }
}

/// Counts one op executed by the station.
#[inline]
fn count_station_op(stats: &WorkerStats, op: &KvOp<'_>, status: Status) {
    match op {
        KvOp::Get { .. } => {
            stats.gets.inc();
            if status == Status::Ok {
                stats.get_hits.inc();
            }
        }
        KvOp::Put { .. } => stats.puts.inc(),
        KvOp::Delete { .. } => stats.deletes.inc(),
        KvOp::UpdateS2S { .. } => stats.atomics.inc(),
        KvOp::UpdateS2V { .. } | KvOp::UpdateV2V { .. } => stats.vector_updates.inc(),
        KvOp::Reduce { .. } => stats.reduces.inc(),
        KvOp::Filter { .. } => stats.filters.inc(),
    }
    if !matches!(status, Status::Ok | Status::NotFound) {
        stats.op_errors.inc();
    }
}
