//! Key partitions across worker lcores (KV-Direct §6.2; MICA/HERD give each core a
//! partition). docs/PROTOCOL.md §6 is the client-facing description.
//!
//! A dataplane with `n` workers splits the key space into `n` partitions, one per
//! worker: its own hash index shard, slab pools and reservation station. A client
//! steers each request to the owner of its keys:
//!
//! * the partition of a key is [`partition_of_hash`] of the engine's key hash
//!   (`kvengine::key_hash`, a fixed function of the key bytes);
//! * client QP `qpn` is served by partition [`partition_of_qp`] (`qpn % n`), and a
//!   request may only carry keys of that partition: others are answered
//!   `WRONG_PARTITION`;
//! * partition `p` polls rx queue `p` of each port; a request that arrives on another
//!   queue is handed to its owner (in order, per QP) and still served.

/// The partition of a key hash among `n` (`n >= 1`): the low 32 bits scaled to
/// `0..n` (multiply-shift). The engine indexes buckets with the high bits, so the
/// partition does not thin out the buckets a partition uses.
#[inline]
pub const fn partition_of_hash(hash: u64, n: u32) -> u32 {
    (((hash & 0xffff_ffff) * n as u64) >> 32) as u32
}

/// The partition that serves client QP `qpn` among `n` (`n >= 1`).
#[inline]
pub const fn partition_of_qp(qpn: u32, n: u32) -> u32 {
    if n == 0 {
        0
    } else {
        qpn % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_in_range_and_spread() {
        let mut counts = [0u32; 3];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..30_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let p = partition_of_hash(x, 3);
            counts[p as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(partition_of_hash(u64::MAX, 1), 0);
        assert_eq!(partition_of_qp(17, 2), 1);
        assert_eq!(partition_of_qp(18, 2), 0);
        assert_eq!(partition_of_qp(5, 1), 0);
    }
}
