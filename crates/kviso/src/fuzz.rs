//! The noninterference run: seeded random streams of every op kind from several
//! tenants and clients without a tenant — batches, transactions that commit, abort
//! or are refused, vector ops, OPEN/CLOSE/RESUME, hijack attempts on each other's
//! QPs, replayed OPENs, and tenants rotated, removed (purged) and added again
//! mid-stream — each answer checked against its client's own namespace model
//! ([`crate::model`]). Another client's actions must never change what a client sees.

use crate::actor::{batch_payload, request_frame, tx_payload, Actor, Identity, Qp};
use crate::figures::{carries_foreign, Figures};
use crate::model::{denied_transaction, Expected, Store};
use crate::ops::{self, Drawn};
use kvops::FunctionRegistry;
use kvtx::TxExecutor;
use kvwire::payload::TxReader;
use kvwire::tenant::{self, PROOF_WINDOW_MS};
use kvwire::transport::{parse_server_frame, NakCode, ServerFrame, Syndrome};
use kvwire::{KvOp, MacAddr, OwnedKvOp, ResponseReader, Status};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::Ipv4Addr;

/// The server under test, in process or live.
pub trait Driver {
    /// The server's MAC and IPv4 address.
    fn server(&self) -> (MacAddr, Ipv4Addr);
    /// Sends `frames` in order (as one burst where it can) and returns the frames the
    /// server answered with — waiting, for a live server, until `expect` came or its
    /// timeout passed.
    fn exchange(&mut self, frames: &[Vec<u8>], expect: usize) -> Vec<Vec<u8>>;
    /// Adds tenant `id` with ACL `acl`; its secret.
    fn add_tenant(&mut self, id: u32, acl: u8) -> Result<Vec<u8>, String>;
    /// Gives tenant `id` a new secret (its QPs close); the secret.
    fn rotate_tenant(&mut self, id: u32) -> Result<Vec<u8>, String>;
    /// Removes tenant `id` (its QPs close) and purges its namespace; once the purge
    /// finished, the keys it deleted.
    fn remove_tenant(&mut self, id: u32) -> Result<u64, String>;
    /// Moves the server's clock `ms` ahead; `false` when it cannot (a live server).
    fn skew_clock(&mut self, ms: u64) -> bool;
    /// The server's wall clock, ms (what OPENs are timed with).
    fn now_ms(&self) -> u64;
}

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The seed of every draw.
    pub seed: u64,
    /// Tenants (ids 1..): ACLs all, read only, write+atomic+txn (no read), read+write
    /// (no txn), then all again.
    pub tenants: u32,
    /// Clients without a tenant.
    pub anonymous: u32,
    /// One admin change (rotate, remove and purge, add again) in about this many
    /// steps (0: none).
    pub admin_every: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 1,
            tenants: 4,
            anonymous: 2,
            admin_every: 4000,
        }
    }
}

/// The ACL of tenant number `i` (0-based).
fn acl_of(i: u32) -> u8 {
    match i % 5 {
        1 => tenant::READ,
        2 => tenant::WRITE | tenant::ATOMIC | tenant::TXN,
        3 => tenant::READ | tenant::WRITE,
        _ => tenant::ALL,
    }
}

/// A refused write: its key, and the value it would have left (`None`: deleted).
type DeniedWrite = (Vec<u8>, Option<Vec<u8>>);

/// Values and denied writes remembered per namespace, to classify wrong answers.
const HISTORY: usize = 64;

/// A request sent and what it must be answered with.
struct Pending {
    actor: usize,
    qpn: u32,
    batch: u32,
    expected: Vec<Expected>,
    /// Namespaces whose keys its ops read (for `denied_with_trace`).
    reads: Vec<(u32, Vec<u8>)>,
}

/// The fuzzer (module docs).
pub struct Fuzzer<D: Driver> {
    driver: D,
    rng: SmallRng,
    actors: Vec<Actor>,
    /// Actor is live (a removed tenant's clients are not, until it is added again).
    live: Vec<bool>,
    stores: HashMap<u32, Store>,
    /// Per namespace: recent values (for leak classification).
    history: HashMap<u32, VecDeque<Vec<u8>>>,
    /// Per namespace: (key, value a refused write would have left; None: deleted).
    denied: HashMap<u32, VecDeque<DeniedWrite>>,
    exec: TxExecutor,
    registry: FunctionRegistry,
    next_batch: u32,
    next_nonce: u64,
    /// Victim QPNs a forged CLOSE or RESUME was sent to.
    attacked: HashSet<u32>,
    /// Where forged OPENs come from (no client's address: its throttle is its own).
    attacker: (MacAddr, Ipv4Addr),
    cfg: Config,
    steps: u64,
    /// The step of each actor's last OPEN.
    opened_at: Vec<u64>,
    /// The figures so far.
    pub figures: Figures,
}

impl<D: Driver> Fuzzer<D> {
    /// A fuzzer over `driver`: adds its tenants to the server.
    pub fn new(mut driver: D, cfg: Config) -> Result<Fuzzer<D>, String> {
        let mut actors = Vec::new();
        for i in 0..cfg.tenants {
            let (id, acl) = (i + 1, acl_of(i));
            let secret = driver.add_tenant(id, acl)?;
            let who = Identity::Tenant { id, secret, acl };
            actors.push(Actor::new(
                who,
                [2, 0, 0, 0, 1, i as u8],
                Ipv4Addr::new(10, 1, 0, 10 + i as u8),
            ));
        }
        for i in 0..cfg.anonymous {
            actors.push(Actor::new(
                Identity::Anonymous,
                [2, 0, 0, 0, 2, i as u8],
                Ipv4Addr::new(10, 2, 0, 10 + i as u8),
            ));
        }
        Ok(Fuzzer {
            live: vec![true; actors.len()],
            opened_at: vec![0; actors.len()],
            actors,
            driver,
            rng: SmallRng::seed_from_u64(cfg.seed),
            stores: HashMap::new(),
            history: HashMap::new(),
            denied: HashMap::new(),
            exec: TxExecutor::new(),
            registry: FunctionRegistry::new(),
            next_batch: 1,
            next_nonce: cfg.seed << 32,
            attacked: HashSet::new(),
            attacker: ([2, 0, 0, 0, 9, 9], Ipv4Addr::new(10, 9, 9, 9)),
            cfg,
            steps: 0,
            figures: Figures::default(),
        })
    }

    /// The driver (for its own figures).
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// Runs until `ops` ops were answered (or the failures exceed `stop_after`).
    pub fn run(&mut self, ops: u64, stop_after: u64) -> &Figures {
        while self.figures.ops < ops && self.figures.failures() <= stop_after {
            self.step();
        }
        &self.figures
    }

    /// One step: mostly requests, sometimes an attack, a connection change or an
    /// admin change.
    pub fn step(&mut self) {
        self.steps += 1;
        if self.cfg.admin_every > 0 && self.rng.gen_range(0..self.cfg.admin_every) == 0 {
            return self.admin();
        }
        match self.rng.gen_range(0..1000) {
            0..=799 => self.requests(),
            800..=869 => self.hijack(),
            870..=899 => self.replay(),
            900..=929 => self.close_and_reopen(),
            930..=959 => self.resume(),
            _ => {
                let a = self.rng.gen_range(0..self.actors.len());
                if self.live[a] && self.actors[a].qps.len() < 3 {
                    self.open(a);
                }
            }
        }
    }

    // ---- connections -------------------------------------------------------------

    /// Opens a QP for actor `a`; whether the server answered with one.
    fn open(&mut self, a: usize) -> bool {
        self.next_nonce += 1;
        let nonce = self.next_nonce;
        let frame = self.actors[a].open_frame(self.driver.server(), nonce, self.driver.now_ms());
        let out = self.driver.exchange(std::slice::from_ref(&frame), 1);
        self.actors[a].last_open = Some((nonce, frame));
        self.opened_at[a] = self.steps;
        for f in &out {
            if let Ok(ServerFrame::Accept(acc)) = parse_server_frame(f) {
                if acc.accept.nonce == nonce
                    && self.actors[a].take_accept(nonce, &acc.accept).is_some()
                {
                    self.figures.opens += 1;
                    return true;
                }
            }
        }
        self.figures.mismatches += 1;
        false
    }

    /// A live QP of actor `a` (one is opened if it has none).
    fn qp_of(&mut self, a: usize) -> Option<usize> {
        if self.actors[a].qps.is_empty() && !self.open(a) {
            return None;
        }
        Some(self.rng.gen_range(0..self.actors[a].qps.len()))
    }

    fn close_and_reopen(&mut self) {
        let a = self.rng.gen_range(0..self.actors.len());
        if !self.live[a] || self.actors[a].qps.is_empty() {
            return;
        }
        let k = self.rng.gen_range(0..self.actors[a].qps.len());
        let q = self.actors[a].qps.remove(k);
        let frame = self.actors[a].close_frame(self.driver.server(), &q);
        if !self.driver.exchange(&[frame], 0).is_empty() {
            self.figures.mismatches += 1; // a CLOSE is never answered
        }
        self.figures.closes += 1;
        // The closed QP serves nothing any more.
        self.expect_refused(a, q, false);
        self.open(a);
    }

    fn resume(&mut self) {
        let a = self.rng.gen_range(0..self.actors.len());
        if !self.live[a] || self.actors[a].qps.is_empty() {
            return;
        }
        let k = self.rng.gen_range(0..self.actors[a].qps.len());
        let q = self.actors[a].qps[k];
        let frame = self.actors[a].resume_frame(self.driver.server(), &q);
        let out = self.driver.exchange(&[frame], 1);
        let ok = out.iter().any(|f| {
            matches!(parse_server_frame(f), Ok(ServerFrame::Accept(acc))
                if acc.dest_qp == q.qpn && acc.accept.resumed && acc.accept.request_psn == q.psn(q.sent))
        });
        if ok {
            self.figures.resumes += 1;
        } else {
            self.figures.mismatches += 1;
        }
    }

    /// Sends one request on `q` (no longer actor `a`'s to use) and expects it refused:
    /// a NAK or nothing, never results. `revoked`: counted as a revoked QP's.
    fn expect_refused(&mut self, a: usize, q: Qp, revoked: bool) {
        let key = self.actors[a].key(0);
        let Some(payload) = batch_payload(self.batch_id(), &[KvOp::Get { key: &key }]) else {
            return;
        };
        let params = self.actors[a].params(self.driver.server());
        let frame = request_frame(
            &params,
            q.qpn,
            q.rkey,
            q.psn(q.sent),
            q.va(q.sent),
            &payload,
        );
        let served = self.served_any(&[frame], q.qpn);
        if revoked {
            self.figures.revoked_attempts += 1;
            self.figures.revoked_served += u64::from(served);
        } else if served {
            self.figures.mismatches += 1;
        }
    }

    /// Sends `frames`; whether a response with results to QPN `qpn` came back.
    fn served_any(&mut self, frames: &[Vec<u8>], qpn: u32) -> bool {
        let out = self.driver.exchange(frames, 1);
        out.iter().any(
            |f| matches!(parse_server_frame(f), Ok(ServerFrame::Response(r)) if r.dest_qp == qpn),
        )
    }

    fn batch_id(&mut self) -> u32 {
        self.next_batch = self.next_batch.wrapping_add(1).max(1);
        self.next_batch
    }

    // ---- requests ----------------------------------------------------------------

    /// 1 to 3 clients each send a batch or a transaction, in one burst.
    fn requests(&mut self) {
        let k = self.rng.gen_range(1..=3);
        let mut frames = Vec::new();
        let mut pending = Vec::new();
        let mut used = Vec::new();
        for _ in 0..k {
            let a = self.rng.gen_range(0..self.actors.len());
            if !self.live[a] || used.contains(&a) {
                continue;
            }
            used.push(a);
            let Some(qi) = self.qp_of(a) else { continue };
            if let Some((frame, p)) = self.request(a, qi) {
                frames.push(frame);
                pending.push(p);
            }
        }
        if frames.is_empty() {
            return;
        }
        let out = self.driver.exchange(&frames, frames.len());
        for p in pending {
            self.check(p, &out);
        }
    }

    /// Builds actor `a`'s next request on its QP `qi` and predicts its answer.
    fn request(&mut self, a: usize, qi: usize) -> Option<(Vec<u8>, Pending)> {
        let id = self.batch_id();
        let tx = self.rng.gen_range(0..4) == 0;
        let n = self.rng.gen_range(1..=6);
        let drawn: Vec<Drawn> = (0..n).map(|_| self.draw_op(a)).collect();
        let kv: Vec<KvOp<'_>> = drawn.iter().map(|d| d.op.as_kv()).collect();
        let (payload, expected) = if tx {
            let stores = &self.stores;
            let conds = ops::conditions(&mut self.rng, &drawn, |k| {
                stores.get(&owner(k))?.get(k).map(<[u8]>::to_vec)
            });
            let cv: Vec<kvwire::payload::Condition<'_>> =
                conds.iter().map(|c| c.as_condition()).collect();
            let payload = tx_payload(id, &cv, &kv)?;
            let expected = self.predict_tx(a, &payload, &drawn);
            (payload, expected)
        } else {
            let payload = batch_payload(id, &kv)?;
            let expected = drawn.iter().map(|d| self.predict_op(a, &d.op)).collect();
            (payload, expected)
        };
        let reads = drawn
            .iter()
            .map(|d| (owner(d.op.key()), d.op.key().to_vec()))
            .collect();
        let actor = &mut self.actors[a];
        let q = &mut actor.qps[qi];
        let n = q.sent;
        q.sent += 1;
        let q = *q;
        let params = actor.params(self.driver.server());
        let frame = request_frame(&params, q.qpn, q.rkey, q.psn(n), q.va(n), &payload);
        Some((
            frame,
            Pending {
                actor: a,
                qpn: q.qpn,
                batch: id,
                expected,
                reads,
            },
        ))
    }

    /// The value the model holds under `key` (any namespace).
    fn peek(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.stores.get(&owner(key))?.get(key).map(<[u8]>::to_vec)
    }

    /// Draws an op for actor `a`: mostly on its own keys, sometimes on another
    /// namespace's (to be refused).
    fn draw_op(&mut self, a: usize) -> Drawn {
        let key = if self.rng.gen_range(0..8) == 0 {
            self.foreign_key(a)
        } else {
            self.actors[a].key(self.rng.gen_range(0..12))
        };
        let current = self.peek(&key);
        ops::draw(&mut self.rng, key, current.as_deref())
    }

    /// A key outside actor `a`'s namespace: another client's, a bare prefix, a key
    /// in the tenant range of no tenant.
    fn foreign_key(&mut self, a: usize) -> Vec<u8> {
        match self.rng.gen_range(0..4) {
            0 => tenant::namespace(self.actors[a].who.tenant().max(1)).to_vec(),
            1 => tenant::prefixed(0x00ab_cdef, b"nobody"),
            _ => {
                let b = self.rng.gen_range(0..self.actors.len());
                self.actors[b].key(self.rng.gen_range(0..12))
            }
        }
    }

    /// Predicts one op of actor `a`, applying it to the model.
    fn predict_op(&mut self, a: usize, op: &OwnedKvOp) -> Expected {
        let who = &self.actors[a].who;
        let kv = op.as_kv();
        if !allowed(who, &kv) {
            self.figures.denied_ops += 1;
            self.note_denied(&kv);
            return (Status::Denied, Vec::new());
        }
        let redact = tenant::redacts(who.acl(), kv.opcode());
        if redact {
            self.figures.redacted_ops += 1;
        }
        let ns = owner(kv.key());
        let store = self.stores.entry(ns).or_default();
        let out = store.apply(&kv, &self.registry, redact);
        if let Some(v) = store.get(kv.key()) {
            remember(&mut self.history, ns, v.to_vec());
        }
        out
    }

    /// Predicts transaction `payload` of actor `a`.
    fn predict_tx(&mut self, a: usize, payload: &[u8], drawn: &[Drawn]) -> Vec<Expected> {
        let Ok(tx) = TxReader::new(payload) else {
            return Vec::new();
        };
        let who = self.actors[a].who.clone();
        if who.acl() & tenant::TXN == 0 {
            self.figures.tx_denied += 1;
            return denied_transaction(255, drawn.len());
        }
        if let Some(i) = drawn.iter().position(|d| !allowed(&who, &d.op.as_kv())) {
            self.figures.tx_denied += 1;
            for d in drawn {
                self.note_denied(&d.op.as_kv());
            }
            return denied_transaction(i as u8, drawn.len());
        }
        let ns = owner(drawn[0].op.key());
        let acl = who.acl();
        let store = self.stores.entry(ns).or_default();
        let out = store.transact(&tx, &mut self.exec, &self.registry, |op| {
            tenant::redacts(acl, op.opcode())
        });
        match out.first() {
            Some((Status::Ok, _)) => self.figures.tx_committed += 1,
            _ => self.figures.tx_aborted += 1,
        }
        let values: Vec<Vec<u8>> = drawn
            .iter()
            .filter_map(|d| store.get(d.op.key()).map(<[u8]>::to_vec))
            .collect();
        for v in values {
            remember(&mut self.history, ns, v);
        }
        out
    }

    /// Remembers what refused write `op` would have left in its key's namespace.
    fn note_denied(&mut self, op: &KvOp<'_>) {
        let left = match op {
            KvOp::Put { value, .. } => Some(Some(value.to_vec())),
            KvOp::Delete { .. } | KvOp::CompareDelete { .. } => Some(None),
            _ => None,
        };
        if let Some(left) = left {
            let d = self.denied.entry(owner(op.key())).or_default();
            if d.len() == HISTORY {
                d.pop_front();
            }
            d.push_back((op.key().to_vec(), left));
        }
    }

    /// Checks request `p`'s answer among `out`.
    fn check(&mut self, p: Pending, out: &[Vec<u8>]) {
        let mut got: Option<Vec<Expected>> = None;
        let mut nak = false;
        for f in out {
            match parse_server_frame(f) {
                Ok(ServerFrame::Response(r)) if r.dest_qp == p.qpn => {
                    let Ok(rd) = ResponseReader::new(r.payload) else {
                        continue;
                    };
                    if rd.batch_id() != p.batch {
                        continue;
                    }
                    let v = got.get_or_insert_with(Vec::new);
                    v.extend(
                        rd.filter_map(Result::ok)
                            .map(|x| (x.status, x.value.to_vec())),
                    );
                }
                Ok(ServerFrame::Ack(a)) if a.dest_qp == p.qpn => {
                    nak |= a.syndrome == Syndrome::Nak(NakCode::InvalidRequest);
                }
                _ => {}
            }
        }
        let Some(got) = got else {
            // Its QP refused: a forged CLOSE took it, or a plain failure.
            if nak && self.attacked.contains(&p.qpn) {
                self.figures.hijacks_succeeded += 1;
            } else {
                self.figures.mismatches += 1;
            }
            self.forget_qp(p.actor, p.qpn);
            return;
        };
        self.figures.requests += 1;
        self.figures.ops += p.expected.len() as u64;
        if got != p.expected {
            self.classify(&p, &got);
        }
    }

    /// A wrong answer: a leak, a denied trace, or a plain mismatch.
    fn classify(&mut self, p: &Pending, got: &[Expected]) {
        let own = self.actors[p.actor].who.tenant();
        let foreign: Vec<Vec<u8>> = self
            .stores
            .iter()
            .filter(|(&ns, _)| ns != own)
            .flat_map(|(_, s)| s.values().map(<[u8]>::to_vec))
            .chain(
                self.history
                    .iter()
                    .filter(|(&ns, _)| ns != own)
                    .flat_map(|(_, h)| h.iter().cloned()),
            )
            .collect();
        if got
            .iter()
            .any(|(_, v)| carries_foreign(v, foreign.iter().map(Vec::as_slice)))
        {
            self.figures.leaks += 1;
            return;
        }
        let traced = p
            .reads
            .iter()
            .zip(got.iter().skip(usize::from(got.len() > p.reads.len())))
            .any(|((ns, key), (st, v))| {
                self.denied.get(ns).is_some_and(|d| {
                    d.iter().any(|(k, left)| {
                        k == key
                            && match left {
                                Some(val) => *st == Status::Ok && v == val,
                                None => *st == Status::NotFound,
                            }
                    })
                })
            });
        if traced {
            self.figures.denied_with_trace += 1;
        } else {
            self.figures.mismatches += 1;
        }
    }

    fn forget_qp(&mut self, a: usize, qpn: u32) {
        self.actors[a].qps.retain(|q| q.qpn != qpn);
    }

    // ---- attacks -----------------------------------------------------------------

    /// Another client's QP, attacked by actor `attacker`: a guessed R_Key, its real
    /// R_Key from the attacker's source, a CLOSE or RESUME without the secret's
    /// proof. The victim's QP must stay its own (later requests on it are checked).
    fn hijack(&mut self) {
        let (x, v) = (
            self.rng.gen_range(0..self.actors.len()),
            self.rng.gen_range(0..self.actors.len()),
        );
        if x == v || !self.live[v] || self.actors[v].qps.is_empty() {
            return;
        }
        let q = self.actors[v].qps[self.rng.gen_range(0..self.actors[v].qps.len())];
        let server = self.driver.server();
        let key = self.actors[v].key(self.rng.gen_range(0..12));
        let id = self.batch_id();
        let Some(payload) = batch_payload(
            id,
            &[KvOp::Put {
                key: &key,
                value: b"HIJACKED",
            }],
        ) else {
            return;
        };
        self.figures.hijack_attempts += 1;
        match self.rng.gen_range(0..5) {
            4 => {
                // An OPEN as the victim's tenant, proved with a guessed secret, from
                // the attacker's address.
                self.figures.hijack_forged_open += 1;
                let guess: Vec<u8> = (0..24).map(|_| self.rng.gen()).collect();
                let forged = Actor::new(
                    Identity::Tenant {
                        id: self.actors[v].who.tenant().max(1),
                        secret: guess,
                        acl: tenant::ALL,
                    },
                    self.attacker.0,
                    self.attacker.1,
                );
                self.next_nonce += 1;
                let frame = forged.open_frame(server, self.next_nonce, self.driver.now_ms());
                let out = self.driver.exchange(&[frame], 0);
                if out
                    .iter()
                    .any(|f| matches!(parse_server_frame(f), Ok(ServerFrame::Accept(_))))
                {
                    self.figures.hijacks_succeeded += 1;
                }
            }
            0 | 1 => {
                // A guessed R_Key, or the victim's (an observer's) from another source.
                let params = self.actors[x].params(server);
                let rkey = if self.rng.gen() {
                    self.figures.hijack_guessed_rkey += 1;
                    self.rng.gen::<u32>() | 1
                } else {
                    self.figures.hijack_wrong_source += 1;
                    q.rkey
                };
                let rkey = if rkey == q.rkey && params.src_mac == self.actors[v].mac {
                    rkey ^ 1
                } else {
                    rkey
                };
                let frame =
                    request_frame(&params, q.qpn, rkey, q.psn(q.sent), q.va(q.sent), &payload);
                if self.served_any(&[frame], q.qpn) {
                    self.figures.hijacks_succeeded += 1;
                }
            }
            _ => {
                // From the victim's own address (spoofed), with its R_Key and nonce,
                // and a guessed proof.
                let c = kvwire::transport::Connect {
                    rkey: q.rkey,
                    nonce: q.nonce,
                };
                let guess = self.rng.gen::<u64>();
                let join = if self.rng.gen() {
                    self.figures.hijack_forged_close += 1;
                    kvwire::transport::Join::Close { proof: guess }
                } else {
                    self.figures.hijack_forged_resume += 1;
                    kvwire::transport::Join::Resume {
                        next_psn: q.psn(q.sent),
                        proof: Some(guess),
                    }
                };
                let frame =
                    crate::actor::join_frame(&self.actors[v].params(server), q.qpn, &c, &join);
                self.attacked.insert(q.qpn);
                let out = self.driver.exchange(&[frame], 0);
                if out
                    .iter()
                    .any(|f| matches!(parse_server_frame(f), Ok(ServerFrame::Accept(_))))
                {
                    self.figures.hijacks_succeeded += 1;
                }
            }
        }
    }

    /// An OPEN replayed: by its own client within the window (a lost ACCEPT: the same
    /// QP), or by an attacker after the window (never the live QP).
    fn replay(&mut self) {
        let v = self.rng.gen_range(0..self.actors.len());
        let Some((nonce, frame)) = self.actors[v].last_open.clone() else {
            return;
        };
        // A repeat of its own stays within the window only while the OPEN is recent.
        if self.steps.saturating_sub(self.opened_at[v]) > 1_000 {
            self.actors[v].last_open = None;
            return;
        }
        let live: Vec<u32> = self.actors[v].qps.iter().map(|q| q.qpn).collect();
        let stale = self.rng.gen() && self.driver.skew_clock(PROOF_WINDOW_MS + 1_000);
        let out = self.driver.exchange(&[frame], 1);
        let accepted = out.iter().find_map(|f| match parse_server_frame(f) {
            Ok(ServerFrame::Accept(a)) if a.accept.nonce == nonce => a.accept.opened.map(|o| o.qpn),
            _ => None,
        });
        if stale {
            self.figures.replay_attempts += 1;
            if accepted.is_some_and(|q| live.contains(&q)) {
                self.figures.replayed_opens_accepted += 1;
            }
            // Every OPEN sent so far is past its window now: none is repeated as a
            // lost ACCEPT's any more.
            for a in &mut self.actors {
                a.last_open = None;
            }
        } else if self.live[v] && live.contains(&accepted.unwrap_or(0)) {
            self.figures.open_repeats += 1;
        }
    }

    // ---- admin -------------------------------------------------------------------

    /// Rotates a tenant's secret, or removes it (its namespace purged), or adds a
    /// removed one again.
    fn admin(&mut self) {
        let tenants: Vec<usize> = (0..self.actors.len())
            .filter(|&a| self.actors[a].who.tenant() != 0)
            .collect();
        if tenants.is_empty() {
            return;
        }
        let a = tenants[self.rng.gen_range(0..tenants.len())];
        let (id, acl) = (self.actors[a].who.tenant(), self.actors[a].who.acl());
        let old: Vec<Qp> = std::mem::take(&mut self.actors[a].qps);
        if !self.live[a] {
            // Added again: a new secret, and its namespace starts empty.
            match self.driver.add_tenant(id, acl) {
                Ok(secret) => {
                    self.set_secret(a, secret);
                    self.live[a] = true;
                    self.figures.readds += 1;
                }
                Err(_) => self.figures.mismatches += 1,
            }
            return;
        }
        if self.rng.gen() {
            match self.driver.rotate_tenant(id) {
                Ok(secret) => {
                    self.set_secret(a, secret);
                    self.figures.rotations += 1;
                }
                Err(_) => self.figures.mismatches += 1,
            }
        } else {
            self.live[a] = false;
            self.figures.removals += 1;
            let keys = self.stores.get(&id).map_or(0, |s| s.values().count()) as u64;
            match self.driver.remove_tenant(id) {
                Ok(n) => {
                    self.figures.purged_keys += n;
                    if n != keys {
                        self.figures.purge_miscounts += 1;
                    }
                }
                Err(_) => self.figures.mismatches += 1,
            }
            if let Some(s) = self.stores.get_mut(&id) {
                s.clear();
            }
        }
        // Its old QPs are closed: nothing on them is served.
        for q in old {
            self.expect_refused(a, q, true);
        }
    }

    fn set_secret(&mut self, a: usize, s: Vec<u8>) {
        if let Identity::Tenant { secret, .. } = &mut self.actors[a].who {
            *secret = s;
        }
    }
}

/// The namespace `key` belongs to: a tenant id, or 0 (clients without a tenant).
pub fn owner(key: &[u8]) -> u32 {
    match key {
        [tenant::NAMESPACE_BYTE, a, b, c, _, ..] => u32::from_be_bytes([0, *a, *b, *c]),
        [tenant::NAMESPACE_BYTE, ..] => u32::MAX,
        _ => 0,
    }
}

/// Whether `who` may run `op` (docs/PROTOCOL.md §6.8): its ACL has the op's category
/// and the key is in its namespace.
fn allowed(who: &Identity, op: &KvOp<'_>) -> bool {
    who.acl() & tenant::category(op.opcode()) != 0 && tenant::key_allowed(who.tenant(), op.key())
}

fn remember(h: &mut HashMap<u32, VecDeque<Vec<u8>>>, ns: u32, v: Vec<u8>) {
    let d = h.entry(ns).or_default();
    if d.len() == HISTORY {
        d.pop_front();
    }
    d.push_back(v);
}
