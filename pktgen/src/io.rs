//! pktgen's packet I/O: the DPDK queues behind the client library's [`PacketIo`], with
//! the seeded fault injection of `--loss/--dup/--reorder` on both sides.
//!
//! A frame to send goes to the tx queue of its owner's partition (`qpn % N`, an
//! OPEN's the one it asks for; or the next one with `--misdirect`): each partition's packets leave in order on one
//! queue. Frames are copied into mbufs and queued in per-queue bursts that
//! [`PortIo::flush`] hands to the NIC once per loop iteration. Received frames are
//! handed over one rx burst per queue at a time.
//!
//! Faults (when configured) are drawn per frame: on the transmit side a dropped frame
//! is not sent, a duplicated one is sent twice, a delayed one is held back behind up
//! to four later frames; on the receive side the same happens to the frames handed to
//! the library. Held frames are released at the latest after [`HOLD_MAX_US`], so a
//! quiet link does not keep them forever.

use crate::fuzz::{FuzzStats, Fuzzer};
use dpdk::{tsc, Mbuf, MbufBurst, Mempool, RxQueue, TxQueue};
use kvclient::PacketIo;
use kvload::faults::{FaultConfig, FaultCounts};
use kvwire::partition::peek_owner;
use kvwire::MacAddr;

/// Frames per rx/tx burst.
pub const BURST: usize = 32;
/// Frames held back at most per direction.
const HOLD: usize = 16;
/// A held frame is released at the latest after this long.
const HOLD_MAX_US: u64 = 200;

/// One direction's fault injection (`kvload::inject`).
type Injector = kvload::inject::Injector<Mbuf, HOLD>;

/// The injector of one direction; `None` when it injects nothing.
fn injector(cfg: FaultConfig) -> Result<Option<Injector>, String> {
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(Injector::new(cfg))
}

/// The DPDK side of pktgen's transport (see the module doc).
pub struct PortIo {
    pool: Mempool,
    rxqs: Vec<RxQueue>,
    txqs: Vec<TxQueue>,
    /// Tx queue of each partition (on the node in use).
    tx_of: Vec<usize>,
    /// `tx_of` on the first node (`set_node` shifts it).
    base_tx_of: Vec<usize>,
    nparts: u32,
    /// Queue pairs per node: the queues of node `k` (`--follow-ports`) are
    /// `k * per_node ..`; all of them are received from.
    per_node: usize,
    /// Node `k`'s client-facing MAC (the config's `replication.client_nodes`, in
    /// `--follow-ports` order): a frame goes to the node its destination MAC names,
    /// whichever node is in use. Empty: to the node in use.
    node_macs: Vec<MacAddr>,
    txb: Vec<MbufBurst<BURST>>,
    rx: MbufBurst<BURST>,
    /// Next rx queue to poll.
    rx_next: usize,
    /// Frames received and waiting to be handed over (a receive-side delay can
    /// release several at once).
    ready: MbufBurst<{ 2 * BURST + HOLD }>,
    tx_faults: Option<Injector>,
    rx_faults: Option<Injector>,
    hold_ticks: u64,
    /// Frames handed to the NIC.
    pub tx_frames: u64,
    /// Frames dropped because a tx queue stayed full (the transport resends them).
    pub tx_full: u64,
    /// The live fuzzer (`--fuzz`) and how many frames it adds per flush.
    fuzz: Option<(Box<Fuzzer>, u32)>,
    /// Scratch frame of the fuzzer.
    fuzz_buf: Vec<u8>,
}

impl PortIo {
    /// I/O over `rxqs`/`txqs` (one pair per partition), sending partition `p`'s frames
    /// on `tx_of[p]`, mbufs from `pool`, with `tx`/`rx` faults (zero: none).
    pub fn new(
        pool: Mempool,
        rxqs: Vec<RxQueue>,
        txqs: Vec<TxQueue>,
        tx_of: Vec<usize>,
        tx: FaultConfig,
        rx: FaultConfig,
    ) -> Result<PortIo, String> {
        let n = txqs.len();
        Ok(PortIo {
            pool,
            rxqs,
            nparts: tx_of.len().max(1) as u32,
            base_tx_of: tx_of.clone(),
            per_node: n,
            node_macs: Vec::new(),
            tx_of,
            txb: (0..n).map(|_| MbufBurst::new()).collect(),
            txqs,
            rx: MbufBurst::new(),
            rx_next: 0,
            ready: MbufBurst::new(),
            tx_faults: injector(tx)?,
            rx_faults: injector(rx)?,
            hold_ticks: tsc::hz() / 1_000_000 * HOLD_MAX_US,
            tx_frames: 0,
            tx_full: 0,
            fuzz: None,
            fuzz_buf: Vec::with_capacity(crate::fuzz::mutate::MAX_FRAME + 64),
        })
    }

    /// The queues are those of `nodes` ports, `per_node` pairs each, in node order
    /// (`--follow-ports`); sending starts on node 0.
    pub fn set_nodes(&mut self, nodes: usize) {
        self.per_node = self.txqs.len() / nodes.max(1);
    }

    /// Routes each frame by its destination MAC: to node `k`'s queues when it is
    /// `macs[k]` (the nodes of [`PortIo::set_nodes`], in order).
    pub fn set_node_macs(&mut self, macs: Vec<MacAddr>) {
        self.node_macs = macs;
    }

    /// Sends on node `k`'s queues from now on (frames already queued for another node
    /// stay there).
    pub fn set_node(&mut self, k: usize) {
        for (t, b) in self.tx_of.iter_mut().zip(&self.base_tx_of) {
            *t = k * self.per_node + b;
        }
    }

    /// The mbuf pool (for raw frames).
    pub fn pool(&self) -> &Mempool {
        &self.pool
    }

    /// Counts of the injected faults (tx, rx).
    pub fn fault_counts(&self) -> (FaultCounts, FaultCounts) {
        let c = |i: &Option<Injector>| i.as_ref().map(Injector::counts).unwrap_or_default();
        (c(&self.tx_faults), c(&self.rx_faults))
    }

    /// Queues an mbuf on tx queue `q` (through the tx faults).
    pub fn queue(&mut self, q: usize, m: Mbuf) {
        let Some(mut inj) = self.tx_faults.take() else {
            self.enqueue(q, m);
            return;
        };
        let pool = self.pool;
        inj.route(m, tsc::now, |m| m.copy_into(&pool), |m| self.enqueue(q, m));
        self.tx_faults = Some(inj);
    }

    fn enqueue(&mut self, q: usize, m: Mbuf) {
        let Some(b) = self.txb.get_mut(q) else { return };
        let m = match b.push(m) {
            Ok(()) => return,
            Err(m) => m,
        };
        let sent = self.txqs[q].tx_burst(b);
        self.tx_frames += sent as u64;
        if self.txb[q].push(m).is_err() {
            self.tx_full += 1;
        }
    }

    /// Turns the live fuzzer on: `per_flush` of its frames go out with every flush
    /// until it has sent its count.
    pub fn set_fuzz(&mut self, f: Fuzzer, per_flush: u32) {
        self.fuzz = Some((Box::new(f), per_flush.max(1)));
    }

    /// The fuzzer's counters (`None` without `--fuzz`).
    pub fn fuzz_report(&self) -> Option<FuzzStats> {
        self.fuzz.as_ref().map(|(f, _)| f.report())
    }

    /// Queues the fuzzer's next frames (past the fault injection: they are the fault).
    fn fuzz_send(&mut self) {
        let Some((mut f, per)) = self.fuzz.take() else {
            return;
        };
        let mut buf = std::mem::take(&mut self.fuzz_buf);
        for _ in 0..per {
            if f.left == 0 {
                break;
            }
            f.next_frame(&mut buf);
            let Some(mut m) = Mbuf::alloc(&self.pool) else {
                break;
            };
            let Some(dst) = m.append(buf.len()) else {
                break;
            };
            dst.copy_from_slice(&buf);
            let q = self.queue_of(&buf);
            self.enqueue(q, m);
            f.left -= 1;
            f.stats.sent += 1;
        }
        self.fuzz_buf = buf;
        self.fuzz = Some((f, per));
    }

    /// Hands the queued frames to the NIC (what it does not take stays queued) and
    /// releases held frames that waited too long; adds the fuzzer's frames first.
    pub fn flush(&mut self) -> bool {
        if self.fuzz.is_some() {
            self.fuzz_send();
        }
        let now = tsc::now();
        if let Some(mut inj) = self.tx_faults.take() {
            // Held frames go to partition 0's queue only if their QP is unknown.
            let mut held = MbufBurst::<HOLD>::new();
            inj.release_stale(now, self.hold_ticks, |m| {
                let _ = held.push(m);
            });
            self.tx_faults = Some(inj);
            for m in held.drain() {
                let q = self.queue_of(m.data());
                self.enqueue(q, m);
            }
        }
        if let Some(inj) = self.rx_faults.as_mut() {
            let ready = &mut self.ready;
            inj.release_stale(now, self.hold_ticks, |m| {
                let _ = ready.push(m);
            });
        }
        let mut moved = false;
        for (b, q) in self.txb.iter_mut().zip(self.txqs.iter_mut()) {
            if !b.is_empty() {
                let sent = q.tx_burst(b);
                self.tx_frames += sent as u64;
                moved |= sent > 0;
            }
        }
        moved
    }

    /// The tx queue of a request frame: its owner's (the destination QP's partition,
    /// or the one an OPEN asks for).
    fn queue_of(&self, frame: &[u8]) -> usize {
        let part = peek_owner(frame, self.nparts).unwrap_or(0) as usize;
        let named = frame
            .get(..6)
            .and_then(|dst| self.node_macs.iter().position(|m| m[..] == *dst));
        match named {
            Some(k) => k * self.per_node + self.base_tx_of.get(part).copied().unwrap_or(0),
            None => self.tx_queue(part),
        }
    }

    /// The tx queue of partition `part`'s packets.
    pub fn tx_queue(&self, part: usize) -> usize {
        self.tx_of.get(part).copied().unwrap_or(0)
    }

    /// Receives one burst from the next rx queue into `ready` (through the rx faults).
    fn fill(&mut self) {
        let nq = self.rxqs.len();
        for _ in 0..nq {
            let q = self.rx_next;
            self.rx_next = (q + 1) % nq;
            if self.rxqs[q].rx_burst(&mut self.rx) > 0 {
                break;
            }
        }
        let pool = self.pool;
        let ready = &mut self.ready;
        for m in self.rx.drain() {
            match self.rx_faults.as_mut() {
                None => {
                    let _ = ready.push(m);
                }
                Some(inj) => inj.route(
                    m,
                    tsc::now,
                    |m| m.copy_into(&pool),
                    |m| {
                        let _ = ready.push(m);
                    },
                ),
            }
        }
    }
}

impl PacketIo for PortIo {
    fn send(&mut self, frame: &[u8]) -> bool {
        let q = self.queue_of(frame);
        let Some(mut m) = Mbuf::alloc(&self.pool) else {
            return false;
        };
        let Some(dst) = m.append(frame.len()) else {
            return false;
        };
        dst.copy_from_slice(frame);
        self.queue(q, m);
        true
    }

    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        if self.ready.is_empty() {
            self.fill();
        }
        let n = self.ready.len();
        for m in self.ready.drain() {
            if let Some((fz, _)) = self.fuzz.as_mut() {
                fz.observe(m.data());
            }
            f(m.data());
        }
        n
    }
}
