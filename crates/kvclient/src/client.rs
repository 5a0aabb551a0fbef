//! [`Client`]: a plain blocking and pipelined KV API over a [`Transport`].

use crate::follow::{Follower, NodeAddr, Verdict};
use crate::qp::QpSpec;
use crate::transport::{Config, Event, SendError, Transport};
use crate::{Credentials, Error, PacketIo};
use hashbrown::{HashMap, HashSet};
use kvwire::partition::{partition_of_hash, partition_of_qp};
use kvwire::payload::{func, Atomic, BatchWriter, PayloadError, ResponseReader, Width};
use kvwire::{FrameParams, Status, MAX_OPS_PER_BATCH};
use std::collections::VecDeque;

mod counter;
mod txn;
pub use txn::{TxCondition, TxOutcome, TxTicket};

/// Configuration of a [`Client`].
#[derive(Debug, Clone, Copy)]
pub struct ClientConfig {
    /// The transport's configuration.
    pub transport: Config,
    /// Number of server partitions `n` (its worker count): a key of partition `p`
    /// goes on a QP with `qpn % n == p`.
    pub partitions: u32,
    /// The server's key hash ([`kvwire::hash::key_hash`] by default, as the engine).
    pub key_hash: fn(&[u8]) -> u64,
    /// How long [`Client::connect`] waits for every QP's ACCEPT (default 1 s).
    pub connect_timeout_ns: u64,
    /// How long a blocking operation waits for its result (default 5 s; the
    /// transport fails a request on its own after `max_retries`, so this is a safety
    /// net).
    pub op_timeout_ns: u64,
    /// Most operations packed into one request packet (default and at most 1024).
    pub max_ops_per_packet: usize,
    /// Follow the master of a replicated cluster (default on): a write answered
    /// `NOT_MASTER` with the master named goes to that node instead (module
    /// [`crate::follow`]).
    pub follow_master: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            transport: Config::default(),
            partitions: 1,
            key_hash: kvwire::hash::key_hash,
            connect_timeout_ns: 1_000_000_000,
            op_timeout_ns: 5_000_000_000,
            max_ops_per_packet: MAX_OPS_PER_BATCH,
            follow_master: true,
        }
    }
}

/// One KV operation, owning its bytes: the op table's owned form
/// ([`kvwire::OwnedKvOp`]; `as_kv` gives the borrowed [`kvwire::KvOp`] a batch is written from).
pub type Op = kvwire::OwnedKvOp;

/// The result of one operation as the server sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Status.
    pub status: Status,
    /// Value (GET value, original value of updates, Σ, filtered elements).
    pub value: Vec<u8>,
}

impl Reply {
    /// `Ok(value)` if the status is OK, else `Err(Error::Status(..))`.
    pub fn ok(self) -> Result<Vec<u8>, Error> {
        match self.status {
            Status::Ok => Ok(self.value),
            s => Err(Error::Status(s)),
        }
    }
}

/// Names a submitted operation ([`Client::submit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// Operations sent in one request packet, in order.
struct Batch {
    qp: usize,
    tickets: Vec<Ticket>,
    /// The operations (sent again, on the master, when refused `NOT_MASTER`).
    ops: Vec<Op>,
    /// Results delivered so far.
    answered: usize,
}

/// A KV client over one [`PacketIo`]: blocking calls (`get`, `put`, …) and a
/// pipelined form ([`Client::submit`], [`Client::flush`], [`Client::poll`]).
///
/// Operations are steered to a QP of their key's partition (always the same QP
/// for a key, so the operations of one key are executed in submission order);
/// queued operations of one QP are packed into as few packets as fit. A QP whose
/// connection was lost is reconnected when it next has work.
pub struct Client<I: PacketIo> {
    io: I,
    t: Transport,
    clock: Box<dyn FnMut() -> u64>,
    cfg: ClientConfig,
    /// QP indices per partition.
    part_qps: Vec<Vec<usize>>,
    queues: Vec<VecDeque<(Ticket, Op)>>,
    batches: HashMap<u64, Batch>,
    abandoned: HashSet<Ticket>,
    ready: Vec<(Ticket, Result<Reply, Error>)>,
    next_tag: u64,
    next_ticket: u64,
    follow: Follower,
    /// Transactions in flight, by request tag.
    txs: HashMap<u64, txn::TxWait>,
    /// Per QP: operations put back at the head of its queue since the last move
    /// (the next ones refused go after them, keeping the order).
    requeued: Vec<usize>,
    /// The tenant whose namespace every key goes into (0: none).
    tenant: u32,
}

impl<I: PacketIo> Drop for Client<I> {
    /// Closes the QPs the server opened for this client ([`Client::close`]).
    fn drop(&mut self) {
        self.close();
    }
}

impl<I: PacketIo> Client<I> {
    /// A client for static QPs `qps` (`(qpn, rkey)`), sending with `params`, reading
    /// the time (ns) from `clock`. Does not connect yet ([`Client::connect`], or
    /// lazily on first use).
    pub fn new(
        io: I,
        cfg: ClientConfig,
        qps: &[(u32, u32)],
        params: FrameParams,
        clock: Box<dyn FnMut() -> u64>,
    ) -> Client<I> {
        let specs: Vec<QpSpec> = qps
            .iter()
            .map(|&(qpn, rkey)| QpSpec::Static { qpn, rkey })
            .collect();
        Self::with_qps(io, cfg, &specs, params, clock)
    }

    /// A client that has the server open one QP per partition for it
    /// (docs/PROTOCOL.md §6.1): no QPN to configure, and no other client can take
    /// its connections over. See [`Client::new`].
    pub fn opened(
        io: I,
        cfg: ClientConfig,
        params: FrameParams,
        clock: Box<dyn FnMut() -> u64>,
    ) -> Client<I> {
        let specs: Vec<QpSpec> = (0..cfg.partitions.max(1))
            .map(|p| QpSpec::Opened {
                partition: p as u16,
            })
            .collect();
        Self::with_qps(io, cfg, &specs, params, clock)
    }

    /// A client for QPs `qps`, static or opened. See [`Client::new`].
    pub fn with_qps(
        io: I,
        cfg: ClientConfig,
        qps: &[QpSpec],
        params: FrameParams,
        clock: Box<dyn FnMut() -> u64>,
    ) -> Client<I> {
        let n = cfg.partitions.max(1);
        let mut part_qps = vec![Vec::new(); n as usize];
        for (i, spec) in qps.iter().enumerate() {
            let p = match *spec {
                QpSpec::Static { qpn, .. } => partition_of_qp(qpn, n),
                QpSpec::Opened { partition } => u32::from(partition),
            };
            if let Some(v) = part_qps.get_mut(p as usize) {
                v.push(i);
            }
        }
        Client {
            io,
            follow: Follower::new(cfg.follow_master, Some((params.dst_mac, params.dst_ip))),
            requeued: vec![0; qps.len()],
            txs: HashMap::new(),
            t: Transport::with_qps(cfg.transport, qps, params),
            clock,
            cfg,
            part_qps,
            queues: qps.iter().map(|_| VecDeque::new()).collect(),
            batches: HashMap::new(),
            abandoned: HashSet::new(),
            ready: Vec::new(),
            next_tag: 0,
            next_ticket: 0,
            tenant: 0,
        }
    }

    /// Makes this client a client of tenant `creds` (docs/PROTOCOL.md §6.8): its
    /// OPENs carry the tenant's proof, and every key it sends goes into the tenant's
    /// namespace (the application never sees the prefix). Call it before connecting.
    pub fn set_credentials(&mut self, creds: Option<Credentials>) {
        self.tenant = creds.as_ref().map_or(0, |c| c.tenant);
        self.t.set_credentials(creds);
    }

    /// Closes the QPs the server opened for this client (best effort, not waited
    /// for: a QP whose CLOSE is lost is reclaimed when it idles). Call it before the
    /// client goes away; operations still pending are abandoned.
    pub fn close(&mut self) {
        self.t.close_opened(&mut self.io);
    }

    /// The transport (counters, states).
    pub fn transport(&self) -> &Transport {
        &self.t
    }

    /// Nodes of a replicated cluster to try, in turn, when the one in use stops
    /// answering (module [`crate::follow`]). With following on, requests in flight on
    /// a node that stops answering are resumed on the next one (a RESUME,
    /// docs/PROTOCOL.md §6.6) rather than failed.
    pub fn set_nodes(&mut self, nodes: &[NodeAddr]) {
        self.follow.set_nodes(nodes);
        self.t
            .set_resume(self.cfg.follow_master && !nodes.is_empty());
    }

    /// The node requests go to now (MAC, IPv4).
    pub fn node(&self) -> Option<NodeAddr> {
        self.follow.current()
    }

    /// Times the client moved to another node (a master named by `NOT_MASTER`, or the
    /// next candidate after the node in use stopped answering).
    pub fn redirects(&self) -> u64 {
        self.follow.redirects
    }

    /// The packet I/O.
    pub fn io_mut(&mut self) -> &mut I {
        &mut self.io
    }

    /// Connects every QP that is not connected; waits up to `connect_timeout_ns`.
    pub fn connect(&mut self) -> Result<(), Error> {
        let start = (self.clock)();
        self.t.connect_all(&mut self.io, start);
        while !self.t.all_connected() {
            let now = (self.clock)();
            if now.saturating_sub(start) > self.cfg.connect_timeout_ns {
                return Err(Error::ConnectTimeout);
            }
            self.pump(now);
        }
        Ok(())
    }

    /// The QP index that carries operations on `key`, `None` if no QP serves its
    /// partition.
    pub fn qp_for_key(&self, key: &[u8]) -> Option<usize> {
        let h = (self.cfg.key_hash)(key);
        let qps = &self.part_qps[partition_of_hash(h, self.cfg.partitions.max(1)) as usize];
        (!qps.is_empty()).then(|| qps[((h >> 32) % qps.len() as u64) as usize])
    }

    /// Queues an operation; it is sent by the next [`Client::flush`] or
    /// [`Client::poll`], and its result comes out of [`Client::poll`] (or
    /// [`Client::wait`]).
    pub fn submit(&mut self, op: Op) -> Ticket {
        let op = op.in_namespace(self.tenant);
        let t = Ticket(self.next_ticket);
        self.next_ticket += 1;
        match self.qp_for_key(op.key()) {
            Some(qp) => self.queues[qp].push_back((t, op)),
            None => self.ready.push((t, Err(Error::NoQp))),
        }
        t
    }

    /// Operations submitted and not yet returned.
    pub fn pending(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum::<usize>()
            + self
                .batches
                .values()
                .map(|b| b.tickets.len() - b.answered)
                .sum::<usize>()
            + self.ready.len()
    }

    /// Sends queued operations as far as credits allow (connecting QPs that need it).
    pub fn flush(&mut self) {
        let now = (self.clock)();
        self.flush_at(now);
    }

    fn flush_at(&mut self, now: u64) {
        let lost = (0..self.queues.len()).any(|qp| self.t.state(qp) == crate::QpState::Lost);
        if self.follow.moving() {
            // A node that names the master answers everything in flight first:
            // nothing new goes out until then. One that stopped answering does not:
            // its requests in flight are resumed at the next node.
            if !lost && !self.batches.is_empty() {
                return;
            }
            if let Some((mac, ip)) = self.follow.take_move() {
                for qp in 0..self.queues.len() {
                    let p = FrameParams {
                        dst_mac: mac,
                        dst_ip: ip,
                        ..self.t.frame_params(qp)
                    };
                    self.t.set_frame_params(qp, p);
                    if lost && self.t.in_flight(qp) > 0 {
                        self.t.resume(qp, &mut self.io, now);
                    } else {
                        self.t.connect(qp, &mut self.io, now);
                    }
                    self.requeued[qp] = 0;
                }
            }
        } else if self.follow.holding(now) {
            // The cluster named no master yet: ask again after the pause.
            return;
        } else if lost {
            // No other node to go to: resume where we are.
            for qp in 0..self.queues.len() {
                if self.t.state(qp) == crate::QpState::Lost {
                    self.t.resume(qp, &mut self.io, now);
                }
            }
        }
        for qp in 0..self.queues.len() {
            if self.queues[qp].is_empty() {
                continue;
            }
            if matches!(
                self.t.state(qp),
                crate::QpState::Idle | crate::QpState::Failed
            ) {
                self.t.connect(qp, &mut self.io, now);
            }
            while !self.queues[qp].is_empty() && self.t.can_send(qp, now) {
                if !self.send_one(qp, now) {
                    break;
                }
            }
        }
    }

    /// Packs queued operations of `qp` into one packet; false if nothing was sent
    /// and the caller should stop for now.
    fn send_one(&mut self, qp: usize, now: u64) -> bool {
        let tag = self.next_tag;
        let queue = &self.queues[qp];
        let max_ops = self.cfg.max_ops_per_packet.clamp(1, MAX_OPS_PER_BATCH);
        let mut packed = 0usize;
        let mut first_err = None;
        let res = self.t.send_with(&mut self.io, qp, now, tag, |buf, id| {
            let mut w = BatchWriter::new(buf, id).ok()?;
            for (_, op) in queue.iter().take(max_ops) {
                if let Err(e) = w.push(&op.as_kv()) {
                    if packed == 0 {
                        first_err = Some(e);
                    }
                    break;
                }
                packed += 1;
            }
            (packed > 0).then(|| w.finish())
        });
        match res {
            Ok(_) => {
                self.next_tag += 1;
                let (tickets, ops) = self.queues[qp].drain(..packed).unzip();
                self.requeued[qp] = self.requeued[qp].saturating_sub(packed);
                self.batches.insert(
                    tag,
                    Batch {
                        qp,
                        tickets,
                        ops,
                        answered: 0,
                    },
                );
                true
            }
            Err(SendError::Aborted) => {
                // The first queued op cannot be sent at all.
                let (t, _) = self.queues[qp].pop_front().expect("queue not empty");
                let e = match first_err {
                    Some(PayloadError::NoSpace) | None => Error::TooLarge,
                    Some(e) => Error::Invalid(e),
                };
                self.ready.push((t, Err(e)));
                true
            }
            Err(_) => false,
        }
    }

    /// One round: flush, receive and handle a burst, run the timers.
    fn pump(&mut self, now: u64) {
        self.flush_at(now);
        let Client {
            io,
            t,
            batches,
            ready,
            abandoned,
            follow,
            queues,
            requeued,
            txs,
            ..
        } = self;
        t.poll(io, now, &mut |ev| match ev {
            Event::Connected { .. } => {}
            // The node stopped answering; the requests stay for a RESUME at the next.
            Event::Lost { .. } => follow.on_node_lost(),
            Event::Results { tag, payload, .. } if txs.contains_key(&tag) => {
                if let (Some(w), Ok(rd)) = (txs.get_mut(&tag), ResponseReader::new(payload)) {
                    w.take(rd);
                }
            }
            Event::Complete { tag, .. } | Event::Failed { tag, .. } if txs.contains_key(&tag) => {
                if let Some(w) = txs.get_mut(&tag) {
                    w.done = Some(match ev {
                        Event::Failed { error, .. } => Err(error),
                        _ => Ok(()),
                    });
                }
            }
            Event::Results { tag, payload, .. } => {
                let Some(b) = batches.get_mut(&tag) else {
                    return;
                };
                let Ok(rd) = ResponseReader::new(payload) else {
                    return;
                };
                let first = usize::from(rd.first_index());
                for (j, r) in rd.enumerate() {
                    let Ok(r) = r else { break };
                    let Some(&tk) = b.tickets.get(first + j) else {
                        break;
                    };
                    b.answered = first + j + 1;
                    if r.status == Status::NotMaster
                        && !abandoned.contains(&tk)
                        && follow.on_not_master(r.value, now) == Verdict::Requeue
                    {
                        // Refused, nothing changed: it goes to the master, in order.
                        let op = b.ops[first + j].clone();
                        let at = requeued[b.qp].min(queues[b.qp].len());
                        queues[b.qp].insert(at, (tk, op));
                        requeued[b.qp] = at + 1;
                        continue;
                    }
                    if !abandoned.remove(&tk) {
                        let reply = Reply {
                            status: r.status,
                            value: r.value.to_vec(),
                        };
                        ready.push((tk, Ok(reply)));
                    }
                }
            }
            Event::Complete { tag, .. } | Event::Failed { tag, .. } => {
                let error = match ev {
                    Event::Failed { error, .. } => error,
                    _ => Error::BadResponse,
                };
                if error == Error::Timeout {
                    // The node stopped answering: try the next candidate.
                    follow.on_node_lost();
                }
                if let (Error::NotExecuted, Some(b)) = (error, batches.get(&tag)) {
                    // Nothing of it ran: its ops go again, first in their queue, on
                    // the QP opened anew.
                    let at = requeued[b.qp].min(queues[b.qp].len());
                    for (k, &tk) in b.tickets.iter().enumerate().skip(b.answered).rev() {
                        queues[b.qp].insert(at, (tk, b.ops[k].clone()));
                    }
                    requeued[b.qp] = at + b.tickets.len() - b.answered;
                    batches.remove(&tag);
                    return;
                }
                if let Some(b) = batches.remove(&tag) {
                    for &tk in &b.tickets[b.answered..] {
                        if !abandoned.remove(&tk) {
                            ready.push((tk, Err(error)));
                        }
                    }
                }
            }
        });
    }

    /// Sends what can be sent, handles one burst of received frames and the timers,
    /// and returns the operations finished since the last call.
    pub fn poll(&mut self) -> Vec<(Ticket, Result<Reply, Error>)> {
        let now = (self.clock)();
        self.pump(now);
        std::mem::take(&mut self.ready)
    }

    /// Polls until operation `t` finished (results of other operations finished
    /// meanwhile stay for [`Client::poll`]), or `op_timeout_ns` passed
    /// ([`Error::Deadline`]: the operation is abandoned, its outcome unknown).
    pub fn wait(&mut self, t: Ticket) -> Result<Reply, Error> {
        let start = (self.clock)();
        loop {
            if let Some(i) = self.ready.iter().position(|(x, _)| *x == t) {
                return self.ready.remove(i).1;
            }
            let now = (self.clock)();
            if now.saturating_sub(start) > self.cfg.op_timeout_ns {
                self.abandon(t);
                return Err(Error::Deadline);
            }
            self.pump(now);
        }
    }

    fn abandon(&mut self, t: Ticket) {
        for q in &mut self.queues {
            if let Some(i) = q.iter().position(|(x, _)| *x == t) {
                q.remove(i);
                return;
            }
        }
        if self.batches.values().any(|b| b.tickets.contains(&t)) {
            self.abandoned.insert(t);
        }
    }

    /// Runs one operation to completion.
    pub fn exec(&mut self, op: Op) -> Result<Reply, Error> {
        let t = self.submit(op);
        self.wait(t)
    }

    /// GET: `Some(value)`, or `None` if the key is absent.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let r = self.exec(Op::Get { key: key.to_vec() })?;
        match r.status {
            Status::NotFound => Ok(None),
            _ => r.ok().map(Some),
        }
    }

    /// PUT.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        let op = Op::Put {
            key: key.to_vec(),
            value: value.to_vec(),
        };
        self.exec(op)?.ok().map(drop)
    }

    /// DELETE: whether the key was present.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, Error> {
        let r = self.exec(Op::Delete { key: key.to_vec() })?;
        match r.status {
            Status::NotFound => Ok(false),
            _ => r.ok().map(|_| true),
        }
    }

    /// COMPARE_DELETE: deletes `key` if it holds `expected` (releasing a lock only its
    /// owner holds, say); whether it did. `false` also when the key is absent.
    pub fn compare_delete(&mut self, key: &[u8], expected: &[u8]) -> Result<bool, Error> {
        let r = self.exec(Op::CompareDelete {
            key: key.to_vec(),
            expected: expected.to_vec(),
        })?;
        match r.status {
            Status::NotFound => Ok(false),
            _ => r.ok().map(|held| held == expected),
        }
    }

    /// UPDATE_S2S with built-in or registered function `func` (unsigned elements of
    /// `width`): returns the original value.
    pub fn update(
        &mut self,
        key: &[u8],
        func: u8,
        width: Width,
        param: u64,
        param2: u64,
    ) -> Result<u64, Error> {
        let op = Op::UpdateS2S {
            key: key.to_vec(),
            atomic: unsigned(func, width),
            param,
            param2,
        };
        self.exec(op)?.ok().map(|v| le_u64(&v))
    }

    /// Fetch-and-add on a `width` scalar: returns the original value.
    pub fn fetch_add(&mut self, key: &[u8], width: Width, delta: u64) -> Result<u64, Error> {
        self.update(key, func::FETCH_ADD, width, delta, 0)
    }

    /// Compare-and-swap on a `width` scalar: returns the original value (the swap
    /// happened iff it equals `expected`).
    pub fn cas(&mut self, key: &[u8], width: Width, expected: u64, new: u64) -> Result<u64, Error> {
        self.update(key, func::CAS, width, expected, new)
    }

    /// REDUCE with `func` over unsigned `width` elements from `init`: returns Σ.
    pub fn reduce(&mut self, key: &[u8], func: u8, width: Width, init: u64) -> Result<u64, Error> {
        let op = Op::Reduce {
            key: key.to_vec(),
            atomic: unsigned(func, width),
            init,
        };
        self.exec(op)?.ok().map(|v| le_u64(&v))
    }

    /// FILTER with predicate `pred` over unsigned `width` elements: the elements
    /// that pass, as stored (little-endian).
    pub fn filter(
        &mut self,
        key: &[u8],
        pred: u8,
        width: Width,
        param: u64,
    ) -> Result<Vec<u8>, Error> {
        let op = Op::Filter {
            key: key.to_vec(),
            atomic: unsigned(pred, width),
            param,
        };
        self.exec(op)?.ok()
    }
}

fn unsigned(func: u8, width: Width) -> Atomic {
    Atomic {
        func,
        width,
        signed: false,
    }
}

/// A little-endian scalar of up to 8 bytes.
fn le_u64(v: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = v.len().min(8);
    b[..n].copy_from_slice(&v[..n]);
    u64::from_le_bytes(b)
}
