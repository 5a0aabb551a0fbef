//! [`Client::incr`]: Redis's INCR on the protocol's 8-byte counters, creating a
//! missing counter. The protocol's fetch-and-add answers NOT_FOUND for an absent key;
//! the creation is then a transaction (docs/PROTOCOL.md §3.4) that commits only if
//! the key is still absent, so an increment is never lost to a concurrent one: if
//! another client created the counter in between, the fetch-and-add runs again.

use super::{Client, Op, TxCondition};
use crate::{Error, PacketIo};
use kvwire::payload::{AbortReason, Width};
use kvwire::Status;

/// Rounds of fetch-and-add then create before giving up (TRY_AGAIN): only a key
/// created and deleted again by others between each of our tries exhausts them.
const TRIES: usize = 8;

impl<I: PacketIo> Client<I> {
    /// Adds `delta` (mod 2^64) to the 8-byte little-endian counter under `key`,
    /// creating it with value `delta` if it is absent; returns the value before (0
    /// for a counter it created). A value of another length is `BAD_LENGTH`, as
    /// for [`Client::fetch_add`].
    pub fn incr(&mut self, key: &[u8], delta: u64) -> Result<u64, Error> {
        for _ in 0..TRIES {
            match self.fetch_add(key, Width::W8, delta) {
                Err(Error::Status(Status::NotFound)) => {}
                r => return r,
            }
            let ops = [
                Op::Get { key: key.to_vec() },
                Op::Put {
                    key: key.to_vec(),
                    value: delta.to_le_bytes().to_vec(),
                },
            ];
            let absent = [TxCondition {
                op: 0,
                expect: None,
            }];
            let out = self.transact(&absent, &ops)?;
            match out.abort {
                None => return Ok(0),
                // Created by someone else meanwhile: add to theirs.
                Some(a) if a.reason == AbortReason::ConditionFailed => {}
                Some(a) => return Err(Error::Status(a.status)),
            }
        }
        Err(Error::Status(Status::TryAgain))
    }
}
