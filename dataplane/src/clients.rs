//! The client QPs of one worker and their connection state.
//!
//! A client QP is either **static**, a (QPN, R_Key) pair the operator admitted (served
//! once connected: CONNECT → ACCEPT, `server/conn.rs`), or **opened**: allocated by
//! this worker for an OPEN, with a fresh QPN, R_Key and connection secret
//! (docs/PROTOCOL.md §6.1). Per client the worker keeps its incarnation (nonce),
//! the next request PSN it expects (`e`), the PSN of its next response frame, the
//! starting PSNs it accepted (to re-send a lost ACCEPT), whether a NAK was sent for the
//! current gap, and the `W` replay entries of its last requests (`response_cache.rs`).
//!
//! Per-QP state: [`CLIENT_BYTES`] in the table (88 B) plus `W ×`
//! [`ENTRY_BYTES`](crate::response_cache::ENTRY_BYTES) (24 B) of replay entries: 856 B for
//! the default `W = 32`. Clients live in a slab whose indices never move while the
//! client lives (a burst's packets refer to their client by index); static QPNs are
//! found by binary search in a dense sorted array, opened QPNs name their slot
//! directly (`OPENED_QPN_BASE + slot × n + partition`). Only the owning worker
//! touches them; admission changes arrive between bursts (`set`).

use crate::repl::completion::{RestoredQp, NOT_RESUMING};
use crate::response_cache::Entry;
use kvwire::psn::Receiver;
use kvwire::transport::{is_opened_qpn, OPENED_QPN_BASE};
use kvwire::MacAddr;
use std::net::Ipv4Addr;

/// The source address a QP is bound to: its frames must come from this MAC and IPv4
/// address (an opened QP: the OPEN's; a static one: its configured address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// Source MAC.
    pub mac: MacAddr,
    /// Source IPv4 address.
    pub ip: Ipv4Addr,
}

/// What the server opened a QP with (docs/PROTOCOL.md §6.1, §6.8); its OPENED
/// completion record carries it to the replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpenedQp {
    /// The R_Key its requests carry.
    pub rkey: u32,
    /// The connection secret of its RESUMEs and CLOSE.
    pub secret: u64,
    /// Its tenant (0: none).
    pub tenant: u32,
    /// Its request window `W`: a power of two, at most the server's credits.
    pub window: u16,
    /// The address that opened it: its frames must come from there (`None` only for
    /// a QP recorded by a master that did not bind QPs).
    pub origin: Option<Origin>,
}

/// One admitted client QP.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    /// The client's QPN (destination QP of its requests and of our responses).
    pub qpn: u32,
    /// The R_Key its requests must carry.
    pub rkey: u32,
    /// Nonce of the current incarnation (meaningful when `connected`).
    pub nonce: u64,
    /// The request PSNs: the next expected one `e`, and whether the current gap was
    /// NAKed (sequence error or RNR).
    pub rx: Receiver,
    /// PSN of the next response frame sent to this client.
    pub resp_psn: u32,
    /// The request PSN the ACCEPT of the current incarnation announced.
    pub start_psn: u32,
    /// The response PSN the ACCEPT of the current incarnation announced.
    pub start_resp_psn: u32,
    /// A CONNECT was accepted (requests are served).
    pub connected: bool,
    /// A connection resumed from completion records (`crate::repl::completion`): until the
    /// expected PSN reaches this one, each request is looked up there first.
    /// [`NOT_RESUMING`] otherwise.
    pub resume_until: u32,
    /// An opened QP's connection secret (0 for a static QP).
    pub secret: u64,
    /// An opened QP's tenant id (0: none).
    pub tenant: u32,
    /// The request window `W` its ACCEPTs grant (its slots, how far ahead or behind
    /// a PSN still belongs to it): the server's credits, or less for a tenant's QP.
    /// The replay ring stays the server's `W` long (entries at `psn mod W`).
    pub window: u16,
    /// When the client last sent a request or a connection payload, in the worker's
    /// coarse seconds (`ClientTable::reclaim_idle`).
    pub last_active: u32,
    /// The source its frames must come from (`None`: any; a static QP without a
    /// configured address).
    pub origin: Option<Origin>,
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
            rx: Receiver::new(0),
            resp_psn: 0,
            start_psn: 0,
            start_resp_psn: 0,
            connected: false,
            resume_until: NOT_RESUMING,
            secret: 0,
            tenant: 0,
            window: credits.max(1),
            last_active: 0,
            origin: None,
            replay: vec![Entry::EMPTY; usize::from(credits.max(1))].into_boxed_slice(),
        }
    }

    /// Whether this is a QP the server opened (not one the operator admitted).
    #[inline]
    pub fn is_opened(&self) -> bool {
        is_opened_qpn(self.qpn)
    }

    /// What an opened QP was opened with.
    pub fn opened_qp(&self) -> OpenedQp {
        OpenedQp {
            rkey: self.rkey,
            secret: self.secret,
            tenant: self.tenant,
            window: self.window,
            origin: self.origin,
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

/// A slab slot without a client.
const FREE_QPN: u32 = 0;
/// An opened slot without a client.
const NO_CLIENT: u16 = u16::MAX;
/// Most clients (static and opened) of one worker: indices are `u16`, one value is
/// [`NO_CLIENT`].
pub const MAX_CLIENTS: usize = NO_CLIENT as usize;

/// The clients of one worker.
#[derive(Debug, Default)]
pub(crate) struct ClientTable {
    /// The slab: a free entry has QPN [`FREE_QPN`] and is on `free`.
    clients: Vec<Client>,
    /// Free slab indices.
    free: Vec<u16>,
    /// The static clients' QPNs, sorted: the lookup searches this dense array (16 KiB
    /// for 4096 clients, cache-resident) instead of striding through the client
    /// entries, so thousands of QPs cost one miss per request, not one per step.
    static_qpns: Vec<u32>,
    /// Slab index of each static QPN (same order).
    static_idx: Vec<u16>,
    /// Slab index of each opened slot ([`NO_CLIENT`]: free).
    opened: Vec<u16>,
    /// Opened QPs live.
    opened_live: usize,
    /// Where the search for a free opened slot starts (after the last one given), so
    /// a closed QPN is not given out again at once.
    opened_cursor: usize,
    /// Where the idle sweep goes on.
    sweep_cursor: usize,
    /// This worker's partition and the number of partitions: opened QPNs are
    /// `OPENED_QPN_BASE + slot × n + me`.
    me: u32,
    n: u32,
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
    /// first R_Key), with `credits` replay entries per client, and room for
    /// `max_opened` opened QPs (partition 0 of 1 until [`ClientTable::set_partition`]).
    pub fn new(clients: &[(u32, u32)], credits: u16, max_opened: usize) -> ClientTable {
        let mut t = ClientTable {
            credits,
            n: 1,
            opened: vec![NO_CLIENT; max_opened.min(MAX_CLIENTS)],
            ..ClientTable::default()
        };
        t.set(clients);
        t
    }

    /// Opened QPNs name partition `me` of `n` (before any QP is opened).
    pub fn set_partition(&mut self, me: u32, n: u32) {
        debug_assert_eq!(self.opened_live, 0);
        self.me = me;
        self.n = n.max(1);
    }

    /// The opened slot QPN `qpn` names in this worker's partition.
    #[inline]
    fn opened_slot(&self, qpn: u32) -> Option<usize> {
        let off = qpn.checked_sub(OPENED_QPN_BASE)?;
        (off % self.n == self.me).then_some((off / self.n) as usize)
    }

    /// The QPN of opened slot `slot`.
    fn opened_qpn(&self, slot: usize) -> Option<u32> {
        let q = OPENED_QPN_BASE as u64 + slot as u64 * u64::from(self.n) + u64::from(self.me);
        u32::try_from(q).ok().filter(|&q| is_opened_qpn(q))
    }

    /// Index of the client with `qpn`.
    #[inline]
    pub fn find(&self, qpn: u32) -> Option<usize> {
        if is_opened_qpn(qpn) {
            let i = usize::from(*self.opened.get(self.opened_slot(qpn)?)?);
            return (self.clients.get(i)?.qpn == qpn).then_some(i);
        }
        let k = self.static_qpns.binary_search(&qpn).ok()?;
        Some(usize::from(self.static_idx[k]))
    }

    /// The clients, by index (free slots have QPN 0).
    #[inline]
    pub fn as_slice(&self) -> &[Client] {
        &self.clients
    }

    /// The clients, by index, mutable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Client] {
        &mut self.clients
    }

    /// Opened QPs live.
    pub fn opened_count(&self) -> usize {
        self.opened_live
    }

    /// Opened QPs this table can hold (`server.max_connections`).
    pub fn opened_capacity(&self) -> usize {
        self.opened.len()
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

    /// The restored state of client `i` (`None` unless kept).
    #[inline]
    pub fn restored(&self, i: usize) -> Option<&RestoredQp> {
        self.restored.get(i)
    }

    /// Forgets every client's restored state (a full sync replaces what the master's
    /// records said, as it replaces the data). Allocates nothing.
    pub fn forget_restored(&mut self) {
        for r in &mut self.restored {
            r.forget();
        }
    }

    /// A client and its restored state together.
    #[inline]
    pub fn with_restored(&mut self, i: usize) -> (&mut Client, Option<&RestoredQp>) {
        (&mut self.clients[i], self.restored.get(i))
    }

    /// A slab index for a new client `qpn` (unconnected, nothing restored); `None`
    /// when the slab is full. Allocates when the slab grows.
    fn alloc(&mut self, qpn: u32, rkey: u32) -> Option<usize> {
        let fresh = Client::new(qpn, rkey, self.credits);
        let i = match self.free.pop() {
            Some(i) => {
                let i = usize::from(i);
                let replay = std::mem::take(&mut self.clients[i].replay);
                self.clients[i] = Client { replay, ..fresh };
                self.clients[i].replay.fill(Entry::EMPTY);
                i
            }
            None if self.clients.len() < MAX_CLIENTS => {
                self.clients.push(fresh);
                if self.keep_restored {
                    self.restored.push(RestoredQp::new(self.credits));
                }
                self.clients.len() - 1
            }
            None => return None,
        };
        if let Some(r) = self.restored.get_mut(i) {
            *r = RestoredQp::new(self.credits);
        }
        Some(i)
    }

    /// Frees slab index `i` (its replay entries stay allocated for the next client).
    fn release(&mut self, i: usize) {
        let c = &mut self.clients[i];
        c.qpn = FREE_QPN;
        c.connected = false;
        c.secret = 0;
        c.tenant = 0;
        c.origin = None;
        c.window = self.credits.max(1);
        self.free.push(i as u16);
    }

    /// Opens QP `q`, active at `now`: its index and QPN, or `None` when every opened
    /// slot (or the slab) is taken.
    pub fn open(&mut self, q: OpenedQp, now: u32) -> Option<(usize, u32)> {
        let len = self.opened.len();
        let slot = (0..len)
            .map(|k| (self.opened_cursor + k) % len)
            .find(|&k| self.opened[k] == NO_CLIENT)?;
        let qpn = self.opened_qpn(slot)?;
        let i = self.install(slot, qpn, q, now)?;
        self.opened_cursor = (slot + 1) % len;
        Some((i, qpn))
    }

    /// Puts opened QP `qpn` (what it was opened with, from the master's completion
    /// records) into this table, unconnected; a client of this node in its slot
    /// (opened while it was not the master) is dropped for it. `None` if `qpn` is not
    /// an opened QPN of this partition, or the slab is full.
    pub fn install_opened(&mut self, qpn: u32, q: OpenedQp, now: u32) -> Option<usize> {
        let slot = self.opened_slot(qpn).filter(|&k| k < self.opened.len())?;
        if let Some(i) = self.find(qpn) {
            if self.clients[i].opened_qp() == self.fitted(q) {
                return Some(i);
            }
        }
        self.close_slot(slot);
        self.install(slot, qpn, q, now)
    }

    /// `q` with a window this table can serve: a power of two up to its credits (a
    /// record from a master with more credits is served with this node's).
    fn fitted(&self, mut q: OpenedQp) -> OpenedQp {
        if !q.window.is_power_of_two() || q.window > self.credits {
            q.window = self.credits.max(1);
        }
        q
    }

    fn install(&mut self, slot: usize, qpn: u32, q: OpenedQp, now: u32) -> Option<usize> {
        let q = self.fitted(q);
        let i = self.alloc(qpn, q.rkey)?;
        let c = &mut self.clients[i];
        c.secret = q.secret;
        c.tenant = q.tenant;
        c.window = q.window;
        c.origin = q.origin;
        c.last_active = now;
        self.opened[slot] = i as u16;
        self.opened_live += 1;
        Some(i)
    }

    /// Closes opened client `i`: its QPN is unknown from now on.
    pub fn close(&mut self, i: usize) {
        let qpn = self.clients[i].qpn;
        if let Some(slot) = self.opened_slot(qpn) {
            if self.opened.get(slot) == Some(&(i as u16)) {
                self.close_slot(slot);
            }
        }
    }

    fn close_slot(&mut self, slot: usize) {
        let i = std::mem::replace(&mut self.opened[slot], NO_CLIENT);
        if i != NO_CLIENT {
            self.release(usize::from(i));
            self.opened_live -= 1;
        }
    }

    /// Looks at up to `budget` opened slots (going round) and returns the index of
    /// the first client idle since before `now − idle`, to be closed by the caller.
    pub fn idle_opened(&mut self, now: u32, idle: u32, budget: usize) -> Option<usize> {
        let len = self.opened.len();
        if len == 0 || self.opened_live == 0 {
            return None;
        }
        for _ in 0..budget.min(len) {
            let k = self.sweep_cursor;
            self.sweep_cursor = (k + 1) % len;
            let i = self.opened[k];
            if i != NO_CLIENT && now.wrapping_sub(self.clients[usize::from(i)].last_active) > idle {
                return Some(usize::from(i));
            }
        }
        None
    }

    /// Replaces the admitted static clients with `clients` (QPN, R_Key; QPNs in the
    /// opened range are ignored). A client whose QPN stays keeps its connection (and
    /// takes the new R_Key); a removed one is forgotten; a new one starts unconnected.
    /// Opened QPs are untouched. Allocates: call it off the hot path.
    pub fn set(&mut self, clients: &[(u32, u32)]) {
        let mut want: Vec<(u32, u32)> = clients
            .iter()
            .copied()
            .filter(|&(q, _)| !is_opened_qpn(q))
            .collect();
        want.sort_by_key(|c| c.0); // stable: the first of a repeated QPN stays first
        want.dedup_by_key(|c| c.0);
        let old_qpns = std::mem::take(&mut self.static_qpns);
        let old_idx = std::mem::take(&mut self.static_idx);
        for (k, q) in old_qpns.iter().enumerate() {
            if want.binary_search_by_key(q, |c| c.0).is_err() {
                self.release(usize::from(old_idx[k]));
            }
        }
        for &(qpn, rkey) in &want {
            let i = match old_qpns.binary_search(&qpn) {
                Ok(k) => usize::from(old_idx[k]),
                Err(_) => match self.alloc(qpn, rkey) {
                    Some(i) => i,
                    None => continue,
                },
            };
            self.clients[i].rkey = rkey;
            self.static_qpns.push(qpn);
            self.static_idx.push(i as u16);
        }
    }

    /// Binds static QP `qpn` to `origin` (`None`: any source); `false` if there is no
    /// such static QP.
    pub fn bind_static(&mut self, qpn: u32, origin: Option<Origin>) -> bool {
        match self.find(qpn) {
            Some(i) if !is_opened_qpn(qpn) => {
                self.clients[i].origin = origin;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_keeps_staying_clients() {
        let mut t = ClientTable::new(&[(5, 50), (3, 30), (5, 51)], 8, 4);
        assert!(t.find(3).is_some());
        assert_eq!(
            t.as_slice()[t.find(5).unwrap()].rkey,
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
        assert_eq!(
            CLIENT_BYTES, 88,
            "72 B, and the bound source address (12 B with its tag)"
        );
    }

    /// An opened QP of R_Key `rkey` and secret `secret`, no tenant, window 4.
    fn oq(rkey: u32, secret: u64) -> OpenedQp {
        OpenedQp {
            rkey,
            secret,
            tenant: 0,
            window: 4,
            origin: None,
        }
    }

    #[test]
    fn opened_qps_get_their_own_qpns_and_never_move() {
        let mut t = ClientTable::new(&[(17, 1)], 8, 3);
        t.set_partition(1, 2);
        let (a, qa) = t.open(oq(10, 100), 0).unwrap();
        let (b, qb) = t.open(oq(11, 101), 0).unwrap();
        assert_eq!((qa, qb), (OPENED_QPN_BASE + 1, OPENED_QPN_BASE + 3));
        assert_eq!((t.find(qa), t.find(qb)), (Some(a), Some(b)));
        assert_eq!(t.find(OPENED_QPN_BASE), None, "another partition's QPN");
        assert_eq!(t.as_slice()[b].secret, 101);
        // Re-admitting static QPs moves no opened client.
        t.set(&[(19, 2), (17, 3), (OPENED_QPN_BASE + 5, 9)]);
        assert_eq!((t.find(qa), t.find(qb)), (Some(a), Some(b)));
        assert_eq!(
            t.find(OPENED_QPN_BASE + 5),
            None,
            "no static QP in the opened range"
        );
        let c = t.open(oq(12, 102), 0).unwrap();
        assert_eq!(t.open(oq(13, 103), 0), None, "3 opened slots");
        assert_eq!(t.opened_count(), 3);
        t.close(a);
        assert_eq!((t.find(qa), t.opened_count()), (None, 2));
        // The freed slot is given again (the cursor went round), with a new key.
        let (d, qd) = t.open(oq(14, 104), 0).unwrap();
        assert_eq!(qd, qa);
        assert_eq!(
            (t.as_slice()[d].rkey, t.as_slice()[d].connected),
            (14, false)
        );
        assert!(t.find(c.1).is_some());
    }

    #[test]
    fn installing_a_masters_qp_evicts_a_local_one_and_idle_ones_are_found() {
        let mut t = ClientTable::new(&[], 4, 4);
        let (local, q) = t.open(oq(1, 2), 5).unwrap();
        let i = t.install_opened(q, oq(7, 8), 5).unwrap();
        assert_eq!(t.find(q), Some(i));
        assert_eq!((t.as_slice()[i].rkey, t.as_slice()[i].secret), (7, 8));
        assert_eq!(t.opened_count(), 1);
        assert_eq!(
            t.install_opened(q, oq(7, 8), 6),
            Some(i),
            "the same QP again"
        );
        assert_eq!(t.install_opened(17, oq(7, 8), 6), None, "a static QPN");
        // A tenant's smaller window comes along; one larger than this node's credits
        // (or not a power of two) is served with its credits.
        let narrow = OpenedQp {
            window: 2,
            ..oq(7, 8)
        };
        assert_eq!(t.install_opened(q, narrow, 6), Some(i), "the slot again");
        assert_eq!(t.as_slice()[i].window, 2);
        for w in [16, 3, 0] {
            let i = t
                .install_opened(
                    q,
                    OpenedQp {
                        window: w,
                        ..oq(7, 8)
                    },
                    6,
                )
                .unwrap();
            assert_eq!(t.as_slice()[i].window, 4, "window {w}");
        }
        let _ = local;
        let (j, _) = t.open(oq(3, 4), 100).unwrap();
        assert_eq!(t.idle_opened(105, 10, 4), Some(i), "idle since 5");
        t.close(i);
        assert_eq!(t.idle_opened(105, 10, 4), None, "the other is fresh");
        assert_eq!(t.idle_opened(111, 10, 4), Some(j));
    }
}
