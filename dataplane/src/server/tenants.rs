//! Tenants on the server (docs/PROTOCOL.md §6.8, `kvwire::tenant` for the shared
//! rules): the OPEN credential check with its per-source throttle, the per-op guard
//! (ACL and namespace), and the per-tenant quotas (opened QPs, requests per second).
//!
//! A worker keeps its own copy of the tenant rules ([`Server::set_tenants`], between
//! bursts); changing or removing a tenant closes its clients' QPs at once, so a
//! revoked or rotated secret stops working on live connections too.

use super::Server;
use crate::stats::{Counter, WorkerStats};
use crate::tenant_stats::{TenantSlot, TenantStats, NO_SLOT};
use kvwire::tenant::{self, TXN};
use kvwire::transport::{open_fields, TenantCredential};
use kvwire::{DropReason, KvOp, MacAddr, Status};
use std::net::Ipv4Addr;
use std::time::{SystemTime, UNIX_EPOCH};

/// Failed OPENs one source may make per second before its OPENs are dropped unchecked
/// (`auth_throttled`): a secret cannot be guessed at line rate.
pub const FAILED_OPENS_PER_S: u16 = 16;
/// Slots of the per-source throttle (sources hash into them).
const THROTTLE_SLOTS: usize = 256;

/// One tenant as a worker applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantRule {
    /// Id (`1..2^24`).
    pub id: u32,
    /// Name, for operators.
    pub name: String,
    /// Secret (the HMAC key of its OPEN proofs).
    pub secret: Vec<u8>,
    /// Op categories allowed (`kvwire::tenant::{READ, WRITE, ATOMIC, TXN}`).
    pub acl: u8,
    /// Opened QPs per worker (0: no limit).
    pub max_connections: u32,
    /// Requests per second per worker (0: no limit).
    pub requests_per_s: u32,
    /// Requests in flight per opened QP: a power of two (0: the server's credits).
    pub max_credits: u16,
    /// Opened QPs per worker held for it while it has fewer (0: none): anonymous
    /// OPENs and other tenants beyond their own reserves leave them free.
    pub reserved_connections: u32,
}

/// The tenant state of one worker.
#[derive(Debug)]
pub(crate) struct Tenants {
    /// The rules, sorted by id.
    rules: Vec<TenantRule>,
    /// Per rule: opened QPs live, and the token bucket (tokens, last refill ms).
    live: Vec<u32>,
    /// Per rule: its ACL's opcode bit sets (`op_masks`).
    masks: Vec<(u32, u32)>,
    bucket: Vec<(u32, u64)>,
    /// Whether clients may OPEN without a tenant.
    pub anonymous: bool,
    /// Whether any tenant has a request-rate quota (else the per-request quota
    /// check and the per-burst clock read are skipped).
    any_rate: bool,
    /// Per source slot: (second, failures in it).
    throttle: Box<[(u32, u16); THROTTLE_SLOTS]>,
    /// The QPs the tenants' reserves hold now ([`Tenants::unmet_reserves`]).
    unmet: u64,
    /// Added to the system's wall clock ([`Server::skew_clock_ms`]).
    skew_ms: u64,
}

impl Default for Tenants {
    fn default() -> Self {
        Tenants {
            rules: Vec::new(),
            live: Vec::new(),
            masks: Vec::new(),
            bucket: Vec::new(),
            anonymous: true,
            any_rate: false,
            throttle: Box::new([(0, 0); THROTTLE_SLOTS]),
            unmet: 0,
            skew_ms: 0,
        }
    }
}

/// What a request's ops are checked against: its client's tenant (0: none) and ACL.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Guard {
    id: u32,
    acl: u8,
    /// The tenant's counters slot (`crate::tenant_stats`).
    pub slot: u8,
    /// The tenant's namespace prefix as a big-endian word (one compare per key).
    prefix: u32,
    /// Bit `opcode`: the ACL allows the op's category (`kvwire::tenant::category`),
    /// looked up once here instead of per op.
    allowed_ops: u32,
    /// Bit `opcode`: the op's result is redacted (`kvwire::tenant::redacts`).
    redacted_ops: u32,
}

/// The opcode bit sets of ACL `acl`: (allowed, redacted) — computed once per rule.
const fn op_masks(acl: u8) -> (u32, u32) {
    let (mut allowed, mut redacted) = (0u32, 0u32);
    let mut op = 0u8;
    while op < 32 {
        if acl & tenant::category(op) != 0 {
            allowed |= 1 << op;
        }
        if tenant::redacts(acl, op) {
            redacted |= 1 << op;
        }
        op += 1;
    }
    (allowed, redacted)
}

/// The bit sets of a client without a tenant (every category).
const ANONYMOUS_MASKS: (u32, u32) = op_masks(tenant::ALL);

impl Guard {
    fn new(id: u32, acl: u8, slot: u8, masks: (u32, u32)) -> Guard {
        Guard {
            id,
            acl,
            slot,
            prefix: u32::from_be_bytes(tenant::namespace(id)),
            allowed_ops: masks.0,
            redacted_ops: masks.1,
        }
    }

    /// Whether the client may run `op` (`kvwire::tenant::{category, key_allowed}`,
    /// with the categories as a bit set and the prefix compared as one word).
    #[inline]
    pub fn allows(&self, op: &KvOp<'_>) -> bool {
        // Opcodes are 5 bits (the op byte's bits 4-0).
        if self.allowed_ops >> (op.opcode() & 31) & 1 == 0 {
            return false;
        }
        let key = op.key();
        if self.id == 0 {
            return key.first() != Some(&tenant::NAMESPACE_BYTE);
        }
        match key.get(..tenant::NAMESPACE_LEN) {
            Some(p) if key.len() > tenant::NAMESPACE_LEN => {
                u32::from_be_bytes([p[0], p[1], p[2], p[3]]) == self.prefix
            }
            _ => false,
        }
    }

    /// Whether `op`'s result is to be redacted for this client (its ACL has no
    /// `read`; `kvwire::tenant::redacts`).
    #[inline]
    pub fn redacts(&self, op: &KvOp<'_>) -> bool {
        self.redacted_ops >> (op.opcode() & 31) & 1 != 0
    }

    /// Whether the client may run transactions.
    pub fn allows_txn(&self) -> bool {
        self.acl & TXN != 0
    }
}

/// Wall-clock milliseconds.
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The throttle slot of source `mac`/`ip`: both, so a sender spoofing a victim's IP
/// from its own MAC throttles only itself.
fn slot_of(mac: &MacAddr, ip: Ipv4Addr) -> usize {
    let mut m = [0u8; 8];
    m[..6].copy_from_slice(mac);
    let x = (u64::from_le_bytes(m) ^ u64::from(u32::from(ip)).rotate_left(29))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as usize % THROTTLE_SLOTS
}

impl Tenants {
    /// The server's wall clock in ms (the system's, plus the skew a simulation set).
    pub fn now_ms(&self) -> u64 {
        wall_ms() + self.skew_ms
    }

    /// Whether any tenant has a request-rate quota.
    #[inline]
    pub fn any_rate(&self) -> bool {
        self.any_rate
    }

    /// Tenant `id`'s secret.
    pub fn secret_of(&self, id: u32) -> Option<&[u8]> {
        self.find(id).map(|i| self.rules[i].secret.as_slice())
    }

    /// The index of tenant `id`.
    pub fn find(&self, id: u32) -> Option<usize> {
        self.rules.binary_search_by_key(&id, |r| r.id).ok()
    }

    /// The guard of an opened client of tenant `id` (0: none). A client without a
    /// tenant may run every op but on no key of the tenant range (`0xFE…`), whether
    /// or not tenants exist yet: nothing it writes can ever sit in a tenant's
    /// namespace.
    #[inline]
    pub fn guard(&self, id: u32) -> Option<Guard> {
        if id == 0 {
            return Some(Guard::new(0, tenant::ALL, NO_SLOT, ANONYMOUS_MASKS));
        }
        match self.find(id) {
            Some(i) => Some(Guard::new(
                id,
                self.rules[i].acl,
                TenantStats::slot_of(i),
                self.masks[i],
            )),
            None => Some(Guard::new(id, 0, NO_SLOT, (0, 0))),
        }
    }

    /// Whether source `mac`/`ip` has failed too many OPENs this second.
    fn throttled(&self, mac: &MacAddr, ip: Ipv4Addr, sec: u32) -> bool {
        let (s, n) = self.throttle[slot_of(mac, ip)];
        s == sec && n >= FAILED_OPENS_PER_S
    }

    /// Counts a failed OPEN of source `mac`/`ip`: a credential that did not hold, or
    /// a connection payload that did not decode (`bad_connect`). A refusal for a
    /// quota or a full worker is not a failure.
    pub fn note_failure(&mut self, mac: &MacAddr, ip: Ipv4Addr) {
        let sec = (self.now_ms() / 1000) as u32;
        let t = &mut self.throttle[slot_of(mac, ip)];
        if t.0 != sec {
            *t = (sec, 0);
        }
        t.1 = t.1.saturating_add(1);
    }

    /// Checks an OPEN's credential from `mac`/`ip`: the tenant id its proof holds for
    /// (0: none), or why not (a failure counted for the source's throttle). The
    /// tenant's quotas are [`Tenants::admit_connection`]'s.
    pub fn check_credential(
        &mut self,
        cred: Option<&TenantCredential>,
        partition: u16,
        nonce: u64,
        mac: &MacAddr,
        ip: Ipv4Addr,
        stats: &WorkerStats,
    ) -> Result<u32, DropReason> {
        let Some(c) = cred else {
            return if self.anonymous {
                Ok(0)
            } else {
                Err(DropReason::BadCredential)
            };
        };
        let now = self.now_ms();
        if self.throttled(mac, ip, (now / 1000) as u32) {
            return Err(DropReason::AuthThrottled);
        }
        let fields = open_fields(partition, nonce, c.id, c.time_ms);
        let i = self.find(c.id);
        let ok = i.is_some_and(|i| {
            tenant::fresh(c.time_ms, now)
                && tenant::verify_open(&self.rules[i].secret, &fields, mac, ip, &c.proof)
        });
        if !ok {
            self.note_failure(mac, ip);
            self.count_for(i, stats, |s| &s.bad_credentials);
            return Err(DropReason::BadCredential);
        }
        Ok(c.id)
    }

    /// Whether tenant `id` (0: an anonymous client) may take one more opened QP on a
    /// worker with `free` of `total` opened QPs free: under the tenant's
    /// `max_connections`, and leaving the QPs the other tenants' reserves hold (at
    /// most half of `total`). Counted as the tenant's OPEN when it may.
    pub fn admit_connection(
        &self,
        id: u32,
        free: usize,
        total: usize,
        stats: &WorkerStats,
    ) -> Result<(), DropReason> {
        let i = self.find(id).filter(|_| id != 0);
        let mut held = self.unmet;
        if let Some(i) = i {
            let r = &self.rules[i];
            if r.max_connections != 0 && self.live[i] >= r.max_connections {
                self.count_for(Some(i), stats, |s| &s.bad_credentials);
                return Err(DropReason::ConnectionQuota);
            }
            held -= u64::from(r.reserved_connections.saturating_sub(self.live[i]));
        }
        let held = held.min(total as u64 / 2);
        if free == 0 || ((free - 1) as u64) < held {
            return Err(if free == 0 {
                DropReason::NoFreeQp
            } else {
                DropReason::ConnectionQuota
            });
        }
        self.count_for(i, stats, |s| &s.opens);
        Ok(())
    }

    /// Bumps counter `f` of rule `i`'s tenant series.
    fn count_for(&self, i: Option<usize>, stats: &WorkerStats, f: fn(&TenantSlot) -> &Counter) {
        if let Some(s) = i
            .map(TenantStats::slot_of)
            .and_then(|s| stats.tenants.slot(s))
        {
            f(s).inc();
        }
    }

    /// The window `W` of a QP tenant `id` opens, of a server granting `credits`: the
    /// tenant's `max_credits` when it is smaller (both are powers of two), else
    /// `credits`.
    pub fn window(&self, id: u32, credits: u16) -> u16 {
        match self.find(id).map(|i| self.rules[i].max_credits) {
            Some(m) if m != 0 && m < credits => m,
            _ => credits,
        }
    }

    /// Publishes each tenant's opened QPs on this worker in its counters slot (the
    /// tenants beyond the first series summed in `other`).
    pub fn publish_connections(&self, stats: &WorkerStats) {
        let mut other = 0u64;
        for (i, &n) in self.live.iter().enumerate() {
            let slot = TenantStats::slot_of(i);
            if slot == crate::tenant_stats::OTHER {
                other += u64::from(n);
            } else if let Some(s) = stats.tenants.slot(slot) {
                s.connections.set(u64::from(n));
            }
        }
        if let Some(s) = stats.tenants.slot(crate::tenant_stats::OTHER) {
            s.connections.set(other);
        }
    }

    /// An opened QP of tenant `id` began (`+1`) or ended (`-1`).
    pub fn count(&mut self, id: u32, delta: i32) {
        if let Some(i) = self.find(id) {
            let reserve = self.rules[i].reserved_connections;
            let before = u64::from(reserve.saturating_sub(self.live[i]));
            self.live[i] = self.live[i].saturating_add_signed(delta);
            let after = u64::from(reserve.saturating_sub(self.live[i]));
            self.unmet = self.unmet - before + after;
            debug_assert_eq!(self.unmet, self.unmet_reserves());
        }
    }

    /// The QPs the tenants' reserves still hold: Σ (reserve − live) over the tenants
    /// below their reserve.
    fn unmet_reserves(&self) -> u64 {
        self.rules
            .iter()
            .zip(&self.live)
            .map(|(r, &l)| u64::from(r.reserved_connections.saturating_sub(l)))
            .sum()
    }

    /// Takes one request from tenant `id`'s bucket; `false` when it is over its rate.
    #[inline]
    pub fn take_request(&mut self, id: u32, now_ms: u64, stats: &WorkerStats) -> bool {
        if !self.any_rate {
            return true;
        }
        let Some(i) = self.find(id) else {
            return true;
        };
        let rate = self.rules[i].requests_per_s;
        if rate == 0 {
            return true;
        }
        let (tokens, last) = &mut self.bucket[i];
        // Refill: `rate` per second, up to one second's worth.
        let add = now_ms.saturating_sub(*last) * u64::from(rate) / 1000;
        if add > 0 {
            *tokens = (u64::from(*tokens) + add).min(u64::from(rate)) as u32;
            *last = now_ms;
        }
        if *tokens == 0 {
            if let Some(s) = stats.tenants.slot(TenantStats::slot_of(i)) {
                s.over_quota.inc();
            }
            return false;
        }
        *tokens -= 1;
        true
    }

    /// Replaces the rules; returns the ids whose rule changed or went (their clients
    /// are to be closed).
    pub fn set(&mut self, mut rules: Vec<TenantRule>, anonymous: bool) -> Vec<u32> {
        if rules == self.rules && anonymous == self.anonymous {
            return Vec::new();
        }
        rules.sort_by_key(|r| r.id);
        rules.dedup_by_key(|r| r.id);
        let gone: Vec<u32> = self
            .rules
            .iter()
            .filter(|old| !rules.iter().any(|r| r == *old))
            .map(|r| r.id)
            .collect();
        let live: Vec<u32> = rules
            .iter()
            .map(|r| match self.find(r.id) {
                Some(i) if !gone.contains(&r.id) => self.live[i],
                _ => 0,
            })
            .collect();
        let now = self.now_ms();
        self.bucket = rules.iter().map(|r| (r.requests_per_s, now)).collect();
        self.any_rate = rules.iter().any(|r| r.requests_per_s > 0);
        self.live = live;
        self.masks = rules.iter().map(|r| op_masks(r.acl)).collect();
        self.rules = rules;
        self.anonymous = anonymous;
        self.unmet = self.unmet_reserves();
        gone
    }

    /// The rules.
    pub fn rules(&self) -> &[TenantRule] {
        &self.rules
    }
}

impl Server {
    /// Applies the tenant rules `rules` (and whether clients may OPEN without a
    /// tenant). The opened QPs of a tenant whose rule changed (a rotated secret, a new
    /// ACL or quota) or went are closed at once (counted `reclaims`): their clients
    /// must OPEN again with the new credential. Allocates: call it between bursts.
    pub fn set_tenants(&mut self, rules: Vec<TenantRule>, anonymous: bool, stats: &WorkerStats) {
        let gone = self.tenants.set(rules, anonymous);
        self.assign_tenant_slots(stats);
        if gone.is_empty() {
            return;
        }
        for i in 0..self.clients.as_slice().len() {
            let c = &self.clients.as_slice()[i];
            if c.is_opened() && c.tenant != 0 && gone.contains(&c.tenant) {
                self.close_opened(i);
                stats.reclaims.inc();
            }
        }
    }

    /// Gives `stats`' tenant slots to the current rules, in id order (no allocation).
    pub(super) fn assign_tenant_slots(&self, stats: &WorkerStats) {
        stats
            .tenants
            .assign(self.tenants.rules().iter().map(|r| r.id));
    }

    /// Runs this server's wall clock (OPEN freshness, the repeat window, the
    /// throttle's seconds) `ms` further ahead of the system's: for simulations and
    /// tests that need minutes to pass at once.
    pub fn skew_clock_ms(&mut self, ms: u64) {
        self.tenants.skew_ms += ms;
    }

    /// The tenant rules this worker applies.
    pub fn tenant_rules(&self) -> &[TenantRule] {
        self.tenants.rules()
    }

    /// The guard of client `ci`'s ops (`None`: nothing to check: a static QP, the
    /// operator's).
    #[inline]
    pub(super) fn guard(&self, ci: usize) -> Option<Guard> {
        let c = &self.clients.as_slice()[ci];
        if !c.is_opened() {
            return None;
        }
        self.tenants.guard(c.tenant)
    }

    /// The status of `op` for a client with `guard`: `Denied` (counted) or `None`.
    #[inline]
    pub(super) fn denied(
        guard: Option<Guard>,
        op: &KvOp<'_>,
        stats: &WorkerStats,
    ) -> Option<Status> {
        match guard {
            Some(g) if !g.allows(op) => {
                stats.denied.inc();
                if let Some(s) = stats.tenants.slot(g.slot) {
                    s.denied.inc();
                }
                Some(Status::Denied)
            }
            _ => None,
        }
    }
}
