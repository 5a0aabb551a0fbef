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

/// Byte offset of the BTH destination QP in a request frame without IPv4 options
/// (Ethernet 14 + IPv4 20 + UDP 8 + 5 bytes into the BTH).
const DEST_QP_OFFSET: usize = 14 + 20 + 8 + 5;

/// The BTH destination QP of a request frame, read without validating anything (for
/// steering a frame to its partition's worker before it is parsed): `None` if the
/// frame is too short or has IPv4 options (the owner's parser will judge it).
#[inline]
pub fn peek_dest_qp(frame: &[u8]) -> Option<u32> {
    if frame.get(14).copied() != Some(0x45) {
        return None;
    }
    let b = frame.get(DEST_QP_OFFSET..DEST_QP_OFFSET + 3)?;
    Some(u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]))
}

/// Byte offset of the BTH opcode in a frame without IPv4 options.
const OPCODE_OFFSET: usize = 14 + 20 + 8;

/// The partition whose worker serves `frame` among `n`, read without validating
/// anything (for steering before the frame is parsed): a frame to a client QP goes
/// to that QP's partition, an OPEN (an RC SEND to the connection manager,
/// [`crate::transport::CM_QPN`]) to the partition it asks for (bytes 4–5 of its
/// payload). `None` if the frame is too short or has IPv4 options, or names a
/// partition of `n` it does not have (the receiving worker's parser judges it).
#[inline]
pub fn peek_owner(frame: &[u8], n: u32) -> Option<u32> {
    let qp = peek_dest_qp(frame)?;
    if qp != crate::transport::CM_QPN {
        return Some(partition_of_qp(qp, n));
    }
    if frame.get(OPCODE_OFFSET).copied() != Some(crate::ib::opcode::RC_SEND_ONLY) {
        return None;
    }
    let at = OPCODE_OFFSET + 12 + 4;
    let b = frame.get(at..at + 2)?;
    let p = u32::from(u16::from_be_bytes([b[0], b[1]]));
    (p < n).then_some(p)
}

/// The BTH PSN of a RoCEv2 frame without parsing it (for prefetching the QP's state
/// before the frame is judged): `None` if the frame is too short or has IPv4 options.
#[inline]
pub fn peek_psn(frame: &[u8]) -> Option<u32> {
    if frame.get(14).copied() != Some(0x45) {
        return None;
    }
    let b = frame.get(DEST_QP_OFFSET + 4..DEST_QP_OFFSET + 7)?;
    Some(u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peeks_match_the_parser() {
        let mut buf = [0u8; 256];
        let n = crate::frame::sample_request(&mut buf);
        let r = crate::parse_request(&buf[..n]).unwrap();
        assert_eq!(peek_dest_qp(&buf[..n]), Some(r.dest_qp));
        assert_eq!(peek_psn(&buf[..n]), Some(r.psn));
        assert_eq!(peek_psn(&buf[..40]), None);
    }

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

    #[test]
    fn peek_finds_the_dest_qp_of_a_request() {
        use crate::frame::{emit_request_headers, finalize, request_frame_len, FrameParams};
        use std::net::Ipv4Addr;
        let params = FrameParams::new(
            [2, 0, 0, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(10, 0, 0, 1),
            0xC000,
        );
        let mut buf = vec![0u8; request_frame_len(8)];
        emit_request_headers(&mut buf, &params, 0x00AB_CDEF, 7, 1 << 32, 0x1234, 8).unwrap();
        let n = finalize(&mut buf).unwrap();
        assert_eq!(peek_dest_qp(&buf[..n]), Some(0x00AB_CDEF));
        assert_eq!(peek_dest_qp(&buf[..40]), None);
        assert_eq!(peek_dest_qp(&[]), None);
    }

    #[test]
    fn an_open_is_steered_to_the_partition_it_asks_for() {
        use crate::transport::{emit_join, Connect, Join, CM_QPN};
        let params = crate::frame::FrameParams::new(
            [2, 0, 0, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            std::net::Ipv4Addr::new(10, 0, 0, 2),
            std::net::Ipv4Addr::new(10, 0, 0, 1),
            0xC000,
        );
        let mut buf = [0u8; 128];
        let c = Connect { rkey: 0, nonce: 5 };
        let n = emit_join(
            &mut buf,
            &params,
            CM_QPN,
            &c,
            &Join::Open {
                partition: 2,
                tenant: None,
            },
        )
        .unwrap();
        assert_eq!(peek_owner(&buf[..n], 3), Some(2));
        assert_eq!(peek_owner(&buf[..n], 2), None, "no partition 2 of 2");
        let n = emit_join(&mut buf, &params, 7, &c, &Join::Connect).unwrap();
        assert_eq!(peek_owner(&buf[..n], 3), Some(1), "a client QP: qpn % n");
    }
}
