//! InfiniBand transport headers carried by RoCEv2: BTH, RETH, DETH.
//!
//! ```text
//! BTH (12 bytes)
//!  0        1                 2        4        5                 8        9                 12
//! +--------+-----------------+--------+--------+-----------------+--------+-----------------+
//! | opcode |SE|M|pad(2)|TVer | P_Key  | resv8a | dest QP (24)    |A|resv7| PSN (24)        |
//! +--------+-----------------+--------+--------+-----------------+--------+-----------------+
//!
//! RETH (16 bytes)                      DETH (8 bytes)
//!  0               8       12      16    0       4       5               8
//! +---------------+-------+-------+     +-------+-------+---------------+
//! | virtual addr  | R_Key |DMA len|     | Q_Key | resv  | src QP (24)   |
//! +---------------+-------+-------+     +-------+-------+---------------+
//! ```
//!
//! In RoCEv2 the two top bits of `resv8a` (BTH byte 4) are FECN/BECN. The
//! ICRC treats the whole byte as variant (all-ones).
//!
//! Panic contract: after `new_checked` succeeds no accessor panics.

use crate::view::{be16, be24, be32, be64, put_be24, view, Error};

/// BTH opcodes used by this protocol.
pub mod opcode {
    /// RC RDMA WRITE Only: a request (followed by RETH).
    pub const RC_RDMA_WRITE_ONLY: u8 = 0x0a;
    /// RC RDMA WRITE Only with Immediate: a replication stream segment
    /// (followed by RETH and ImmDt, `crate::repl`).
    pub const RC_RDMA_WRITE_ONLY_IMM: u8 = 0x0b;
    /// UD SEND Only: a response or a connection accept (followed by DETH).
    pub const UD_SEND_ONLY: u8 = 0x64;
    /// RC SEND Only: a connection request (protocol v2, `crate::transport`).
    pub const RC_SEND_ONLY: u8 = 0x04;
    /// RC Acknowledge: an ACK, RNR NAK or NAK (followed by AETH).
    pub const RC_ACKNOWLEDGE: u8 = 0x11;
}

/// Mask of a 24-bit QP number or PSN.
pub const MASK_24: u32 = 0x00ff_ffff;

/// Byte ranges of the BTH.
pub mod bth_field {
    use crate::view::Field;
    /// Opcode.
    pub const OPCODE: usize = 0;
    /// SE (bit 7), M (bit 6), pad count (bits 5..4), TVer (bits 3..0).
    pub const FLAGS: usize = 1;
    /// Partition key.
    pub const PKEY: Field = 2..4;
    /// Reserved byte (FECN bit 7 / BECN bit 6 in RoCEv2); all-ones in the ICRC.
    pub const RESV8A: usize = 4;
    /// Destination QP number (24 bits).
    pub const DEST_QP: Field = 5..8;
    /// AckReq (bit 7), reserved (bits 6..0).
    pub const ACK: usize = 8;
    /// Packet sequence number (24 bits).
    pub const PSN: Field = 9..12;
}

/// Byte ranges of the RETH.
pub mod reth_field {
    use crate::view::Field;
    /// Virtual address.
    pub const VA: Field = 0..8;
    /// Remote key.
    pub const RKEY: Field = 8..12;
    /// DMA length.
    pub const DMA_LEN: Field = 12..16;
}

/// Byte ranges of the DETH.
pub mod deth_field {
    use crate::view::Field;
    /// Queue key.
    pub const QKEY: Field = 0..4;
    /// Reserved.
    pub const RESV: usize = 4;
    /// Source QP number (24 bits).
    pub const SRC_QP: Field = 5..8;
}

/// BTH length.
pub const BTH_LEN: usize = 12;
/// RETH length.
pub const RETH_LEN: usize = 16;
/// DETH length.
pub const DETH_LEN: usize = 8;
/// AETH (ACK Extended Transport Header) length: syndrome (1 B) + MSN (3 B).
pub const AETH_LEN: usize = 4;
/// Default partition key (full member, default partition).
pub const DEFAULT_PKEY: u16 = 0xffff;

view!(
    /// Zero-copy view of a Base Transport Header.
    Bth,
    BTH_LEN
);
view!(
    /// Zero-copy view of an RDMA Extended Transport Header.
    Reth,
    RETH_LEN
);
view!(
    /// Zero-copy view of a Datagram Extended Transport Header.
    Deth,
    DETH_LEN
);

macro_rules! fixed_check_len {
    ($t:ident, $n:expr) => {
        impl<T: AsRef<[u8]>> $t<T> {
            /// Checks that the buffer holds the full header.
            pub fn check_len(&self) -> Result<(), Error> {
                if self.buffer.as_ref().len() < $n {
                    Err(Error::Truncated)
                } else {
                    Ok(())
                }
            }
        }
    };
}
fixed_check_len!(Bth, BTH_LEN);
fixed_check_len!(Reth, RETH_LEN);
fixed_check_len!(Deth, DETH_LEN);

impl<T: AsRef<[u8]>> Bth<T> {
    /// Opcode.
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[bth_field::OPCODE]
    }
    /// Solicited event bit.
    #[inline]
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[bth_field::FLAGS] & 0x80 != 0
    }
    /// MigReq bit.
    #[inline]
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[bth_field::FLAGS] & 0x40 != 0
    }
    /// Pad count (0..=3 bytes of padding before the ICRC).
    #[inline]
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[bth_field::FLAGS] >> 4) & 0x3
    }
    /// Transport header version (0).
    #[inline]
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[bth_field::FLAGS] & 0x0f
    }
    /// Partition key.
    #[inline]
    pub fn pkey(&self) -> u16 {
        be16(self.buffer.as_ref(), bth_field::PKEY)
    }
    /// Reserved byte 4 (FECN/BECN in the top bits).
    #[inline]
    pub fn resv8a(&self) -> u8 {
        self.buffer.as_ref()[bth_field::RESV8A]
    }
    /// Destination QP number.
    #[inline]
    pub fn dest_qp(&self) -> u32 {
        be24(self.buffer.as_ref(), bth_field::DEST_QP)
    }
    /// AckReq bit.
    #[inline]
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[bth_field::ACK] & 0x80 != 0
    }
    /// Packet sequence number.
    #[inline]
    pub fn psn(&self) -> u32 {
        be24(self.buffer.as_ref(), bth_field::PSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    /// Sets the opcode.
    #[inline]
    pub fn set_opcode(&mut self, v: u8) {
        self.buffer.as_mut()[bth_field::OPCODE] = v;
    }
    /// Sets SE, M, pad count and TVer at once.
    #[inline]
    pub fn set_flags(&mut self, se: bool, mig: bool, pad: u8, tver: u8) {
        self.buffer.as_mut()[bth_field::FLAGS] =
            (u8::from(se) << 7) | (u8::from(mig) << 6) | ((pad & 3) << 4) | (tver & 0x0f);
    }
    /// Sets the partition key.
    #[inline]
    pub fn set_pkey(&mut self, v: u16) {
        self.buffer.as_mut()[bth_field::PKEY].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets reserved byte 4.
    #[inline]
    pub fn set_resv8a(&mut self, v: u8) {
        self.buffer.as_mut()[bth_field::RESV8A] = v;
    }
    /// Sets the destination QP (low 24 bits used).
    #[inline]
    pub fn set_dest_qp(&mut self, v: u32) {
        put_be24(self.buffer.as_mut(), bth_field::DEST_QP, v);
    }
    /// Sets AckReq (the 7 reserved bits are cleared).
    #[inline]
    pub fn set_ack_req(&mut self, v: bool) {
        self.buffer.as_mut()[bth_field::ACK] = u8::from(v) << 7;
    }
    /// Sets the PSN (low 24 bits used).
    #[inline]
    pub fn set_psn(&mut self, v: u32) {
        put_be24(self.buffer.as_mut(), bth_field::PSN, v);
    }
}

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address.
    #[inline]
    pub fn va(&self) -> u64 {
        be64(self.buffer.as_ref(), reth_field::VA)
    }
    /// Remote key.
    #[inline]
    pub fn rkey(&self) -> u32 {
        be32(self.buffer.as_ref(), reth_field::RKEY)
    }
    /// DMA length.
    #[inline]
    pub fn dma_len(&self) -> u32 {
        be32(self.buffer.as_ref(), reth_field::DMA_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the virtual address.
    #[inline]
    pub fn set_va(&mut self, v: u64) {
        self.buffer.as_mut()[reth_field::VA].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the remote key.
    #[inline]
    pub fn set_rkey(&mut self, v: u32) {
        self.buffer.as_mut()[reth_field::RKEY].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the DMA length.
    #[inline]
    pub fn set_dma_len(&mut self, v: u32) {
        self.buffer.as_mut()[reth_field::DMA_LEN].copy_from_slice(&v.to_be_bytes());
    }
}

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    #[inline]
    pub fn qkey(&self) -> u32 {
        be32(self.buffer.as_ref(), deth_field::QKEY)
    }
    /// Source QP number.
    #[inline]
    pub fn src_qp(&self) -> u32 {
        be24(self.buffer.as_ref(), deth_field::SRC_QP)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the queue key.
    #[inline]
    pub fn set_qkey(&mut self, v: u32) {
        self.buffer.as_mut()[deth_field::QKEY].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the source QP (low 24 bits) and clears the reserved byte.
    #[inline]
    pub fn set_src_qp(&mut self, v: u32) {
        self.buffer.as_mut()[deth_field::RESV] = 0;
        put_be24(self.buffer.as_mut(), deth_field::SRC_QP, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BTH: [u8; 12] = [
        0x0a, 0x20, 0xff, 0xff, 0x00, 0x00, 0x01, 0x11, 0x80, 0x12, 0x34, 0x56,
    ];
    static RETH: [u8; 16] = [
        0, 0, 0x7f, 0, 0, 0, 0x10, 0, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0x05, 0xa0,
    ];
    static DETH: [u8; 8] = [0x11, 0x11, 0x11, 0x11, 0, 0x00, 0x00, 0x02];

    #[test]
    fn bth() {
        let b = Bth::new_checked(&BTH[..]).unwrap();
        assert_eq!(b.opcode(), opcode::RC_RDMA_WRITE_ONLY);
        assert!(!b.solicited() && !b.mig_req());
        assert_eq!(b.pad_count(), 2);
        assert_eq!(b.tver(), 0);
        assert_eq!(b.pkey(), DEFAULT_PKEY);
        assert_eq!(b.dest_qp(), 0x111);
        assert!(b.ack_req());
        assert_eq!(b.psn(), 0x123456);
        let mut o = [0xa5u8; 12];
        let mut w = Bth::new_unchecked(&mut o[..]);
        w.set_opcode(opcode::RC_RDMA_WRITE_ONLY);
        w.set_flags(false, false, 2, 0);
        w.set_pkey(DEFAULT_PKEY);
        w.set_resv8a(0);
        w.set_dest_qp(0x111);
        w.set_ack_req(true);
        w.set_psn(0x123456);
        assert_eq!(o, BTH);
        assert!(Bth::new_checked(&BTH[..11]).is_err());
    }

    #[test]
    fn reth_deth() {
        let r = Reth::new_checked(&RETH[..]).unwrap();
        assert_eq!(r.va(), 0x7f00_0000_1000);
        assert_eq!(r.rkey(), 0xdead_beef);
        assert_eq!(r.dma_len(), 1440);
        let mut o = [0xa5u8; 16];
        let mut w = Reth::new_unchecked(&mut o[..]);
        w.set_va(0x7f00_0000_1000);
        w.set_rkey(0xdead_beef);
        w.set_dma_len(1440);
        assert_eq!(o, RETH);
        let d = Deth::new_checked(&DETH[..]).unwrap();
        assert_eq!(d.qkey(), 0x1111_1111);
        assert_eq!(d.src_qp(), 2);
        let mut o = [0xa5u8; 8];
        let mut w = Deth::new_unchecked(&mut o[..]);
        w.set_qkey(0x1111_1111);
        w.set_src_qp(2);
        assert_eq!(o, DETH);
        assert!(Deth::new_checked(&DETH[..7]).is_err());
        assert!(Reth::new_checked(&RETH[..15]).is_err());
    }
}
