//! Bounds-checked byte readers shared by the request and response decoders.

use super::{PayloadError, Width};

/// Reads from `buf` at `pos`, advancing it; every read fails with
/// [`PayloadError::Truncated`] instead of panicking.
pub(super) struct Cursor<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline]
    pub(super) fn bytes(&mut self, n: usize) -> Result<&'a [u8], PayloadError> {
        let end = self.pos.checked_add(n).ok_or(PayloadError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(PayloadError::Truncated)?;
        self.pos = end;
        Ok(s)
    }
    #[inline]
    pub(super) fn u8(&mut self) -> Result<u8, PayloadError> {
        let b = *self.buf.get(self.pos).ok_or(PayloadError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }
    #[inline]
    pub(super) fn u16(&mut self) -> Result<u16, PayloadError> {
        let s = self.bytes(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    #[inline]
    pub(super) fn le(&mut self, w: Width) -> Result<u64, PayloadError> {
        let s = self.bytes(w.bytes())?;
        let mut a = [0u8; 8];
        a[..s.len()].copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
}

/// Big-endian u16 at `b[i..i + 2]` (callers pass a header slice already checked).
#[inline]
pub(super) fn rd16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

/// Big-endian u32 at `b[i..i + 4]` (callers pass a header slice already checked).
#[inline]
pub(super) fn rd32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}
