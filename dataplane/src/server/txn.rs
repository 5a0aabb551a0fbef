//! Serving a transaction request (docs/TRANSACTIONS.md, docs/PROTOCOL.md §3.4): the
//! ops staged before it in the burst run first, then the transaction runs whole on
//! this worker's engine (`kvtx::TxExecutor`) — nothing else touches the partition
//! meanwhile, so transactions are serializable in the order the worker serves them —
//! its post-images go to the mutation tap (replication), and its response carries the
//! outcome first, then every op's result.

use super::resume::ServeMark;
use super::Server;
use crate::chunk::Chunk;
use crate::mutation::record_cost;
use crate::packet::{PktCtx, MAX_BURST, RESPONSE_UDP_SRC_PORT};
use crate::respond::{Ctx, Responder};
use crate::response_cache::Entry;
use crate::stats::WorkerStats;
use crate::tx::TxSink;
use arrayvec::ArrayVec;
use kvtx::Outcome;
use kvwire::partition::partition_of_hash;
use kvwire::payload::{tx_batch_id, AbortReason, TxAbort, TxReader, TX_ABORT_LEN};
use kvwire::{PayloadError, Request, Status, MASTER_HINT_LEN};

impl Server {
    /// Serves the transaction in `req` (admitted and in sequence on client `ci`).
    pub(super) fn transaction<T: TxSink>(
        &mut self,
        req: &Request<'_>,
        ci: usize,
        chunk: &mut Chunk<'_>,
        pkts: &mut ArrayVec<PktCtx, MAX_BURST>,
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        let parsed = TxReader::new(req.payload);
        // A transaction whose batch id cannot be read is answered under batch id 0
        // (ABORTED, malformed), as a malformed batch is (docs/PROTOCOL.md §3.3).
        let batch_id = match &parsed {
            Ok(r) => r.batch().batch_id(),
            Err(_) => tx_batch_id(req.payload).unwrap_or(0),
        };
        // Whatever the executor holds is another request's.
        self.tx_exec.begin();
        let client = &mut self.clients.as_mut_slice()[ci];
        *client.entry(req.psn) = Entry::pending(req.psn);
        stats.requests.inc();
        // What came before it in this burst runs first: the transaction sees it.
        if !chunk.tags.is_empty() {
            self.flush(chunk, pkts, stats, out);
        }
        let pkt = pkts.len() as u8;
        let mark = self.serve;
        pkts.push(PktCtx {
            params: req.reply_params(self.id.mac, self.id.ip, RESPONSE_UDP_SRC_PORT),
            client: ci as u16,
            psn: req.psn,
            batch_id,
            logged: mark == ServeMark::Logged,
        });
        // Begun by the old master, outcome not known here (docs/PROTOCOL.md §6.6):
        // nothing runs, and the outcome result says so.
        let unknown = mark == ServeMark::Unknown;
        let outcome = match &parsed {
            _ if unknown => {
                stats.outcome_unknown.inc();
                Outcome::Committed
            }
            Ok(r) => match self.tx_denied(ci, r, req.payload.len(), stats) {
                // Refused: its results are its own ABORTED ones, never what the
                // executor last ran for anyone else.
                Some(abort) => self.tx_exec.refuse(r, abort),
                None => {
                    let o = match self.other_partitions(r) {
                        0 => self.run_local(r),
                        others => self.run_cross(r, req.payload, others, stats),
                    };
                    if let Some(g) = self.guard(ci) {
                        self.tx_exec.redact_results(r, |op| g.redacts(op));
                    }
                    o
                }
            },
            Err(e) => Outcome::Aborted(TxAbort {
                reason: if *e == PayloadError::TooManyOps {
                    AbortReason::TooLarge
                } else {
                    AbortReason::Malformed
                },
                op: 255,
                status: e.status(),
            }),
        };
        let Server {
            id,
            clients,
            tx_exec,
            hint,
            hint_len,
            ..
        } = self;
        let mut value = [0u8; TX_ABORT_LEN + MASTER_HINT_LEN];
        let (status, len) = match outcome {
            _ if unknown => (Status::OutcomeUnknown, 0),
            Outcome::Committed => {
                stats.tx_committed.inc();
                (Status::Ok, 0)
            }
            Outcome::Aborted(a) => {
                stats.tx_aborted.inc();
                value[..TX_ABORT_LEN].copy_from_slice(&a.encode());
                let mut len = TX_ABORT_LEN;
                if a.status == Status::NotMaster && *hint_len > 0 {
                    value[len..len + *hint_len].copy_from_slice(&hint[..*hint_len]);
                    len += *hint_len;
                }
                (Status::Aborted, len)
            }
        };
        let mut ctx = Ctx {
            clients: clients.as_mut_slice(),
            id,
            pkts,
            stats,
            hint: &hint[..*hint_len],
        };
        out.result(&mut ctx, pkt, status, &value[..len]);
        if let (Ok(r), false) = (&parsed, unknown) {
            // op count + 1 results, the ops' from this transaction alone (a
            // transaction refused before it ran has none yet: each ABORTED).
            tx_exec.pad_results(usize::from(r.batch().op_count()));
            for (s, v) in tx_exec.results() {
                out.result(&mut ctx, pkt, s, v);
            }
        }
    }

    /// Runs `r` on this partition alone (a key of another one aborts it
    /// `CROSS_PARTITION`); a commit's post-images go to the tap.
    /// Why client `ci`'s tenant may not run transaction `r` (its ACL has no `txn`,
    /// or an op is outside its ACL or namespace): an abort naming the op (255: the
    /// transaction itself) with status DENIED; `None` if it may. Counts the request
    /// (`bytes` of payload) for the tenant.
    fn tx_denied(
        &self,
        ci: usize,
        r: &TxReader<'_>,
        bytes: usize,
        stats: &WorkerStats,
    ) -> Option<TxAbort> {
        let g = self.guard(ci)?;
        let slot = stats.tenants.slot(g.slot);
        if let Some(s) = slot {
            s.requests.inc();
            s.request_bytes.add(bytes as u64);
        }
        let deny = |op: u8| {
            stats.denied.inc();
            if let Some(s) = slot {
                s.denied.inc();
            }
            Some(TxAbort {
                reason: AbortReason::OpFailed,
                op,
                status: Status::Denied,
            })
        };
        if !g.allows_txn() {
            return deny(255);
        }
        for (k, op) in r.batch().enumerate() {
            match op {
                Ok(op) if !g.allows(&op) => return deny(k as u8),
                _ => {}
            }
        }
        None
    }

    fn run_local(&mut self, r: &TxReader<'_>) -> Outcome {
        let Server {
            engine,
            station,
            tx_exec,
            tap,
            partition,
            partitions,
            write_status,
            ..
        } = self;
        let (me, n) = (*partition, *partitions);
        let key_ok = |k: &[u8]| n <= 1 || partition_of_hash(kvengine::key_hash(k), n) == me;
        let o = tx_exec.execute(r, engine, station.registry(), key_ok, *write_status);
        if o == Outcome::Committed {
            if let Some(t) = tap.as_deref_mut() {
                // More than one post-image: a replica must apply them as one.
                let (mut n, mut bytes) = (0usize, 0usize);
                for (k, v) in tx_exec.post_images() {
                    n += 1;
                    bytes += record_cost(k.len(), v.map_or(0, <[u8]>::len));
                }
                if n > 1 {
                    t.group(bytes as u32);
                }
                for (k, v) in tx_exec.post_images() {
                    match v {
                        Some(v) => t.put(k, v),
                        None => t.delete(k),
                    }
                }
            }
        }
        o
    }
}
