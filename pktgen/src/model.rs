//! Verify mode's model of the store: the current version of every key.
//!
//! The dataplane executes each key's operations in arrival order, and pktgen sends
//! them in program order over one queue per partition, so the expected answer of an
//! operation is fixed when it is *sent*: pktgen applies each write to the model at
//! send time and records what every read must return. A write whose packet timed out
//! leaves its key *uncertain* (it may or may not have been applied) until the next
//! write to that key is sent.

use kvload::OpType;

const UNCERTAIN: u32 = 1 << 31;
const ABSENT: u32 = 0;

/// What an operation's response must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Status OK with the value of `version` after `adds` fetch-adds of 1 to each 8-byte
    /// element (GET, and the original value returned by an atomic or vector update), or
    /// for REDUCE the sum of those elements.
    Value {
        /// Version the last PUT wrote.
        version: u32,
        /// Fetch-adds (atomic or vector) applied since.
        adds: u32,
    },
    /// Status BAD_LENGTH: the stored value has the wrong length for the operation.
    BadLength,
    /// Status NOT_FOUND.
    Absent,
    /// Status OK, no value (a PUT, or a DELETE of a present key).
    Done,
    /// A DELETE of an absent key: NOT_FOUND.
    DeleteAbsent,
    /// The key's state is unknown after a lost write: any well-formed answer.
    Any,
}

/// Current version of every key (`0` absent; top bit: uncertain) and the fetch-adds
/// applied to it since its last PUT.
pub struct Model {
    versions: Vec<u32>,
    adds: Vec<u32>,
    next_version: u32,
}

impl Model {
    /// A model of `keys` absent keys.
    pub fn new(keys: u64) -> Model {
        Model {
            versions: vec![ABSENT; keys as usize],
            adds: vec![0; keys as usize],
            next_version: 1,
        }
    }

    /// Records that an operation is being sent; returns the version a PUT writes
    /// (0 for others) and what the response must be. `len_of(version)` is the value
    /// length of the key at a version (read-modify-write ops need it to know whether
    /// the server will accept the value's length).
    pub fn on_send(
        &mut self,
        op: OpType,
        key: u64,
        len_of: impl Fn(u32) -> usize,
    ) -> (u32, Expect) {
        let k = key as usize;
        let slot = &mut self.versions[k];
        let uncertain = *slot & UNCERTAIN != 0;
        let cur = *slot & !UNCERTAIN;
        let adds = self.adds[k];
        match op {
            OpType::Get => {
                let e = if uncertain {
                    Expect::Any
                } else if cur == ABSENT {
                    Expect::Absent
                } else {
                    Expect::Value { version: cur, adds }
                };
                (0, e)
            }
            OpType::Atomic | OpType::Vector | OpType::Reduce => {
                if uncertain {
                    return (0, Expect::Any);
                }
                if cur == ABSENT {
                    return (0, Expect::Absent);
                }
                let len = len_of(cur);
                let fits = match op {
                    OpType::Atomic => len == 8,
                    _ => len.is_multiple_of(8),
                };
                if !fits {
                    return (0, Expect::BadLength);
                }
                if op != OpType::Reduce {
                    self.adds[k] = adds.wrapping_add(1);
                }
                (0, Expect::Value { version: cur, adds })
            }
            OpType::Put => {
                let v = self.next_version;
                self.next_version = if v + 1 >= UNCERTAIN { 1 } else { v + 1 };
                *slot = v;
                self.adds[k] = 0;
                (v, Expect::Done)
            }
            OpType::Delete => {
                let e = if uncertain {
                    Expect::Any
                } else if cur == ABSENT {
                    Expect::DeleteAbsent
                } else {
                    Expect::Done
                };
                *slot = ABSENT;
                self.adds[k] = 0;
                (0, e)
            }
        }
    }

    /// The version the next PUT will write (what [`Model::on_send`] will return).
    pub fn peek_version(&self) -> u32 {
        self.next_version
    }

    /// Marks a key whose write was lost (timed out) as uncertain.
    pub fn on_lost_write(&mut self, key: u64) {
        self.versions[key as usize] |= UNCERTAIN;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_writes_in_send_order() {
        let mut m = Model::new(4);
        assert_eq!(m.on_send(OpType::Get, 1, |_| 2).1, Expect::Absent);
        let (v, e) = m.on_send(OpType::Put, 1, |_| 2);
        assert_eq!(e, Expect::Done);
        assert_eq!(
            m.on_send(OpType::Get, 1, |_| 2).1,
            Expect::Value {
                version: v,
                adds: 0
            }
        );
        assert_eq!(m.on_send(OpType::Delete, 1, |_| 2).1, Expect::Done);
        assert_eq!(m.on_send(OpType::Delete, 1, |_| 2).1, Expect::DeleteAbsent);
        assert_eq!(m.on_send(OpType::Get, 1, |_| 2).1, Expect::Absent);
    }

    #[test]
    fn lost_write_makes_key_uncertain_until_next_write() {
        let mut m = Model::new(2);
        m.on_send(OpType::Put, 0, |_| 2);
        m.on_lost_write(0);
        assert_eq!(m.on_send(OpType::Get, 0, |_| 2).1, Expect::Any);
        let (v, _) = m.on_send(OpType::Put, 0, |_| 2);
        assert_eq!(
            m.on_send(OpType::Get, 0, |_| 2).1,
            Expect::Value {
                version: v,
                adds: 0
            }
        );
    }

    #[test]
    fn fetch_adds_are_counted_until_the_next_put() {
        let mut m = Model::new(2);
        assert_eq!(m.on_send(OpType::Atomic, 0, |_| 8).1, Expect::Absent);
        let (v, _) = m.on_send(OpType::Put, 0, |_| 8);
        for i in 0..3 {
            assert_eq!(
                m.on_send(OpType::Atomic, 0, |_| 8).1,
                Expect::Value {
                    version: v,
                    adds: i
                }
            );
        }
        assert_eq!(
            m.on_send(OpType::Reduce, 0, |_| 8).1,
            Expect::Value {
                version: v,
                adds: 3
            }
        );
        assert_eq!(m.on_send(OpType::Atomic, 0, |_| 16).1, Expect::BadLength);
        assert_eq!(
            m.on_send(OpType::Vector, 0, |_| 16).1,
            Expect::Value {
                version: v,
                adds: 3
            }
        );
        let (v2, _) = m.on_send(OpType::Put, 0, |_| 8);
        assert_eq!(
            m.on_send(OpType::Get, 0, |_| 8).1,
            Expect::Value {
                version: v2,
                adds: 0
            }
        );
    }
}
