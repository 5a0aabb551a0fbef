//! Structure-aware mutations of a request frame (Ethernet/IPv4/UDP/BTH/RETH/payload/
//! ICRC, docs/PROTOCOL.md): header fields set to random or edge values, lengths that
//! lie, truncation and oversize, VLAN tags, IP options and fragments, op-stream bytes,
//! and an optional repair of the checksums so a mutation reaches the deeper checks.

use kvwire::finalize;

/// A small, fast, seeded PRNG (xorshift64*): the whole run follows from the seed.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (0 is mapped to a fixed non-zero state).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n` (`n > 0`; 0 for `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    /// True with probability 1/`n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
}

/// A header field: (name, byte offset in an untagged IHL-5 frame, width in bytes).
pub type Field = (&'static str, usize, usize);

/// Every header field the mutator targets.
pub const FIELDS: &[Field] = &[
    ("eth.dst", 0, 6),
    ("eth.src", 6, 6),
    ("eth.type", 12, 2),
    ("ip.ver_ihl", 14, 1),
    ("ip.tos", 15, 1),
    ("ip.len", 16, 2),
    ("ip.id", 18, 2),
    ("ip.flags_frag", 20, 2),
    ("ip.ttl", 22, 1),
    ("ip.proto", 23, 1),
    ("ip.csum", 24, 2),
    ("ip.src", 26, 4),
    ("ip.dst", 30, 4),
    ("udp.sport", 34, 2),
    ("udp.dport", 36, 2),
    ("udp.len", 38, 2),
    ("udp.csum", 40, 2),
    ("bth.opcode", 42, 1),
    ("bth.flags", 43, 1),
    ("bth.pkey", 44, 2),
    ("bth.dqpn", 47, 3),
    ("bth.ack", 50, 1),
    ("bth.psn", 51, 3),
    ("reth.va", 54, 8),
    ("reth.rkey", 62, 4),
    ("reth.len", 66, 4),
    ("payload.hdr", 70, 8),
    ("payload.op", 78, 8),
];

/// Largest frame the fuzzer sends (within a pktgen mbuf's data room).
pub const MAX_FRAME: usize = 2000;

/// Writes `v` big-endian into `f[at..at + w]` (as far as the frame reaches).
fn put(f: &mut [u8], at: usize, w: usize, v: u64) {
    for i in 0..w {
        if let Some(b) = f.get_mut(at + i) {
            *b = (v >> (8 * (w - 1 - i))) as u8;
        }
    }
}

/// Reads `f[at..at + w]` big-endian (missing bytes read as 0).
fn get(f: &[u8], at: usize, w: usize) -> u64 {
    (0..w).fold(0, |v, i| (v << 8) | u64::from(*f.get(at + i).unwrap_or(&0)))
}

/// A random or edge value for a field of `w` bytes whose current value is `cur`.
fn value(r: &mut Rng, w: usize, cur: u64) -> u64 {
    let mask = if w >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * w)) - 1
    };
    let v = match r.below(8) {
        0 => 0,
        1 => mask,
        2 => cur.wrapping_add(1),
        3 => cur.wrapping_sub(1),
        4 => cur.wrapping_add(r.below(64) as u64).wrapping_sub(32),
        5 => 1 << r.below(8 * w),
        6 => cur ^ (1 << r.below(8 * w)),
        _ => r.next(),
    };
    v & mask
}

/// The mutations, by kind (for the report).
pub const KINDS: &[&str] = &[
    "field",
    "bitflip",
    "truncate",
    "oversize",
    "vlan",
    "ip_options",
    "fragment",
    "lying_length",
    "op_bytes",
    "runt",
];

/// Applies one mutation of kind `k` (index into [`KINDS`]) to `f`.
pub fn mutate(r: &mut Rng, f: &mut Vec<u8>, k: usize) {
    match k {
        0 => {
            let (_, at, w) = FIELDS[r.below(FIELDS.len())];
            let v = value(r, w, get(f, at, w));
            put(f, at, w, v);
        }
        1 => {
            for _ in 0..=r.below(4) {
                let at = r.below(f.len());
                if let Some(b) = f.get_mut(at) {
                    *b ^= 1 << r.below(8);
                }
            }
        }
        2 => {
            let n = r.below(f.len());
            f.truncate(n);
        }
        3 => {
            let extra = 1 + r.below(MAX_FRAME.saturating_sub(f.len()).max(1));
            let fill = r.next() as u8;
            f.resize(f.len() + extra, fill);
        }
        4 => {
            // 802.1Q (or QinQ) tag after the MACs.
            let tpid: u16 = if r.one_in(4) { 0x88a8 } else { 0x8100 };
            let tci = r.next() as u16;
            let at = 12.min(f.len());
            let tag = [(tpid >> 8) as u8, tpid as u8, (tci >> 8) as u8, tci as u8];
            f.splice(at..at, tag);
        }
        5 => {
            // IHL 6..15 with that many option words inserted after the fixed header.
            let words = 1 + r.below(10);
            if let Some(b) = f.get_mut(14) {
                *b = (*b & 0xf0) | (5 + words as u8);
            }
            let at = 34.min(f.len());
            let opt: Vec<u8> = (0..4 * words).map(|_| r.next() as u8).collect();
            f.splice(at..at, opt);
        }
        6 => {
            // More-fragments and/or a fragment offset.
            let v = match r.below(3) {
                0 => 0x2000,
                1 => r.below(0x1fff) as u64 + 1,
                _ => 0x2000 | (r.below(0x1fff) as u64),
            };
            put(f, 20, 2, v);
        }
        7 => {
            // A length field that lies by a little or a lot.
            let (at, w) = [(16, 2), (38, 2), (66, 4), (70, 2)][r.below(4)];
            let cur = get(f, at, w);
            let v = match r.below(3) {
                0 => cur.wrapping_add(1 + r.below(8) as u64),
                1 => cur.saturating_sub(1 + r.below(8) as u64),
                _ => value(r, w, cur),
            };
            put(f, at, w, v);
        }
        8 => {
            // Random op-stream bytes (opcodes, flags, key/value lengths, widths).
            if f.len() > 78 {
                let end = f.len().saturating_sub(4).max(79);
                for _ in 0..=r.below(6) {
                    let at = 70 + r.below(end - 70);
                    if let Some(b) = f.get_mut(at) {
                        *b = r.next() as u8;
                    }
                }
            }
        }
        _ => {
            let n = r.below(60);
            f.truncate(n);
        }
    }
}

/// Repairs the IPv4 checksum and ICRC after a mutation when the frame still looks
/// like an untagged IHL-5 RoCE frame (so the mutation is judged by the deeper checks,
/// not by the checksum); leaves it alone otherwise.
pub fn repair(f: &mut [u8]) {
    let _ = finalize(f);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_and_total() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next(), b.next());
        }
        // Every kind on frames of every length: never panics, stays bounded.
        let mut r = Rng::new(1);
        for len in 0..120 {
            for k in 0..KINDS.len() {
                let mut f = vec![0x45u8; len];
                mutate(&mut r, &mut f, k);
                repair(&mut f);
                assert!(f.len() <= MAX_FRAME + 64);
            }
        }
    }
}
