//! RoCEv2 invariant CRC (ICRC), as in Linux `drivers/infiniband/sw/rxe/rxe_icrc.c`.
//!
//! The ICRC is zlib's reflected CRC-32 over
//!
//! 1. 8 bytes of `0xff` (the masked LRH of native InfiniBand),
//! 2. the IPv4 header with TOS, TTL and header checksum set to all-ones,
//! 3. the UDP header with the checksum set to all-ones,
//! 4. the BTH with byte 4 (`resv8a`, FECN/BECN) set to all-ones,
//! 5. extension headers, payload and pad bytes, unmodified,
//!
//! and is stored after the pad bytes least-significant byte first.

use crate::ipv4;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Computes the ICRC of `ip_packet`: an IPv4 header (`ip_header_len` bytes,
/// must be ≥ 20 + 8 + 12 and ≤ 60) followed by UDP, BTH, extension
/// headers and payload, *excluding* the ICRC trailer.
///
/// Returns `None` if the slice is too short for IP + UDP + BTH or the header
/// length is out of range (never panics).
pub fn compute(ip_packet: &[u8], ip_header_len: usize) -> Option<u32> {
    // 8 bytes of 0xff, then up to 60 B IP + 8 B UDP + 12 B BTH, hashed in one
    // update (crc32fast is much faster on one longer slice than several short).
    const LRH: usize = 8;
    const MAX_PSEUDO: usize = LRH + 60 + 8 + 12;
    let fixed = ip_header_len.checked_add(8 + 12)?;
    if !(ipv4::HEADER_LEN..=60).contains(&ip_header_len) || ip_packet.len() < fixed {
        return None;
    }
    let mut pseudo = [0xffu8; MAX_PSEUDO];
    let p = pseudo.get_mut(..LRH + fixed)?;
    p[LRH..].copy_from_slice(ip_packet.get(..fixed)?);
    p[LRH + ipv4::field::TOS] = 0xff;
    p[LRH + ipv4::field::TTL] = 0xff;
    p[LRH + ipv4::field::CHECKSUM.start] = 0xff;
    p[LRH + ipv4::field::CHECKSUM.start + 1] = 0xff;
    let udp = LRH + ip_header_len;
    p[udp + 6] = 0xff;
    p[udp + 7] = 0xff;
    p[udp + 8 + crate::ib::bth_field::RESV8A] = 0xff;
    let mut h = crc32fast::Hasher::new();
    h.update(p);
    h.update(ip_packet.get(fixed..)?);
    Some(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_short_input() {
        assert_eq!(compute(&[0u8; 39], 20), None);
        assert_eq!(compute(&[0u8; 100], 16), None);
        assert_eq!(compute(&[0u8; 100], 64), None);
        assert!(compute(&[0u8; 40], 20).is_some());
    }

    #[test]
    fn masked_fields_do_not_matter() {
        let mut pkt = [0x11u8; 60];
        let a = compute(&pkt, 20).unwrap();
        for i in [1usize, 8, 10, 11, 26, 27, 32] {
            pkt[i] = 0x5a;
        }
        assert_eq!(compute(&pkt, 20), Some(a));
        pkt[33] ^= 1; // dest QP is covered
        assert_ne!(compute(&pkt, 20), Some(a));
    }
}
