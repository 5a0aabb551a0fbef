//! What the replication lcore publishes for operators: role, epoch, offsets and each
//! peer's state, as atomics the lcore stores and the telemetry thread reads
//! (`/kvd/replication`, `ctlplane replication status`).

use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Peers (replication links) a node reports at most.
pub const MAX_PEERS: usize = 8;

/// A node's role as published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum RoleCode {
    /// No replication.
    Standalone = 0,
    /// Takes writes, ships the stream.
    Master = 1,
    /// Follows a master.
    Replica = 2,
    /// Was master, may no longer acknowledge writes (lease not renewed).
    Fenced = 3,
}

impl RoleCode {
    fn name(v: u64) -> &'static str {
        match v {
            1 => "master",
            2 => "replica",
            3 => "fenced",
            _ => "standalone",
        }
    }
}

/// A peer's replication state as published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum PeerState {
    /// No peer on this link (yet), or not a replica.
    Absent = 0,
    /// Handshake under way.
    Connecting = 1,
    /// Receiving a full copy (snapshot scan) before the live stream.
    FullSync = 2,
    /// Catching up from the backlog.
    PartialSync = 3,
    /// In sync: acknowledging the live stream.
    Online = 4,
    /// No answer to probes within `waiting_time_ms`: not counted for min-replicas.
    Invalid = 5,
}

impl PeerState {
    /// Stable lower-case name.
    pub fn name(v: u64) -> &'static str {
        match v {
            1 => "connecting",
            2 => "full_sync",
            3 => "partial_sync",
            4 => "online",
            5 => "invalid",
            _ => "absent",
        }
    }
}

/// Why the replication lcore dropped a frame it received on a link: every frame is
/// taken or counted under one (`link_drops` in `/kvd/replication`,
/// `kvd_repl_link_drops_total{reason}`; docs/OPERATIONS.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkDrop {
    /// Not a replication frame this node parses (headers, ICRC, opcode).
    Malformed,
    /// A control message addressed to another node.
    WrongDestination,
    /// A control message that does not decode.
    BadControl,
    /// A segment not from the node that welcomed this one, or with a wrong R_Key or VA.
    ForeignSegment,
    /// A segment or WELCOME of a master older than the newest epoch this node knows
    /// (a deposed master still sending).
    StaleEpoch,
    /// A segment behind one refused with RNR while the workers' rings (or the log
    /// file's) lack room; the master resends it.
    NoRoom,
}

impl LinkDrop {
    /// Every reason, in index order.
    pub const ALL: [LinkDrop; 6] = [
        LinkDrop::Malformed,
        LinkDrop::WrongDestination,
        LinkDrop::BadControl,
        LinkDrop::ForeignSegment,
        LinkDrop::StaleEpoch,
        LinkDrop::NoRoom,
    ];

    /// Its name in `/kvd/replication` and the `reason` label.
    pub const fn name(self) -> &'static str {
        match self {
            LinkDrop::Malformed => "malformed",
            LinkDrop::WrongDestination => "wrong_destination",
            LinkDrop::BadControl => "bad_control",
            LinkDrop::ForeignSegment => "foreign_segment",
            LinkDrop::StaleEpoch => "stale_epoch",
            LinkDrop::NoRoom => "no_room",
        }
    }
}

/// One peer's published figures.
#[derive(Debug, Default)]
pub struct PeerStatus {
    /// [`PeerState`] as u64.
    pub state: AtomicU64,
    /// Master: the stream offset this replica acknowledged. Replica: the offset it
    /// acknowledged to its master.
    pub acked: AtomicU64,
    /// Master: the stream offset sent to this replica so far.
    pub sent: AtomicU64,
    /// Nanoseconds (lcore clock) of the last acknowledgement or probe answer.
    pub last_heard_ns: AtomicU64,
    /// Full syncs started for this peer.
    pub full_syncs: AtomicU64,
    /// Partial syncs started for this peer.
    pub partial_syncs: AtomicU64,
    /// Times this peer was declared invalid.
    pub invalidations: AtomicU64,
    /// Segments resent (timeouts, NAKs).
    pub resent: AtomicU64,
}

/// A node's published replication state.
#[derive(Debug, Default)]
pub struct ReplStatus {
    /// [`RoleCode`] as u64.
    pub role: AtomicU64,
    /// Epoch this node serves at.
    pub epoch: AtomicU64,
    /// Replication id of the stream (master's, or the one a replica follows).
    pub repl_id: AtomicU64,
    /// Master: end offset of the stream. Replica: offset applied by every worker.
    pub offset: AtomicU64,
    /// Master: oldest offset still in the backlog.
    pub backlog_start: AtomicU64,
    /// Lcore clock (ns) at the last publication.
    pub now_ns: AtomicU64,
    /// Replicas counted for min-replicas at the last check.
    pub good_replicas: AtomicU64,
    /// Whether writes are refused for want of replicas (1) or not (0).
    pub short_of_replicas: AtomicU64,
    /// Records moved from the workers' logs into the stream (master) or routed to
    /// the workers (replica).
    pub records: AtomicU64,
    /// Per link.
    pub peers: [PeerStatus; MAX_PEERS],
    /// Number of links in use.
    pub links: AtomicU64,
    /// Per link, a memif client link's state as the replication lcore last saw it
    /// (checked every 10 ms): 0 unknown (not a memif client), 1 down, 2 up.
    pub link_up: [AtomicU64; MAX_PEERS],
    /// Per link, times a memif client link was redialed.
    pub link_redials: [AtomicU64; MAX_PEERS],
    /// Sleeps of the replication lcore's idle policy (`server.idle: adaptive`).
    pub idle_sleeps: AtomicU64,
    /// Microseconds those sleeps asked for.
    pub idle_sleep_us: AtomicU64,
    /// The doorbells idle lcores sleep on (`server.idle: adaptive`): the replication
    /// lcore's ("replication", rung by the workers' log rings) and each replica
    /// worker's ("worker<k>", rung by the replication lcore); set once at start-up.
    pub bells: std::sync::OnceLock<Vec<(String, std::sync::Arc<dpdk::Doorbell>)>>,
    /// Link names (set once at start-up).
    pub link_names: std::sync::OnceLock<Vec<String>>,
    /// Times this node became master through an election (etcd).
    pub promotions: AtomicU64,
    /// Times it stopped being master because another node was elected.
    pub demotions: AtomicU64,
    /// Chain: HELLOs this node (head or relay) answered with a REDIRECT to its
    /// live successor.
    pub redirects_sent: AtomicU64,
    /// Chain: REDIRECTs this replica followed.
    pub redirects_followed: AtomicU64,
    /// HELLOs left unanswered: a master that started empty and a replica holding
    /// data of another stream (`MasterConfig::keep_foreign`).
    pub foreign_refused: AtomicU64,
    /// An etcd-managed node: what its data is worth to an election
    /// (`kvcluster::records::DataState::code`) and the epoch it follows.
    pub data: AtomicU64,
    /// With `data`.
    pub hist: AtomicU64,
    /// Full syncs refused from a force-elected master: they would have discarded
    /// data this node holds (docs/FAILOVER.md "Election safety").
    pub diverged: AtomicU64,
    /// Full syncs refused because they would roll a node's data back: on a chain
    /// relay, HELLOs from a node holding more of the stream (or a newer one) than
    /// the relay; on a replica, a full sync offered by a node behind it in its own
    /// stream (docs/REPLICATION.md §7.1).
    pub rollbacks_refused: AtomicU64,
    /// `have << 32 | need` while the cluster has no master and the election waits
    /// for a quorum of data-holding members (writes unavailable); 0 otherwise.
    pub quorum_wait: AtomicU64,
    /// A replica's log file writer (config `replication.log_file`), when there is one.
    pub log: std::sync::OnceLock<(String, std::sync::Arc<super::replica_log::LogShared>)>,
    /// A chain node's relay: its view of the successors it ships to.
    pub relay: std::sync::OnceLock<std::sync::Arc<ReplStatus>>,
    /// Frames dropped, by [`LinkDrop`] (its position in [`LinkDrop::ALL`]).
    pub link_drops: [AtomicU64; LinkDrop::ALL.len()],
}

impl ReplStatus {
    /// Per doorbell: sleeps its rings cut short, and the ring-to-wake latency.
    fn bells_json(&self) -> Value {
        let Some(bells) = self.bells.get() else {
            return json!({});
        };
        let mut m = serde_json::Map::new();
        for (name, b) in bells {
            let n = b.wakeups.load(Relaxed);
            let sum = b.wake_ns_sum.load(Relaxed);
            m.insert(
                name.clone(),
                json!({
                    "wakeups": n,
                    "wake_us_mean": if n == 0 { 0.0 } else { sum as f64 / n as f64 / 1e3 },
                    "wake_us_max": b.wake_ns_max.load(Relaxed) as f64 / 1e3,
                }),
            );
        }
        Value::Object(m)
    }

    /// Counts one frame dropped for `r`.
    #[inline]
    pub fn drop_frame(&self, r: LinkDrop) {
        self.link_drops[r as usize].fetch_add(1, Relaxed);
    }

    /// Frames dropped for `r` so far.
    pub fn dropped(&self, r: LinkDrop) -> u64 {
        self.link_drops[r as usize].load(Relaxed)
    }

    /// Sets the role.
    pub fn set_role(&self, r: RoleCode) {
        self.role.store(r as u64, Relaxed);
    }

    /// The status as JSON (for telemetry).
    pub fn to_json(&self) -> Value {
        let now = self.now_ns.load(Relaxed);
        let offset = self.offset.load(Relaxed);
        let names = self.link_names.get().cloned().unwrap_or_default();
        let n = (self.links.load(Relaxed) as usize).min(MAX_PEERS);
        let mut peers = serde_json::Map::new();
        for (i, p) in self.peers.iter().take(n).enumerate() {
            let acked = p.acked.load(Relaxed);
            let heard = p.last_heard_ns.load(Relaxed);
            peers.insert(
                i.to_string(),
                json!({
                    "link": names.get(i).cloned().unwrap_or_default(),
                    "state": PeerState::name(p.state.load(Relaxed)),
                    "acked_offset": acked,
                    "sent_offset": p.sent.load(Relaxed),
                    "lag_bytes": offset.saturating_sub(acked),
                    "last_heard_ms_ago": if heard == 0 { u64::MAX } else { now.saturating_sub(heard) / 1_000_000 },
                    "full_syncs": p.full_syncs.load(Relaxed),
                    "partial_syncs": p.partial_syncs.load(Relaxed),
                    "invalidations": p.invalidations.load(Relaxed),
                    "resent": p.resent.load(Relaxed),
                }),
            );
        }
        // Every configured link (a replica's peers show only its upstream).
        let link_states: Vec<Value> = (0..names.len().min(MAX_PEERS))
            .map(|i| {
                json!({
                    "link": names[i],
                    "up": match self.link_up[i].load(Relaxed) {
                        0 => Value::Null,
                        u => Value::Bool(u == 2),
                    },
                    "redials": self.link_redials[i].load(Relaxed),
                })
            })
            .collect();
        let log = self.log.get().map_or(Value::Null, |(path, l)| {
            json!({
                "file": path,
                "synced_offset": l.synced_end.load(Relaxed),
                "blocks": l.blocks.load(Relaxed),
                "errors": l.errors.load(Relaxed),
            })
        });
        let relay = self.relay.get().map_or(Value::Null, |r| {
            let mut j = r.to_json();
            if let Some(o) = j.as_object_mut() {
                // The relay's role, epoch and id are its own node's.
                for k in [
                    "role",
                    "epoch",
                    "repl_id",
                    "promotions",
                    "demotions",
                    "redirects_followed",
                    "relay",
                    "log_file",
                    "links",
                    "idle_sleeps",
                    "idle_sleep_us",
                    "doorbells",
                ] {
                    o.remove(k);
                }
            }
            j
        });
        json!({
            "role": RoleCode::name(self.role.load(Relaxed)),
            "epoch": self.epoch.load(Relaxed),
            "repl_id": format!("{:016x}", self.repl_id.load(Relaxed)),
            "offset": offset,
            "backlog_start": self.backlog_start.load(Relaxed),
            "good_replicas": self.good_replicas.load(Relaxed),
            "short_of_replicas": self.short_of_replicas.load(Relaxed),
            "records": self.records.load(Relaxed),
            "promotions": self.promotions.load(Relaxed),
            "demotions": self.demotions.load(Relaxed),
            "redirects_sent": self.redirects_sent.load(Relaxed),
            "redirects_followed": self.redirects_followed.load(Relaxed),
            "foreign_refused": self.foreign_refused.load(Relaxed),
            "data": kvcluster::records::DataState::from_code(self.data.load(Relaxed)).name(),
            "hist": self.hist.load(Relaxed),
            "diverged": self.diverged.load(Relaxed),
            "rollbacks_refused": self.rollbacks_refused.load(Relaxed),
            "election_wait": match self.quorum_wait.load(Relaxed) {
                0 => Value::Null,
                w => json!({ "have": w >> 32, "need": w & 0xffff_ffff }),
            },
            "peers": Value::Object(peers),
            "links": link_states,
            "link_drops": LinkDrop::ALL
                .iter()
                .map(|&r| (r.name().to_string(), json!(self.dropped(r))))
                .collect::<serde_json::Map<_, _>>(),
            "idle_sleeps": self.idle_sleeps.load(Relaxed),
            "idle_sleep_us": self.idle_sleep_us.load(Relaxed),
            "doorbells": self.bells_json(),
            "log_file": log,
            "relay": relay,
        })
    }
}
