//! The control thread: one current-thread tokio runtime on its own `std::thread`, talking
//! to etcd; the only writer of the [`ClusterView`].
//!
//! A *session* is one etcd connection with this node's lease kept alive, a snapshot of the
//! cluster prefix and a watch from the snapshot's revision on. Any etcd error ends the
//! session; the next one reconnects (with back-off), reuses the lease when it is still
//! alive and grants a new one otherwise. The write fence never depends on this thread
//! running: it is a deadline in the view that passes by itself.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, LeaseKeepAliveResponse,
    LeaseKeeper, PutOptions, Txn, TxnOp, WatchOptions, WatchResponse,
};

mod handover;

use handover::OutgoingHandover;

use crate::election::{self, Decision, ElectionInput, WaitReason};
use crate::records::{
    self, decode, decode_epoch, encode, ForceRecord, HandoverRecord, LeaderRecord, MemberRecord,
};
use crate::{
    mono_now_ns, ClusterConfig, ClusterError, ClusterEvent, ClusterView, FenceReason, Keys,
    MasterInfo, Role, TimedEvent,
};

/// Main-loop tick: the longest the loop sleeps without an etcd message.
const TICK_MS: u64 = 20;
/// Least time between two campaign transactions of one node.
const CAMPAIGN_BACKOFF_MS: u64 = 100;
/// Session retry back-off, first and longest.
const BACKOFF_MIN_MS: u64 = 100;
const BACKOFF_MAX_MS: u64 = 1000;

const MS: u64 = 1_000_000;

/// State shared between the handle and the control thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub view: Arc<ClusterView>,
    pub stop: AtomicBool,
    /// On stop, revoke the lease (graceful leave) rather than let it expire.
    pub revoke_on_stop: AtomicBool,
    /// Test hook: the loop does nothing while set (a frozen control thread).
    pub paused: AtomicBool,
    pub wake: tokio::sync::Notify,
}

/// How a session ended without an error.
enum End {
    Stop,
    /// Start a new session at once (lease revoked for a handover, lease found expired).
    Restart,
}

struct LeaseState {
    id: i64,
    ttl_ms: u64,
    /// Send time of the last renewal (or grant) etcd answered.
    renewed_send_ns: u64,
}

/// The control thread's state.
struct Node {
    cfg: ClusterConfig,
    keys: Keys,
    sh: Arc<Shared>,
    events: Sender<TimedEvent>,
    lease: Option<LeaseState>,
    // The cluster as last seen in etcd.
    members: BTreeMap<u32, MemberRecord>,
    /// The tenant records (`Keys::tenants`), published to the view.
    tenants: BTreeMap<u32, Vec<u8>>,
    leader: Option<LeaderRecord>,
    epoch: u64,
    epoch_mod_rev: i64,
    handover: Option<HandoverRecord>,
    force: Option<ForceRecord>,
    key_rev: HashMap<Vec<u8>, i64>,
    /// Highest epoch ever seen (the epoch key could be deleted by hand; never go back).
    max_epoch: u64,
    decode_errors: u64,
    // This node.
    /// The epoch at which this node holds the leader key, as far as it knows.
    mastership: Option<u64>,
    fence_reason: FenceReason,
    handover_out: Option<OutgoingHandover>,
    leaderless_since: Option<u64>,
    /// Whether the current leaderless period began with a watch event (see
    /// [`ElectionInput::witnessed`]).
    leaderless_witnessed: bool,
    /// Set while a session's snapshot is being applied.
    in_snapshot: bool,
    ready: Option<u64>,
    last_published: Option<MemberRecord>,
    last_publish_ns: u64,
    /// Sessions that failed since the last one established (reported once one is).
    failures: u32,
    /// The election rank published: the configured one, until the node is appended
    /// behind a chain's tail ([`ClusterView::note_appended`]).
    rank: u32,
    /// Set once the rank was moved behind the other members'.
    rank_appended: bool,
    last_campaign_ns: u64,
    /// (role, epoch, master id) last shown in the view.
    shown: (Role, u64, Option<u32>),
}

/// Runs the control thread until stopped.
pub(crate) fn run(cfg: ClusterConfig, sh: Arc<Shared>, events: Sender<TimedEvent>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = events.send(TimedEvent {
                at_ns: mono_now_ns(),
                event: ClusterEvent::EtcdUnavailable {
                    error: format!("cannot build the control thread's runtime: {e}"),
                },
            });
            return;
        }
    };
    let keys = cfg.keys();
    let rank = cfg.rank;
    let mut node = Node {
        cfg,
        keys,
        sh,
        events,
        lease: None,
        members: BTreeMap::new(),
        tenants: BTreeMap::new(),
        leader: None,
        epoch: 0,
        epoch_mod_rev: 0,
        handover: None,
        force: None,
        key_rev: HashMap::new(),
        max_epoch: 0,
        decode_errors: 0,
        mastership: None,
        fence_reason: FenceReason::LeaseNotRenewed,
        handover_out: None,
        leaderless_since: None,
        leaderless_witnessed: false,
        in_snapshot: false,
        ready: None,
        last_published: None,
        last_publish_ns: 0,
        failures: 0,
        rank,
        rank_appended: false,
        last_campaign_ns: 0,
        shown: (Role::Fenced, 0, None),
    };
    rt.block_on(node.run());
}

/// Awaits an etcd request with the configured timeout.
async fn op<T>(
    timeout_ms: u64,
    what: &str,
    f: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, ClusterError> {
    match tokio::time::timeout(Duration::from_millis(timeout_ms), f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ClusterError::Etcd(format!("{what}: {e}"))),
        Err(_) => Err(ClusterError::Etcd(format!(
            "{what}: no answer within {timeout_ms} ms"
        ))),
    }
}

/// Whether `e` is etcd's answer to a request naming an expired or revoked lease.
fn lease_not_found(e: &ClusterError) -> bool {
    matches!(e, ClusterError::Etcd(m) if m.contains("requested lease not found"))
}

impl Node {
    fn stopping(&self) -> bool {
        self.sh.stop.load(Ordering::Acquire)
    }

    fn emit(&self, event: ClusterEvent) {
        // A dropped receiver only means nobody listens any more.
        let _ = self.events.send(TimedEvent {
            at_ns: mono_now_ns(),
            event,
        });
    }

    async fn run(&mut self) {
        let mut backoff = BACKOFF_MIN_MS;
        while !self.stopping() {
            match self.session().await {
                Ok(End::Stop) => break,
                Ok(End::Restart) => backoff = BACKOFF_MIN_MS,
                Err(e) if lease_not_found(&e) => {
                    // A put or campaign with our lease failed because it has expired.
                    self.lease_lost();
                    backoff = BACKOFF_MIN_MS;
                }
                Err(e) => {
                    self.failures += 1;
                    self.emit(ClusterEvent::EtcdUnavailable {
                        error: e.to_string(),
                    });
                    let until = mono_now_ns() + backoff * MS;
                    while mono_now_ns() < until && !self.stopping() {
                        self.pause_point().await;
                        self.sync_view(mono_now_ns());
                        tokio::time::sleep(Duration::from_millis(TICK_MS)).await;
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX_MS);
                }
            }
        }
        self.mastership = None;
        self.fence_reason = FenceReason::Stopped;
        self.leader = None;
        self.sync_view(mono_now_ns());
    }

    /// Test hook: while paused, do nothing at all.
    async fn pause_point(&self) {
        while self.sh.paused.load(Ordering::Acquire) && !self.stopping() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    async fn session(&mut self) -> Result<End, ClusterError> {
        let t = self.cfg.op_timeout_ms;
        let opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(t))
            .with_keep_alive(Duration::from_millis(t), Duration::from_millis(t));
        let mut client = op(
            t,
            "connect",
            Client::connect(&self.cfg.endpoints, Some(opts)),
        )
        .await?;
        let (mut keeper, mut ka) = match self.open_lease(&mut client).await? {
            Some(k) => k,
            None => return Ok(End::Restart),
        };
        let rev = self.load_snapshot(&mut client).await?;
        let wopts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(rev + 1);
        let mut watch = op(
            t,
            "watch",
            client.watch(self.keys.prefix.clone(), Some(wopts)),
        )
        .await?;
        if self.failures > 0 {
            let failures = std::mem::take(&mut self.failures);
            self.emit(ClusterEvent::EtcdReconnected { failures });
        }
        let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut ka_sent: Option<u64> = None;
        let mut last_ka_ns = self.lease.as_ref().map_or(0, |l| l.renewed_send_ns);
        loop {
            if self.stopping() {
                if self.sh.revoke_on_stop.load(Ordering::Acquire) {
                    if let Some(l) = self.lease.take() {
                        // Fence first, and let any lcore check made before the fence age
                        // past the margin, before the leader key can go.
                        if self.mastership.take().is_some() {
                            self.fence_reason = FenceReason::Stopped;
                            self.sync_view(mono_now_ns());
                            tokio::time::sleep(Duration::from_millis(self.cfg.fence_margin_ms))
                                .await;
                        }
                        let _ = op(t, "lease revoke", client.lease_revoke(l.id)).await;
                    }
                }
                return Ok(End::Stop);
            }
            self.pause_point().await;
            let sh = self.sh.clone();
            enum Ev {
                Tick,
                Ka(Result<Option<LeaseKeepAliveResponse>, etcd_client::Error>),
                Watch(Result<Option<WatchResponse>, etcd_client::Error>),
            }
            let ev = tokio::select! {
                _ = sh.wake.notified() => Ev::Tick,
                _ = tick.tick() => Ev::Tick,
                r = ka.message() => Ev::Ka(r),
                r = watch.message() => Ev::Watch(r),
            };
            match ev {
                Ev::Tick => {}
                Ev::Ka(r) => {
                    let resp = r
                        .map_err(|e| ClusterError::Etcd(format!("lease keep-alive: {e}")))?
                        .ok_or_else(|| ClusterError::Etcd("keep-alive stream closed".into()))?;
                    if !self.on_keepalive(&resp, ka_sent.take()) {
                        return Ok(End::Restart);
                    }
                }
                Ev::Watch(r) => {
                    let resp = r
                        .map_err(|e| ClusterError::Etcd(format!("watch: {e}")))?
                        .ok_or_else(|| ClusterError::Etcd("watch stream closed".into()))?;
                    self.on_watch(&resp)?;
                }
            }
            let now = mono_now_ns();
            // Lease renewal: one request in flight at a time, so each answer pairs with
            // the send time recorded for it.
            let interval = self.cfg.keepalive_interval_ms * MS;
            match ka_sent {
                None if now >= last_ka_ns + interval => {
                    op(t, "lease keep-alive", keeper.keep_alive()).await?;
                    ka_sent = Some(now);
                    last_ka_ns = now;
                }
                Some(sent) if now > sent + interval.max(t * MS) => {
                    return Err(ClusterError::Etcd(
                        "lease keep-alive unanswered; reconnecting".into(),
                    ));
                }
                _ => {}
            }
            if self.step(&mut client, now).await? {
                return Ok(End::Restart);
            }
        }
    }

    /// Renews the existing lease or grants a new one, and opens its keep-alive stream.
    /// `None` when the old lease turned out to be gone (the caller restarts).
    async fn open_lease(
        &mut self,
        client: &mut Client,
    ) -> Result<Option<(LeaseKeeper, etcd_client::LeaseKeepAliveStream)>, ClusterError> {
        let t = self.cfg.op_timeout_ms;
        if let Some(id) = self.lease.as_ref().map(|l| l.id) {
            let sent = mono_now_ns();
            return match tokio::time::timeout(Duration::from_millis(t), client.lease_keep_alive(id))
                .await
            {
                Ok(Ok(k)) => {
                    if let Some(l) = self.lease.as_mut() {
                        l.renewed_send_ns = l.renewed_send_ns.max(sent);
                    }
                    self.sh.view.count_keepalive();
                    Ok(Some(k))
                }
                Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => {
                    // etcd answered: the lease has expired (or was revoked).
                    self.lease_lost();
                    Ok(None)
                }
                Ok(Err(e)) => Err(ClusterError::Etcd(format!("lease keep-alive: {e}"))),
                Err(_) => Err(ClusterError::Etcd(format!(
                    "lease keep-alive: no answer within {t} ms"
                ))),
            };
        }
        let ttl_s = self.cfg.lease_ttl_s();
        let sent = mono_now_ns();
        let g = op(t, "lease grant", client.lease_grant(ttl_s, None)).await?;
        if g.ttl() <= 0 {
            return Err(ClusterError::Etcd(format!(
                "lease grant returned TTL {}",
                g.ttl()
            )));
        }
        self.lease = Some(LeaseState {
            id: g.id(),
            ttl_ms: g.ttl() as u64 * 1000,
            renewed_send_ns: sent,
        });
        let k = op(t, "lease keep-alive", client.lease_keep_alive(g.id())).await?;
        Ok(Some(k))
    }

    /// Handles a keep-alive answer; `false` when the lease is gone.
    fn on_keepalive(&mut self, resp: &LeaseKeepAliveResponse, sent: Option<u64>) -> bool {
        if resp.ttl() <= 0 {
            self.lease_lost();
            return false;
        }
        self.sh.view.count_keepalive();
        if let (Some(l), Some(sent)) = (self.lease.as_mut(), sent) {
            l.renewed_send_ns = l.renewed_send_ns.max(sent);
            l.ttl_ms = resp.ttl() as u64 * 1000;
        }
        true
    }

    /// The lease is gone: so are the leader key (if it was ours) and the member key.
    fn lease_lost(&mut self) {
        self.lease = None;
        if self.mastership.take().is_some() {
            self.fence_reason = FenceReason::LeaseLost;
        }
        self.handover_out = None;
        self.last_published = None;
        self.sync_view(mono_now_ns());
    }

    /// The write fence: send time of the last answered renewal + TTL − margin.
    fn deadline_ns(&self) -> u64 {
        self.lease.as_ref().map_or(0, |l| {
            (l.renewed_send_ns + l.ttl_ms * MS).saturating_sub(self.cfg.fence_margin_ms * MS)
        })
    }

    async fn load_snapshot(&mut self, client: &mut Client) -> Result<i64, ClusterError> {
        let t = self.cfg.op_timeout_ms;
        let resp = op(
            t,
            "get",
            client.get(
                self.keys.prefix.clone(),
                Some(GetOptions::new().with_prefix()),
            ),
        )
        .await?;
        let rev = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| ClusterError::Etcd("get: answer without a header".into()))?;
        self.members.clear();
        self.tenants.clear();
        self.leader = None;
        self.epoch = 0;
        self.epoch_mod_rev = 0;
        self.handover = None;
        self.force = None;
        self.key_rev.clear();
        for kv in resp.kvs() {
            self.apply(kv.key(), Some(kv.value()), kv.mod_revision());
        }
        self.sh.view.publish_tenants(&self.tenants);
        self.in_snapshot = true;
        self.after_cache_change(mono_now_ns());
        self.in_snapshot = false;
        Ok(rev)
    }

    fn on_watch(&mut self, resp: &WatchResponse) -> Result<(), ClusterError> {
        if resp.canceled() {
            return Err(ClusterError::Etcd(format!(
                "watch cancelled (compacted at {}): {}",
                resp.compact_revision(),
                resp.cancel_reason()
            )));
        }
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            let value = match ev.event_type() {
                EventType::Put => Some(kv.value()),
                EventType::Delete => None,
            };
            self.apply(kv.key(), value, kv.mod_revision());
        }
        self.sh.view.publish_tenants(&self.tenants);
        self.after_cache_change(mono_now_ns());
        Ok(())
    }

    /// Applies one key's new value (`None`: deleted) at revision `rev` to the cache;
    /// older news of a key than what the cache holds is ignored.
    fn apply(&mut self, key: &[u8], value: Option<&[u8]>, rev: i64) {
        if self.key_rev.get(key).is_some_and(|&r| rev <= r) {
            return;
        }
        self.key_rev.insert(key.to_vec(), rev);
        if key == self.keys.leader.as_bytes() {
            self.leader = value.and_then(|v| self.decoded(decode::<LeaderRecord>("leader", v)));
        } else if key == self.keys.epoch.as_bytes() {
            match value {
                Some(v) => {
                    if let Some(e) = self.decoded(decode_epoch(v)) {
                        self.epoch = e;
                        self.epoch_mod_rev = rev;
                    }
                }
                None => {
                    self.epoch = 0;
                    self.epoch_mod_rev = 0;
                }
            }
        } else if key == self.keys.handover.as_bytes() {
            self.handover =
                value.and_then(|v| self.decoded(decode::<HandoverRecord>("handover", v)));
        } else if key == self.keys.force.as_bytes() {
            self.force = value.and_then(|v| self.decoded(decode::<ForceRecord>("force", v)));
        } else if let Some(id) = self.keys.tenant_id(key) {
            // Checked by whoever applies it (the dataplane reads a config tenant).
            match value {
                Some(v) => self.tenants.insert(id, v.to_vec()),
                None => self.tenants.remove(&id),
            };
        } else if let Some(id) = self.keys.member_id(key) {
            match value.and_then(|v| self.decoded(decode::<MemberRecord>("member", v))) {
                Some(m) if m.id == id => {
                    self.members.insert(id, m);
                }
                _ => {
                    self.members.remove(&id);
                }
            }
        }
    }

    fn decoded<T>(&mut self, r: Result<T, ClusterError>) -> Option<T> {
        r.map_err(|_| self.decode_errors += 1).ok()
    }

    /// Consequences of a new cluster state: leadership lost or superseded, leaderless
    /// periods (and the final-offset report they call for).
    fn after_cache_change(&mut self, now: u64) {
        self.max_epoch = self.max_epoch.max(self.epoch);
        if let Some(l) = &self.leader {
            self.max_epoch = self.max_epoch.max(l.epoch);
        }
        if let Some(e) = self.mastership {
            let ours = matches!(&self.leader, Some(l) if l.id == self.cfg.node_id && l.epoch == e);
            if !ours || self.max_epoch > e {
                self.mastership = None;
                self.handover_out = None;
                self.fence_reason = FenceReason::Superseded;
            }
        }
        if self.leader.is_none() {
            if self.leaderless_since.is_none() {
                self.leaderless_since = Some(now);
                self.leaderless_witnessed = !self.in_snapshot;
            }
            self.ready = Some(self.epoch);
        } else {
            self.leaderless_since = None;
            self.ready = None;
        }
        self.sync_view(now);
    }

    /// One pass of the periodic work after each event or tick; `true`: restart the
    /// session (the lease was given up).
    async fn step(&mut self, client: &mut Client, now: u64) -> Result<bool, ClusterError> {
        if let Some(req) = self.sh.view.take_switchover() {
            self.start_handover(client, req, now).await?;
        }
        if self.progress_handover(client, now).await? {
            return Ok(true);
        }
        self.maybe_campaign(client, now).await?;
        self.publish(client, now).await?;
        self.sync_view(mono_now_ns());
        Ok(false)
    }

    /// Writes this node's member key when its content changed (offset-only changes at
    /// most every `publish_interval_ms`).
    async fn publish(&mut self, client: &mut Client, now: u64) -> Result<(), ClusterError> {
        let Some(lease) = self.lease.as_ref().map(|l| l.id) else {
            return Ok(());
        };
        // Data before offset: a state raised after the offset was read could pair
        // a Live state with an older offset (harmless), never a stale Live state with
        // data already being replaced (the lcore lowers the state first).
        let (hist, data) = self.sh.view.data();
        let rec = MemberRecord {
            id: self.cfg.node_id,
            addr: self.cfg.addr,
            role: records::RoleName::from(self.shown.0),
            offset: self.sh.view.offset(),
            epoch: self.max_epoch,
            ready: self.ready,
            rank: self.rank(),
            hist,
            data,
        };
        if let Some(last) = &self.last_published {
            if *last == rec {
                return Ok(());
            }
            let only_offset = MemberRecord {
                offset: last.offset,
                ..rec.clone()
            } == *last;
            if only_offset && now < self.last_publish_ns + self.cfg.publish_interval_ms * MS {
                return Ok(());
            }
        }
        let key = self.keys.member(self.cfg.node_id);
        let opts = PutOptions::new().with_lease(lease);
        op(
            self.cfg.op_timeout_ms,
            "put member",
            client.put(key, encode(&rec), Some(opts)),
        )
        .await?;
        self.last_published = Some(rec);
        self.last_publish_ns = now;
        Ok(())
    }

    /// The rank to publish: once the data plane says this node was appended behind
    /// the chain's tail, one more than the highest rank of the other members then
    /// (kept for the rest of the run; a restart appends it again).
    fn rank(&mut self) -> u32 {
        if !self.rank_appended && self.sh.view.appended() {
            let me = self.cfg.node_id;
            let last = self
                .members
                .values()
                .filter(|m| m.id != me)
                .map(|m| m.rank)
                .max();
            if let Some(r) = last {
                self.rank = r.saturating_add(1).max(self.rank);
            }
            self.rank_appended = true;
        }
        self.rank
    }

    async fn maybe_campaign(&mut self, client: &mut Client, now: u64) -> Result<(), ClusterError> {
        let (Some(since), None, None, Some(lease)) = (
            self.leaderless_since,
            &self.leader,
            self.mastership,
            self.lease.as_ref().map(|l| l.id),
        ) else {
            self.sh.view.set_quorum_wait(None);
            return Ok(());
        };
        if now < self.last_campaign_ns + CAMPAIGN_BACKOFF_MS * MS {
            return Ok(());
        }
        let members: Vec<MemberRecord> = self.members.values().cloned().collect();
        let decision = election::decide(&ElectionInput {
            me: self.cfg.node_id,
            epoch: self.epoch,
            members: &members,
            handover: self.handover.as_ref(),
            force: self.force.as_ref(),
            leaderless_ms: now.saturating_sub(since) / MS,
            witnessed: self.leaderless_witnessed,
            election_wait_ms: self.cfg.election_wait_ms,
            handover_timeout_ms: self.cfg.handover_timeout_ms,
            cluster_size: self.cfg.cluster_size,
            quorum: self.cfg.election_quorum,
        });
        self.sh.view.set_quorum_wait(match decision {
            Decision::Wait(
                WaitReason::NoQuorum { have, need } | WaitReason::Bootstrap { have, need },
            ) => Some((have, need)),
            _ => None,
        });
        if decision != Decision::Campaign {
            return Ok(());
        }
        self.last_campaign_ns = now;
        let next = self.epoch.max(self.max_epoch) + 1;
        let forced = self
            .force
            .as_ref()
            .is_some_and(|f| f.target == self.cfg.node_id && f.epoch == self.epoch);
        let rec = LeaderRecord {
            id: self.cfg.node_id,
            epoch: next,
            addr: self.cfg.addr,
            forced,
        };
        let k = &self.keys;
        let epoch_unchanged = if self.epoch_mod_rev == 0 {
            Compare::version(k.epoch.clone(), CompareOp::Equal, 0)
        } else {
            Compare::mod_revision(k.epoch.clone(), CompareOp::Equal, self.epoch_mod_rev)
        };
        let txn = Txn::new()
            .when([
                Compare::version(k.leader.clone(), CompareOp::Equal, 0),
                epoch_unchanged,
            ])
            .and_then([
                TxnOp::put(
                    k.leader.clone(),
                    encode(&rec),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::put(k.epoch.clone(), next.to_string(), None),
                TxnOp::delete(k.handover.clone(), None),
                TxnOp::delete(k.force.clone(), None),
            ]);
        let resp = op(self.cfg.op_timeout_ms, "campaign txn", client.txn(txn)).await?;
        if !resp.succeeded() {
            // Someone else was faster (or our view was stale): the watch brings the news.
            return Ok(());
        }
        let rev = resp.header().map_or(0, |h| h.revision());
        let (leader_key, epoch_key, handover_key, force_key) = (
            k.leader.clone(),
            k.epoch.clone(),
            k.handover.clone(),
            k.force.clone(),
        );
        self.apply(leader_key.as_bytes(), Some(&encode(&rec)), rev);
        self.apply(epoch_key.as_bytes(), Some(next.to_string().as_bytes()), rev);
        self.apply(handover_key.as_bytes(), None, rev);
        self.apply(force_key.as_bytes(), None, rev);
        self.sh.view.set_quorum_wait(None);
        self.mastership = Some(next);
        self.after_cache_change(now);
        Ok(())
    }

    /// Shows the node's state in the view and reports changes as events.
    fn sync_view(&mut self, now: u64) {
        let me = self.cfg.node_id;
        let view = &self.sh.view;
        view.set_forced_epoch(
            self.leader
                .as_ref()
                .filter(|l| l.forced)
                .map_or(0, |l| l.epoch),
        );
        let (role, epoch, master) = if let Some(e) = self.mastership {
            let info = MasterInfo {
                id: me,
                epoch: e,
                addr: self.cfg.addr,
            };
            let deadline = self.deadline_ns();
            if self.handover_out.is_none() && now < deadline {
                if self.shown.0 == Role::Master && self.shown.1 == e {
                    view.set_deadline(deadline);
                } else {
                    view.set_master_info(Some(info));
                    view.set_master(e, deadline);
                }
                (Role::Master, e, Some(info))
            } else {
                if self.handover_out.is_none() {
                    self.fence_reason = FenceReason::LeaseNotRenewed;
                }
                (Role::Fenced, e, Some(info))
            }
        } else if let Some(l) = self.leader.as_ref().filter(|l| l.id != me) {
            // (A leader key naming this node without the mastership is a stale cache
            // entry of a lost lease, or of an earlier run of this node: not a master.)
            let info = MasterInfo {
                id: l.id,
                epoch: l.epoch,
                addr: l.addr,
            };
            (Role::Replica, l.epoch, Some(info))
        } else {
            (Role::Fenced, self.max_epoch, None)
        };
        let master_id = master.map(|m| m.id);
        if (role, epoch, master_id) == self.shown {
            return;
        }
        if role != Role::Master {
            view.set_non_master(role, epoch);
            view.set_master_info(master);
        }
        let prev = self.shown;
        self.shown = (role, epoch, master_id);
        if prev.0 == Role::Master && role != Role::Master {
            self.emit(ClusterEvent::Fenced {
                epoch: prev.1,
                reason: self.fence_reason,
            });
        }
        match (role, master) {
            (Role::Master, _) => self.emit(ClusterEvent::BecameMaster { epoch }),
            (Role::Replica, Some(m)) => self.emit(ClusterEvent::BecameReplica { master: m, epoch }),
            _ => {}
        }
    }
}
