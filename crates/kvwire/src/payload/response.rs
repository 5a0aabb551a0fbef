//! Responses: [`ResponseWriter`] / [`put_result`] encode results,
//! [`ResponseReader`] decodes them.

use super::cursor::{rd16, rd32, Cursor};
use super::{
    resp_field, PayloadError, Status, MAX_VALUE_LEN, RESPONSE_BATCH_HEADER_LEN, RESPONSE_MAGIC,
    RESP_FLAG_MORE, RESULT_HEADER_LEN, VERSION,
};

/// One decoded result of a response payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvResult<'a> {
    /// Status code.
    pub status: Status,
    /// Returned value (GET value, original value of updates, Σ, filtered elements).
    pub value: &'a [u8],
}

/// Appends results into a response payload buffer.
#[derive(Debug)]
pub struct ResponseWriter<'b> {
    buf: &'b mut [u8],
    pos: usize,
    count: u16,
}

impl<'b> ResponseWriter<'b> {
    /// Starts a response for `batch_id`; `first_index` is the index within the
    /// request batch of the first result written here (0 unless the server
    /// split the results over several packets).
    pub fn new(buf: &'b mut [u8], batch_id: u32, first_index: u16) -> Result<Self, PayloadError> {
        let h = buf
            .get_mut(..RESPONSE_BATCH_HEADER_LEN)
            .ok_or(PayloadError::NoSpace)?;
        h[resp_field::MAGIC] = RESPONSE_MAGIC;
        h[resp_field::VERSION] = VERSION;
        h[resp_field::COUNT].fill(0);
        h[resp_field::BATCH_ID].copy_from_slice(&batch_id.to_be_bytes());
        h[resp_field::FIRST_INDEX].copy_from_slice(&first_index.to_be_bytes());
        h[resp_field::FLAGS] = 0;
        h[resp_field::RESERVED] = 0;
        Ok(ResponseWriter {
            buf,
            pos: RESPONSE_BATCH_HEADER_LEN,
            count: 0,
        })
    }
    /// Continues a response started by [`ResponseWriter::new`] on the same `buf`
    /// that holds `len` bytes (header included) and `count` results: lets a server
    /// keep only `(len, count)` between results instead of a borrow of the frame.
    /// Fails with `Truncated` if `len` is not within `buf` or below the header.
    pub fn resume(buf: &'b mut [u8], len: usize, count: u16) -> Result<Self, PayloadError> {
        if len < RESPONSE_BATCH_HEADER_LEN || len > buf.len() {
            return Err(PayloadError::Truncated);
        }
        Ok(ResponseWriter {
            buf,
            pos: len,
            count,
        })
    }
    /// Bytes written so far (header included).
    #[inline]
    pub fn len(&self) -> usize {
        self.pos
    }
    /// True if no result was pushed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Number of results pushed.
    #[inline]
    pub fn count(&self) -> u16 {
        self.count
    }
    /// Whether a result with a value of `value_len` bytes still fits.
    #[inline]
    pub fn fits(&self, value_len: usize) -> bool {
        RESULT_HEADER_LEN + value_len <= self.buf.len() - self.pos
    }
    /// Sets the MORE flag (further response packets follow for this batch).
    pub fn set_more(&mut self, more: bool) {
        self.buf[resp_field::FLAGS] = if more { RESP_FLAG_MORE } else { 0 };
    }
    /// Appends a result. On `NoSpace` nothing is written.
    pub fn push(&mut self, status: Status, value: &[u8]) -> Result<(), PayloadError> {
        if value.len() > MAX_VALUE_LEN {
            return Err(PayloadError::ValueTooLarge);
        }
        if self.count == u16::MAX {
            return Err(PayloadError::TooManyOps);
        }
        self.pos = put_result(self.buf, self.pos, status, value).ok_or(PayloadError::NoSpace)?;
        self.count += 1;
        Ok(())
    }
    /// Appends a result whose `value_len` value bytes are written in place by `fill`.
    pub fn push_with(
        &mut self,
        status: Status,
        value_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), PayloadError> {
        if value_len > MAX_VALUE_LEN {
            return Err(PayloadError::ValueTooLarge);
        }
        if self.count == u16::MAX {
            return Err(PayloadError::TooManyOps);
        }
        if !self.fits(value_len) {
            return Err(PayloadError::NoSpace);
        }
        let p = self.pos;
        self.buf[p] = status as u8;
        self.buf[p + 1..p + 3].copy_from_slice(&(value_len as u16).to_be_bytes());
        fill(&mut self.buf[p + 3..p + 3 + value_len]);
        self.pos = p + 3 + value_len;
        self.count += 1;
        Ok(())
    }
    /// Writes the count and returns the payload length.
    pub fn finish(self) -> usize {
        self.buf[resp_field::COUNT].copy_from_slice(&self.count.to_be_bytes());
        self.pos
    }
}

/// Encodes one result (`status`, `value_len` BE, `value`) at byte `pos` of a response
/// payload `buf` and returns the position after it, or `None` (nothing written) when it
/// does not fit or the value is longer than [`MAX_VALUE_LEN`]. The result count in the
/// header is the caller's to keep ([`ResponseWriter`] does it for you); this is the
/// per-result step of a server that keeps only `(pos, count)` between results.
#[inline(always)]
pub fn put_result(buf: &mut [u8], pos: usize, status: Status, value: &[u8]) -> Option<usize> {
    let n = value.len();
    if n > MAX_VALUE_LEN {
        return None;
    }
    let end = pos.checked_add(RESULT_HEADER_LEN + n)?;
    let dst = buf.get_mut(pos..end)?;
    let (hdr, val) = dst.split_at_mut(RESULT_HEADER_LEN);
    hdr[0] = status as u8;
    hdr[1..3].copy_from_slice(&(n as u16).to_be_bytes());
    copy_small(val, value);
    Some(end)
}

/// `dst.copy_from_slice(src)` that stays inline for short slices (values of a few
/// bytes are the common case; a call into `memcpy` costs more than the copy). Two
/// overlapping fixed-size moves cover every length in a size class.
///
/// Panics if the lengths differ, like `copy_from_slice`.
#[inline(always)]
pub fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    assert_eq!(dst.len(), n, "copy_small: length mismatch");
    if n > 16 {
        dst.copy_from_slice(src);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else if n >= 2 {
        dst[..2].copy_from_slice(&src[..2]);
        dst[n - 2..].copy_from_slice(&src[n - 2..]);
    } else if n == 1 {
        dst[0] = src[0];
    }
}

/// Iterator over the results of a response payload (fused after an error).
#[derive(Debug, Clone)]
pub struct ResponseReader<'a> {
    buf: &'a [u8],
    pos: usize,
    batch_id: u32,
    count: u16,
    first_index: u16,
    flags: u8,
    remaining: u16,
    failed: bool,
}

impl<'a> ResponseReader<'a> {
    /// Validates the response header.
    pub fn new(payload: &'a [u8]) -> Result<Self, PayloadError> {
        let h = payload
            .get(..RESPONSE_BATCH_HEADER_LEN)
            .ok_or(PayloadError::Truncated)?;
        if h[resp_field::MAGIC] != RESPONSE_MAGIC {
            return Err(PayloadError::BadMagic);
        }
        if h[resp_field::VERSION] != VERSION {
            return Err(PayloadError::BadVersion);
        }
        let count = rd16(h, resp_field::COUNT.start);
        Ok(ResponseReader {
            buf: payload,
            pos: RESPONSE_BATCH_HEADER_LEN,
            batch_id: rd32(h, resp_field::BATCH_ID.start),
            count,
            first_index: rd16(h, resp_field::FIRST_INDEX.start),
            flags: h[resp_field::FLAGS],
            remaining: count,
            failed: false,
        })
    }
    /// Echoed batch id.
    #[inline]
    pub fn batch_id(&self) -> u32 {
        self.batch_id
    }
    /// Number of results in this packet (header field).
    #[inline]
    pub fn result_count(&self) -> u16 {
        self.count
    }
    /// Index of the first result within the request batch.
    #[inline]
    pub fn first_index(&self) -> u16 {
        self.first_index
    }
    /// True if more response packets follow for this batch.
    #[inline]
    pub fn more(&self) -> bool {
        self.flags & RESP_FLAG_MORE != 0
    }

    #[inline]
    fn decode(&mut self) -> Result<KvResult<'a>, PayloadError> {
        let mut c = Cursor {
            buf: self.buf,
            pos: self.pos,
        };
        let s = c.u8()?;
        let status = Status::from_u8(s).ok_or(PayloadError::UnknownStatus(s))?;
        let n = usize::from(c.u16()?);
        let value = c.bytes(n)?;
        self.pos = c.pos;
        Ok(KvResult { status, value })
    }
}

impl<'a> Iterator for ResponseReader<'a> {
    type Item = Result<KvResult<'a>, PayloadError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.remaining == 0 {
            return None;
        }
        match self.decode() {
            Ok(r) => {
                self.remaining -= 1;
                Some(Ok(r))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl core::iter::FusedIterator for ResponseReader<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn copy_small_copies_every_length() {
        for n in 0..=40usize {
            let src: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(37) ^ 0x5a).collect();
            let mut dst = vec![0u8; n + 2];
            copy_small(&mut dst[1..n + 1], &src);
            assert_eq!(&dst[1..n + 1], &src[..], "length {n}");
            assert_eq!((dst[0], dst[n + 1]), (0, 0), "length {n} wrote outside");
        }
    }

    #[test]
    fn put_result_matches_response_writer() {
        let mut a = [0u8; 64];
        let mut b = [0u8; 64];
        let mut w = ResponseWriter::new(&mut a, 9, 0).unwrap();
        w.push(Status::Ok, &[1, 2, 3, 4, 5]).unwrap();
        w.push(Status::NotFound, &[]).unwrap();
        let len = w.finish();
        let h = RESPONSE_BATCH_HEADER_LEN;
        ResponseWriter::new(&mut b, 9, 0).unwrap().finish();
        let p = put_result(&mut b, h, Status::Ok, &[1, 2, 3, 4, 5]).unwrap();
        let p = put_result(&mut b, p, Status::NotFound, &[]).unwrap();
        b[2..4].copy_from_slice(&2u16.to_be_bytes());
        assert_eq!(p, len);
        assert_eq!(a[..len], b[..len]);
        // Does not fit: nothing written, None.
        let before = b;
        assert_eq!(put_result(&mut b, 60, Status::Ok, &[7; 2]), None);
        assert_eq!(before, b);
        assert_eq!(put_result(&mut b, 61, Status::Ok, &[]), Some(64));
    }

    #[test]
    fn resume_continues_a_response() {
        let mut buf = [0xa5u8; 64];
        let (len, count) = {
            let mut w = ResponseWriter::new(&mut buf, 7, 0).unwrap();
            w.push(Status::Ok, b"ab").unwrap();
            (w.len(), w.count())
        };
        let mut w = ResponseWriter::resume(&mut buf, len, count).unwrap();
        w.push(Status::NotFound, &[]).unwrap();
        let n = w.finish();
        let results: Vec<_> = ResponseReader::new(&buf[..n])
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].value, b"ab");
        assert_eq!(results[1].status, Status::NotFound);
        assert!(ResponseWriter::resume(&mut buf, 3, 0).is_err());
        assert!(ResponseWriter::resume(&mut buf, 65, 0).is_err());
    }
    #[test]
    fn response_roundtrip_and_full() {
        let mut buf = [0xa5u8; 30];
        let mut w = ResponseWriter::new(&mut buf, 77, 5).unwrap();
        w.push(Status::Ok, &[]).unwrap();
        w.push(Status::NotFound, &[]).unwrap();
        w.push_with(Status::Ok, 4, |d| d.copy_from_slice(&[1, 2, 3, 4]))
            .unwrap();
        assert!(!w.fits(6));
        assert_eq!(w.push(Status::Ok, &[0; 6]), Err(PayloadError::NoSpace));
        w.set_more(true);
        let n = w.finish();
        assert_eq!(n, 12 + 3 + 3 + 7);
        assert_eq!(
            &buf[..n],
            &[0x52, 1, 0, 3, 0, 0, 0, 77, 0, 5, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 4, 1, 2, 3, 4]
        );
        let r = ResponseReader::new(&buf[..n]).unwrap();
        assert_eq!(
            (r.batch_id(), r.result_count(), r.first_index(), r.more()),
            (77, 3, 5, true)
        );
        let v: Vec<_> = r.map(Result::unwrap).collect();
        assert_eq!(v[1].status, Status::NotFound);
        assert_eq!(v[2].value, &[1, 2, 3, 4]);
        for cut in 0..n {
            if let Ok(r) = ResponseReader::new(&buf[..cut]) {
                assert!(r.clone().any(|x| x.is_err()));
            }
        }
        let mut bad = buf;
        bad[12] = 42;
        assert_eq!(
            ResponseReader::new(&bad[..n]).unwrap().next(),
            Some(Err(PayloadError::UnknownStatus(42)))
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn response_roundtrip(vals in prop::collection::vec((0usize..13, prop::collection::vec(any::<u8>(), 0..100)), 0..30)) {
            let mut buf = vec![0u8; 4000];
            let mut w = ResponseWriter::new(&mut buf, 3, 0).unwrap();
            for (s, v) in &vals {
                w.push(Status::ALL[*s], v).unwrap();
            }
            let n = w.finish();
            let back: Vec<_> = ResponseReader::new(&buf[..n]).unwrap().map(Result::unwrap).collect();
            prop_assert_eq!(back.len(), vals.len());
            for (b, (s, v)) in back.iter().zip(&vals) {
                prop_assert_eq!(b.status, Status::ALL[*s]);
                prop_assert_eq!(b.value, &v[..]);
            }
        }
    }
}
