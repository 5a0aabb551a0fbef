//! Sync replication's held responses (docs/REPLICATION.md, "Write safety"): in
//! `mode: sync` a master worker answers a write only once `min_replicas` replicas have
//! the stream up to its post-image.
//!
//! The worker queues every response frame of a burst here with the QP it goes to; after
//! the burst it tags them with its log position (the ring position after the last
//! post-image it pushed, [`crate::mutation::MutationSink::position`]): every write of
//! the burst is at or below it. A frame leaves once the replication lcore's durable
//! position for this worker reaches its tag **and** no older frame to the same QP is
//! still held, so each QP's responses keep their order (its PSN order) while other QPs
//! go on. A response replayed from the transport's cache queues behind its QP's held
//! frames, so it never leaves before the original's write is durable.
//!
//! While the master refuses writes for want of replicas (`NOT_ENOUGH_REPLICAS`), the
//! worker tags its bursts 0: they executed no write, so their answers (reads, refusals,
//! connection set-up) leave at once unless their QP waits for an older write. Such a
//! read may return a value whose write is applied but not yet durable (and not yet
//! acknowledged to its writer) — reads go on while the replicas are missing, as the
//! issue asks; the writer's acknowledgement is what sync mode guarantees.
//!
//! Fixed capacity, allocated once: the worker reports backlog (the server answers RNR
//! NAKs) well before it is full.

use std::collections::VecDeque;

/// Tag of a frame queued in the current burst, not tagged yet.
const UNTAGGED: u64 = u64::MAX;
/// Distinct QPs tracked as blocked in one release pass; past that, the pass stops.
const MAX_BLOCKED: usize = 64;

/// The held frames of one worker.
#[derive(Debug)]
pub struct HoldQueue<F> {
    /// (frame, tag, destination QP), oldest first.
    q: VecDeque<(F, u64, u32)>,
    /// Frames at the back still untagged.
    untagged: usize,
}

impl<F> HoldQueue<F> {
    /// A queue for up to `cap` frames (allocates once, here).
    pub fn new(cap: usize) -> Self {
        HoldQueue {
            q: VecDeque::with_capacity(cap.max(1)),
            untagged: 0,
        }
    }

    /// Frames held.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Room left.
    pub fn room(&self) -> usize {
        self.q.capacity() - self.q.len()
    }

    /// Queues a frame of the current burst for QP `qp`; gives it back when full.
    pub fn push(&mut self, f: F, qp: u32) -> Result<(), F> {
        if self.q.len() == self.q.capacity() {
            return Err(f);
        }
        self.q.push_back((f, UNTAGGED, qp));
        self.untagged += 1;
        Ok(())
    }

    /// Tags the burst's frames with the log position `pos` its writes reached (0: the
    /// burst wrote nothing).
    pub fn tag(&mut self, pos: u64) {
        let n = self.q.len();
        for (_, t, _) in self.q.range_mut(n - self.untagged..) {
            *t = pos.min(UNTAGGED - 1);
        }
        self.untagged = 0;
    }

    /// Hands `out` every tagged frame whose tag is at or below `durable` and whose QP
    /// has no older frame still held, oldest first. Returns how many.
    pub fn release(&mut self, durable: u64, mut out: impl FnMut(F)) -> usize {
        // Fast path: the oldest frames are durable.
        let mut n = 0;
        while let Some(&(_, t, _)) = self.q.front() {
            if t == UNTAGGED || t > durable {
                break;
            }
            if let Some((f, _, _)) = self.q.pop_front() {
                out(f);
                n += 1;
            }
        }
        if self.q.len() <= self.untagged {
            return n;
        }
        // Something old is held: let other QPs' frames past it.
        let mut blocked = [0u32; MAX_BLOCKED];
        let mut nb = 0usize;
        let tagged = self.q.len() - self.untagged;
        let mut i = 0;
        let mut seen = 0;
        while seen < tagged {
            seen += 1;
            let (t, qp) = (self.q[i].1, self.q[i].2);
            let is_blocked = blocked[..nb].contains(&qp);
            if t <= durable && !is_blocked {
                if let Some((f, _, _)) = self.q.remove(i) {
                    out(f);
                    n += 1;
                }
                continue;
            }
            if !is_blocked {
                if nb == MAX_BLOCKED {
                    break;
                }
                blocked[nb] = qp;
                nb += 1;
            }
            i += 1;
        }
        n
    }

    /// Removes every tagged frame (they are not to be sent: their writes may never be
    /// durable); returns them through `out`.
    pub fn discard(&mut self, mut out: impl FnMut(F)) -> usize {
        let keep = self.untagged;
        let mut n = 0;
        while self.q.len() > keep {
            if let Some((f, _, _)) = self.q.pop_front() {
                out(f);
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_leave_in_order_once_durable() {
        let mut h = HoldQueue::new(8);
        h.push(1, 7).unwrap();
        h.push(2, 7).unwrap();
        let mut out = Vec::new();
        assert_eq!(h.release(u64::MAX - 1, |f| out.push(f)), 0, "untagged stay");
        h.tag(100);
        h.push(3, 7).unwrap();
        h.tag(100);
        h.push(4, 7).unwrap();
        h.tag(250);
        assert_eq!(h.release(99, |f| out.push(f)), 0);
        assert_eq!(h.release(100, |f| out.push(f)), 3);
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(h.release(249, |f| out.push(f)), 0);
        assert_eq!(h.release(250, |f| out.push(f)), 1);
        assert_eq!(out, [1, 2, 3, 4]);
        assert!(h.is_empty());
    }

    #[test]
    fn a_qp_keeps_its_order_other_qps_pass() {
        let mut h = HoldQueue::new(8);
        h.push("a-write", 1).unwrap();
        h.tag(500);
        h.push("a-read", 1).unwrap();
        h.push("b-read", 2).unwrap();
        h.tag(0); // a burst without writes
        let mut out = Vec::new();
        assert_eq!(h.release(100, |f| out.push(f)), 1);
        assert_eq!(
            out,
            ["b-read"],
            "QP 2 passes, QP 1's read waits for its write"
        );
        assert_eq!(h.release(500, |f| out.push(f)), 2);
        assert_eq!(out, ["b-read", "a-write", "a-read"]);
    }

    #[test]
    fn full_queue_refuses_and_discard_keeps_the_open_burst() {
        let mut h = HoldQueue::new(2);
        h.push(1, 1).unwrap();
        h.tag(5);
        h.push(2, 1).unwrap();
        assert_eq!(h.push(3, 1), Err(3));
        assert_eq!(h.room(), 0);
        let mut gone = Vec::new();
        assert_eq!(h.discard(|f| gone.push(f)), 1);
        assert_eq!(gone, [1]);
        assert_eq!(h.len(), 1, "the untagged frame of the open burst stays");
        h.tag(6);
        assert_eq!(h.release(6, |_| {}), 1);
    }
}
