//! The replication lcore (SKV's Nic-KV in software): it owns the replication links'
//! ports and runs the node's [`ReplLogic`] — on a master, draining the workers' log
//! rings into the stream and shipping it; on a replica, receiving the stream and
//! routing its records to the workers. The workers never wait for it.

use dataplane::repl::link::{LinkTx, ReplLogic};
use dataplane::repl::status::ReplStatus;
use dpdk::{tsc, IdleBackoff, Mbuf, MbufBurst, Mempool, Port, RxQueue, TxQueue};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// Frames per rx/tx burst on a replication link.
const BURST: usize = 32;
/// Frames queued per link before the NIC takes them.
const TX_QUEUE: usize = 256;
/// Bytes of the largest frame the logic may build.
pub const FRAME_CAP: usize = 1600;

/// A dead link is redialed after it was down this long, then at growing intervals
/// up to [`REDIAL_MAX_S`].
const REDIAL_AFTER_S: u64 = 1;
/// Longest interval between two redials of a dead link.
const REDIAL_MAX_S: u64 = 8;
/// A connection accepted into a live server's queue is left waiting this long for
/// the server's HELLO before it is given up and redialed anyway (a server that
/// dropped it without restarting).
const PENDING_MAX_S: u64 = 60;
/// A memif server's socket must be this old before its client dials it: the server
/// process listens from its EAL start on, before its ports are configured, and a
/// client that connects in between gets a link that is up but carries nothing.
pub const PEER_SETTLE_S: u64 = 3;

/// One replication link: a port's single queue pair.
pub struct Link {
    /// Receive queue.
    pub rxq: RxQueue,
    /// Transmit queue.
    pub txq: TxQueue,
    /// A memif client link: its port, restarted while the link is down so that it
    /// connects again to a peer that restarted (DPDK's memif client dials only
    /// when its port starts), and the server's socket file, if it has one
    /// ([`peer_settled`]).
    pub redial: Option<(Port, Option<PathBuf>)>,
    /// Whether its port is started (a memif client whose server was not up at
    /// start-up is not: the redial starts it).
    pub started: bool,
}

/// Redial state of a link ([`Link::redial`]).
struct Redial {
    port: Port,
    socket: Option<PathBuf>,
    /// When the link was first seen down (tsc), if it is.
    down_since: Option<u64>,
    /// Next redial (tsc) and the interval after it.
    next: u64,
    interval_s: u64,
    /// When the port last started with its connect accepted (wall clock): the
    /// connection then waits in the server's queue until the server answers.
    dialed: Option<SystemTime>,
}

/// Whether the memif server listening on `socket` started after `dialed` (its socket
/// file is newer): the server our pending connection reached is gone, so a redial is
/// needed. While the same server lives — frozen, or slow to answer — the connection
/// is left waiting in its queue: a redial would close it, and the server would accept a
/// dead connection on waking (DPDK 22.11's memif server then crashed; `dpdk::memif_fix`
/// works around that, issue 29), only to tear it down and take the next one.
fn server_restarted_since(socket: &Path, dialed: SystemTime) -> bool {
    std::fs::metadata(socket)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t > dialed)
}

/// Whether the memif server listening on `socket` has been up for [`PEER_SETTLE_S`]
/// (its socket file exists and is that old): a control check, one `stat` per
/// redial attempt.
pub fn peer_settled(socket: &Path) -> bool {
    std::fs::metadata(socket)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() >= PEER_SETTLE_S))
}

/// The socket file of a memif vdev (`socket=PATH`, not abstract), if any.
pub fn memif_socket(vdev: &str) -> Option<PathBuf> {
    let mut path = None;
    for kv in vdev.split(',') {
        if kv == "socket-abstract=yes" {
            return None;
        }
        if let Some(p) = kv.strip_prefix("socket=") {
            path = Some(PathBuf::from(p));
        }
    }
    path
}

/// The links' transmit side: mbufs from the pool, queued per link.
struct Tx {
    pool: Arc<Mempool>,
    queues: Vec<(TxQueue, MbufBurst<TX_QUEUE>)>,
    /// Links whose port is stopped (a redial that did not connect): nothing is
    /// sent or polled there until a redial starts it again.
    stopped: Vec<bool>,
    /// Frames lost for want of an mbuf or queue room (the transport resends).
    lost: u64,
}

impl LinkTx for Tx {
    fn send(&mut self, link: usize, build: &mut dyn FnMut(&mut [u8]) -> usize) -> bool {
        let Some((txq, q)) = self.queues.get_mut(link) else {
            return false;
        };
        if self.stopped[link] {
            self.lost += 1;
            return false;
        }
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
        for ((txq, q), &stopped) in self.queues.iter_mut().zip(&self.stopped) {
            if !q.is_empty() && !stopped {
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
    redial: Vec<Option<Redial>>,
    logic: Box<dyn ReplLogic + Send>,
    rx: MbufBurst<BURST>,
    start: u64,
    hz: u64,
    /// Where the links' states are published (telemetry).
    status: Option<Arc<ReplStatus>>,
}

impl Replicator {
    /// The loop over `links`, running `logic`, with mbufs from `pool`.
    pub fn new(links: Vec<Link>, logic: Box<dyn ReplLogic + Send>, pool: Arc<Mempool>) -> Self {
        let mut rxqs = Vec::with_capacity(links.len());
        let mut tx = Tx {
            pool,
            queues: Vec::with_capacity(links.len()),
            stopped: vec![false; links.len()],
            lost: 0,
        };
        let mut redial = Vec::with_capacity(links.len());
        for (i, l) in links.into_iter().enumerate() {
            tx.stopped[i] = !l.started;
            rxqs.push(l.rxq);
            tx.queues.push((l.txq, MbufBurst::new()));
            let dialed = l.started.then(SystemTime::now);
            redial.push(l.redial.map(|(port, socket)| Redial {
                port,
                socket,
                down_since: None,
                next: 0,
                interval_s: REDIAL_AFTER_S,
                dialed,
            }));
        }
        Replicator {
            rxqs,
            tx,
            redial,
            logic,
            rx: MbufBurst::new(),
            start: tsc::now(),
            hz: tsc::hz().max(1),
            status: None,
        }
    }

    /// The idle policy slept `us` microseconds (published for `/kvd/replication`).
    #[cold]
    fn note_sleep(&self, us: u32) {
        if let Some(s) = &self.status {
            s.idle_sleeps.fetch_add(1, Ordering::Relaxed);
            s.idle_sleep_us.fetch_add(u64::from(us), Ordering::Relaxed);
        }
    }

    /// Publishes the memif client links' states and redials into `status`.
    pub fn with_status(mut self, status: Arc<ReplStatus>) -> Self {
        self.status = Some(status);
        self
    }

    /// One pass: every link's received frames to the logic, the logic's periodic work,
    /// the frames it built to the NICs. Returns whether there was work.
    pub fn poll_once(&mut self) -> bool {
        let now = tsc::now();
        let now_ns = ((now - self.start) as u128 * 1_000_000_000 / self.hz as u128) as u64;
        let mut got = 0usize;
        for (l, rxq) in self.rxqs.iter_mut().enumerate() {
            if self.tx.stopped[l] {
                continue;
            }
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

    /// Redials the memif client links that have been down for [`REDIAL_AFTER_S`]
    /// (a peer that restarted listens again but is never called back otherwise),
    /// then every interval, doubling up to [`REDIAL_MAX_S`] while it fails. A
    /// control event on this lcore, off the workers' path: a link check per call,
    /// a port restart (a socket connect) at most once per interval.
    fn redial(&mut self, now: u64, hz: u64) {
        for (l, slot) in self.redial.iter_mut().enumerate() {
            let Some(r) = slot else { continue };
            let up = !self.tx.stopped[l] && r.port.link().is_ok_and(|s| s.up);
            if let Some(st) = self.status.as_ref().and_then(|s| s.link_up.get(l)) {
                st.store(if up { 2 } else { 1 }, Ordering::Relaxed);
            }
            if up {
                r.down_since = None;
                r.interval_s = REDIAL_AFTER_S;
                // The server took the connection: none of ours waits in its queue
                // any more, so a link that goes down again is redialed at once.
                r.dialed = None;
                continue;
            }
            let since = *r.down_since.get_or_insert(now);
            if now.saturating_sub(since) < REDIAL_AFTER_S * hz || now < r.next {
                continue;
            }
            if !r.socket.as_deref().is_none_or(peer_settled) {
                continue; // no server yet, or one still starting: look again soon
            }
            if let (Some(sock), Some(t)) = (r.socket.as_deref(), r.dialed) {
                let waited = t.elapsed().map_or(0, |d| d.as_secs());
                if waited < PENDING_MAX_S && !server_restarted_since(sock, t) {
                    continue; // our connection waits in the same server's queue
                }
            }
            let (txq, q) = &mut self.tx.queues[l];
            q.clear(); // frames for a dead peer: the transport resends them
            let res = r.port.restart(&mut self.rxqs[l], txq);
            eprintln!(
                "dataplane: replication link {l} down for {} s: redialed ({})",
                now.saturating_sub(since) / hz.max(1),
                res.as_ref()
                    .map_or_else(|e| e.to_string(), |()| "port restarted".into())
            );
            self.tx.stopped[l] = res.is_err();
            if let Some(st) = self.status.as_ref().and_then(|s| s.link_redials.get(l)) {
                st.fetch_add(1, Ordering::Relaxed);
            }
            r.dialed = res.is_ok().then(SystemTime::now);
            r.next = now + r.interval_s * hz;
            r.interval_s = (r.interval_s * 2).min(REDIAL_MAX_S);
        }
    }
}

/// Runs the replication lcore until `quit` is set or `deadline` passes; returns the
/// frames lost for want of an mbuf or queue room.
pub fn run(
    mut r: Replicator,
    quit: &AtomicBool,
    deadline: Option<Instant>,
    idle: dpdk::IdlePolicy,
    bell: Option<Arc<dpdk::Doorbell>>,
    rx_intr: bool,
) -> u64 {
    let hz = tsc::hz().max(1);
    let check_ticks = hz / 100;
    let mut next_check = tsc::now() + check_ticks;
    // Sleeping, it wakes when a worker pushed a post-image (the workers ring `bell`)
    // and, `rx_intr`, when a frame reached a memif link (its ring signal, armed per sleep).
    let sleeps = matches!(idle, dpdk::IdlePolicy::Sleep { .. });
    let armed: Vec<Box<dyn dpdk::ArmRx>> = if sleeps && rx_intr {
        r.rxqs
            .iter()
            .filter_map(|q| dpdk::MemifRxIntr::new(q).ok())
            .map(|m| Box::new(m) as Box<dyn dpdk::ArmRx>)
            .collect()
    } else {
        Vec::new()
    };
    let mut backoff = IdleBackoff::with_policy(idle)
        .with_doorbell(bell)
        .with_armed_rx(armed);
    loop {
        let busy = r.poll_once();
        let slept = if !busy && r.logic.waiting() {
            backoff.poll_waiting();
            0
        } else {
            backoff.poll(!busy)
        };
        if slept > 0 {
            r.note_sleep(slept);
        }
        let now = tsc::now();
        if now >= next_check {
            next_check = now + check_ticks;
            r.redial(now, hz);
            if quit.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
    }
    r.lost_frames()
}
