//! A worker's part in replication, chosen once when the node starts (the way DPDK's
//! l3fwd picks its lookup mode): what the worker does between its bursts besides
//! serving requests. The loop calls [`Role::between_bursts`] once per iteration and
//! knows nothing of the roles themselves.
//!
//! | role           | nodes                                         | between bursts                     |
//! |----------------|-----------------------------------------------|------------------------------------|
//! | [`Standalone`] | no replication; a master whose replication lcore ships its log | nothing            |
//! | [`Replica`]    | a fixed replica; every node of an etcd cluster (its role changes at run time, its apply ring stays) | applies the master's records |
//! | [`InlineMaster`] | `--repl-inline` (worker 0 of a master)      | one pass of the replication loop   |
//!
//! What every worker does whatever its role stays in the loop: the mutation tap's
//! periodic work (a master's log ring, a snapshot's records), the parking point of
//! cross-partition transactions, snapshot steps. A sync master's held responses belong
//! to its transmit side (`worker::tx_side`), which every response passes through.

use crate::replication::replicator::Replicator;
use dataplane::repl::apply::{apply_span, Applier};
use dataplane::server::Server;

/// Replicated records a replica worker applies per loop iteration at most (bounds the
/// delay they add to the requests waiting behind them).
const APPLY_PER_LOOP: usize = 256;

/// What a worker does between its bursts for the node's replication.
pub trait Role: Send {
    /// One step of the role's work; the units of work done (0: none, so the worker
    /// may count the iteration idle).
    fn between_bursts(&mut self, server: &mut Server) -> usize;

    /// The role's name (the start-up banner and errors).
    fn name(&self) -> &'static str;
}

/// No replication work on this worker.
pub struct Standalone;

impl Role for Standalone {
    #[inline]
    fn between_bursts(&mut self, _server: &mut Server) -> usize {
        0
    }

    fn name(&self) -> &'static str {
        "standalone"
    }
}

/// Applies the master's records routed to this partition (through the mutation tap,
/// so a snapshot taken on a replica sees them); a transaction spanning several
/// partitions with their workers parked.
pub struct Replica(pub Applier);

impl Role for Replica {
    #[inline]
    fn between_bursts(&mut self, server: &mut Server) -> usize {
        let a = &mut self.0;
        let k = {
            let (engine, tap, mut keeper) = server.apply_parts();
            a.apply_with(engine, tap, APPLY_PER_LOOP, &mut keeper)
        };
        k + a.pending_span().map_or(0, |parts| {
            server
                .with_parked(parts, |me, others| apply_span(a, me, others))
                .unwrap_or(0)
        })
    }

    fn name(&self) -> &'static str {
        "replica"
    }
}

/// Polls the replication loop between this worker's bursts instead of a replication
/// lcore (`--repl-inline`: the baseline without SKV's offload).
pub struct InlineMaster(pub Replicator);

impl Role for InlineMaster {
    #[inline]
    fn between_bursts(&mut self, _server: &mut Server) -> usize {
        usize::from(self.0.poll_once())
    }

    fn name(&self) -> &'static str {
        "inline master"
    }
}
