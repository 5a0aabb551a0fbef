//! The replication lcore (SKV's Nic-KV in software): it owns the replication links'
//! ports and runs the node's [`ReplLogic`] — on a master, draining the workers' log
//! rings into the stream and shipping it; on a replica, receiving the stream and
//! routing its records to the workers. The workers never wait for it.

use dataplane::repl::link::{LinkTx, ReplLogic};
use dpdk::{tsc, IdleBackoff, Mbuf, MbufBurst, Mempool, RxQueue, TxQueue};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Frames per rx/tx burst on a replication link.
const BURST: usize = 32;
/// Frames queued per link before the NIC takes them.
const TX_QUEUE: usize = 256;
/// Bytes of the largest frame the logic may build.
pub const FRAME_CAP: usize = 1600;

/// One replication link: a port's single queue pair.
pub struct Link {
    /// Receive queue.
    pub rxq: RxQueue,
    /// Transmit queue.
    pub txq: TxQueue,
}

/// The links' transmit side: mbufs from the pool, queued per link.
struct Tx {
    pool: Arc<Mempool>,
    queues: Vec<(TxQueue, MbufBurst<TX_QUEUE>)>,
    /// Frames lost for want of an mbuf or queue room (the transport resends).
    lost: u64,
}

impl LinkTx for Tx {
    fn send(&mut self, link: usize, build: &mut dyn FnMut(&mut [u8]) -> usize) -> bool {
        let Some((txq, q)) = self.queues.get_mut(link) else {
            return false;
        };
        let Some(mut m) = Mbuf::alloc(&self.pool) else {
            self.lost += 1;
            return false;
        };
        let cap = FRAME_CAP.min(m.tailroom());
        if !m.set_len(cap) {
            self.lost += 1;
            return false;
        }
        let n = build(m.data_mut());
        if n == 0 {
            return true;
        }
        m.set_len(n.min(cap));
        if let Err(m) = q.push(m) {
            txq.tx_burst(q);
            if q.push(m).is_err() {
                self.lost += 1;
                return false;
            }
        }
        true
    }
}

impl Tx {
    fn flush(&mut self) {
        for (txq, q) in &mut self.queues {
            if !q.is_empty() {
                txq.tx_burst(q);
            }
        }
    }
}

/// The replication loop's state: the links' queues and the node's logic. Either the
/// replication lcore runs it ([`run`]), or — the inline baseline of the replication
/// benchmark (`--repl-inline`) — worker 0 polls it between its own bursts, as a
/// master without SKV's offload would (its CPU does the replication).
pub struct Replicator {
    rxqs: Vec<RxQueue>,
    tx: Tx,
    logic: Box<dyn ReplLogic + Send>,
    rx: MbufBurst<BURST>,
    start: u64,
    hz: u64,
}

impl Replicator {
    /// The loop over `links`, running `logic`, with mbufs from `pool`.
    pub fn new(links: Vec<Link>, logic: Box<dyn ReplLogic + Send>, pool: Arc<Mempool>) -> Self {
        let mut rxqs = Vec::with_capacity(links.len());
        let mut tx = Tx {
            pool,
            queues: Vec::with_capacity(links.len()),
            lost: 0,
        };
        for l in links {
            rxqs.push(l.rxq);
            tx.queues.push((l.txq, MbufBurst::new()));
        }
        Replicator {
            rxqs,
            tx,
            logic,
            rx: MbufBurst::new(),
            start: tsc::now(),
            hz: tsc::hz().max(1),
        }
    }

    /// One pass: every link's received frames to the logic, the logic's periodic work,
    /// the frames it built to the NICs. Returns whether there was work.
    pub fn poll_once(&mut self) -> bool {
        let now = tsc::now();
        let now_ns = ((now - self.start) as u128 * 1_000_000_000 / self.hz as u128) as u64;
        let mut got = 0usize;
        for (l, rxq) in self.rxqs.iter_mut().enumerate() {
            let n = rxq.rx_burst(&mut self.rx);
            if n > 0 {
                got += n;
                let mut frames: [&[u8]; BURST] = [&[]; BURST];
                for (slot, m) in frames.iter_mut().zip(self.rx.iter()) {
                    *slot = m.data();
                }
                self.logic.on_frames(l, &frames[..n], now_ns, &mut self.tx);
                self.rx.clear();
            }
        }
        let busy = self.logic.poll(now_ns, &mut self.tx);
        self.tx.flush();
        got > 0 || busy
    }

    /// Frames lost for want of an mbuf or queue room (the transport resent them).
    pub fn lost_frames(&self) -> u64 {
        self.tx.lost
    }
}

/// Runs the replication lcore until `quit` is set or `deadline` passes; returns the
/// frames lost for want of an mbuf or queue room.
pub fn run(
    mut r: Replicator,
    quit: &AtomicBool,
    deadline: Option<Instant>,
    idle_yield_polls: u32,
) -> u64 {
    let hz = tsc::hz().max(1);
    let check_ticks = hz / 100;
    let mut next_check = tsc::now() + check_ticks;
    let mut backoff = IdleBackoff::new(idle_yield_polls);
    loop {
        let busy = r.poll_once();
        backoff.poll(!busy);
        let now = tsc::now();
        if now >= next_check {
            next_check = now + check_ticks;
            if quit.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
    }
    r.lost_frames()
}
