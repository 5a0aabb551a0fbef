//! Ethernet II header view.
//!
//! ```text
//!  0      6      12   14
//! +------+------+----+---------
//! | dst  | src  |type| payload
//! +------+------+----+---------
//! ```
//!
//! Panic contract: after [`EthernetFrame::new_checked`] (or a successful
//! [`EthernetFrame::check_len`]) no accessor panics.

use crate::view::{be16, view, Error};

/// A MAC address.
pub type MacAddr = [u8; 6];

/// Parses a MAC address: six groups of one or two hex digits separated by `:` or
/// `-` (`02:00:00:00:00:01`, `2-0-0-0-0-1`); `None` for anything else. The one
/// parser of every tool and client.
pub fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut out = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for b in &mut out {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Byte ranges of the Ethernet II header.
pub mod field {
    use crate::view::Field;
    /// Destination MAC.
    pub const DST: Field = 0..6;
    /// Source MAC.
    pub const SRC: Field = 6..12;
    /// EtherType.
    pub const ETHERTYPE: Field = 12..14;
    /// Start of the payload.
    pub const PAYLOAD: usize = 14;
}

/// Ethernet II header length.
pub const HEADER_LEN: usize = field::PAYLOAD;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;

view!(
    /// Zero-copy view of an Ethernet II frame.
    EthernetFrame,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks that the buffer holds the full header.
    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// Destination MAC.
    #[inline]
    pub fn dst_addr(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }
    /// Source MAC.
    #[inline]
    pub fn src_addr(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }
    /// EtherType.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE)
    }
    /// Bytes after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    #[inline]
    pub fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a);
    }
    /// Sets the source MAC.
    #[inline]
    pub fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a);
    }
    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&t.to_be_bytes());
    }
    /// Mutable bytes after the header.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_mac_parser() {
        assert_eq!(
            super::parse_mac("02:00:00:00:00:0a"),
            Some([2, 0, 0, 0, 0, 10])
        );
        assert_eq!(super::parse_mac("2-0-0-0-0-A"), Some([2, 0, 0, 0, 0, 10]));
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:00:00",
            "02:00:00:00:00:0g",
            "002:0:0:0:0:0",
            "+2:0:0:0:0:0",
            "02::00:00:00:00",
        ] {
            assert_eq!(super::parse_mac(bad), None, "{bad:?}");
        }
    }

    use super::*;

    static FRAME: [u8; 15] = [
        0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, 0xaa,
    ];

    #[test]
    fn parse() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(f.src_addr(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(f.ethertype(), ETHERTYPE_IPV4);
        assert_eq!(f.payload(), &[0xaa]);
    }

    #[test]
    fn emit() {
        let mut b = [0xa5u8; 15];
        let mut f = EthernetFrame::new_unchecked(&mut b[..]);
        f.set_dst_addr([2, 0, 0, 0, 0, 2]);
        f.set_src_addr([2, 0, 0, 0, 0, 1]);
        f.set_ethertype(ETHERTYPE_IPV4);
        f.payload_mut()[0] = 0xaa;
        assert_eq!(b, FRAME);
    }

    #[test]
    fn truncated() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                EthernetFrame::new_checked(&FRAME[..n]).unwrap_err(),
                Error::Truncated
            );
        }
    }
}
