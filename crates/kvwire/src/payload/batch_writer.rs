//! The request encoder: [`BatchWriter`].

use super::{
    copy_small, param_count, req_field, KvOp, PayloadError, BATCH_HEADER_LEN, FLAG_COPY_SIZES,
    FLAG_COPY_VALUE, MAX_KEY_LEN, MAX_OPS_PER_BATCH, MAX_VALUE_LEN, REQUEST_MAGIC, VERSION,
};

/// Encodes operations into a request payload buffer.
///
/// By default the writer sets the copy flags itself whenever an op has the
/// same key/value sizes or the same value bytes as the previous op
/// ([`BatchWriter::with_compression`] turns this off).
#[derive(Debug)]
pub struct BatchWriter<'b> {
    buf: &'b mut [u8],
    pos: usize,
    count: u16,
    prev_key_len: Option<usize>,
    /// Range in `buf` of the previous op's value bytes, `None` if it had none.
    prev_value: Option<(usize, usize)>,
    compress: bool,
}

impl<'b> BatchWriter<'b> {
    /// Starts a batch; writes the header (count is filled in by [`Self::finish`]).
    pub fn new(buf: &'b mut [u8], batch_id: u32) -> Result<Self, PayloadError> {
        let h = buf
            .get_mut(..BATCH_HEADER_LEN)
            .ok_or(PayloadError::NoSpace)?;
        h[req_field::MAGIC] = REQUEST_MAGIC;
        h[req_field::VERSION] = VERSION;
        h[req_field::OP_COUNT].fill(0);
        h[req_field::BATCH_ID].copy_from_slice(&batch_id.to_be_bytes());
        Ok(BatchWriter {
            buf,
            pos: BATCH_HEADER_LEN,
            count: 0,
            prev_key_len: None,
            prev_value: None,
            compress: true,
        })
    }
    /// Enables/disables automatic use of the copy flags.
    pub fn with_compression(mut self, on: bool) -> Self {
        self.compress = on;
        self
    }
    /// Bytes written so far (header included).
    #[inline]
    pub fn len(&self) -> usize {
        self.pos
    }
    /// True if no op was pushed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Number of ops pushed.
    #[inline]
    pub fn op_count(&self) -> u16 {
        self.count
    }
    /// Free bytes left in the buffer.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Appends one op. On error nothing is written and the writer is unchanged.
    #[inline]
    pub fn push(&mut self, kv: &KvOp<'_>) -> Result<(), PayloadError> {
        if usize::from(self.count) >= MAX_OPS_PER_BATCH {
            return Err(PayloadError::TooManyOps);
        }
        let opcode = kv.opcode();
        let key = kv.key();
        if key.is_empty() {
            return Err(PayloadError::EmptyKey);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(PayloadError::KeyTooLarge);
        }
        let value = kv.value();
        if value.is_some_and(|v| v.len() > MAX_VALUE_LEN) {
            return Err(PayloadError::ValueTooLarge);
        }
        let prev_value = self.prev_value.map(|(s, e)| &self.buf[s..e]);
        let copy_value = self.compress
            && match (value, prev_value) {
                (Some(v), Some(p)) => v == p,
                _ => false,
            };
        let copy_sizes = self.compress
            && self.prev_key_len == Some(key.len())
            && match value {
                Some(v) => copy_value || prev_value.map_or(0, <[u8]>::len) == v.len(),
                None => true,
            };
        let atomic = kv.atomic();
        let (p1, p2) = match *kv {
            KvOp::UpdateS2S { param, param2, .. } | KvOp::UpdateS2V { param, param2, .. } => {
                (param, param2)
            }
            KvOp::Reduce { init, .. } => (init, 0),
            KvOp::Filter { param, .. } => (param, 0),
            _ => (0, 0),
        };
        let nparams = atomic.map_or(0, |a| param_count(opcode, a.func));
        let wbytes = atomic.map_or(0, |a| a.width.bytes());
        let vlen = value.map_or(0, <[u8]>::len);
        let need = 1
            + usize::from(!copy_sizes)
            + if value.is_some() && !copy_sizes && !copy_value {
                2
            } else {
                0
            }
            + if atomic.is_some() { 2 } else { 0 }
            + nparams * wbytes
            + key.len()
            + if copy_value { 0 } else { vlen };
        if need > self.remaining() {
            return Err(PayloadError::NoSpace);
        }
        let mut p = self.pos;
        let b = &mut *self.buf;
        b[p] = opcode
            | if copy_sizes { FLAG_COPY_SIZES } else { 0 }
            | if copy_value { FLAG_COPY_VALUE } else { 0 };
        p += 1;
        if !copy_sizes {
            b[p] = key.len() as u8;
            p += 1;
        }
        if value.is_some() && !copy_sizes && !copy_value {
            b[p..p + 2].copy_from_slice(&(vlen as u16).to_be_bytes());
            p += 2;
        }
        if let Some(a) = atomic {
            b[p] = a.func;
            b[p + 1] = a.attr();
            p += 2;
            for v in [p1, p2].iter().take(nparams) {
                b[p..p + wbytes].copy_from_slice(&v.to_le_bytes()[..wbytes]);
                p += wbytes;
            }
        }
        copy_small(&mut b[p..p + key.len()], key);
        p += key.len();
        let new_prev_value = match value {
            Some(_) if copy_value => self.prev_value,
            Some(v) => {
                copy_small(&mut b[p..p + v.len()], v);
                let r = (p, p + v.len());
                p += v.len();
                Some(r)
            }
            None => None,
        };
        self.pos = p;
        self.count += 1;
        self.prev_key_len = Some(key.len());
        self.prev_value = new_prev_value;
        Ok(())
    }

    /// Writes the op count into the header and returns the payload length.
    pub fn finish(self) -> usize {
        self.buf[req_field::OP_COUNT].copy_from_slice(&self.count.to_be_bytes());
        self.pos
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{encode, A, BATCH};
    use super::super::*;
    use proptest::prelude::*;

    #[test]
    fn encode_static() {
        let mut buf = [0xa5u8; 29];
        let n = encode(
            &[
                KvOp::Put {
                    key: b"hello",
                    value: b"world!",
                },
                KvOp::Get { key: b"hello" },
            ],
            &mut buf,
        );
        assert_eq!(n, 29);
        assert_eq!(buf, BATCH);
    }

    #[test]
    fn put_same_value_costs_no_value_bytes() {
        let v = [7u8; 100];
        let mut buf = [0u8; 512];
        let ops = [
            KvOp::Put {
                key: b"k1",
                value: &v,
            },
            KvOp::Put {
                key: b"k2",
                value: &v,
            },
            KvOp::Put {
                key: b"k33",
                value: &v,
            },
        ];
        let n = encode(&ops, &mut buf);
        // header + (1+1+2+2+100) + (1+2) + (1+1+3)
        assert_eq!(n, 8 + 106 + 3 + 5);
        assert_eq!(buf[8 + 106], op::PUT | FLAG_COPY_SIZES | FLAG_COPY_VALUE);
        assert_eq!(buf[8 + 106 + 3], op::PUT | FLAG_COPY_VALUE);
        let back: Vec<_> = BatchReader::new(&buf[..n])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, ops);
    }

    #[test]
    fn atomics_layout() {
        let mut buf = [0xa5u8; 64];
        let ops = [
            KvOp::UpdateS2S {
                key: b"c",
                atomic: A,
                param: 5,
                param2: 0xffff_fffe,
            },
            KvOp::Reduce {
                key: b"v",
                atomic: Atomic {
                    func: func::FETCH_ADD,
                    width: Width::W2,
                    signed: false,
                },
                init: 0x1234,
            },
        ];
        let n = encode(&ops, &mut buf);
        assert_eq!(
            &buf[8..n],
            &[
                0x04,
                1,
                func::CAS,
                0x06,
                5,
                0,
                0,
                0,
                0xfe,
                0xff,
                0xff,
                0xff,
                b'c', // S2S
                0x87,
                0x00,
                0x01,
                0x34,
                0x12,
                b'v', // REDUCE, COPY_SIZES
            ]
        );
        assert_eq!(A.sign_extend(0xffff_fffe), -2);
        let back: Vec<_> = BatchReader::new(&buf[..n])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, ops);
    }

    #[test]
    fn writer_limits() {
        let mut buf = [0u8; 21];
        let mut w = BatchWriter::new(&mut buf, 1).unwrap();
        assert_eq!(w.push(&KvOp::Get { key: b"" }), Err(PayloadError::EmptyKey));
        assert_eq!(
            w.push(&KvOp::Get { key: &[0; 256] }),
            Err(PayloadError::KeyTooLarge)
        );
        w.push(&KvOp::Put {
            key: b"abc",
            value: b"de",
        })
        .unwrap();
        assert_eq!(w.len(), 8 + 9);
        assert_eq!(
            w.push(&KvOp::Put {
                key: b"xyz",
                value: b"fg"
            }),
            Err(PayloadError::NoSpace)
        );
        assert_eq!(w.len(), 8 + 9);
        // Same sizes and value: op byte + key only.
        w.push(&KvOp::Put {
            key: b"xyz",
            value: b"de",
        })
        .unwrap();
        let n = w.finish();
        assert_eq!(n, 21);
        assert_eq!(
            BatchReader::new(&buf[..n])
                .unwrap()
                .filter(Result::is_ok)
                .count(),
            2
        );
        assert!(BatchWriter::new(&mut [0u8; 7], 1).is_err());
        let mut big = vec![0u8; 8 + 2 * 1025];
        let mut w = BatchWriter::new(&mut big, 1).unwrap();
        for _ in 0..MAX_OPS_PER_BATCH {
            w.push(&KvOp::Get { key: b"k" }).unwrap();
        }
        assert_eq!(
            w.push(&KvOp::Get { key: b"k" }),
            Err(PayloadError::TooManyOps)
        );
    }

    /// Owned form of an op for proptest.
    #[derive(Debug, Clone)]
    struct Owned {
        opcode: u8,
        key: Vec<u8>,
        value: Vec<u8>,
        atomic: Atomic,
        p1: u64,
        p2: u64,
    }

    impl Owned {
        fn view(&self) -> KvOp<'_> {
            let (key, atomic) = (&self.key[..], self.atomic);
            let m = atomic.width.mask();
            let (param, param2) = (
                self.p1 & m,
                if atomic.func == func::CAS {
                    self.p2 & m
                } else {
                    0
                },
            );
            KvOp::from_parts(self.opcode, key, &self.value, atomic, param, param2)
                .expect("a defined opcode")
        }
    }

    fn owned() -> impl Strategy<Value = Owned> {
        // Small pools so that equal sizes and equal values repeat often.
        let key = prop_oneof![
            prop::sample::select(vec![b"k1".to_vec(), b"k2".to_vec(), b"key-3".to_vec()]),
            prop::collection::vec(any::<u8>(), 1..=255),
        ];
        let value = prop_oneof![
            prop::sample::select(vec![vec![], b"v1".to_vec(), vec![9u8; 64]]),
            prop::collection::vec(any::<u8>(), 0..300),
        ];
        let atomic = (
            prop_oneof![0u8..=9, Just(func::CAS), 128u8..=255],
            prop::sample::select(Width::ALL.to_vec()),
            any::<bool>(),
        )
            .prop_map(|(func, width, signed)| Atomic {
                func,
                width,
                signed,
            });
        (
            1u8..=OPCOUNT,
            key,
            value,
            atomic,
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(opcode, key, value, atomic, p1, p2)| Owned {
                opcode,
                key,
                value,
                atomic,
                p1,
                p2,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn batch_roundtrip(ops in prop::collection::vec(owned(), 0..40), compress: bool, id: u32) {
            let views: Vec<KvOp<'_>> = ops.iter().map(Owned::view).collect();
            let mut buf = vec![0u8; 20_000];
            let mut w = BatchWriter::new(&mut buf, id).unwrap().with_compression(compress);
            for v in &views {
                w.push(v).unwrap();
            }
            let n = w.finish();
            let r = BatchReader::new(&buf[..n]).unwrap();
            prop_assert_eq!(r.batch_id(), id);
            let back: Result<Vec<_>, _> = r.collect();
            prop_assert_eq!(back.unwrap(), views);
        }
    }
}
