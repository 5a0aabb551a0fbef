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
        KvOp::CompareDelete { .. } => stats.compare_deletes.inc(),
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
        let ops: Vec<KvOp<'_>> = OPS
            .iter()
            .map(|s| KvOp::from_parts(s.code, b"k", b"v", a, 1, 0).unwrap())
            .collect();
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
