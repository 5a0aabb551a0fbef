//! The request decoder: [`BatchReader`].

use super::cursor::{rd16, rd32, Cursor};
use super::{
    op, opcode_has_atomic, opcode_has_value, param_count, req_field, Atomic, KvOp, PayloadError,
    Width, BATCH_HEADER_LEN, FLAG_COPY_SIZES, FLAG_COPY_VALUE, FLAG_RESERVED, MAX_OPS_PER_BATCH,
    OPCODE_MASK, REQUEST_MAGIC, VERSION,
};

/// Iterator over the operations of a request payload.
///
/// Copy flags are resolved: a copied value borrows the previous op's bytes.
/// After the first `Err` the iterator is fused and yields `None`.
#[derive(Debug, Clone)]
pub struct BatchReader<'a> {
    buf: &'a [u8],
    st: DecodeState<'a>,
    batch_id: u32,
    op_count: u16,
    remaining: u16,
    failed: bool,
}

/// What decoding one op hands to the next: where it starts and what its copy flags
/// copy from.
#[derive(Debug, Clone, Copy)]
struct DecodeState<'a> {
    /// Byte offset of the next op in the payload.
    pos: usize,
    /// Key length of the previous op, 0 before the first op.
    prev_key_len: usize,
    /// Value of the previous op, `None` if it had none (or no previous op).
    prev_value: Option<&'a [u8]>,
    /// Whether an op was decoded already.
    have_prev: bool,
}

/// Whether the op byte is a GET, PUT or DELETE with at most `COPY_SIZES` (the bulk
/// of real traffic): an op for [`plain_op`].
#[inline(always)]
fn is_plain(opb: u8) -> bool {
    opb & (FLAG_RESERVED | FLAG_COPY_VALUE) == 0
        && matches!(opb & OPCODE_MASK, op::GET | op::PUT | op::DELETE)
}

/// Decodes the plain op (see [`is_plain`]) whose op byte `opb` is at `st.pos` of
/// `buf`: the same checks, in the same order, as [`BatchReader::decode_general`],
/// without the atomic fields. On success `st` moves past the op; on error it is left
/// as it was. The one plain decoder: the iterator reports its error, `plain_ops`
/// stops before the op.
#[inline(always)]
fn plain_op<'a>(
    buf: &'a [u8],
    opb: u8,
    st: &mut DecodeState<'a>,
) -> Result<KvOp<'a>, PayloadError> {
    let opcode = opb & OPCODE_MASK;
    let copy_sizes = opb & FLAG_COPY_SIZES != 0;
    if copy_sizes && !st.have_prev {
        return Err(PayloadError::BadFlags);
    }
    let mut p = st.pos + 1;
    let key_len = if copy_sizes {
        st.prev_key_len
    } else {
        let k = *buf.get(p).ok_or(PayloadError::Truncated)?;
        p += 1;
        usize::from(k)
    };
    let is_put = opcode == op::PUT;
    let value_len = if !is_put {
        0
    } else if copy_sizes {
        st.prev_value.map_or(0, <[u8]>::len)
    } else {
        let v = buf.get(p..p + 2).ok_or(PayloadError::Truncated)?;
        p += 2;
        usize::from(u16::from_be_bytes([v[0], v[1]]))
    };
    if key_len == 0 {
        return Err(PayloadError::EmptyKey);
    }
    let key = buf.get(p..p + key_len).ok_or(PayloadError::Truncated)?;
    p += key_len;
    let value = buf.get(p..p + value_len).ok_or(PayloadError::Truncated)?;
    p += value_len;
    *st = DecodeState {
        pos: p,
        prev_key_len: key_len,
        prev_value: if is_put { Some(value) } else { None },
        have_prev: true,
    };
    Ok(match opcode {
        op::GET => KvOp::Get { key },
        op::DELETE => KvOp::Delete { key },
        _ => KvOp::Put { key, value },
    })
}

impl<'a> BatchReader<'a> {
    /// Validates the batch header. Ops are decoded lazily by iteration.
    pub fn new(payload: &'a [u8]) -> Result<Self, PayloadError> {
        let h = payload
            .get(..BATCH_HEADER_LEN)
            .ok_or(PayloadError::Truncated)?;
        if h[req_field::MAGIC] != REQUEST_MAGIC {
            return Err(PayloadError::BadMagic);
        }
        if h[req_field::VERSION] != VERSION {
            return Err(PayloadError::BadVersion);
        }
        let op_count = rd16(h, req_field::OP_COUNT.start);
        if usize::from(op_count) > MAX_OPS_PER_BATCH {
            return Err(PayloadError::TooManyOps);
        }
        Ok(BatchReader {
            buf: payload,
            st: DecodeState {
                pos: BATCH_HEADER_LEN,
                prev_key_len: 0,
                prev_value: None,
                have_prev: false,
            },
            batch_id: rd32(h, req_field::BATCH_ID.start),
            op_count,
            remaining: op_count,
            failed: false,
        })
    }
    /// Client batch id from the header.
    #[inline]
    pub fn batch_id(&self) -> u32 {
        self.batch_id
    }
    /// Op count from the header.
    #[inline]
    pub fn op_count(&self) -> u16 {
        self.op_count
    }
    /// Index of the next op to be decoded.
    #[inline]
    pub fn index(&self) -> u16 {
        self.op_count - self.remaining
    }
    /// Byte offset of the next op in the payload.
    #[inline]
    pub fn offset(&self) -> usize {
        self.st.pos
    }

    #[inline]
    fn decode(&mut self) -> Result<KvOp<'a>, PayloadError> {
        let opb = *self.buf.get(self.st.pos).ok_or(PayloadError::Truncated)?;
        if is_plain(opb) {
            return plain_op(self.buf, opb, &mut self.st);
        }
        self.decode_general()
    }

    /// Decodes the run of GET/PUT/DELETE ops (without `COPY_VALUE`) that starts at the
    /// next op, handing each to `f` in order, and stops before the first op that is
    /// anything else — another opcode, or any op the iterator would answer with an
    /// error — or at the end of the batch. Iterate on to get that op (or its error).
    ///
    /// The ops and errors seen are exactly those of iterating alone: the same decoder
    /// (`plain_op`), with the reader's state held in locals for the whole run, for
    /// the server's per-op loop.
    #[inline(always)]
    pub fn plain_ops(&mut self, mut f: impl FnMut(KvOp<'a>)) {
        if self.failed {
            return;
        }
        let buf = self.buf;
        let (mut st, mut remaining) = (self.st, self.remaining);
        while remaining != 0 {
            // Anything but a plain op that decodes ends the run, before the op: the
            // iterator decodes it (or reports its error).
            let Some(&opb) = buf.get(st.pos) else { break };
            if !is_plain(opb) {
                break;
            }
            let Ok(op) = plain_op(buf, opb, &mut st) else {
                break;
            };
            remaining -= 1;
            f(op);
        }
        self.st = st;
        self.remaining = remaining;
    }

    /// Any op (the read-modify-write opcodes, `COPY_VALUE`, and every malformed case).
    #[inline(never)]
    fn decode_general(&mut self) -> Result<KvOp<'a>, PayloadError> {
        let mut c = Cursor {
            buf: self.buf,
            pos: self.st.pos,
        };
        let opb = c.u8()?;
        let opcode = opb & OPCODE_MASK;
        let copy_sizes = opb & FLAG_COPY_SIZES != 0;
        let copy_value = opb & FLAG_COPY_VALUE != 0;
        if super::optable::spec(opcode).is_none() {
            return Err(PayloadError::UnknownOpcode(opcode));
        }
        let has_value = opcode_has_value(opcode);
        if opb & FLAG_RESERVED != 0
            || (copy_value && !has_value)
            || (copy_sizes && !self.st.have_prev)
        {
            return Err(PayloadError::BadFlags);
        }
        let copied = if copy_value {
            Some(self.st.prev_value.ok_or(PayloadError::BadFlags)?)
        } else {
            None
        };
        let key_len = if copy_sizes {
            self.st.prev_key_len
        } else {
            usize::from(c.u8()?)
        };
        let value_len = if !has_value || copied.is_some() {
            0
        } else if copy_sizes {
            self.st.prev_value.map_or(0, <[u8]>::len)
        } else {
            usize::from(c.u16()?)
        };
        let mut atomic = None;
        let (mut p1, mut p2) = (0, 0);
        if opcode_has_atomic(opcode) {
            let f = c.u8()?;
            let attr = c.u8()?;
            let a = Atomic::from_attr(f, attr).ok_or(PayloadError::BadAttr)?;
            let n = param_count(opcode, f);
            if n >= 1 {
                p1 = c.le(a.width)?;
            }
            if n >= 2 {
                p2 = c.le(a.width)?;
            }
            atomic = Some(a);
        }
        if key_len == 0 {
            return Err(PayloadError::EmptyKey);
        }
        let key = c.bytes(key_len)?;
        let value = match copied {
            Some(v) => v,
            None if has_value => c.bytes(value_len)?,
            None => &[],
        };
        // The atomic is always Some for these opcodes; the fallback is never
        // taken but avoids an unwrap.
        let a = atomic.unwrap_or(Atomic {
            func: 0,
            width: Width::W1,
            signed: false,
        });
        let op = KvOp::from_parts(opcode, key, value, a, p1, p2)
            .ok_or(PayloadError::UnknownOpcode(opcode))?;
        self.st = DecodeState {
            pos: c.pos,
            prev_key_len: key_len,
            prev_value: if has_value { Some(value) } else { None },
            have_prev: true,
        };
        Ok(op)
    }
}

impl<'a> Iterator for BatchReader<'a> {
    type Item = Result<KvOp<'a>, PayloadError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.remaining == 0 {
            return None;
        }
        match self.decode() {
            Ok(op) => {
                self.remaining -= 1;
                Some(Ok(op))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.failed {
            (0, Some(0))
        } else {
            (0, Some(usize::from(self.remaining)))
        }
    }
}

impl core::iter::FusedIterator for BatchReader<'_> {}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{encode, A, BATCH};
    use super::super::*;
    use super::*;
    use proptest::prelude::*;

    /// The op count field of a request header (`d` holds at least the header).
    fn r_count(d: &[u8]) -> usize {
        usize::from(u16::from_be_bytes([d[2], d[3]]))
    }

    /// A request payload with a valid header (0..40 ops announced) over a body biased
    /// to GET/PUT/DELETE opcode bytes, flags and short lengths: mostly plain ops, with
    /// every kind of malformed op mixed in.
    fn plain_heavy_payload() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            4 => prop::sample::select(vec![1u8, 2, 3, 0x81, 0x82, 0x83, 0x42, 0xc2, 0x21, 4, 0]),
            1 => any::<u8>(),
            3 => 0u8..12,
        ];
        (prop::collection::vec(byte, 0..200), 0u16..40).prop_map(|(body, count)| {
            let mut payload = vec![REQUEST_MAGIC, VERSION];
            payload.extend_from_slice(&count.to_be_bytes());
            payload.extend_from_slice(&7u32.to_be_bytes());
            payload.extend_from_slice(&body);
            payload
        })
    }

    #[test]
    fn decode_static() {
        let r = BatchReader::new(&BATCH).unwrap();
        assert_eq!(r.batch_id(), 0x0102_0304);
        assert_eq!(r.op_count(), 2);
        let ops: Vec<_> = r.collect();
        assert_eq!(
            ops,
            vec![
                Ok(KvOp::Put {
                    key: b"hello",
                    value: b"world!"
                }),
                Ok(KvOp::Get { key: b"hello" })
            ]
        );
    }

    #[test]
    fn reader_errors() {
        let hdr = |count: u16| {
            let mut h = vec![REQUEST_MAGIC, VERSION];
            h.extend_from_slice(&count.to_be_bytes());
            h.extend_from_slice(&[0, 0, 0, 9]);
            h
        };
        assert_eq!(
            BatchReader::new(&BATCH[..7]).unwrap_err(),
            PayloadError::Truncated
        );
        let mut b = BATCH;
        b[0] = 0;
        assert_eq!(BatchReader::new(&b).unwrap_err(), PayloadError::BadMagic);
        b = BATCH;
        b[1] = 2;
        assert_eq!(BatchReader::new(&b).unwrap_err(), PayloadError::BadVersion);
        assert_eq!(
            BatchReader::new(&hdr(1025)).unwrap_err(),
            PayloadError::TooManyOps
        );
        let first_err = |body: &[u8], count: u16| {
            let mut p = hdr(count);
            p.extend_from_slice(body);
            BatchReader::new(&p).unwrap().find_map(Result::err)
        };
        // Op count larger than the payload holds.
        assert_eq!(
            first_err(&[0x01, 1, b'k'], 2),
            Some(PayloadError::Truncated)
        );
        assert_eq!(first_err(&[], 1), Some(PayloadError::Truncated));
        assert_eq!(
            first_err(&[OPCOUNT + 1, 1, b'k'], 1),
            Some(PayloadError::UnknownOpcode(OPCOUNT + 1))
        );
        assert_eq!(first_err(&[0x00], 1), Some(PayloadError::UnknownOpcode(0)));
        assert_eq!(first_err(&[0x81, b'k'], 1), Some(PayloadError::BadFlags));
        assert_eq!(first_err(&[0x21, 1, b'k'], 1), Some(PayloadError::BadFlags));
        assert_eq!(first_err(&[0x41, 1, b'k'], 1), Some(PayloadError::BadFlags));
        // COPY_VALUE after an op without value.
        assert_eq!(
            first_err(&[0x01, 1, b'k', 0x42, 1, b'k'], 2),
            Some(PayloadError::BadFlags)
        );
        assert_eq!(first_err(&[0x01, 0], 1), Some(PayloadError::EmptyKey));
        assert_eq!(
            first_err(&[0x04, 1, 0, 0x08, 1, b'k'], 1),
            Some(PayloadError::BadAttr)
        );
        // Lying value length.
        assert_eq!(
            first_err(&[0x02, 1, 0xff, 0xff, b'k', 1, 2], 1),
            Some(PayloadError::Truncated)
        );
        // Fused after an error.
        let mut p = hdr(3);
        p.extend_from_slice(&[0x01, 1, b'k', 0x1f]);
        let mut r = BatchReader::new(&p).unwrap();
        assert!(r.next().unwrap().is_ok());
        assert!(r.next().unwrap().is_err());
        assert!(r.next().is_none());
    }

    #[test]
    fn truncation_at_every_offset() {
        let mut buf = [0u8; 128];
        let n = encode(
            &[
                KvOp::Put {
                    key: b"a",
                    value: b"xyz",
                },
                KvOp::UpdateS2V {
                    key: b"b",
                    atomic: A,
                    param: 1,
                    param2: 2,
                },
                KvOp::Filter {
                    key: b"b",
                    atomic: A,
                    param: 3,
                },
                KvOp::UpdateV2V {
                    key: b"cc",
                    atomic: A,
                    delta: &[1, 2, 3, 4],
                },
                KvOp::Delete { key: b"dd" },
            ],
            &mut buf,
        );
        for cut in 0..n {
            match BatchReader::new(&buf[..cut]) {
                Err(e) => assert_eq!(e, PayloadError::Truncated),
                Ok(r) => assert!(r.clone().any(|x| x.is_err()), "cut {cut}"),
            }
        }
        assert_eq!(
            BatchReader::new(&buf[..n])
                .unwrap()
                .filter(Result::is_ok)
                .count(),
            5
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The GET/PUT/DELETE fast path decodes exactly as the general decoder, on
        /// any bytes: same ops, same error at the same op, same position after each.
        #[test]
        fn plain_fast_path_matches_general(payload in plain_heavy_payload()) {
            let count = BatchReader::new(&payload).unwrap().op_count();
            let mut fast = BatchReader::new(&payload).unwrap();
            let mut general = fast.clone();
            for _ in 0..count {
                let a = fast.decode();
                let b = general.decode_general();
                prop_assert_eq!(&a, &b);
                prop_assert_eq!(fast.st.pos, general.st.pos);
                if a.is_err() {
                    break;
                }
            }
        }

        /// `plain_ops` runs interleaved with iteration give exactly the ops and the
        /// error of iterating alone, in the same order, on any bytes.
        #[test]
        fn plain_runs_match_iteration(payload in plain_heavy_payload()) {
            let alone: Vec<_> = BatchReader::new(&payload).unwrap().collect();
            let mut mixed = Vec::new();
            let mut r = BatchReader::new(&payload).unwrap();
            loop {
                r.plain_ops(|op| mixed.push(Ok(op)));
                match r.next() {
                    Some(item) => mixed.push(item),
                    None => break,
                }
            }
            r.plain_ops(|op| mixed.push(Ok(op)));
            prop_assert_eq!(mixed, alone);
        }

        /// On any bytes behind a valid magic and version: iteration ends after at most `op_count`
        /// items — exactly `op_count` unless one is an error, which is the last item
        /// and fuses the reader — without reading past the payload; and the ops decoded
        /// re-encode (with compression) into no more bytes than they took, decoding
        /// back to the same ops.
        #[test]
        fn reader_terminates_fuses_and_reencodes(
            data in prop_oneof![prop::collection::vec(any::<u8>(), 0..200), plain_heavy_payload()],
            small_count: bool,
        ) {
            let mut d = data;
            if d.len() >= 2 { d[0] = REQUEST_MAGIC; d[1] = VERSION; }
            if small_count && d.len() >= 4 { d[2] = 0; d[3] %= 48; }
            let Ok(mut r) = BatchReader::new(&d) else {
                prop_assert!(d.len() < BATCH_HEADER_LEN || r_count(&d) > MAX_OPS_PER_BATCH);
                return Ok(());
            };
            let count = usize::from(r.op_count());
            let mut ops = Vec::new();
            let mut failed = false;
            while let Some(item) = r.next() {
                prop_assert!(!failed, "an item after an error");
                prop_assert!(ops.len() < count, "more items than op_count");
                prop_assert!(r.offset() <= d.len());
                match item {
                    Ok(op) => ops.push(op),
                    Err(_) => failed = true,
                }
                prop_assert_eq!(usize::from(r.index()), ops.len());
            }
            prop_assert!(failed || ops.len() == count);
            prop_assert!(r.next().is_none());
            prop_assert_eq!(r.size_hint(), (0, Some(0)));
            let mut after = Vec::new();
            r.plain_ops(|op| after.push(op));
            prop_assert!(after.is_empty(), "plain_ops after the end");

            let used = r.offset();
            let mut buf = vec![0u8; used];
            let mut w = BatchWriter::new(&mut buf, r.batch_id()).unwrap();
            for op in &ops {
                prop_assert_eq!(w.push(op), Ok(()));
            }
            let n = w.finish();
            let back: Vec<_> = BatchReader::new(&buf[..n]).unwrap().collect();
            prop_assert_eq!(back, ops.into_iter().map(Ok).collect::<Vec<_>>());
        }
    }
}
