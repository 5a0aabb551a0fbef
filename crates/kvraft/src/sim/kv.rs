//! The simulation's store and its records: keys and values are `u64`s; a record is
//! kind (1 PUT, 2 DELETE), key and value, 17 bytes, little-endian — the shape of the
//! dataplane's post-image records, without their bytes.

use crate::group::Fsm;
use std::collections::BTreeMap;

/// Bytes of one record.
pub const RECORD_LEN: usize = 17;
const PUT: u8 = 1;
const DELETE: u8 = 2;

/// Appends a PUT (`Some`) or DELETE (`None`) record of `key` to `out`.
pub fn record(out: &mut Vec<u8>, key: u64, value: Option<u64>) {
    out.push(if value.is_some() { PUT } else { DELETE });
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&value.unwrap_or(0).to_le_bytes());
}

/// A node's store: what its state machine holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kv {
    /// The keys and values.
    pub map: BTreeMap<u64, u64>,
    /// Writes reached the store that no entry logs (cannot happen: a bug).
    pub diverged: bool,
    /// Records applied (committed ones from the log).
    pub applied_records: u64,
}

impl Kv {
    /// Applies records (a PUT sets, a DELETE removes).
    pub fn apply_records(&mut self, recs: &[u8]) {
        for r in recs.chunks_exact(RECORD_LEN) {
            let key = u64::from_le_bytes(r[1..9].try_into().unwrap_or_default());
            let value = u64::from_le_bytes(r[9..17].try_into().unwrap_or_default());
            match r[0] {
                PUT => {
                    self.map.insert(key, value);
                }
                DELETE => {
                    self.map.remove(&key);
                }
                _ => {}
            }
            self.applied_records += 1;
        }
    }
}

impl Fsm for Kv {
    fn apply(&mut self, _index: u64, records: &[u8]) {
        self.apply_records(records);
    }

    fn restore(&mut self, _index: u64) {
        self.map.clear();
        self.diverged = false;
    }
}
