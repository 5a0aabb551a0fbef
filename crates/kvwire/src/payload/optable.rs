//! Every opcode's properties, declared once: its name, whether it may write, what its
//! encoding carries, its tenant ACL category and the worker counter it is counted
//! under. The codec ([`opcode_has_value`](super::opcode_has_value),
//! [`opcode_has_atomic`](super::opcode_has_atomic)), the write gate
//! ([`KvOp::is_write`](super::KvOp::is_write)), tenant ACLs
//! ([`crate::tenant::category`]) and the dataplane's op counters read it; what an op
//! does to a value is `kvops::semantics`. docs/PROTOCOL.md §3 is the normative text.

use super::op;
use crate::tenant::{ATOMIC, READ, WRITE};

/// One opcode's properties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpSpec {
    /// The opcode ([`op`]).
    pub code: u8,
    /// Its name, as the docs and tools spell it.
    pub name: &'static str,
    /// It may change the store: refused `NOT_MASTER` by a replica or a fenced master,
    /// logged for exactly-once, counted against the replication tap.
    pub writes: bool,
    /// Its encoding carries value bytes (value length and value).
    pub value: bool,
    /// Its encoding carries the func and attr bytes and parameters.
    pub atomic: bool,
    /// Its tenant ACL category ([`crate::tenant`]).
    pub category: u8,
    /// The worker counter (`crate::counters`) it is counted under.
    pub counter: &'static str,
    /// Its result carries bytes of the stored value (GET's value, an update's
    /// original, REDUCE's Σ, FILTER's elements, the value COMPARE_DELETE found): a
    /// client whose ACL lacks `read` gets it redacted ([`crate::tenant::redacts`]).
    pub reads_value: bool,
}

/// The opcodes, in opcode order (`OPS[i].code == i + 1`).
pub const OPS: [OpSpec; 9] = [
    OpSpec {
        code: op::GET,
        name: "get",
        writes: false,
        value: false,
        atomic: false,
        category: READ,
        counter: "gets",
        reads_value: true,
    },
    OpSpec {
        code: op::PUT,
        name: "put",
        writes: true,
        value: true,
        atomic: false,
        category: WRITE,
        counter: "puts",
        reads_value: false,
    },
    OpSpec {
        code: op::DELETE,
        name: "delete",
        writes: true,
        value: false,
        atomic: false,
        category: WRITE,
        counter: "deletes",
        reads_value: false,
    },
    OpSpec {
        code: op::UPDATE_S2S,
        name: "update_s2s",
        writes: true,
        value: false,
        atomic: true,
        category: ATOMIC,
        counter: "atomics",
        reads_value: true,
    },
    OpSpec {
        code: op::UPDATE_S2V,
        name: "update_s2v",
        writes: true,
        value: false,
        atomic: true,
        category: ATOMIC,
        counter: "vector_updates",
        reads_value: true,
    },
    OpSpec {
        code: op::UPDATE_V2V,
        name: "update_v2v",
        writes: true,
        value: true,
        atomic: true,
        category: ATOMIC,
        counter: "vector_updates",
        reads_value: true,
    },
    OpSpec {
        code: op::REDUCE,
        name: "reduce",
        writes: false,
        value: false,
        atomic: true,
        category: READ,
        counter: "reduces",
        reads_value: true,
    },
    OpSpec {
        code: op::FILTER,
        name: "filter",
        writes: false,
        value: false,
        atomic: true,
        category: READ,
        counter: "filters",
        reads_value: true,
    },
    OpSpec {
        code: op::COMPARE_DELETE,
        name: "compare_delete",
        writes: true,
        value: true,
        atomic: false,
        category: WRITE,
        counter: "compare_deletes",
        reads_value: true,
    },
];

/// The number of opcodes: they are 1 to `OPCOUNT`.
pub const OPCOUNT: u8 = OPS.len() as u8;

// The table is indexed by opcode.
const _: () = {
    let mut i = 0;
    while i < OPS.len() {
        assert!(OPS[i].code as usize == i + 1);
        i += 1;
    }
};

/// The properties of `opcode`; `None` for an undefined one.
#[inline]
pub const fn spec(opcode: u8) -> Option<&'static OpSpec> {
    match opcode {
        1..=OPCOUNT => Some(&OPS[opcode as usize - 1]),
        _ => None,
    }
}

/// An opcode by its name (any case).
pub fn by_name(name: &str) -> Option<u8> {
    let n = name.trim();
    OPS.iter()
        .find(|s| s.name.eq_ignore_ascii_case(n))
        .map(|s| s.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_opcode_once_and_by_name() {
        for (i, s) in OPS.iter().enumerate() {
            assert_eq!(spec(s.code), Some(s));
            assert_eq!(by_name(&s.name.to_uppercase()), Some(s.code));
            assert_eq!(usize::from(s.code), i + 1);
        }
        assert_eq!(spec(0), None);
        assert_eq!(spec(OPCOUNT + 1), None);
        assert_eq!(by_name("append"), None);
    }

    #[test]
    fn the_counters_are_worker_counters() {
        for s in &OPS {
            assert!(
                crate::counters::WORKER_COUNTERS
                    .iter()
                    .any(|c| c.name == s.counter),
                "{}: no worker counter {}",
                s.name,
                s.counter
            );
        }
    }
}
