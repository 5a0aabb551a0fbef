//! The admitted client QPs of one worker and their connection state.
//!
//! A client is a (QPN, R_Key) pair the operator admitted. It is served once connected
//! (CONNECT → ACCEPT, `conn.rs`). Per client the worker keeps its incarnation (nonce),
//! the next request PSN it expects (`e`), the PSN of its next response frame, the
//! starting PSNs it accepted (to re-send a lost ACCEPT), whether a NAK was sent for the
//! current gap, and the `W` replay entries of its last requests (`replay.rs`).
//!
//! Per-QP state: [`CLIENT_BYTES`] in the table (56 B) plus `W ×`
//! [`ENTRY_BYTES`](crate::replay::ENTRY_BYTES) (24 B) of replay entries: 824 B for
//! the default `W = 32`. Clients are kept in a vector sorted by QPN and searched per
//! request. Only the owning worker touches them; admission changes arrive between
//! bursts (`set`).

use crate::completion::{RestoredQp, NOT_RESUMING};
use crate::replay::Entry;

/// One admitted client QP.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    /// The client's QPN (destination QP of its requests and of our responses).
    pub qpn: u32,
    /// The R_Key its requests must carry.
    pub rkey: u32,
    /// Nonce of the current incarnation (meaningful when `connected`).
    pub nonce: u64,
    /// Next expected request PSN `e`.
    pub expected_psn: u32,
    /// PSN of the next response frame sent to this client.
    pub resp_psn: u32,
    /// The request PSN the ACCEPT of the current incarnation announced.
    pub start_psn: u32,
    /// The response PSN the ACCEPT of the current incarnation announced.
    pub start_resp_psn: u32,
    /// A CONNECT was accepted (requests are served).
    pub connected: bool,
    /// A NAK (sequence error or RNR) was sent for the current gap; cleared when the
    /// expected request is served.
    pub nak_sent: bool,
    /// A connection resumed from completion records (`crate::completion`): until the
    /// expected PSN reaches this one, each request is looked up there first.
    /// [`NOT_RESUMING`] otherwise.
    pub resume_until: u32,
    /// Replay entries, the one of PSN `p` at `p mod W`.
    pub replay: Box<[Entry]>,
}

/// Bytes of one [`Client`] in the table (its replay entries are on the heap).
pub const CLIENT_BYTES: usize = std::mem::size_of::<Client>();

impl Client {
    fn new(qpn: u32, rkey: u32, credits: u16) -> Client {
        Client {
            qpn,
            rkey,
            nonce: 0,
            expected_psn: 0,
            resp_psn: 0,
            start_psn: 0,
            start_resp_psn: 0,
            connected: false,
            nak_sent: false,
            resume_until: NOT_RESUMING,
            replay: vec![Entry::EMPTY; usize::from(credits.max(1))].into_boxed_slice(),
        }
    }

    /// The replay entry of request PSN `psn`, read-only (for prefetching).
    #[inline]
    pub fn entry_ref(&self, psn: u32) -> &Entry {
        let mask = self.replay.len() - 1;
        &self.replay[psn as usize & mask]
    }

    /// The replay entry of request PSN `psn` (`W` is a power of two).
    #[inline]
    pub fn entry(&mut self, psn: u32) -> &mut Entry {
        let mask = self.replay.len() - 1;
        &mut self.replay[psn as usize & mask]
    }
}

/// The admitted clients, sorted by QPN.
#[derive(Debug, Default)]
pub(crate) struct ClientTable {
    clients: Vec<Client>,
    /// The clients' QPNs, in the same order: the lookup searches this dense array
    /// (16 KiB for 4096 clients, cache-resident) instead of striding through the
    /// client entries, so thousands of QPs cost one miss per request, not one per
    /// search step.
    qpns: Vec<u32>,
    /// Replay entries per client (the window `W`).
    credits: u16,
    /// Per client (same index), what its master's completion records say: empty
    /// unless [`ClientTable::keep_restored`] was called.
    restored: Vec<RestoredQp>,
    /// Whether `restored` is kept.
    keep_restored: bool,
}

impl ClientTable {
    /// A table admitting `clients` as (QPN, R_Key) pairs (a repeated QPN keeps its
    /// first R_Key), with `credits` replay entries per client.
    pub fn new(clients: &[(u32, u32)], credits: u16) -> ClientTable {
        let mut t = ClientTable {
            clients: Vec::new(),
            qpns: Vec::new(),
            credits,
            restored: Vec::new(),
            keep_restored: false,
        };
        t.set(clients);
        t
    }

    /// Index of the client with `qpn`.
    #[inline]
    pub fn find(&self, qpn: u32) -> Option<usize> {
        self.qpns.binary_search(&qpn).ok()
    }

    /// The clients, by index.
    #[inline]
    pub fn as_slice(&self) -> &[Client] {
        &self.clients
    }

    /// The clients, by index, mutable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Client] {
        &mut self.clients
    }

    /// Keeps, per client, what completion records say about its requests on the
    /// master (a node that may be promoted). Allocates `W` entries per client.
    pub fn keep_restored(&mut self) {
        if !self.keep_restored {
            self.keep_restored = true;
            self.restored = vec![RestoredQp::new(self.credits); self.clients.len()];
        }
    }

    /// The restored state of client `i`, mutable (`None` unless kept).
    #[inline]
    pub fn restored_mut(&mut self, i: usize) -> Option<&mut RestoredQp> {
        self.restored.get_mut(i)
    }

    /// A client and its restored state together.
    #[inline]
    pub fn with_restored(&mut self, i: usize) -> (&mut Client, Option<&RestoredQp>) {
        (&mut self.clients[i], self.restored.get(i))
    }

    /// Replaces the admitted clients with `clients` (QPN, R_Key). A client whose QPN
    /// stays keeps its connection (and takes the new R_Key); a removed one is
    /// forgotten; a new one starts unconnected. Allocates: call it off the hot path.
    pub fn set(&mut self, clients: &[(u32, u32)]) {
        let old_qpns = std::mem::take(&mut self.qpns);
        let mut old_restored = std::mem::take(&mut self.restored);
        let mut old = std::mem::take(&mut self.clients);
        let mut v: Vec<Client> = clients
            .iter()
            .map(
                |&(qpn, rkey)| match old.binary_search_by_key(&qpn, |c| c.qpn) {
                    // A repeated QPN finds its replay entries taken (empty): it is
                    // removed by the dedup below, which keeps the first.
                    Ok(i) => Client {
                        rkey,
                        replay: std::mem::take(&mut old[i].replay),
                        ..old[i].clone()
                    },
                    Err(_) => Client::new(qpn, rkey, self.credits),
                },
            )
            .collect();
        v.sort_by_key(|c| c.qpn); // stable: the first of a repeated QPN stays first
        v.dedup_by_key(|c| c.qpn);
        self.qpns = v.iter().map(|c| c.qpn).collect();
        if self.keep_restored {
            self.restored = v
                .iter()
                .map(|c| match old_qpns.binary_search(&c.qpn) {
                    Ok(i) if i < old_restored.len() => {
                        std::mem::replace(&mut old_restored[i], RestoredQp::new(1))
                    }
                    _ => RestoredQp::new(self.credits),
                })
                .collect();
        }
        self.clients = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_keeps_staying_clients() {
        let mut t = ClientTable::new(&[(5, 50), (3, 30), (5, 51)], 8);
        assert_eq!(t.find(3), Some(0));
        assert_eq!(
            t.as_slice()[1].rkey,
            50,
            "a repeated QPN keeps its first R_Key"
        );
        let i = t.find(5).unwrap();
        t.as_mut_slice()[i].resp_psn = 9;
        t.as_mut_slice()[i].connected = true;
        *t.as_mut_slice()[i].entry(13) = Entry::pending(13);
        t.set(&[(5, 55), (7, 70)]);
        assert_eq!(t.find(3), None);
        let i = t.find(5).unwrap();
        let c = &mut t.as_mut_slice()[i];
        assert_eq!((c.rkey, c.resp_psn, c.connected), (55, 9, true));
        assert_eq!(c.entry(13).psn, 13, "replay entries kept");
        assert_eq!(c.replay.len(), 8);
        let i = t.find(7).unwrap();
        assert!(!t.as_slice()[i].connected);
        assert_eq!(t.as_slice()[i].replay.len(), 8);
        assert_eq!(CLIENT_BYTES, 56);
    }
}
