//! Which counter an executed op bumps: the hot path matches on the op; the op table
//! (`kvwire::OPS`) names the counter, and the test below holds them together.

use crate::stats::WorkerStats;
use kvwire::{KvOp, Status};

/// Counts one op executed by the station.
#[inline]
pub(super) fn count_station_op(stats: &WorkerStats, op: &KvOp<'_>, status: Status) {
    match op {
        KvOp::Get { .. } => {
            stats.gets.inc();
            if status == Status::Ok {
                stats.get_hits.inc();
            }
        }
        KvOp::Put { .. } => stats.puts.inc(),
        KvOp::Delete { .. } => stats.deletes.inc(),
        KvOp::UpdateS2S { .. } => stats.atomics.inc(),
        KvOp::UpdateS2V { .. } | KvOp::UpdateV2V { .. } => stats.vector_updates.inc(),
        KvOp::Reduce { .. } => stats.reduces.inc(),
        KvOp::Filter { .. } => stats.filters.inc(),
    }
    if !matches!(status, Status::Ok | Status::NotFound) {
        stats.op_errors.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::count_station_op;
    use crate::stats::WorkerStats;
    use kvwire::{Atomic, KvOp, Status, Width, OPS};

    /// Each op is counted under the counter its row of the op table names
    /// (`kvwire::OPS`): the hot path matches on the op, the table says what it means.
    #[test]
    fn each_op_bumps_the_counter_the_op_table_names() {
        let a = Atomic {
            func: 0,
            width: Width::W8,
            signed: false,
        };
        let k = &b"k"[..];
        let ops = [
            KvOp::Get { key: k },
            KvOp::Put { key: k, value: k },
            KvOp::Delete { key: k },
            KvOp::UpdateS2S {
                key: k,
                atomic: a,
                param: 1,
                param2: 0,
            },
            KvOp::UpdateS2V {
                key: k,
                atomic: a,
                param: 1,
                param2: 0,
            },
            KvOp::UpdateV2V {
                key: k,
                atomic: a,
                delta: k,
            },
            KvOp::Reduce {
                key: k,
                atomic: a,
                init: 0,
            },
            KvOp::Filter {
                key: k,
                atomic: a,
                param: 0,
            },
        ];
        assert_eq!(ops.len(), OPS.len());
        for op in &ops {
            let spec = kvwire::payload::ops::spec(op.opcode()).unwrap();
            let stats = WorkerStats::default();
            count_station_op(&stats, op, Status::Ok);
            let bumped: Vec<&str> = stats
                .counters()
                .iter()
                .filter(|(n, c)| c.get() > 0 && *n != "get_hits")
                .map(|(n, _)| *n)
                .collect();
            assert_eq!(bumped, vec![spec.counter], "{}", spec.name);
        }
    }
}
