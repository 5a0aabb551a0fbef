//! The `replication` section: a node's role, the replication link to its peers, the
//! write-safety rules (mode, min-replicas, max lag), failure detection, the replica's
//! log file and the etcd cluster that decides who is master (docs/REPLICATION.md,
//! docs/FAILOVER.md).
//!
//! Absent, the node is standalone: no replication lcore, every write is taken.

use crate::{parse_mac, ConfigError};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// What a node does in a replicated cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ReplRole {
    /// No replication (the default).
    #[default]
    Standalone,
    /// Takes writes and ships them to its replicas.
    Master,
    /// Follows a master's stream; serves reads, refuses writes with `NOT_MASTER`.
    Replica,
}

impl std::str::FromStr for ReplRole {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "standalone" => Ok(ReplRole::Standalone),
            "master" => Ok(ReplRole::Master),
            "replica" => Ok(ReplRole::Replica),
            _ => Err(format!("{s:?} is not a role (standalone, master, replica)")),
        }
    }
}

/// When the master answers a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ReplMode {
    /// At once (SKV): a write is acknowledged before any replica has it.
    #[default]
    Async,
    /// Only once `min_replicas` replicas acknowledged its stream offset.
    Sync,
}

/// When the replica's log file is flushed to disk (Redis AOF's `appendfsync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// After every applied segment.
    Always,
    /// Once a second (the default).
    #[default]
    Everysec,
    /// Left to the kernel.
    No,
}

/// How the replicas are arranged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// Every replica follows the master directly (the default).
    #[default]
    Star,
    /// Chain replication: each replica follows its predecessor (`master` names it)
    /// and relays the stream to the node after it; a node acknowledges an offset
    /// upstream only once its successor did, so the head answers a synchronous write
    /// after the tail has it (docs/TRANSACTIONS.md, "Chain replication").
    Chain,
}

/// A node's address on the replication link.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkAddr {
    /// MAC address.
    pub mac: String,
    /// IPv4 address.
    pub ip: Ipv4Addr,
}

/// The etcd cluster holding membership and leadership.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdSection {
    /// Client URLs, e.g. `["http://127.0.0.1:2379"]`.
    pub endpoints: Vec<String>,
    /// Key prefix of this cluster (`/kvd/<cluster>/…`).
    #[serde(default = "default_cluster")]
    pub cluster: String,
    /// Lease time-to-live of the leader and member keys.
    #[serde(default = "default_lease_ttl_ms")]
    pub lease_ttl_ms: u64,
    /// Log (as master) and keep (as replica) completion records, so a client's
    /// request resent across a failover is answered once, never run twice
    /// (docs/PROTOCOL.md §6.6). Default on; off saves their share of the stream.
    #[serde(default = "default_true")]
    pub completion_records: bool,
    /// The cluster's nodes. Default: this node's replication links + 1 (every node
    /// is linked to every other). The cluster's first election waits for all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// Members holding everything they acknowledged that must report before a master
    /// is elected. Default: the safe value for `mode` and `min_replicas` — `nodes −
    /// min_replicas` in sync mode, `nodes − 1` in async mode (docs/FAILOVER.md
    /// "Election safety"). A smaller value can elect a node missing acknowledged
    /// writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub election_quorum: Option<u32>,
}

/// The `replication` section of a config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicationSection {
    /// This node's role at start (etcd may change it later).
    #[serde(default)]
    pub role: ReplRole,
    /// This node's name in the cluster (unique).
    #[serde(default)]
    pub node_id: String,
    /// When the master answers writes.
    #[serde(default)]
    pub mode: ReplMode,
    /// Writes are refused (`NOT_ENOUGH_REPLICAS`) while fewer replicas than this
    /// acknowledged within `max_lag_ms`.
    #[serde(default)]
    pub min_replicas: u32,
    /// How old a replica's last acknowledgement may be for it to count.
    #[serde(default = "default_max_lag_ms")]
    pub max_lag_ms: u64,
    /// Bytes of the stream the master keeps for partial resyncs, in MiB.
    #[serde(default = "default_backlog_mb")]
    pub backlog_mb: u32,
    /// A replica acknowledges its applied offset at least this often.
    #[serde(default = "default_ack_interval_ms")]
    pub ack_interval_ms: u64,
    /// The master probes each replica this often.
    #[serde(default = "default_probe_interval_ms")]
    pub probe_interval_ms: u64,
    /// A replica that answers no probe for this long is invalid.
    #[serde(default = "default_waiting_time_ms")]
    pub waiting_time_ms: u64,
    /// EAL vdevs of the replication link(s): on a master one per replica link, on a
    /// replica the link to the master. Their ports belong to the replication lcore.
    #[serde(default)]
    pub vdevs: Vec<String>,
    /// This node's address on the replication link(s).
    pub link: Option<LinkAddr>,
    /// A replica without etcd: the master's address on the link.
    #[serde(default)]
    pub master: Option<LinkAddr>,
    /// How the replicas are arranged.
    #[serde(default)]
    pub topology: Topology,
    /// A replica of a chain: the nodes before its predecessor, nearest first. When its
    /// upstream is silent for `waiting_time_ms` the replica joins the next one (the
    /// chain closes over a failed node), resuming from its offset.
    #[serde(default)]
    pub fallback: Vec<LinkAddr>,
    /// A replica appends the stream it applies to this file.
    #[serde(default)]
    pub log_file: Option<PathBuf>,
    /// Flush policy of `log_file`.
    #[serde(default)]
    pub fsync: FsyncPolicy,
    /// Membership and leader election (optional: without it roles are fixed).
    #[serde(default)]
    pub etcd: Option<EtcdSection>,
    /// An etcd-managed node that is not master (a replica, or a master fenced by its
    /// lease) serves reads anyway (stale by its replication lag) instead of refusing
    /// them `NOT_MASTER` like writes. Default false: only the master answers reads.
    #[serde(default)]
    pub replica_reads: bool,
    /// The client-facing address (the `dataplane` MAC/IP) of every node of the
    /// cluster, this one included. Not read by the dataplane: a client reading this
    /// config tries them in turn when the node it uses stops answering
    /// (docs/FAILOVER.md "Clients"); a `NOT_MASTER` hint names one of them.
    #[serde(default)]
    pub client_nodes: Vec<LinkAddr>,
}

impl Default for ReplicationSection {
    fn default() -> Self {
        ReplicationSection {
            role: ReplRole::Standalone,
            node_id: String::new(),
            mode: ReplMode::Async,
            min_replicas: 0,
            max_lag_ms: default_max_lag_ms(),
            backlog_mb: default_backlog_mb(),
            ack_interval_ms: default_ack_interval_ms(),
            probe_interval_ms: default_probe_interval_ms(),
            waiting_time_ms: default_waiting_time_ms(),
            vdevs: Vec::new(),
            link: None,
            master: None,
            topology: Topology::Star,
            fallback: Vec::new(),
            log_file: None,
            fsync: FsyncPolicy::Everysec,
            etcd: None,
            client_nodes: Vec::new(),
            replica_reads: false,
        }
    }
}

fn default_true() -> bool {
    true
}
fn default_cluster() -> String {
    "kvd".into()
}
fn default_lease_ttl_ms() -> u64 {
    1500
}
fn default_max_lag_ms() -> u64 {
    1000
}
fn default_backlog_mb() -> u32 {
    64
}
fn default_ack_interval_ms() -> u64 {
    10
}
fn default_probe_interval_ms() -> u64 {
    100
}
fn default_waiting_time_ms() -> u64 {
    500
}

impl ReplicationSection {
    /// Lcores a dataplane of `role` keeps for replication: its last EAL lcore unless
    /// standalone. The workers — one key partition each — are the other lcores, so a
    /// client of the node counts `dataplane.lcores` minus this.
    pub fn lcores_for(role: ReplRole) -> u32 {
        u32::from(role != ReplRole::Standalone)
    }

    /// Checks the section for `role` (the config's or the command line's).
    pub fn validate(&self, role: ReplRole) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError(format!("replication.{m}")));
        if role == ReplRole::Standalone {
            return Ok(());
        }
        if self.node_id.is_empty() {
            return err("node_id must be set for a master or replica".into());
        }
        if self.vdevs.is_empty() {
            return err("vdevs must name at least one replication link".into());
        }
        let Some(link) = &self.link else {
            return err("link (this node's mac and ip on the replication link) is missing".into());
        };
        parse_mac(&link.mac).map_err(|e| ConfigError(format!("replication.link.mac: {e}")))?;
        if let Some(m) = &self.master {
            parse_mac(&m.mac).map_err(|e| ConfigError(format!("replication.master.mac: {e}")))?;
        }
        for (i, m) in self.fallback.iter().enumerate() {
            parse_mac(&m.mac)
                .map_err(|e| ConfigError(format!("replication.fallback[{i}].mac: {e}")))?;
        }
        if role == ReplRole::Replica && self.master.is_none() && self.etcd.is_none() {
            return err("master (or etcd) is needed to find the master".into());
        }
        if self.backlog_mb == 0 {
            return err("backlog_mb must be at least 1".into());
        }
        if self.probe_interval_ms == 0 || self.ack_interval_ms == 0 {
            return err("probe_interval_ms and ack_interval_ms must be positive".into());
        }
        if self.waiting_time_ms < self.probe_interval_ms {
            return err(format!(
                "waiting_time_ms ({}) must be at least probe_interval_ms ({})",
                self.waiting_time_ms, self.probe_interval_ms
            ));
        }
        if let Some(e) = &self.etcd {
            if e.endpoints.is_empty() {
                return err("etcd.endpoints must not be empty".into());
            }
            if e.lease_ttl_ms < 300 {
                return err("etcd.lease_ttl_ms must be at least 300".into());
            }
            let nodes = e.nodes.unwrap_or(self.vdevs.len() as u32 + 1);
            if nodes == 0 {
                return err("etcd.nodes must be at least 1".into());
            }
            if let Some(q) = e.election_quorum {
                if q == 0 || q > nodes {
                    return err(format!(
                        "etcd.election_quorum ({q}) must be in 1..=nodes ({nodes})"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_rules() {
        let s: ReplicationSection = serde_json::from_str("{}").unwrap();
        assert_eq!(s, ReplicationSection::default());
        assert!(s.validate(ReplRole::Standalone).is_ok());
        let e = s.validate(ReplRole::Master).unwrap_err().0;
        assert!(e.contains("node_id"), "{e}");
        let s: ReplicationSection = serde_json::from_str(
            r#"{"role":"replica","node_id":"r1","vdevs":["net_memif1"],
                "link":{"mac":"02:00:00:00:01:02","ip":"10.9.0.2"}}"#,
        )
        .unwrap();
        let e = s.validate(ReplRole::Replica).unwrap_err().0;
        assert!(e.contains("master"), "{e}");
        let bad: Result<ReplicationSection, _> = serde_json::from_str(r#"{"mod":"sync"}"#);
        assert!(bad.is_err(), "unknown fields are errors");
        assert_eq!("replica".parse::<ReplRole>(), Ok(ReplRole::Replica));
        assert!("leader".parse::<ReplRole>().is_err());
    }
}
