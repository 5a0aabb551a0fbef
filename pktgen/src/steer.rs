//! Steering operations to the dataplane's key partitions.
//!
//! With `n` partitions every request packet may only carry keys of one partition
//! (that of its client QP, `kvwire::partition`). Keys are still drawn from the
//! workload one after the other, exactly as with one partition; a drawn op whose key
//! belongs to another partition than the packet being built is *parked* in that
//! partition's pending queue and goes first into the next packet built for it. The
//! next packet's partition is the one with the most pending ops (ties round robin),
//! so the per-partition load follows the real key skew and no partition starves.
//!
//! Each partition's ops leave in the order they were drawn (its queue is FIFO and is
//! drained before fresh draws join the packet), which is what verify mode needs: a
//! key always maps to the same partition, so its ops are sent in draw order.
//!
//! Everything is preallocated: parking and filling never allocate.

use kvload::OpType;
use kvwire::partition::partition_of_hash;

/// A drawn operation: its key index, type and the low 32 bits of the engine's key
/// hash (all that [`partition_of_hash`] looks at).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drawn {
    /// Key index (`0..keys`).
    pub key: u64,
    /// Low 32 bits of `kvwire::hash::key_hash` of the key's bytes.
    pub hash32: u32,
    /// Operation type.
    pub op: OpType,
}

/// Per-partition FIFO queues of parked ops, one fixed-capacity ring each.
#[derive(Debug)]
pub struct Steer {
    n: u32,
    /// Ring capacity (a power of two).
    cap: usize,
    ring: Vec<Drawn>,
    head: Vec<usize>,
    len: Vec<usize>,
    /// Queues at capacity: while any is full, no fresh op is drawn (it might have
    /// nowhere to go).
    full: usize,
    total: usize,
    /// Round-robin cursor for ties.
    rr: usize,
}

impl Steer {
    /// Queues for `n >= 1` partitions of at least `cap` ops each. `cap` must exceed
    /// the largest number of ops per packet, so a full queue empties one packet's
    /// worth at a time without blocking the others for long.
    pub fn new(n: u32, cap: usize) -> Steer {
        assert!(n >= 1, "at least one partition");
        let cap = cap.max(2).next_power_of_two();
        let nn = n as usize;
        Steer {
            n,
            cap,
            ring: vec![
                Drawn {
                    key: 0,
                    hash32: 0,
                    op: OpType::Get
                };
                nn * cap
            ],
            head: vec![0; nn],
            len: vec![0; nn],
            full: 0,
            total: 0,
            rr: 0,
        }
    }

    /// The partition of a drawn op.
    #[inline]
    pub fn partition_of(&self, d: &Drawn) -> usize {
        partition_of_hash(u64::from(d.hash32), self.n) as usize
    }

    /// Ops parked over all partitions.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Drops every parked op (between phases: they were never sent, so the verify
    /// model never saw them).
    pub fn clear(&mut self) {
        self.head.fill(0);
        self.len.fill(0);
        self.full = 0;
        self.total = 0;
    }

    /// Appends `d` to partition `p`'s queue; false when it is full.
    #[inline]
    fn park(&mut self, p: usize, d: Drawn) -> bool {
        let l = self.len[p];
        if l == self.cap {
            return false;
        }
        let i = (self.head[p] + l) & (self.cap - 1);
        self.ring[p * self.cap + i] = d;
        self.len[p] = l + 1;
        self.total += 1;
        if l + 1 == self.cap {
            self.full += 1;
        }
        true
    }

    /// The oldest op parked for `p`.
    #[inline]
    fn front(&self, p: usize) -> Option<Drawn> {
        (self.len[p] > 0).then(|| self.ring[p * self.cap + self.head[p]])
    }

    /// Removes the oldest op parked for `p` (which must exist).
    #[inline]
    fn pop_front(&mut self, p: usize) {
        debug_assert!(self.len[p] > 0);
        if self.len[p] == self.cap {
            self.full -= 1;
        }
        self.head[p] = (self.head[p] + 1) & (self.cap - 1);
        self.len[p] -= 1;
        self.total -= 1;
    }

    /// The partition with the most parked ops, ties broken round robin; `None` when
    /// nothing is parked.
    pub fn pick(&mut self) -> Option<usize> {
        if self.total == 0 {
            return None;
        }
        let nn = self.n as usize;
        let mut best = self.rr;
        for i in 1..nn {
            let p = (self.rr + i) % nn;
            if self.len[p] > self.len[best] {
                best = p;
            }
        }
        self.rr = (best + 1) % nn;
        Some(best)
    }

    /// Fills one packet of at most `target` ops and returns `(partition, ops)`, or
    /// `None` when nothing is parked and `draw` has nothing left.
    ///
    /// The partition is [`Steer::pick`]'s, or when nothing is parked that of the
    /// first op drawn. Its parked ops go first, then fresh ops from `draw`; ops of
    /// other partitions are parked. `emit` writes an op into the packet and returns
    /// false when the packet is full (the op is then kept, still first in line).
    /// The packet is closed early when a queue fills up, so parking never fails.
    pub fn fill(
        &mut self,
        target: usize,
        mut draw: impl FnMut() -> Option<Drawn>,
        mut emit: impl FnMut(&Drawn) -> bool,
    ) -> Option<(usize, usize)> {
        let p = match self.pick() {
            Some(p) => p,
            None => {
                let d = draw()?;
                let p = self.partition_of(&d);
                // Everything is empty: cannot fail.
                let parked = self.park(p, d);
                debug_assert!(parked);
                p
            }
        };
        let mut n = 0;
        while n < target {
            let Some(d) = self.front(p) else { break };
            if !emit(&d) {
                return Some((p, n));
            }
            self.pop_front(p);
            n += 1;
        }
        // p's queue is empty from here on (or the packet is complete).
        while n < target && self.full == 0 {
            let Some(d) = draw() else { break };
            let q = self.partition_of(&d);
            if q == p {
                if emit(&d) {
                    n += 1;
                    continue;
                }
                // Packet full: p's queue is empty, so `d` stays first in line.
                let parked = self.park(p, d);
                debug_assert!(parked);
                break;
            }
            // No queue is full (checked above), so this cannot fail.
            let parked = self.park(q, d);
            debug_assert!(parked);
        }
        Some((p, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvload::{splitmix64, write_key, Distribution, KeyChooser, Xorshift64Star as Rng};

    fn hash32(key: u64) -> u32 {
        let mut b = [0u8; 8];
        write_key(key, &mut b);
        kvwire::hash::key_hash(&b) as u32
    }

    /// Drives `fill` like pktgen does over `draws` Zipf draws, packets of at most
    /// `target` ops with room for `room(packet)` ops; returns the drawn keys and the
    /// packets (partition, keys) in send order.
    fn drive(
        n: u32,
        cap: usize,
        target: usize,
        draws: usize,
        room: impl Fn(usize) -> usize,
    ) -> (Vec<u64>, Vec<(usize, Vec<u64>)>) {
        let mut s = Steer::new(n, cap);
        let chooser = KeyChooser::new(10_000, Distribution::Zipf(0.99));
        let mut rng = Rng::new(42);
        let mut drawn = Vec::new();
        let mut packets = Vec::new();
        loop {
            let mut keys = Vec::new();
            let r = room(packets.len());
            let got = s.fill(
                target,
                || {
                    if drawn.len() == draws {
                        return None;
                    }
                    let key = chooser.next(&mut rng);
                    drawn.push(key);
                    Some(Drawn {
                        key,
                        hash32: hash32(key),
                        op: OpType::Get,
                    })
                },
                |d| {
                    if keys.len() == r {
                        return false;
                    }
                    keys.push(d.key);
                    true
                },
            );
            let Some((p, k)) = got else { break };
            assert_eq!(k, keys.len());
            assert!(k <= target);
            packets.push((p, keys));
            assert!(packets.len() < 10 * draws + 100, "no progress");
        }
        assert_eq!(s.total(), 0, "everything parked was sent");
        (drawn, packets)
    }

    fn check(n: u32, cap: usize, target: usize, room: impl Fn(usize) -> usize) {
        let draws = 20_000;
        let (drawn, packets) = drive(n, cap, target, draws, room);
        assert_eq!(drawn.len(), draws);
        // Each packet holds keys of its partition only.
        for (p, keys) in &packets {
            for &k in keys {
                assert_eq!(partition_of_hash(u64::from(hash32(k)), n) as usize, *p);
            }
        }
        // Every drawn op is sent exactly once, and each partition's ops leave in draw
        // order (what keeps the verify model right).
        for part in 0..n as usize {
            let want: Vec<u64> = drawn
                .iter()
                .copied()
                .filter(|&k| partition_of_hash(u64::from(hash32(k)), n) as usize == part)
                .collect();
            let sent: Vec<u64> = packets
                .iter()
                .filter(|(p, _)| *p == part)
                .flat_map(|(_, k)| k.iter().copied())
                .collect();
            assert_eq!(sent, want, "partition {part} of {n}");
        }
        let total: usize = packets.iter().map(|(_, k)| k.len()).sum();
        assert_eq!(total, draws);
    }

    #[test]
    fn every_op_is_sent_once_in_its_partition_in_draw_order() {
        for n in [1, 2, 3, 10] {
            check(n, 64, 8, |_| usize::MAX);
            // Packets that fill up before `target` (large values): the op that did
            // not fit must come back first.
            check(n, 32, 16, |i| 1 + splitmix64(i as u64) as usize % 5);
        }
    }

    #[test]
    fn packets_are_mostly_full_and_load_follows_skew() {
        let n = 4;
        let (drawn, packets) = drive(n, 256, 8, 40_000, |_| usize::MAX);
        let mut per = [0usize; 4];
        for &k in &drawn {
            per[partition_of_hash(u64::from(hash32(k)), n) as usize] += 1;
        }
        let mut sent = [0usize; 4];
        for (p, k) in &packets {
            sent[*p] += k.len();
        }
        assert_eq!(per, sent);
        // Only the last packets of the drain may be short.
        let full = packets.iter().filter(|(_, k)| k.len() == 8).count();
        assert!(
            full * 100 >= packets.len() * 95,
            "{full} of {}",
            packets.len()
        );
    }

    #[test]
    fn picks_the_longest_queue_round_robin_on_ties() {
        let mut s = Steer::new(3, 8);
        let d = |key, hash32| Drawn {
            key,
            hash32,
            op: OpType::Put,
        };
        // hash32 0 -> partition 0, u32::MAX -> partition 2, 0x6000_0000 -> 1.
        assert!(s.park(2, d(1, u32::MAX)));
        assert!(s.park(2, d(2, u32::MAX)));
        assert!(s.park(1, d(3, 0x6000_0000)));
        assert!(s.park(0, d(4, 0)));
        assert_eq!(s.pick(), Some(2));
        assert_eq!(s.front(2).map(|x| x.key), Some(1), "FIFO");
        s.pop_front(2);
        // All at 1 now: round robin from after 2.
        assert_eq!(s.pick(), Some(0));
        assert_eq!(s.pick(), Some(1));
        assert_eq!(s.pick(), Some(2));
        for _ in 0..7 {
            assert!(s.park(1, d(9, 0x6000_0000)));
            assert!(s.park(0, d(8, 0)));
        }
        assert!(!s.park(1, d(9, 0x6000_0000)), "capacity 8");
        // Queues 0 and 1 are full (8 each): a packet drains one of them, and no fresh
        // op is drawn while the other is still full.
        let mut calls = 0;
        let first = s.fill(
            10,
            || {
                calls += 1;
                None
            },
            |_| true,
        );
        assert!(matches!(first, Some((0 | 1, 8))), "{first:?}");
        assert_eq!(calls, 0, "drew while a queue was full");
        let second = s.fill(
            10,
            || {
                calls += 1;
                None
            },
            |_| true,
        );
        assert_eq!(second.map(|x| x.1), Some(8));
        assert_ne!(first.map(|x| x.0), second.map(|x| x.0));
        assert_eq!(calls, 1, "draws resume once nothing is full");
        assert_eq!(s.fill(10, || None, |_| true), Some((2, 1)));
        assert!(s.park(2, d(5, u32::MAX)));
        s.clear();
        assert_eq!(s.total(), 0);
        assert_eq!(s.fill(4, || None, |_| true), None);
    }
}
