//! The node's cluster configuration, its advertised address and the etcd key layout.

use std::fmt;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::ClusterError;

/// The address a node serves on, as clients and peers need it to reach it over RoCEv2:
/// Ethernet MAC, IPv4 address and the server's queue pair number (24 bits). The dataplane
/// fills it from its own configuration; kvcluster only stores and publishes it.
///
/// In etcd it is JSON: `{"mac":"02:00:00:00:00:01","ip":"10.0.0.1","qpn":1}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "AddrJson", into = "AddrJson")]
pub struct NodeAddr {
    /// Ethernet MAC address.
    pub mac: [u8; 6],
    /// IPv4 address.
    pub ip: Ipv4Addr,
    /// The server queue pair number (must fit in 24 bits).
    pub qpn: u32,
}

impl NodeAddr {
    /// Packs the address into two words for the lock-free master slot of the view.
    pub(crate) fn to_words(self) -> (u64, u64) {
        let mut m = [0u8; 8];
        m[..6].copy_from_slice(&self.mac);
        let w0 = u64::from_le_bytes(m);
        let w1 = u64::from(u32::from(self.ip)) | (u64::from(self.qpn) << 32);
        (w0, w1)
    }

    /// The inverse of [`NodeAddr::to_words`].
    pub(crate) fn from_words(w0: u64, w1: u64) -> Self {
        let b = w0.to_le_bytes();
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&b[..6]);
        NodeAddr {
            mac,
            ip: Ipv4Addr::from((w1 & 0xffff_ffff) as u32),
            qpn: (w1 >> 32) as u32,
        }
    }

    /// Parses a MAC address ([`kvwire::ethernet::parse_mac`]).
    pub fn parse_mac(s: &str) -> Result<[u8; 6], ClusterError> {
        kvwire::ethernet::parse_mac(s)
            .ok_or_else(|| ClusterError::Config(format!("bad MAC address {s:?}")))
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.mac;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} {} qpn {}",
            m[0], m[1], m[2], m[3], m[4], m[5], self.ip, self.qpn
        )
    }
}

/// The JSON form of [`NodeAddr`].
#[derive(Serialize, Deserialize)]
struct AddrJson {
    mac: String,
    ip: Ipv4Addr,
    qpn: u32,
}

impl TryFrom<AddrJson> for NodeAddr {
    type Error = String;
    fn try_from(a: AddrJson) -> Result<Self, String> {
        let mac = NodeAddr::parse_mac(&a.mac).map_err(|e| e.to_string())?;
        if a.qpn >= 1 << 24 {
            return Err(format!("qpn {} does not fit in 24 bits", a.qpn));
        }
        Ok(NodeAddr {
            mac,
            ip: a.ip,
            qpn: a.qpn,
        })
    }
}

impl From<NodeAddr> for AddrJson {
    fn from(a: NodeAddr) -> Self {
        let m = a.mac;
        AddrJson {
            mac: format!(
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            ),
            ip: a.ip,
            qpn: a.qpn,
        }
    }
}

/// Everything a node needs to take part in a cluster. Build it with
/// [`ClusterConfig::new`] (defaults for every timing) and adjust fields as needed;
/// [`ClusterConfig::validate`] (called by `ClusterHandle::start`) checks the relations
/// between the timings that the fencing argument relies on (docs/FAILOVER.md).
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// etcd client URLs, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// The cluster's name: keys live under `/kvd/<cluster>/`. Letters, digits, `-`, `_`.
    pub cluster: String,
    /// This node's id, unique in the cluster, ≥ 1.
    pub node_id: u32,
    /// The address clients and peers reach this node at.
    pub addr: NodeAddr,
    /// The lease TTL, 1000..=600000. etcd grants leases in whole seconds: the node asks
    /// for this rounded up (1500 → 2 s). The server may raise it further (its minimum is
    /// 1.5 election timeouts, rounded up to seconds); the node then uses the TTL the
    /// server granted. Default 2000.
    pub lease_ttl_ms: u64,
    /// Safety margin subtracted from the lease's end for the write fence: covers the
    /// drift between this node's clock rate and etcd's over one TTL and the time between
    /// an lcore's check and its transmit. Default 100.
    pub fence_margin_ms: u64,
    /// How often the lease is renewed. Default `lease_ttl_ms / 4`.
    pub keepalive_interval_ms: u64,
    /// How often this node's stream offset is published to its member key (only when it
    /// changed). Default 100.
    pub publish_interval_ms: u64,
    /// After the leader key disappears, how long a replica waits at most for every live
    /// member to report its final offset before the election goes on without the silent
    /// ones. Default 500.
    pub election_wait_ms: u64,
    /// How long a planned switchover may wait for its target to catch up before it is
    /// called off and the master resumes. Default 5000.
    pub handover_timeout_ms: u64,
    /// Timeout of each etcd request (and of connecting). Default 1000.
    pub op_timeout_ms: u64,
    /// This node's preference in an election among members with equal offsets, lower
    /// first (`MemberRecord::rank`; a chain node's position). Default 0.
    pub rank: u32,
    /// The number of nodes in the cluster (the first election waits for all of
    /// them). Default 1.
    pub cluster_size: u32,
    /// Members whose data is Live that must have reported before anyone campaigns
    /// ([`crate::election::quorum_for`] gives the safe value for a replication mode).
    /// Default 1.
    pub election_quorum: u32,
}

impl ClusterConfig {
    /// A configuration with default timings.
    pub fn new(endpoints: Vec<String>, cluster: &str, node_id: u32, addr: NodeAddr) -> Self {
        ClusterConfig {
            endpoints,
            cluster: cluster.to_string(),
            node_id,
            addr,
            lease_ttl_ms: 2000,
            fence_margin_ms: 100,
            keepalive_interval_ms: 500,
            publish_interval_ms: 100,
            election_wait_ms: 500,
            handover_timeout_ms: 5000,
            op_timeout_ms: 1000,
            rank: 0,
            cluster_size: 1,
            election_quorum: 1,
        }
    }

    /// Sets the cluster's size and election quorum ([`ClusterConfig::cluster_size`],
    /// [`ClusterConfig::election_quorum`]).
    pub fn with_quorum(mut self, cluster_size: u32, election_quorum: u32) -> Self {
        self.cluster_size = cluster_size;
        self.election_quorum = election_quorum;
        self
    }

    /// Sets the election rank ([`ClusterConfig::rank`]).
    pub fn with_rank(mut self, rank: u32) -> Self {
        self.rank = rank;
        self
    }

    /// Sets the lease TTL and the keep-alive interval that goes with it (TTL / 4).
    pub fn with_lease_ttl_ms(mut self, ttl_ms: u64) -> Self {
        self.lease_ttl_ms = ttl_ms;
        self.keepalive_interval_ms = ttl_ms / 4;
        self
    }

    /// Checks the configuration; the error names the offending field.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let bad = |m: String| Err(ClusterError::Config(m));
        if self.endpoints.is_empty() {
            return bad("no etcd endpoints".into());
        }
        validate_cluster_name(&self.cluster)?;
        if self.node_id == 0 {
            return bad("node_id must be ≥ 1".into());
        }
        if self.addr.qpn >= 1 << 24 {
            return bad(format!("qpn {} does not fit in 24 bits", self.addr.qpn));
        }
        if !(1000..=600_000).contains(&self.lease_ttl_ms) {
            return bad(format!(
                "lease_ttl_ms {} must be in 1000..=600000",
                self.lease_ttl_ms
            ));
        }
        if self.keepalive_interval_ms == 0 {
            return bad("keepalive_interval_ms must be > 0".into());
        }
        // One lost keep-alive must not close the write window in steady state: the
        // deadline after a renewal is TTL - margin ahead, the next renewal comes one
        // interval (plus its round trip) later.
        if 2 * self.keepalive_interval_ms + self.fence_margin_ms > self.lease_ttl_ms {
            return bad(format!(
                "2 * keepalive_interval_ms ({}) + fence_margin_ms ({}) must not exceed \
                 lease_ttl_ms ({})",
                self.keepalive_interval_ms, self.fence_margin_ms, self.lease_ttl_ms
            ));
        }
        if self.election_quorum == 0 || self.election_quorum > self.cluster_size {
            return bad(format!(
                "election_quorum {} must be in 1..=cluster_size ({})",
                self.election_quorum, self.cluster_size
            ));
        }
        if self.publish_interval_ms == 0 || self.op_timeout_ms == 0 {
            return bad("publish_interval_ms and op_timeout_ms must be > 0".into());
        }
        Ok(())
    }

    /// The TTL asked of etcd: `lease_ttl_ms` rounded up to whole seconds.
    pub fn lease_ttl_s(&self) -> i64 {
        self.lease_ttl_ms.div_ceil(1000) as i64
    }

    /// The etcd keys of this node's cluster.
    pub fn keys(&self) -> Keys {
        Keys::new(&self.cluster)
    }
}

/// A stable 64-bit hash of a node's name (FNV-1a): the dataplane's replication node
/// id.
pub fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A node's id in etcd, from its name (`replication.node_id`): [`name_hash`] folded
/// to 32 bits, never 0.
pub fn node_id_from_name(name: &str) -> u32 {
    let h = name_hash(name);
    ((h ^ (h >> 32)) as u32).max(1)
}

/// Checks a cluster name: 1..=64 of `[A-Za-z0-9_-]`.
pub(crate) fn validate_cluster_name(name: &str) -> Result<(), ClusterError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ClusterError::Config(format!(
            "cluster name {name:?} must be 1..=64 of [A-Za-z0-9_-]"
        )))
    }
}

/// The etcd key layout of one cluster (docs/FAILOVER.md, "Keys").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// `/kvd/<cluster>/`: everything of the cluster (the node watches this prefix).
    pub prefix: String,
    /// `/kvd/<cluster>/members/`: one lease-bound key per live node.
    pub members: String,
    /// `/kvd/<cluster>/leader`: the master's lease-bound key.
    pub leader: String,
    /// `/kvd/<cluster>/epoch`: the last epoch a master was elected at (never leased).
    pub epoch: String,
    /// `/kvd/<cluster>/handover`: a planned switchover's target (never leased).
    pub handover: String,
    /// `/kvd/<cluster>/force`: an operator's forced election (never leased).
    pub force: String,
    /// `/kvd/<cluster>/tenants/`: one key per tenant (`<id>`), its value the JSON of a
    /// config `tenants[]` entry (never leased): the tenants every node applies.
    pub tenants: String,
}

impl Keys {
    /// The keys of cluster `cluster`.
    pub fn new(cluster: &str) -> Self {
        let prefix = format!("/kvd/{cluster}/");
        Keys {
            members: format!("{prefix}members/"),
            leader: format!("{prefix}leader"),
            epoch: format!("{prefix}epoch"),
            handover: format!("{prefix}handover"),
            force: format!("{prefix}force"),
            tenants: format!("{prefix}tenants/"),
            prefix,
        }
    }

    /// The member key of node `id`.
    pub fn member(&self, id: u32) -> String {
        format!("{}{id}", self.members)
    }

    /// The node id of a member key, or `None` when `key` is not one.
    pub fn member_id(&self, key: &[u8]) -> Option<u32> {
        id_after(key, &self.members)
    }

    /// The tenant key of tenant `id`.
    pub fn tenant(&self, id: u32) -> String {
        format!("{}{id}", self.tenants)
    }

    /// The tenant id of a tenant key, if `key` is one.
    pub fn tenant_id(&self, key: &[u8]) -> Option<u32> {
        id_after(key, &self.tenants)
    }
}

/// The decimal id that follows `prefix` in `key` (nothing else after it).
fn id_after(key: &[u8], prefix: &str) -> Option<u32> {
    let rest = key.strip_prefix(prefix.as_bytes())?;
    let s = std::str::from_utf8(rest).ok()?;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> NodeAddr {
        NodeAddr {
            mac: [2, 0, 0, 0, 0, 0xab],
            ip: Ipv4Addr::new(10, 0, 0, 7),
            qpn: 0xfffffe,
        }
    }

    #[test]
    fn addr_words_round_trip() {
        let a = addr();
        let (w0, w1) = a.to_words();
        assert_eq!(NodeAddr::from_words(w0, w1), a);
    }

    #[test]
    fn addr_json_round_trip_and_errors() {
        let a = addr();
        let j = serde_json::to_string(&a).unwrap();
        assert_eq!(
            j,
            r#"{"mac":"02:00:00:00:00:ab","ip":"10.0.0.7","qpn":16777214}"#
        );
        assert_eq!(serde_json::from_str::<NodeAddr>(&j).unwrap(), a);
        for bad in [
            r#"{"mac":"02:00:00:00:00","ip":"10.0.0.7","qpn":1}"#,
            r#"{"mac":"02:00:00:00:00:00:01","ip":"10.0.0.7","qpn":1}"#,
            r#"{"mac":"zz:00:00:00:00:00","ip":"10.0.0.7","qpn":1}"#,
            r#"{"mac":"02:00:00:00:00:01","ip":"10.0.0","qpn":1}"#,
            r#"{"mac":"02:00:00:00:00:01","ip":"10.0.0.7","qpn":16777216}"#,
            r#"{"mac":"02:00:00:00:00:01"}"#,
        ] {
            assert!(serde_json::from_str::<NodeAddr>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn validate_rejects_bad_timings() {
        let ok = ClusterConfig::new(vec!["http://127.0.0.1:1".into()], "c", 1, addr());
        ok.validate().unwrap();
        ok.clone().with_lease_ttl_ms(1000).validate().unwrap();
        let mut c = ok.clone();
        c.lease_ttl_ms = 999;
        assert!(c.validate().is_err());
        let c = ok.clone().with_lease_ttl_ms(1500);
        c.validate().unwrap();
        assert_eq!(c.lease_ttl_s(), 2);
        let mut c = ok.clone();
        c.keepalive_interval_ms = 1000;
        assert!(c.validate().is_err());
        let mut c = ok.clone();
        c.node_id = 0;
        assert!(c.validate().is_err());
        let mut c = ok.clone();
        c.cluster = "a/b".into();
        assert!(c.validate().is_err());
        let mut c = ok.clone();
        c.election_quorum = 0;
        assert!(c.validate().is_err());
        let c = ok.clone().with_quorum(3, 4);
        assert!(c.validate().is_err());
        ok.clone().with_quorum(3, 2).validate().unwrap();
        let mut c = ok;
        c.endpoints.clear();
        assert!(c.validate().is_err());
    }

    #[test]
    fn member_keys() {
        let k = Keys::new("east");
        assert_eq!(k.member(12), "/kvd/east/members/12");
        assert_eq!(k.member_id(b"/kvd/east/members/12"), Some(12));
        assert_eq!(k.member_id(b"/kvd/east/members/"), None);
        assert_eq!(k.member_id(b"/kvd/east/members/1x"), None);
        assert_eq!(k.member_id(b"/kvd/east/members/99999999999"), None);
        assert_eq!(k.member_id(b"/kvd/east/leader"), None);
    }
}
