//! What a run counted, and how a wrong answer is classified: a **leak** carries bytes
//! of another namespace's values; a **denied trace** shows the effect of an op the
//! server answered `DENIED`; a **purge leftover** is a removed tenant's key a purge
//! left behind. Every other wrong answer is a plain mismatch. A run passes only with
//! every failure figure at 0.

use serde::{Deserialize, Serialize};

/// The figures of a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Figures {
    /// Ops answered and checked (single ops and transactions' ops).
    pub ops: u64,
    /// Requests (batches and transactions) answered and checked.
    pub requests: u64,
    /// Transactions: committed, aborted (a condition), refused `DENIED`.
    pub tx_committed: u64,
    /// Transactions aborted by a condition or a failing op.
    pub tx_aborted: u64,
    /// Transactions refused `DENIED` (outside the namespace or ACL, or no `txn`).
    pub tx_denied: u64,
    /// Ops answered `DENIED` as predicted.
    pub denied_ops: u64,
    /// Results redacted for a client without `read`, as predicted.
    pub redacted_ops: u64,
    /// OPENs, CLOSEs and RESUMEs of the clients' own QPs.
    pub opens: u64,
    /// CLOSEs of own QPs.
    pub closes: u64,
    /// RESUMEs of own QPs.
    pub resumes: u64,
    /// Repeats of an OPEN within the proof window (a lost ACCEPT): answered with the
    /// same QP.
    pub open_repeats: u64,
    /// Tenant secret rotations.
    pub rotations: u64,
    /// Tenant removals (each with a purge of its namespace).
    pub removals: u64,
    /// Removed tenants added again (with a new secret, their namespace empty).
    pub readds: u64,
    /// Keys the purges deleted (each checked against the model's count).
    pub purged_keys: u64,
    /// Attempts to use another client's QP: a guessed R_Key, its R_Key from another
    /// source, a RESUME or CLOSE without a proof of its secret.
    pub hijack_attempts: u64,
    /// Of those: requests with a guessed R_Key.
    pub hijack_guessed_rkey: u64,
    /// Requests with the victim's R_Key from another source.
    pub hijack_wrong_source: u64,
    /// CLOSEs from the victim's address without the proof of its secret.
    pub hijack_forged_close: u64,
    /// RESUMEs from the victim's address without the proof of its secret.
    pub hijack_forged_resume: u64,
    /// OPENs as the victim's tenant with a guessed secret.
    pub hijack_forged_open: u64,
    /// Attempts that got data, an ACCEPT of the victim's QP, or closed it.
    pub hijacks_succeeded: u64,
    /// OPENs of another client replayed after the proof window.
    pub replay_attempts: u64,
    /// Replays answered with the live QP of the client that sent the OPEN.
    pub replayed_opens_accepted: u64,
    /// Requests on QPs closed by a rotation or removal of their tenant.
    pub revoked_attempts: u64,
    /// Of those, served.
    pub revoked_served: u64,
    /// Answers carrying bytes of another namespace's values.
    pub leaks: u64,
    /// Answers showing the effect of an op answered `DENIED`.
    pub denied_with_trace: u64,
    /// Keys of a removed tenant found after its purge.
    pub purge_leftovers: u64,
    /// Purges whose count of deleted keys differs from the model's.
    pub purge_miscounts: u64,
    /// Any other answer that differs from the prediction (or a missing one).
    pub mismatches: u64,
}

impl Figures {
    /// Adds `other`'s figures to these (runs of several seeds).
    pub fn merge(&mut self, other: &Figures) {
        let (a, b) = (serde_json::to_value(&*self), serde_json::to_value(other));
        let (Ok(serde_json::Value::Object(mut a)), Ok(b)) = (a, b) else {
            return;
        };
        for (k, v) in a.iter_mut() {
            *v = (v.as_u64().unwrap_or(0) + b[k.as_str()].as_u64().unwrap_or(0)).into();
        }
        if let Ok(sum) = serde_json::from_value(serde_json::Value::Object(a)) {
            *self = sum;
        }
    }

    /// The failures: every figure that must be 0.
    pub fn failures(&self) -> u64 {
        self.hijacks_succeeded
            + self.replayed_opens_accepted
            + self.revoked_served
            + self.leaks
            + self.denied_with_trace
            + self.purge_leftovers
            + self.purge_miscounts
            + self.mismatches
    }
}

/// Whether `observed` carries bytes of one of `foreign` values: equal to one of at
/// least 4 bytes, or sharing an 8-byte window with one.
pub fn carries_foreign<'a>(observed: &[u8], foreign: impl Iterator<Item = &'a [u8]>) -> bool {
    if observed.len() < 4 {
        return false;
    }
    for v in foreign {
        if v.len() >= 4 && observed == v {
            return true;
        }
        if observed.len() >= 8 && v.len() >= 8 {
            for w in v.windows(8) {
                if distinct_bytes(w) >= 4 && observed.windows(8).any(|o| o == w) {
                    return true;
                }
            }
        }
    }
    false
}

/// Distinct byte values in `w` (a window of zeros is no one's).
fn distinct_bytes(w: &[u8]) -> usize {
    let mut seen = [false; 256];
    w.iter()
        .filter(|&&b| !std::mem::replace(&mut seen[usize::from(b)], true))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_bytes_are_found_and_zeros_are_no_ones() {
        let foreign: [&[u8]; 2] = [b"A-SECRET-4111", &[0u8; 16]];
        assert!(carries_foreign(b"A-SECRET-4111", foreign.iter().copied()));
        assert!(carries_foreign(b"xxA-SECRET-41yy", foreign.iter().copied()));
        assert!(!carries_foreign(&[0u8; 12], foreign.iter().copied()));
        assert!(!carries_foreign(b"mine", foreign.iter().copied()));
    }
}
