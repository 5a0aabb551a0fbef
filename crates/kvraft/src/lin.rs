//! A linearizability checker (Wing & Gong's search with Lowe's memoization, the
//! method of Knossos and Porcupine; our own code): does a history of operations —
//! each with the time it was called and the time it returned — have an order that
//! respects real time (an op that returned before another was called comes first)
//! and that a sequential model accepts?
//!
//! Histories of independent keys are checked one key at a time ([`check_keys`]):
//! linearizability is compositional. An op whose answer never came (a client that
//! gave up, a crashed client) has return time [`PENDING`] and an unknown output: it
//! may take effect at any point after its call, or not at all.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// The return time of an op whose answer never came.
pub const PENDING: u64 = u64::MAX;

/// A sequential specification.
pub trait Model {
    /// The state.
    type State: Clone + Eq + Hash;
    /// What an op asks.
    type Input;
    /// What it answered (`None`: unknown).
    type Output;
    /// The initial state.
    fn init(&self) -> Self::State;
    /// The state after `input` answered `output` in `state`; `None` when the model
    /// cannot answer so.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: &Option<Self::Output>,
    ) -> Option<Self::State>;
}

/// One operation of a history.
#[derive(Clone, Debug)]
pub struct Op<I, O> {
    /// When it was called.
    pub call: u64,
    /// When it returned ([`PENDING`]: never).
    pub ret: u64,
    /// What it asked.
    pub input: I,
    /// What it answered (`None`: unknown).
    pub output: Option<O>,
}

/// The checker's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A linearization exists.
    Linearizable,
    /// None exists; the longest prefix of ops (by index) linearized before the search
    /// gave up, for the report.
    NotLinearizable {
        /// Ops linearized in the deepest attempt.
        deepest: usize,
    },
    /// The search took more than its budget of steps.
    Unknown,
}

/// A node of the search's doubly linked event list.
#[derive(Clone, Copy, Debug)]
struct Event {
    op: usize,
    is_call: bool,
    /// For a call: the index of its return event.
    ret: usize,
    prev: usize,
    next: usize,
}

const NIL: usize = usize::MAX;

/// The ops linearized so far, as a bit set.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// Checks `ops` against `model` with at most `budget` search steps.
pub fn check<M: Model>(model: &M, ops: &[Op<M::Input, M::Output>], budget: u64) -> Verdict {
    let n = ops.len();
    if n == 0 {
        return Verdict::Linearizable;
    }
    // Events by time; a call sorts before a return at the same time (overlapping).
    let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, o) in ops.iter().enumerate() {
        order.push((o.call, false, i));
        order.push((o.ret, true, i));
    }
    order.sort_by_key(|&(t, is_ret, i)| (t, is_ret, i));
    let mut ev: Vec<Event> = order
        .iter()
        .map(|&(_, is_ret, op)| Event {
            op,
            is_call: !is_ret,
            ret: NIL,
            prev: NIL,
            next: NIL,
        })
        .collect();
    let mut ret_of = vec![NIL; n];
    for (k, e) in ev.iter().enumerate() {
        if !e.is_call {
            ret_of[e.op] = k;
        }
    }
    for k in 0..ev.len() {
        if ev[k].is_call {
            ev[k].ret = ret_of[ev[k].op];
        }
        ev[k].prev = if k == 0 { NIL } else { k - 1 };
        ev[k].next = if k + 1 == ev.len() { NIL } else { k + 1 };
    }
    let mut head = 0usize;
    let mut state = model.init();
    let mut linearized = Bits::new(n);
    let mut cache: HashMap<u64, Vec<(Bits, M::State)>> = HashMap::new();
    // (call event, state before it)
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    let mut cur = head;
    let (mut steps, mut deepest) = (0u64, 0usize);
    // Unlinks the call `c` and its return; relinks them.
    let lift = |ev: &mut Vec<Event>, head: &mut usize, c: usize| {
        for k in [c, ev[c].ret] {
            let (p, nx) = (ev[k].prev, ev[k].next);
            if p == NIL {
                *head = nx;
            } else {
                ev[p].next = nx;
            }
            if nx != NIL {
                ev[nx].prev = p;
            }
        }
    };
    let unlift = |ev: &mut Vec<Event>, head: &mut usize, c: usize| {
        for k in [ev[c].ret, c] {
            let (p, nx) = (ev[k].prev, ev[k].next);
            if p == NIL {
                *head = k;
            } else {
                ev[p].next = k;
            }
            if nx != NIL {
                ev[nx].prev = k;
            }
        }
    };
    loop {
        if head == NIL {
            return Verdict::Linearizable;
        }
        steps += 1;
        if steps > budget {
            return Verdict::Unknown;
        }
        if cur == NIL {
            // Nothing left to try at this depth.
            let Some((c, before)) = stack.pop() else {
                return Verdict::NotLinearizable { deepest };
            };
            state = before;
            linearized.clear(ev[c].op);
            unlift(&mut ev, &mut head, c);
            cur = ev[c].next;
            continue;
        }
        let e = ev[cur];
        if e.is_call {
            let o = &ops[e.op];
            if let Some(next) = model.step(&state, &o.input, &o.output) {
                let mut bits = linearized.clone();
                bits.set(e.op);
                let h = {
                    let mut hs = std::collections::hash_map::DefaultHasher::new();
                    bits.hash(&mut hs);
                    next.hash(&mut hs);
                    hs.finish()
                };
                let seen = cache.entry(h).or_default();
                if !seen.iter().any(|(b, s)| *b == bits && *s == next) {
                    seen.push((bits.clone(), next.clone()));
                    stack.push((cur, std::mem::replace(&mut state, next)));
                    linearized = bits;
                    deepest = deepest.max(stack.len());
                    lift(&mut ev, &mut head, cur);
                    cur = head;
                    continue;
                }
            }
            cur = e.next;
        } else {
            // A return whose call is not linearized yet: this order fails here.
            let Some((c, before)) = stack.pop() else {
                return Verdict::NotLinearizable { deepest };
            };
            state = before;
            linearized.clear(ev[c].op);
            unlift(&mut ev, &mut head, c);
            cur = ev[c].next;
        }
    }
}

/// One op of model `M`.
pub type OpOf<M> = Op<<M as Model>::Input, <M as Model>::Output>;

/// Checks a history of independent keys one key at a time; the keys that failed
/// (or whose search ran out of budget: `Unknown`).
pub fn check_keys<K: Clone + Eq + Hash, M: Model>(
    model: &M,
    ops: Vec<(K, OpOf<M>)>,
    budget: u64,
) -> Vec<(K, Verdict)> {
    let mut by_key: HashMap<K, Vec<OpOf<M>>> = HashMap::new();
    for (k, o) in ops {
        by_key.entry(k).or_default().push(o);
    }
    by_key
        .into_iter()
        .filter_map(|(k, h)| match check(model, &h, budget) {
            Verdict::Linearizable => None,
            v => Some((k, v)),
        })
        .collect()
}

/// One key of a KV store: a register that also counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct KvKey;

/// What a client asked of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvInput {
    /// PUT the value.
    Put(u64),
    /// GET.
    Get,
    /// Fetch-add: adds and answers the value before.
    Add(u64),
    /// DELETE.
    Delete,
}

/// What it answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvOutput {
    /// PUT done.
    Done,
    /// GET or fetch-add: the value (before the add), or absent.
    Value(Option<u64>),
    /// DELETE: whether the key was there.
    Deleted(bool),
}

impl Model for KvKey {
    type State = Option<u64>;
    type Input = KvInput;
    type Output = KvOutput;

    fn init(&self) -> Option<u64> {
        None
    }

    fn step(&self, s: &Option<u64>, i: &KvInput, o: &Option<KvOutput>) -> Option<Option<u64>> {
        let (next, answer) = match *i {
            KvInput::Put(v) => (Some(v), KvOutput::Done),
            KvInput::Get => (*s, KvOutput::Value(*s)),
            // An add of an absent key fails and changes nothing (as the server's).
            KvInput::Add(d) => (s.map(|v| v.wrapping_add(d)), KvOutput::Value(*s)),
            KvInput::Delete => (None, KvOutput::Deleted(s.is_some())),
        };
        match o {
            Some(out) if *out != answer => None,
            _ => Some(next),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: u64, ret: u64, input: KvInput, output: Option<KvOutput>) -> Op<KvInput, KvOutput> {
        Op {
            call,
            ret,
            input,
            output,
        }
    }

    #[test]
    fn a_stale_read_after_a_write_returned_is_not_linearizable() {
        use KvInput::*;
        use KvOutput::*;
        let ok = vec![
            op(0, 10, Put(1), Some(Done)),
            op(5, 15, Get, Some(Value(None))), // overlaps the put: may precede it
            op(20, 30, Get, Some(Value(Some(1)))),
        ];
        assert_eq!(check(&KvKey, &ok, 1 << 20), Verdict::Linearizable);
        let stale = vec![
            op(0, 10, Put(1), Some(Done)),
            op(20, 30, Get, Some(Value(None))), // after the put returned
        ];
        assert!(matches!(
            check(&KvKey, &stale, 1 << 20),
            Verdict::NotLinearizable { .. }
        ));
    }

    #[test]
    fn pending_ops_may_or_may_not_have_happened() {
        use KvInput::*;
        use KvOutput::*;
        let h = vec![
            op(0, 10, Put(1), Some(Done)),
            op(12, PENDING, Put(2), None),
            op(20, 30, Get, Some(Value(Some(1)))),
            op(40, 50, Get, Some(Value(Some(2)))),
        ];
        assert_eq!(check(&KvKey, &h, 1 << 20), Verdict::Linearizable);
        // A lost acknowledged increment: two adds answered 5 and 6, the value read 6.
        let lost = vec![
            op(0, 1, Put(5), Some(Done)),
            op(2, 3, Add(1), Some(Value(Some(5)))),
            op(4, 5, Add(1), Some(Value(Some(6)))),
            op(6, 7, Get, Some(Value(Some(6)))),
        ];
        assert!(matches!(
            check(&KvKey, &lost, 1 << 20),
            Verdict::NotLinearizable { .. }
        ));
    }

    #[test]
    fn many_concurrent_ops_are_checked_quickly() {
        use KvInput::*;
        use KvOutput::*;
        // 10 clients each add 1 once, all overlapping; then a read of 10.
        let mut h = vec![op(0, 1, Put(0), Some(Done))];
        for c in 0..10u64 {
            h.push(op(2 + c, 100, Add(1), None));
        }
        h.push(op(200, 201, Get, Some(Value(Some(10)))));
        assert_eq!(check(&KvKey, &h, 1 << 22), Verdict::Linearizable);
        let per_key = check_keys(&KvKey, h.into_iter().map(|o| (1u8, o)).collect(), 1 << 22);
        assert!(per_key.is_empty());
    }
}
