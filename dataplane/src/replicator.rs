//! The replication lcore (SKV's Nic-KV in software): it owns the replication links'
//! ports and runs the node's [`ReplLogic`] — on a master, draining the workers' log
//! rings into the stream and shipping it; on a replica, receiving the stream and
//! routing its records to the workers. The workers never wait for it.

use dataplane::repl::link::{LinkTx, ReplLogic};
use dpdk::{tsc, IdleBackoff, Mbuf, MbufBurst, Mempool, RxQueue, TxQueue};
use std::sync::atomic::{AtomicBool, Ordering};
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
struct Tx<'a> {
    pool: &'a Mempool,
    queues: Vec<(TxQueue, MbufBurst<TX_QUEUE>)>,
    /// Frames lost for want of an mbuf or queue room (the transport resends).
    lost: u64,
}

impl LinkTx for Tx<'_> {
    fn send(&mut self, link: usize, build: &mut dyn FnMut(&mut [u8]) -> usize) -> bool {
        let Some((txq, q)) = self.queues.get_mut(link) else {
            return false;
        };
        let Some(mut m) = Mbuf::alloc(self.pool) else {
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

impl Tx<'_> {
    fn flush(&mut self) {
        for (txq, q) in &mut self.queues {
            if !q.is_empty() {
                txq.tx_burst(q);
            }
        }
    }
}

/// Runs the replication lcore until `quit` is set or `deadline` passes.
pub fn run(
    links: Vec<Link>,
    logic: &mut dyn ReplLogic,
    pool: &Mempool,
    quit: &AtomicBool,
    deadline: Option<Instant>,
    idle_yield_polls: u32,
) -> u64 {
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
    let hz = tsc::hz().max(1);
    let start = tsc::now();
    let ns_of = |t: u64| ((t - start) as u128 * 1_000_000_000 / hz as u128) as u64;
    let check_ticks = hz / 100;
    let mut next_check = start + check_ticks;
    let mut backoff = IdleBackoff::new(idle_yield_polls);
    let mut rx = MbufBurst::<BURST>::new();
    loop {
        let now = tsc::now();
        let now_ns = ns_of(now);
        let mut got = 0usize;
        for (l, rxq) in rxqs.iter_mut().enumerate() {
            let n = rxq.rx_burst(&mut rx);
            if n > 0 {
                got += n;
                let mut frames: [&[u8]; BURST] = [&[]; BURST];
                for (slot, m) in frames.iter_mut().zip(rx.iter()) {
                    *slot = m.data();
                }
                logic.on_frames(l, &frames[..n], now_ns, &mut tx);
                rx.clear();
            }
        }
        let busy = logic.poll(now_ns, &mut tx);
        tx.flush();
        backoff.poll(got == 0 && !busy);
        if now >= next_check {
            next_check = now + check_ticks;
            if quit.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
    }
    tx.lost
}
