//! Request processing, independent of DPDK: request frames in, response frames out.
//!
//! The worker loop hands [`Server::handle_burst`] the frames of one rx burst. A CONNECT
//! (protocol v2) starts or confirms a client QP's incarnation (`conn`). For a request
//! the server checks, in order: the wire format (kvwire's `parse_client_frame`, ICRC
//! included), the destination MAC/IP, the client's QP, its R_Key, that the QP is
//! connected, the RETH slot (`slot_va` of the PSN), and the PSN against the expected
//! one (`conn`: serve, NAK a gap once, replay a duplicate from the response cache,
//! refuse with an RNR NAK when the tx side is backlogged). Served frames' KV batches
//! are decoded in place (keys and values stay in the rx buffers) and the operations of
//! the whole burst are executed in chunks of [`CHUNK`]:
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
//! Every response frame is built in the worker's response cache (`replay`) first, so a
//! retransmitted request is answered with the same bytes and never executed twice.
//!
//! Every frame that is not answered is counted under a [`DropReason`]; every op that
//! is answered with an error is counted under its status.

mod conn;
mod cross;
mod op_count;
mod open;
mod purge;
mod resume;
mod sync_records;
mod tenants;
mod txn;

pub use crate::clients::Origin;
pub use conn::{first_psns, Transport, DEFAULT_IDLE_CLOSE_S, DEFAULT_MAX_OPENED, RNR_TIMER};
pub use cross::{ParkWaker, PartitionTable, MAX_PARTITIONS};
pub use purge::PurgeDone;
pub use resume::Keeper;
use resume::ServeMark;
pub use tenants::{TenantRule, FAILED_OPENS_PER_S};

use crate::chunk::{Chunk, ChunkDeps, CHUNK};
use crate::clients::ClientTable;
use crate::mutation::{MutationSink, TapResults, TapStage};
use crate::packet::{Identity, PktCtx, Source, Tag, MAX_BURST, RESPONSE_UDP_SRC_PORT};
use crate::repl::gate::WriteGate;
use crate::respond::{Ctx, EngineSink, Responder, MAX_PAYLOAD};
use crate::response_cache::{Arena, Entry};
use crate::stage::EngineStage;
use crate::stats::WorkerStats;
use crate::tx::TxSink;
use arrayvec::ArrayVec;
use kvengine::{BatchOp, Engine};
use kvops::{FunctionRegistry, Station, StationConfig};
use kvwire::partition::{partition_of_hash, peek_dest_qp, peek_psn};
use kvwire::transport::{is_opened_qpn, parse_client_frame, ClientFrame};
use kvwire::{
    response_frame_len, response_payload_capacity, BatchReader, DropReason, KvOp, Status,
    MASTER_HINT_LEN,
};
use std::sync::Arc;

/// The batch id of a payload whose batch header is malformed: its bytes 4–7 if it
/// has them, else 0 (docs/PROTOCOL.md §3.3).
fn malformed_batch_id(payload: &[u8]) -> u32 {
    payload
        .get(4..8)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Below this many admitted clients their state stays in cache and the per-burst
/// prefetch pass (`handle_burst`) is skipped.
const PREFETCH_CLIENTS_ABOVE: usize = 64;

/// The station's key hash: the engine's, so the station and the engine agree.
type KeyHash = fn(&[u8]) -> u64;

/// Results of one station chunk by op index: status, offset and length in the arena.
struct StationResults {
    slots: Box<[(Status, u32, u32)]>,
    /// Result bytes; `CHUNK × max_value_len`, so every op's result fits.
    arena: Box<[u8]>,
}

/// Request processing state of one worker: identity, clients and their connections,
/// response cache, engine, reservation station.
pub struct Server {
    id: Identity,
    /// Admitted clients and their connection state.
    clients: ClientTable,
    /// The request window `W` (credits) of every client.
    credits: u16,
    /// Bytes per request slot (`kvwire::transport::slot_size`).
    slot_size: u64,
    /// The response cache (`replay`), taken out during a burst.
    arena: Arena,
    /// Payload bytes of a response frame.
    payload_cap: usize,
    /// State of the PRNG drawing the starting PSNs of first connections.
    rng: u64,
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
    /// Whether writes are taken (`None`: always; a replicated node's gate).
    gate: Option<Arc<WriteGate>>,
    /// The gate's status for writes, read once per burst (`Ok`: writes go through).
    write_status: Status,
    /// Reads are refused with `write_status` too this burst (a replica of an
    /// etcd-managed cluster: `WriteGate::set_reads_follow_writes`).
    refuse_reads: bool,
    /// The `NOT_MASTER` value of this burst (`hint[..hint_len]`).
    hint: [u8; MASTER_HINT_LEN],
    hint_len: usize,
    /// Where applied mutations go as post-images (`crate::mutation`); `None`: nowhere.
    tap: Option<Box<dyn MutationSink>>,
    /// Post-image bytes the tap can still take in this burst: its room at the burst's
    /// start less what the packets served since then may produce.
    tap_budget: usize,
    /// Runs transaction requests (docs/TRANSACTIONS.md).
    tx_exec: kvtx::TxExecutor,
    /// The node's partitions, for transactions over several (`cross`); `None`: one
    /// partition, or transactions stay in theirs.
    cross: Option<Arc<PartitionTable>>,
    /// Completion records (`crate::repl::completion`, `resume`): a master logs them, a
    /// replica keeps them. Off unless set.
    completions: bool,
    /// The payloads of responses restored from completion records.
    restored_ring: Arena,
    /// Where a FRAME record is put together (header + payload).
    completion_scratch: Box<[u8]>,
    /// What `sequence` decided for the request it just let through.
    serve: ServeMark,
    /// Draws opened QPs' R_Keys and connection secrets (a CSPRNG seeded from the OS).
    keys: rand::rngs::StdRng,
    /// The worker's coarse clock, in seconds ([`Server::maintain`]).
    now_s: u32,
    /// Opened QPs idle this long are closed (0: never).
    idle_close_s: u32,
    /// The last OPENs, to answer a repeated one with the same QP.
    recent_opens: open::RecentOpens,
    /// NAK answers to refused frames of opened QPNs left this second.
    refusals: open::RefusalBudget,
    /// Purges of removed tenants' namespaces (`purge`).
    purges: purge::Purges,
    /// Tenants: credentials, ACLs, quotas (`tenants`).
    tenants: tenants::Tenants,
    /// Wall-clock ms at the start of the burst (read only while a tenant has a
    /// request-rate quota).
    burst_ms: u64,
}

impl Server {
    /// A server over `engine` admitting `clients` as (QPN, R_Key) pairs, with an
    /// out-of-order reservation station, only the built-in functions and the default
    /// [`Transport`]. Panics if that does not fit `id` (a request region too small
    /// for `W` slots of the MTU's request payload).
    pub fn new(id: Identity, clients: &[(u32, u32)], engine: Engine) -> Server {
        Self::with_station(id, clients, engine, true, FunctionRegistry::new())
    }

    /// A server whose reservation station runs out of order (`ooo`) or stalls on
    /// conflicts, resolving function IDs through `registry`, with the default
    /// [`Transport`] (panics as [`Server::new`]).
    pub fn with_station(
        id: Identity,
        clients: &[(u32, u32)],
        engine: Engine,
        ooo: bool,
        registry: FunctionRegistry,
    ) -> Server {
        Self::with_transport(id, clients, engine, ooo, registry, Transport::default())
            .unwrap_or_else(|e| panic!("default transport: {e}"))
    }

    /// [`Server::with_station`] with the transport settings `t` (window, response
    /// cache size, PSN seed); an error if they are invalid for `id`
    /// ([`Transport::check`]).
    pub fn with_transport(
        id: Identity,
        clients: &[(u32, u32)],
        engine: Engine,
        ooo: bool,
        registry: FunctionRegistry,
        t: Transport,
    ) -> Result<Server, String> {
        let slot_size = t.check(&id)?;
        let mtu = id.mtu;
        let max_value_len = engine.max_value_len().max(8);
        let cfg = StationConfig {
            ooo,
            max_batch: CHUNK,
            max_value_len,
        };
        let station = Station::new(cfg, kvengine::key_hash as KeyHash, registry)
            .expect("CHUNK and max_value_len are within the station's limits");
        // An MTU that leaves less than a header and one bare result answers nothing
        // (each response counted as `mtu_too_small`) rather than exceed the MTU.
        let payload_cap = response_payload_capacity(mtu).min(MAX_PAYLOAD);
        Ok(Server {
            id,
            clients: ClientTable::new(clients, t.credits, t.max_opened),
            credits: t.credits,
            slot_size,
            arena: Arena::new(t.replay_cache_bytes, response_frame_len(payload_cap)),
            payload_cap,
            rng: t.seed,
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
            gate: None,
            write_status: Status::Ok,
            refuse_reads: false,
            hint: [0; MASTER_HINT_LEN],
            hint_len: 0,
            tap: None,
            tap_budget: 0,
            tx_exec: kvtx::TxExecutor::new(),
            cross: None,
            completions: false,
            restored_ring: Arena::default(),
            completion_scratch: Box::default(),
            serve: ServeMark::Plain,
            keys: rand::SeedableRng::from_entropy(),
            now_s: 0,
            idle_close_s: t.idle_close_s,
            recent_opens: open::RecentOpens::default(),
            refusals: open::RefusalBudget::default(),
            purges: purge::Purges::default(),
            tenants: tenants::Tenants::default(),
            burst_ms: 0,
        })
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
        self.clients.set_partition(self.partition, self.partitions);
    }

    /// This server's partition and the node's number of partitions
    /// ([`Server::set_partition`]).
    pub fn partitioning(&self) -> (u32, u32) {
        (self.partition, self.partitions)
    }

    /// Makes writes depend on `gate` (replication: a replica or a fenced master
    /// answers them `NOT_MASTER`, a master short of replicas `NOT_ENOUGH_REPLICAS`);
    /// the gate is read once per burst.
    pub fn set_write_gate(&mut self, gate: Arc<WriteGate>) {
        self.gate = Some(gate);
    }

    /// Installs (`Some`) or removes (`None`) the mutation tap, between bursts; returns
    /// the one it replaces. From the next burst on, every applied mutation goes to it
    /// as a post-image and a request is served only if its worst case fits the tap's
    /// room (`crate::mutation`).
    pub fn set_mutation_sink(
        &mut self,
        sink: Option<Box<dyn MutationSink>>,
    ) -> Option<Box<dyn MutationSink>> {
        std::mem::replace(&mut self.tap, sink)
    }

    /// Whether the last burst took writes (its write gate said `Ok`).
    pub fn took_writes(&self) -> bool {
        self.write_status == Status::Ok
    }

    /// The mutation tap's position ([`MutationSink::position`]; 0 without a tap).
    pub fn write_position(&self) -> u64 {
        self.tap.as_ref().map_or(0, |t| t.position())
    }

    /// The installed mutation tap.
    pub fn mutation_sink_mut(&mut self) -> Option<&mut (dyn MutationSink + 'static)> {
        self.tap.as_deref_mut()
    }

    /// The engine and the installed mutation tap together (a scan that feeds the tap,
    /// `crate::snapshot`).
    pub fn engine_and_tap(&mut self) -> (&Engine, Option<&mut (dyn MutationSink + 'static)>) {
        (&self.engine, self.tap.as_deref_mut())
    }

    /// The engine, mutable, and the mutation tap: for changes made outside requests
    /// that the tap must still see (a replica applying its master's records).
    pub fn engine_mut_and_tap(
        &mut self,
    ) -> (&mut Engine, Option<&mut (dyn MutationSink + 'static)>) {
        (&mut self.engine, self.tap.as_deref_mut())
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
    /// A client whose QPN stays keeps its connection, PSNs and cached responses (and
    /// takes the new R_Key); a removed one is forgotten, so its frames drop as
    /// `UnknownQp` from the next burst on; a new one starts unconnected. Allocates:
    /// call it off the hot path.
    pub fn set_clients(&mut self, clients: &[(u32, u32)]) {
        self.clients.set(clients);
    }

    /// Binds static client `qpn` to `origin` (its frames must come from there;
    /// `None`: any source, while the server takes anonymous clients). `false` when
    /// `qpn` is not an admitted static QP.
    pub fn bind_static(&mut self, qpn: u32, origin: Option<Origin>) -> bool {
        self.clients.bind_static(qpn, origin)
    }

    /// Checks a request's destination, QP, R_Key and source; returns the client index.
    fn admit(&self, req: &kvwire::Request<'_>) -> Result<usize, DropReason> {
        if !self.for_us(req.dst_mac, req.dst_ip) {
            return Err(DropReason::WrongDestination);
        }
        let ci = self
            .clients
            .find(req.dest_qp)
            .ok_or(DropReason::UnknownQp)?;
        let c = &self.clients.as_slice()[ci];
        if c.rkey != req.rkey {
            return Err(DropReason::BadRKey);
        }
        if !self.source_ok(c, req.src_mac, req.src_ip) {
            return Err(DropReason::WrongSource);
        }
        Ok(ci)
    }

    /// Whether client `c` may be used from `mac`/`ip`: its bound source, or any for
    /// an unbound QP — an unbound static QP only while the server takes anonymous
    /// clients (`server.anonymous`).
    #[inline]
    fn source_ok(
        &self,
        c: &crate::clients::Client,
        mac: kvwire::MacAddr,
        ip: std::net::Ipv4Addr,
    ) -> bool {
        match c.origin {
            Some(o) => o.mac == mac && o.ip == ip,
            None => c.is_opened() || self.tenants.anonymous,
        }
    }

    /// [`Server::admit`], answering a refused request to an opened QPN — not open, or
    /// with a wrong R_Key or source, all alike — with NAK invalid request (within the
    /// refusal rate) and counting every refusal.
    fn admit_or_refuse<T: TxSink>(
        &mut self,
        req: &kvwire::Request<'_>,
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) -> Option<usize> {
        match self.admit(req) {
            Ok(ci) => Some(ci),
            Err(why @ (DropReason::UnknownQp | DropReason::BadRKey | DropReason::WrongSource))
                if is_opened_qpn(req.dest_qp) =>
            {
                let params = req.reply_params(self.id.mac, self.id.ip, RESPONSE_UDP_SRC_PORT);
                self.refuse_opened(&params, req.dest_qp, req.psn, why, stats, out);
                None
            }
            Err(why) => {
                stats.drop(why);
                None
            }
        }
    }

    /// Whether a frame to `mac`/`ip` is for this server (its MAC or broadcast, its IP).
    #[inline]
    fn for_us(&self, mac: kvwire::MacAddr, ip: std::net::Ipv4Addr) -> bool {
        (mac == self.id.mac || mac == [0xff; 6]) && ip == self.id.ip
    }

    /// Processes one rx burst (at most [`MAX_BURST`] frames; any beyond are ignored):
    /// every frame is answered through `tx` or counted under a [`DropReason`].
    pub fn handle_burst<T: TxSink>(&mut self, frames: &[&[u8]], stats: &WorkerStats, tx: &mut T) {
        let frames = &frames[..frames.len().min(MAX_BURST)];
        if let Some(g) = &self.gate {
            self.write_status = g.write_status();
            self.refuse_reads = g.refuses_reads(self.write_status);
            self.hint_len = if self.write_status == Status::NotMaster {
                g.master_hint(&mut self.hint)
            } else {
                0
            };
        }
        // At most one entry per frame, so never more than MAX_BURST.
        let mut pkts = ArrayVec::<PktCtx, MAX_BURST>::new();
        let mut chunk = Chunk::new();
        // The responder borrows the response cache for the whole burst while `self` is
        // borrowed by each step; taking it out (and back) moves no bytes.
        let mut arena = std::mem::take(&mut self.arena);
        let mut out = Responder::new(&mut arena, self.payload_cap, tx);
        if let Some(t) = &self.tap {
            self.tap_budget = t.room();
        }
        if self.tenants.any_rate() {
            self.burst_ms = self.tenants.now_ms();
        }
        // With thousands of client QPs each frame's connection state (its client
        // entry and the replay entry of its PSN) is a cache miss: start them all
        // before the first frame is judged, so a burst's misses overlap.
        if self.clients.as_slice().len() > PREFETCH_CLIENTS_ABOVE {
            for frame in frames {
                if let Some(ci) = peek_dest_qp(frame).and_then(|q| self.clients.find(q)) {
                    let c = &self.clients.as_slice()[ci];
                    kvengine::prefetch_ref(c);
                    if let Some(psn) = peek_psn(frame) {
                        kvengine::prefetch_ref(c.entry_ref(psn));
                    }
                }
            }
        }

        for frame in frames {
            stats.rx_packets.inc();
            let req = match parse_client_frame(frame) {
                Ok(ClientFrame::Request(r)) => r,
                Ok(ClientFrame::Connect(c)) => {
                    self.connect(&c, &mut chunk, &pkts, stats, &mut out);
                    continue;
                }
                Err(why) => {
                    stats.drop(why);
                    continue;
                }
            };
            let Some(ci) = self.admit_or_refuse(&req, stats, &mut out) else {
                continue;
            };
            if !self.sequence(&req, ci, stats, &mut out) {
                continue;
            }
            let mark = self.serve;
            if kvwire::payload::is_tx_payload(req.payload) {
                self.transaction(&req, ci, &mut chunk, &mut pkts, stats, &mut out);
                continue;
            }
            let client = &mut self.clients.as_mut_slice()[ci];
            let reader = BatchReader::new(req.payload);
            *client.entry(req.psn) = Entry::pending(req.psn);
            stats.requests.inc();
            let pkt = pkts.len() as u8;
            pkts.push(PktCtx {
                params: req.reply_params(self.id.mac, self.id.ip, RESPONSE_UDP_SRC_PORT),
                client: ci as u16,
                psn: req.psn,
                batch_id: reader
                    .as_ref()
                    .map_or_else(|_| malformed_batch_id(req.payload), |r| r.batch_id()),
                logged: mark == ServeMark::Logged,
            });
            let Ok(reader) = reader else {
                // A malformed batch header: its PSN is taken and it is answered with
                // one MALFORMED result (docs/PROTOCOL.md §3.3), so the client's credit
                // comes back and a resend is replayed.
                stats.bad_batches.inc();
                if chunk.tags.is_full() {
                    self.flush(&mut chunk, &pkts, stats, &mut out);
                }
                chunk.tags.push(Tag {
                    pkt,
                    src: Source::Immediate(Status::Malformed),
                });
                continue;
            };
            if mark == ServeMark::Unknown && reader.op_count() > 0 {
                // The old master began it; what it did is not known here: each op
                // is answered so, none executed (docs/PROTOCOL.md §6.6).
                stats.outcome_unknown.inc();
                for _ in 0..reader.op_count() {
                    if chunk.tags.is_full() {
                        self.flush(&mut chunk, &pkts, stats, &mut out);
                    }
                    chunk.tags.push(Tag {
                        pkt,
                        src: Source::Immediate(Status::OutcomeUnknown),
                    });
                }
                continue;
            }
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
            // The client's tenant rules (`None`: nothing to check, one branch per op).
            let guard = self.guard(ci);
            if let Some(s) = guard.and_then(|g| stats.tenants.slot(g.slot)) {
                s.requests.inc();
                s.request_bytes.add(req.payload.len() as u64);
            }
            self.stage_ops(reader, pkt, guard, &mut chunk, &pkts, stats, &mut out);
        }
        self.finish_pending(&mut chunk, &pkts, stats, &mut out);
        // `out` borrowed `arena` until here.
        if self.completions && pkts.iter().any(|p| p.logged) {
            self.log_completions(&arena, &pkts, stats);
        }
        self.arena = arena;
    }

    /// Stages the ops of one request (packet `pkt`) into the chunk, flushing it when
    /// full: plain GET/PUT/DELETE runs straight from the decoder, other ops one by
    /// one; an op the client's `guard` refuses is answered DENIED, one that does not
    /// decode ends the request.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn stage_ops<'f, T: TxSink>(
        &mut self,
        mut reader: BatchReader<'f>,
        pkt: u8,
        guard: Option<tenants::Guard>,
        chunk: &mut Chunk<'f>,
        pkts: &[PktCtx],
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        loop {
            // The GET/PUT/DELETE run first (the decoder's state in registers), then
            // the op that ended it through the iterator.
            reader.plain_ops(|op| {
                if chunk.tags.is_full() {
                    self.flush(chunk, pkts, stats, out);
                }
                let src = self.stage_guarded(chunk, guard, op, stats);
                chunk.tags.push(Tag { pkt, src });
            });
            let Some(item) = reader.next() else { break };
            if chunk.tags.is_full() {
                self.flush(chunk, pkts, stats, out);
            }
            let src = match item {
                Ok(op) => self.stage_guarded(chunk, guard, op, stats),
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

    /// Executes the chunk and closes the open response: every request admitted so far
    /// is answered and its replay entry complete.
    fn finish_pending<T: TxSink>(
        &mut self,
        chunk: &mut Chunk<'_>,
        pkts: &[PktCtx],
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        if !chunk.tags.is_empty() {
            self.flush(chunk, pkts, stats, out);
        }
        let clients = self.clients.as_mut_slice();
        let mut ctx = Ctx {
            clients,
            id: &self.id,
            pkts,
            stats,
            hint: &self.hint[..self.hint_len],
        };
        out.close(&mut ctx, false);
        // Requests whose last frame could not be built (a too small MTU) are complete
        // too: there is nothing more to send for them.
        for p in pkts {
            let e = ctx.clients[usize::from(p.client)].entry(p.psn);
            if e.psn == p.psn && e.state == crate::response_cache::EntryState::Pending {
                e.state = crate::response_cache::EntryState::Ready;
            }
        }
    }

    /// [`Server::stage`] for a client with `guard`: an op it may not run is answered
    /// DENIED (counted) and not staged; one whose result it may not read is marked
    /// [`Source::Redacted`].
    #[inline(always)]
    fn stage_guarded<'f>(
        &mut self,
        chunk: &mut Chunk<'f>,
        guard: Option<tenants::Guard>,
        op: KvOp<'f>,
        stats: &WorkerStats,
    ) -> Source {
        // One inlined `stage` (the request path is instruction-bound).
        let redact = match guard {
            Some(g) => {
                if let Some(st) = Self::denied(guard, &op, stats) {
                    return Source::Immediate(st);
                }
                g.redacts(&op)
            }
            None => false,
        };
        match self.stage(chunk, op) {
            Source::Engine if redact => Source::Redacted,
            src => src,
        }
    }

    /// Adds a decoded op to the chunk (the caller made room) and says where its result
    /// comes from: the engine/station, or `WRONG_PARTITION` for another partition's key.
    #[inline(always)]
    fn stage<'f>(&mut self, chunk: &mut Chunk<'f>, op: KvOp<'f>) -> Source {
        if self.write_status != Status::Ok && (self.refuse_reads || op.is_write()) {
            return Source::Immediate(self.write_status);
        }
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
            hint,
            hint_len,
            tap,
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
                hint: &hint[..*hint_len],
            },
            tags: &chunk.tags,
            next_tag: 0,
            run_left: 0,
            run_pkt: 0,
        };
        match tap {
            None => engine.execute_batch(&chunk.bops, &mut sink),
            Some(tap) => {
                let mut tapped = TapResults {
                    inner: &mut sink,
                    bops: &chunk.bops,
                    tap: &mut **tap,
                };
                engine.execute_batch(&chunk.bops, &mut tapped);
            }
        }
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
            hint,
            hint_len,
            tap,
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
        match tap {
            None => station.process_batch(&ops, &mut EngineStage(engine), &mut sink),
            Some(tap) => {
                let mut stage = TapStage::new(engine, &mut **tap);
                station.process_batch(&ops, &mut stage, &mut sink);
            }
        }
        let st = station.stats();
        stats.station_forwarded.set(st.forwarded);
        stats.station_merged.set(st.merged);
        stats.station_write_backs.set(st.write_backs);
        stats.station_stalls.set(st.stalls);

        let mut ctx = Ctx {
            clients: clients.as_mut_slice(),
            id,
            pkts,
            stats,
            hint: &hint[..*hint_len],
        };
        let mut next_tag = 0usize;
        for (op, &(status, off, len)) in ops.iter().zip(slots.iter()) {
            out.drain_immediates(&mut ctx, tags, &mut next_tag);
            let Some(t) = tags.get(next_tag) else { break };
            op_count::count_station_op(stats, op, status);
            let value = arena
                .get_mut(off as usize..off as usize + len as usize)
                .unwrap_or_default();
            let value = match t.src {
                Source::Redacted => {
                    // Only read-modify-write ops are redacted: never a plain op.
                    debug_assert!(!matches!(op, KvOp::Get { .. }));
                    let n = kvops::semantics::redact(op, status, value);
                    &value[..n]
                }
                _ => &value[..],
            };
            out.result(&mut ctx, t.pkt, status, value);
            next_tag += 1;
        }
        out.drain_immediates(&mut ctx, tags, &mut next_tag);
    }
}

/// Bytes of connection state per client QP with window `credits`: its client table
/// entry (QPN, R_Key, nonce, PSNs, flags, an opened QP's secret, tenant, window and
/// bound source: 88 B) and `credits` replay entries (24 B each): 856 B for the
/// default `W = 32`. The response frames themselves live in the worker's response
/// cache, shared by all its QPs.
pub const fn qp_state_bytes(credits: u16) -> usize {
    crate::clients::CLIENT_BYTES + credits as usize * crate::response_cache::ENTRY_BYTES
}
