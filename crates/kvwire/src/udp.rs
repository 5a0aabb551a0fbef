//! UDP header view.
//!
//! ```text
//!  0          2          4          6          8
//! +----------+----------+----------+----------+
//! | src port | dst port |  length  | checksum |
//! +----------+----------+----------+----------+
//! ```
//!
//! RoCEv2 sets the checksum to 0 ("not computed"); the destination port is
//! 4791 and the source port carries flow entropy chosen by the sender.
//!
//! Panic contract: after [`UdpPacket::new_checked`] succeeds (8 ≤ length ≤
//! buffer) no accessor panics.

use crate::view::{be16, view, Error};

/// Byte ranges of the UDP header.
pub mod field {
    use crate::view::Field;
    /// Source port.
    pub const SRC_PORT: Field = 0..2;
    /// Destination port.
    pub const DST_PORT: Field = 2..4;
    /// Length of header + payload.
    pub const LENGTH: Field = 4..6;
    /// Checksum (0 = none).
    pub const CHECKSUM: Field = 6..8;
}

/// UDP header length.
pub const HEADER_LEN: usize = 8;
/// IANA port of RoCEv2.
pub const ROCEV2_PORT: u16 = 4791;

view!(
    /// Zero-copy view of a UDP datagram.
    UdpPacket,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Checks the header and the length field against the buffer.
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = usize::from(self.len());
        if l < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < l {
            return Err(Error::Truncated);
        }
        Ok(())
    }
    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length field (header + payload).
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Bytes between the header and `length`.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static PACKET: [u8; 10] = [0xc0, 0x00, 0x12, 0xb7, 0x00, 0x0a, 0x00, 0x00, 0x01, 0x02];

    #[test]
    fn parse_emit() {
        let p = UdpPacket::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.src_port(), 0xc000);
        assert_eq!(p.dst_port(), ROCEV2_PORT);
        assert_eq!(p.len(), 10);
        assert_eq!(p.checksum(), 0);
        assert_eq!(p.payload(), &[1, 2]);
        let mut b = [0xa5u8; 10];
        let mut q = UdpPacket::new_unchecked(&mut b[..]);
        q.set_src_port(0xc000);
        q.set_dst_port(ROCEV2_PORT);
        q.set_len(10);
        q.set_checksum(0);
        b[8..].copy_from_slice(&[1, 2]);
        assert_eq!(b, PACKET);
    }

    #[test]
    fn lying_length() {
        let mut b = PACKET;
        b[5] = 7;
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Malformed
        );
        b[5] = 11;
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Truncated
        );
    }
}
