//! Pre-built request payloads, MoonGen's idea: the run phase of a one-partition
//! workload with a fixed value size sends copies of a few hundred packet templates,
//! each encoded once by kvwire's [`BatchWriter`] (op types drawn from the mix, a
//! placeholder key and value per op), with only what varies patched in per packet:
//! the batch id, the keys and the PUT values. The per-packet work is one copy of the
//! template and, per op, a key draw, an 8-byte key store and the verify model's
//! bookkeeping; no encoding decision is taken on the hot path.
//!
//! The bytes sent are the ones [`BatchWriter`] would write for the same ops, except
//! that two consecutive PUTs whose values happen to be equal carry both values instead
//! of a COPY_VALUE flag (both encodings are valid, docs/PROTOCOL.md §3): the copy
//! flags of a template depend only on the op types and sizes, which patching keeps.

use super::{ExpOp, Workload};
use kvload::{write_value, Mix, OpType, RandomSource};
use kvwire::partition::partition_of_hash;
use kvwire::payload::req_field;
use kvwire::{BatchWriter, KvOp};

/// Ops drawn over one cycle of templates: the op-type sequence repeats after about
/// this many ops (keys never repeat: they are drawn per packet).
const OPS_PER_CYCLE: usize = 4096;
/// Fewest and most templates in a set.
const MIN_TEMPLATES: usize = 64;
const MAX_TEMPLATES: usize = 4096;

/// One op of a template: its type and where its key and (PUT) value bytes go.
#[derive(Clone, Copy, Debug)]
pub(super) struct TemplateOp {
    pub(super) op: OpType,
    key_off: u16,
    val_off: u16,
}

/// A set of packet templates for one (ops per packet, payload capacity).
#[derive(Debug)]
pub(super) struct Templates {
    /// Template `i`'s payload is `bytes[i * cap..][..lens[i]]`.
    bytes: Vec<u8>,
    lens: Vec<u16>,
    /// Template `i`'s ops are `ops[i * per..][..nops[i]]`.
    ops: Vec<TemplateOp>,
    nops: Vec<u16>,
    per: usize,
    cap: usize,
    key_size: usize,
    val_len: usize,
    next: usize,
}

impl Templates {
    /// Encodes templates of up to `per` ops (as many as fit `cap` payload bytes) with
    /// op types drawn from `mix`; `None` if not even one op fits.
    pub(super) fn build<R: RandomSource>(
        mix: &Mix,
        rng: &mut R,
        per: usize,
        (key_size, val_len): (usize, usize),
        cap: usize,
    ) -> Option<Templates> {
        let per = per.clamp(1, kvwire::MAX_OPS_PER_BATCH);
        let count = (OPS_PER_CYCLE / per).clamp(MIN_TEMPLATES, MAX_TEMPLATES);
        let mut t = Templates {
            bytes: vec![0; count * cap],
            lens: vec![0; count],
            ops: vec![
                TemplateOp {
                    op: OpType::Get,
                    key_off: 0,
                    val_off: 0,
                };
                count * per
            ],
            nops: vec![0; count],
            per,
            cap,
            key_size,
            val_len,
            next: 0,
        };
        let key = vec![0u8; key_size];
        let mut val = vec![0u8; val_len];
        for i in 0..count {
            let buf = &mut t.bytes[i * cap..(i + 1) * cap];
            let mut w = BatchWriter::new(buf, 0).ok()?;
            let ops = &mut t.ops[i * per..(i + 1) * per];
            let mut n = 0;
            while n < per {
                let op = mix.next(rng);
                // Placeholder values differ from their neighbours' so that no
                // COPY_VALUE flag is set where a real value will go.
                val.fill((n % 255) as u8 + 1);
                if push(&mut w, op, &key, &val).is_err() {
                    break;
                }
                let end = w.len();
                let val_off = if op == OpType::Put {
                    end - val_len
                } else {
                    end
                };
                ops[n] = TemplateOp {
                    op,
                    key_off: u16::try_from(val_off - key_size).ok()?,
                    val_off: u16::try_from(val_off).ok()?,
                };
                n += 1;
            }
            if n == 0 {
                return None;
            }
            t.nops[i] = n as u16;
            t.lens[i] = u16::try_from(w.finish()).ok()?;
        }
        Some(t)
    }

    /// Whether the set was built for `per` ops per packet and `cap` payload bytes.
    pub(super) fn fits(&self, per: usize, cap: usize) -> bool {
        self.per == per.clamp(1, kvwire::MAX_OPS_PER_BATCH) && self.cap == cap
    }
}

/// Encodes one op of the generator's op set with a placeholder key and value.
fn push(
    w: &mut BatchWriter<'_>,
    op: OpType,
    key: &[u8],
    val: &[u8],
) -> Result<(), kvwire::PayloadError> {
    let atomic = super::U64_ADD;
    w.push(&match op {
        OpType::Get => KvOp::Get { key },
        OpType::Delete => KvOp::Delete { key },
        OpType::Put => KvOp::Put { key, value: val },
        OpType::Atomic => KvOp::UpdateS2S {
            key,
            atomic,
            param: 1,
            param2: 0,
        },
        OpType::Vector => KvOp::UpdateS2V {
            key,
            atomic,
            param: 1,
            param2: 0,
        },
        OpType::Reduce => KvOp::Reduce {
            key,
            atomic,
            init: 0,
        },
    })
}

impl Workload {
    /// Fills `payload` from the next template for batch `batch_id`: copies it, draws
    /// its keys in one go, patches keys and PUT values and records each op's
    /// expectation in `exp` (and its partition of K in `tally`). Returns the payload
    /// length and the op count, or `None` when the template does not fit `payload`.
    pub(super) fn fill_template(
        &mut self,
        verify: bool,
        payload: &mut [u8],
        batch_id: u32,
        exp: &mut [ExpOp],
        mut tally: Option<(&mut [u64], u32)>,
    ) -> Option<(usize, usize)> {
        let t = self.templates.as_mut()?;
        let i = t.next;
        let (len, n) = (usize::from(t.lens[i]), usize::from(t.nops[i]));
        let dst = payload.get_mut(..len)?;
        t.next = if i + 1 == t.lens.len() { 0 } else { i + 1 };
        dst.copy_from_slice(&t.bytes[i * t.cap..][..len]);
        dst[req_field::BATCH_ID].copy_from_slice(&batch_id.to_be_bytes());
        let keys = &mut self.key_draws[..n];
        self.chooser.fill(&mut self.rng, keys);
        let (key_size, val_len, sizes) = (t.key_size, t.val_len, self.sizes);
        let mut model = verify.then_some(&mut self.model);
        for ((o, &k), e) in t.ops[i * t.per..][..n].iter().zip(keys.iter()).zip(exp) {
            let key = &mut dst[usize::from(o.key_off)..][..key_size];
            self.key_prefix.write_key(k, key);
            if let Some((part_ops_k, count_k)) = tally.as_mut() {
                let h = kvwire::hash::key_hash(key);
                part_ops_k[partition_of_hash(h, *count_k) as usize] += 1;
            }
            if o.op == OpType::Put {
                let v = super::plain::put_version(model.as_deref());
                write_value(k, v, &mut dst[usize::from(o.val_off)..][..val_len]);
            }
            *e = ExpOp {
                key: k,
                op: o.op,
                expect: super::plain::expect_of(o.op, k, sizes, model.as_deref_mut()),
            };
        }
        Some((len, n))
    }
}
