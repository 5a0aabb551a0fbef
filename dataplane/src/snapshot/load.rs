//! `dataplane --load FILE`: a verified snapshot into the engines, before serving.

use kvengine::{key_hash, Engine, Status};
use kvrepl::snapshot::{SnapshotError, SnapshotReader};
use kvrepl::Record;
use kvwire::partition::partition_of_hash;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

/// What a load did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Records applied (PUTs and DELETEs, in file order).
    pub records: u64,
    /// Keys stored afterwards, over all engines.
    pub keys: u64,
    /// Partitions of the dataplane that wrote the file.
    pub saved_partitions: u32,
    /// Bytes of the file.
    pub bytes: u64,
}

/// Verifies the snapshot at `path` whole, then applies its records in order to
/// `engines` (partition `i` = `engines[i]`, each key to the partition of its hash, so
/// the number of workers may differ from the saver's). The engines are the staging
/// area: on `Err` they hold part of the file and must not serve (the dataplane exits).
/// Errors: the file's (`kvrepl::snapshot`), or a record the engines refuse (a key or
/// value too large for this engine configuration, out of memory).
pub fn load_into(path: &Path, engines: &mut [&mut Engine]) -> Result<LoadReport, String> {
    if engines.is_empty() {
        return Err("no engine to load into".into());
    }
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let reader = SnapshotReader::open(BufReader::with_capacity(1 << 20, file))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    apply(reader, path, engines, &mut |_, _| {})
}

/// [`load_into`] for a replica's log file (`kvrepl::aof`: recover it first, so a torn
/// tail is already cut); the same checks, the same errors. Its completion records
/// (`QP_STATE`) go to `qp_state` in file order: a node elected after its restart
/// must know the requests whose effects it loaded (`crate::repl::completion`).
pub fn load_log_into(
    path: &Path,
    engines: &mut [&mut Engine],
    qp_state: &mut dyn FnMut(u32, &[u8]),
) -> Result<LoadReport, String> {
    if engines.is_empty() {
        return Err("no engine to load into".into());
    }
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let reader = kvrepl::aof::open_reader(BufReader::with_capacity(1 << 20, file))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    apply(reader, path, engines, qp_state)
}

/// Applies a verified file's records in order.
fn apply(
    reader: SnapshotReader<BufReader<File>>,
    path: &Path,
    engines: &mut [&mut Engine],
    qp_state: &mut dyn FnMut(u32, &[u8]),
) -> Result<LoadReport, String> {
    let n = engines.len() as u32;
    let what = |e: SnapshotError| format!("{}: {e}", path.display());
    let saved_partitions = reader.info().header.partitions;
    let mut records = 0u64;
    let res = reader.for_each(|rec| {
        let (key, status) = match rec {
            Record::Put { key, value } => {
                let p = partition_of_hash(key_hash(key), n) as usize;
                (key, engines[p].put(key, value))
            }
            Record::Delete { key } => {
                let p = partition_of_hash(key_hash(key), n) as usize;
                let s = engines[p].delete(key);
                // A key deleted after the scan missed it: nothing to remove.
                (key, if s == Status::NotFound { Status::Ok } else { s })
            }
            // Per-QP transport state: a replica log's, for its node's transport.
            Record::QpState { qpn, bytes } => {
                qp_state(qpn, bytes);
                (&[][..], Status::Ok)
            }
            // Transaction boundaries matter to a live replica only.
            Record::Group { .. } => (&[][..], Status::Ok),
        };
        records += 1;
        if status == Status::Ok {
            Ok(())
        } else {
            Err(format!(
                "record {records} (key of {} B): the engine refused it: {status:?}",
                key.len()
            ))
        }
    });
    let info = match res {
        Ok(info) => info,
        Err(Ok(refused)) => return Err(format!("{}: {refused}", path.display())),
        Err(Err(e)) => return Err(what(e)),
    };
    let keys = engines.iter().map(|e| e.stats().stored_kvs).sum();
    Ok(LoadReport {
        records,
        keys,
        saved_partitions,
        bytes: info.bytes,
    })
}
