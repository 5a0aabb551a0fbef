//! Requests built op by op: sweeps (load, read-back), several partitions, value-size
//! ranges and `--no-templates` (the templates' A/B baseline) encode each op with
//! kvwire's [`BatchWriter`] as it is drawn.

use super::{ExpOp, Phase, Workload, U64_ADD};
use crate::model::{Expect, Model};
use kvload::{write_value, OpType, SizeDist};
use kvwire::partition::partition_of_hash;
use kvwire::{BatchWriter, KvOp};

impl Workload {
    /// Fills a batch for one partition op by op (`key`: room for one key): no
    /// steering, no per-op partition work. A drawn op that does not fit the packet is
    /// dropped (a sweep retries its key). Expectations go to `exp`, ops per partition
    /// of K to `tally`; returns the ops written.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn fill_plain(
        &mut self,
        verify: bool,
        phase: Phase,
        target: usize,
        w: &mut BatchWriter<'_>,
        key: &mut [u8],
        exp: &mut [ExpOp],
        mut tally: Option<(&mut [u64], u32)>,
    ) -> usize {
        let mut model = verify.then_some(&mut self.model);
        let mut nops = 0;
        while nops < target {
            let (op, k) = match phase {
                Phase::Load | Phase::Readback => {
                    if self.sweep_next >= self.keys {
                        break;
                    }
                    let op = if phase == Phase::Load {
                        OpType::Put
                    } else {
                        OpType::Get
                    };
                    (op, self.sweep_next)
                }
                _ => (
                    self.mix.next(&mut self.rng),
                    self.chooser.next(&mut self.rng),
                ),
            };
            let val = &mut self.val[..];
            self.key_prefix.write_key(k, key);
            let Some(expect) = push_op(w, op, k, key, val, self.sizes, model.as_deref_mut()) else {
                break; // packet full
            };
            exp[nops] = ExpOp { key: k, op, expect };
            nops += 1;
            if phase.sweeps() {
                self.sweep_next += 1;
            }
            if let Some((part_ops_k, count_k)) = tally.as_mut() {
                let h = kvwire::hash::key_hash(key);
                part_ops_k[partition_of_hash(h, *count_k) as usize] += 1;
            }
        }
        nops
    }
}

/// Writes one op on key `k` (its bytes already in `key`) into the batch, a PUT's
/// value into `val`.
/// With a `model` (verify mode) the op is applied to it and its expected answer
/// returned, else `Expect::Any`. `None` when the packet is full (nothing recorded).
#[inline(always)]
pub(super) fn push_op(
    w: &mut BatchWriter<'_>,
    op: OpType,
    k: u64,
    key: &[u8],
    val: &mut [u8],
    sizes: SizeDist,
    model: Option<&mut Model>,
) -> Option<Expect> {
    let pushed = match op {
        OpType::Get => w.push(&KvOp::Get { key }),
        OpType::Delete => w.push(&KvOp::Delete { key }),
        OpType::Atomic => w.push(&KvOp::UpdateS2S {
            key,
            atomic: U64_ADD,
            param: 1,
            param2: 0,
        }),
        OpType::Vector => w.push(&KvOp::UpdateS2V {
            key,
            atomic: U64_ADD,
            param: 1,
            param2: 0,
        }),
        OpType::Reduce => w.push(&KvOp::Reduce {
            key,
            atomic: U64_ADD,
            init: 0,
        }),
        OpType::Put => {
            let v = put_version(model.as_deref());
            let len = sizes.len_of(k, v).min(val.len());
            write_value(k, v, &mut val[..len]);
            w.push(&KvOp::Put {
                key,
                value: &val[..len],
            })
        }
    };
    if pushed.is_err() {
        return None;
    }
    Some(expect_of(op, k, sizes, model))
}

/// The version a PUT about to be sent writes: the verify model's next (without verify
/// the model is not kept, so no per-op cache miss: version 1).
#[inline(always)]
pub(super) fn put_version(model: Option<&Model>) -> u32 {
    model.map_or(1, Model::peek_version)
}

/// Records op `op` on key `k` as sent in the verify model (if any) and returns the
/// answer it must get (`Expect::Any` without a model).
#[inline(always)]
pub(super) fn expect_of(op: OpType, k: u64, sizes: SizeDist, model: Option<&mut Model>) -> Expect {
    match model {
        Some(m) => m.on_send(op, k, |v| sizes.len_of(k, v)).1,
        None => Expect::Any,
    }
}
