//! IPv4 header view (with header checksum compute/verify).
//!
//! ```text
//!  0       1       2               4               6               8
//! +-------+-------+---------------+---------------+---------------+
//! |ver|ihl|  tos  | total length  | identification| flags|frag off|
//! +-------+-------+---------------+---------------+---------------+
//! |  ttl  | proto |   checksum    |          source address       |
//! +-------+-------+---------------+---------------+---------------+
//! |      destination address      |  options (ihl > 5) ...
//! +-------------------------------+
//! ```
//!
//! Panic contract: after [`Ipv4Packet::new_checked`] succeeds (buffer holds
//! `ihl * 4` header bytes and `total length` bytes in all, `ihl >= 5`) no
//! accessor panics. Trailing bytes past `total length` (Ethernet padding) are
//! allowed and ignored by [`Ipv4Packet::payload`].

use crate::view::{be16, view, Error};
use core::net::Ipv4Addr;

/// Byte ranges of the IPv4 header.
pub mod field {
    use crate::view::Field;
    /// Version (high nibble) and IHL (low nibble).
    pub const VER_IHL: usize = 0;
    /// DSCP/ECN (the former TOS byte).
    pub const TOS: usize = 1;
    /// Total length (header + payload).
    pub const LENGTH: Field = 2..4;
    /// Identification.
    pub const IDENT: Field = 4..6;
    /// Flags (3 bits) and fragment offset (13 bits).
    pub const FLG_OFF: Field = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Field = 10..12;
    /// Source address.
    pub const SRC: Field = 12..16;
    /// Destination address.
    pub const DST: Field = 16..20;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// "Don't fragment" flag in the flags/fragment-offset field.
pub const FLAG_DF: u16 = 0x4000;

view!(
    /// Zero-copy view of an IPv4 packet.
    Ipv4Packet,
    HEADER_LEN
);

/// Internet checksum (RFC 1071) of `data`, not yet complemented.
pub fn ones_complement_sum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Checks header length, IHL and total length against the buffer.
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        let tl = usize::from(self.total_len());
        if hl < HEADER_LEN || tl < hl {
            return Err(Error::Malformed);
        }
        if b.len() < tl {
            return Err(Error::Truncated);
        }
        Ok(())
    }
    /// IP version (must be 4).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    /// TOS (DSCP/ECN) byte.
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }
    /// Total length.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }
    /// True if "more fragments" is set or the fragment offset is non-zero.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & 0x3fff != 0
    }
    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Protocol.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        let s = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(s[0], s[1], s[2], s[3])
    }
    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        let s = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(s[0], s[1], s[2], s[3])
    }
    /// True if the header checksum is valid.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        ones_complement_sum(&self.buffer.as_ref()[..self.header_len()]) == 0xffff
    }
    /// Bytes between the header and `total length`.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets version 4 and the header length (bytes, multiple of 4).
    #[inline]
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }
    /// Sets the TOS byte.
    #[inline]
    pub fn set_tos(&mut self, v: u8) {
        self.buffer.as_mut()[field::TOS] = v;
    }
    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        self.buffer.as_mut()[field::IDENT].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the flags/fragment-offset field.
    #[inline]
    pub fn set_flags_frag(&mut self, v: u16) {
        self.buffer.as_mut()[field::FLG_OFF].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the TTL.
    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    /// Sets the protocol.
    #[inline]
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }
    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }
    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }
    /// Computes and stores the header checksum.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = !ones_complement_sum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A hand-made header (checksum 0x9c76 computed independently in Python), 20 bytes + 4 payload.
    static PACKET: [u8; 24] = [
        0x45, 0x00, 0x00, 0x18, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x9c, 0x76, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7, 0xde, 0xad, 0xbe, 0xef,
    ];

    #[test]
    fn parse() {
        let p = Ipv4Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 24);
        assert_eq!(p.protocol(), PROTO_UDP);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(!p.is_fragment());
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert!(p.verify_checksum());
    }

    #[test]
    fn emit() {
        let mut b = [0xa5u8; 24];
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.set_version_and_header_len(20);
        p.set_tos(0);
        p.set_total_len(24);
        p.set_ident(0x1c46);
        p.set_flags_frag(FLAG_DF);
        p.set_ttl(64);
        p.set_protocol(PROTO_UDP);
        p.set_src_addr(Ipv4Addr::new(192, 168, 0, 1));
        p.set_dst_addr(Ipv4Addr::new(192, 168, 0, 199));
        p.fill_checksum();
        b[20..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(b, PACKET);
    }

    #[test]
    fn bad_checksum_and_lengths() {
        let mut b = PACKET;
        b[11] ^= 1;
        assert!(!Ipv4Packet::new_checked(&b[..]).unwrap().verify_checksum());
        let mut b = PACKET;
        b[0] = 0x44; // ihl 16 bytes
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::Malformed
        );
        let mut b = PACKET;
        b[3] = 0x40; // total length past the buffer
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::Truncated
        );
        for n in 0..PACKET.len() {
            assert!(Ipv4Packet::new_checked(&PACKET[..n]).is_err());
        }
    }
}
