//! The admitted client QPs of one worker and their sequence state.
//!
//! A client is a (QPN, R_Key) pair the operator admitted. Per client the worker keeps
//! the next request PSN it expects and the PSN of its next response: 16 bytes, in a
//! vector sorted by QPN and searched per request. Only the owning worker touches it;
//! admission changes arrive between bursts (`set`).

use kvwire::psn;

/// A PSN at most this far behind the expected one is a duplicate and dropped; one
/// farther behind is taken as the client restarting its sequence (a resync).
pub const PSN_DUP_WINDOW: i32 = 128;

/// One admitted client QP.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Client {
    /// The client's QPN (destination QP of its requests and of our responses).
    pub qpn: u32,
    /// The R_Key its requests must carry.
    pub rkey: u32,
    /// Next expected request PSN (`None` until the first request).
    expected_psn: Option<u32>,
    /// PSN of the next response sent to this client.
    pub resp_psn: u32,
}

/// What to do with a received request PSN (docs/PROTOCOL.md §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PsnVerdict {
    /// The expected PSN (or the first request, or a restarted sequence): serve.
    Serve,
    /// Ahead of the expected PSN: requests were lost; serve it and count the gap.
    Gap,
    /// Recently served: drop it, never execute it twice.
    Duplicate,
}

impl Client {
    fn new(qpn: u32, rkey: u32) -> Client {
        Client {
            qpn,
            rkey,
            expected_psn: None,
            resp_psn: 0,
        }
    }

    /// Judges request PSN `psn_in` and advances the expected PSN past it unless it is
    /// a duplicate.
    pub fn accept_psn(&mut self, psn_in: u32) -> PsnVerdict {
        let verdict = match self.expected_psn {
            None => PsnVerdict::Serve,
            Some(exp) => match psn::distance(exp, psn_in) {
                0 => PsnVerdict::Serve,
                d if (-PSN_DUP_WINDOW..0).contains(&d) => PsnVerdict::Duplicate,
                d if d > 0 => PsnVerdict::Gap,
                _ => PsnVerdict::Serve, // far behind: the client restarted its sequence
            },
        };
        if verdict != PsnVerdict::Duplicate {
            self.expected_psn = Some(psn::add(psn_in, 1));
        }
        verdict
    }
}

/// The admitted clients, sorted by QPN.
#[derive(Debug, Default)]
pub(crate) struct ClientTable(Vec<Client>);

impl ClientTable {
    /// A table admitting `clients` as (QPN, R_Key) pairs (a repeated QPN keeps its
    /// first R_Key).
    pub fn new(clients: &[(u32, u32)]) -> ClientTable {
        let mut t = ClientTable::default();
        t.set(clients);
        t
    }

    /// Index of the client with `qpn`.
    #[inline]
    pub fn find(&self, qpn: u32) -> Option<usize> {
        self.0.binary_search_by_key(&qpn, |c| c.qpn).ok()
    }

    /// The clients, by index.
    #[inline]
    pub fn as_slice(&self) -> &[Client] {
        &self.0
    }

    /// The clients, by index, mutable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Client] {
        &mut self.0
    }

    /// Replaces the admitted clients with `clients` (QPN, R_Key). A client whose QPN
    /// stays keeps its PSN state (and takes the new R_Key); a removed one is
    /// forgotten; a new one starts fresh. Allocates: call it off the hot path.
    pub fn set(&mut self, clients: &[(u32, u32)]) {
        let old = std::mem::take(&mut self.0);
        let mut v: Vec<Client> = clients
            .iter()
            .map(
                |&(qpn, rkey)| match old.binary_search_by_key(&qpn, |c| c.qpn) {
                    Ok(i) => Client { rkey, ..old[i] },
                    Err(_) => Client::new(qpn, rkey),
                },
            )
            .collect();
        v.sort_by_key(|c| c.qpn);
        v.dedup_by_key(|c| c.qpn);
        self.0 = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_verdicts() {
        let mut c = Client::new(1, 2);
        let w = PSN_DUP_WINDOW as u32;
        assert_eq!(c.accept_psn(1000), PsnVerdict::Serve);
        assert_eq!(c.accept_psn(1001), PsnVerdict::Serve);
        assert_eq!(c.accept_psn(1001), PsnVerdict::Duplicate);
        assert_eq!(c.accept_psn(1002 - w), PsnVerdict::Duplicate);
        assert_eq!(c.accept_psn(1005), PsnVerdict::Gap);
        assert_eq!(c.accept_psn(1006), PsnVerdict::Serve);
        // Farther behind than the window: a restarted sequence.
        assert_eq!(c.accept_psn(1007 - w - 1), PsnVerdict::Serve);
        // Wraps at 2^24.
        let mut c = Client::new(1, 2);
        assert_eq!(c.accept_psn(0xff_ffff), PsnVerdict::Serve);
        assert_eq!(c.accept_psn(0), PsnVerdict::Serve);
        assert_eq!(c.accept_psn(0xff_ffff), PsnVerdict::Duplicate);
    }

    #[test]
    fn set_keeps_staying_clients() {
        let mut t = ClientTable::new(&[(5, 50), (3, 30), (5, 51)]);
        assert_eq!(t.find(3), Some(0));
        assert_eq!(
            t.as_slice()[1].rkey,
            50,
            "a repeated QPN keeps its first R_Key"
        );
        let i = t.find(5).unwrap();
        t.as_mut_slice()[i].resp_psn = 9;
        t.set(&[(5, 55), (7, 70)]);
        assert_eq!(t.find(3), None);
        let i = t.find(5).unwrap();
        assert_eq!((t.as_slice()[i].rkey, t.as_slice()[i].resp_psn), (55, 9));
        let i = t.find(7).unwrap();
        assert_eq!(t.as_slice()[i].resp_psn, 0);
    }
}
