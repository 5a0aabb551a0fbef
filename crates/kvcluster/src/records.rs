//! The values stored under the cluster's etcd keys (JSON, docs/FAILOVER.md "Keys").
//! Parsing never panics: a malformed value is an error the caller skips and counts.

use serde::{Deserialize, Serialize};

use crate::{ClusterError, NodeAddr, Role};

/// `/kvd/<cluster>/members/<id>`: one live node (bound to its lease).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// The node id (equal to the key's last component).
    pub id: u32,
    /// Where the node serves.
    pub addr: NodeAddr,
    /// The role the node had when it wrote the record.
    pub role: RoleName,
    /// The node's applied (replica) or acknowledged (master) stream offset.
    pub offset: u64,
    /// The highest epoch the node has seen.
    pub epoch: u64,
    /// Set while the cluster has no leader: the epoch whose master was lost. A record
    /// with `ready == Some(e)` carries the node's offset as of after that loss, so
    /// candidates of the election after epoch `e` compare final offsets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<u64>,
    /// Preference among members with equal offsets, lower first (a chain node's
    /// position: the dead head's successor before the tail). 0 when not set.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rank: u32,
    /// The epoch of the master whose stream the node's data follows (a master: its
    /// own epoch); 0 with [`DataState::None`]. The election compares `(hist, offset)`
    /// as Raft compares (last term, last index).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub hist: u64,
    /// What the node's data is worth to an election ([`DataState`]).
    #[serde(default)]
    pub data: DataState,
}

fn is_zero(r: &u32) -> bool {
    *r == 0
}

fn is_zero_u64(r: &u64) -> bool {
    *r == 0
}

/// What a member's data is worth to an election (docs/FAILOVER.md, "Election
/// safety"). A record without the field (an older node) reads as `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataState {
    /// No data of the cluster's history: started empty and not synced since, or in
    /// the middle of a full sync (its old data already being replaced). Never
    /// electable (but for a first election or an operator's forced one), never
    /// counted.
    #[default]
    None,
    /// A prefix of history `hist` up to `offset`, loaded from a file when the process
    /// started: a genuine prefix, so electable when it is the longest, but it may lack
    /// writes the node acknowledged before it stopped, so not counted for the quorum.
    Loaded,
    /// Received from a master (or written as master) by this process and kept since:
    /// it holds every write the node acknowledged. Electable and counted.
    Live,
}

impl DataState {
    /// A small code of the state (the view's atomics, a status counter).
    pub fn code(self) -> u64 {
        match self {
            DataState::None => 0,
            DataState::Loaded => 1,
            DataState::Live => 2,
        }
    }

    /// The inverse of [`DataState::code`] (an unknown code reads as `None`).
    pub fn from_code(c: u64) -> Self {
        match c {
            2 => DataState::Live,
            1 => DataState::Loaded,
            _ => DataState::None,
        }
    }

    /// The state's name, as in etcd: `none`, `loaded`, `live`.
    pub fn name(self) -> &'static str {
        match self {
            DataState::None => "none",
            DataState::Loaded => "loaded",
            DataState::Live => "live",
        }
    }
}

/// A role as written into etcd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoleName {
    /// Serving writes.
    Master,
    /// Following a master.
    Replica,
    /// Neither: joining, between masters, or stepped down.
    Fenced,
}

impl From<Role> for RoleName {
    fn from(r: Role) -> Self {
        match r {
            Role::Master => RoleName::Master,
            Role::Replica => RoleName::Replica,
            Role::Fenced => RoleName::Fenced,
        }
    }
}

/// `/kvd/<cluster>/leader`: the master (bound to the master's lease).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderRecord {
    /// The master's node id.
    pub id: u32,
    /// The epoch it was elected at.
    pub epoch: u64,
    /// Where it serves.
    pub addr: NodeAddr,
    /// Elected by an operator's forced election ([`ForceRecord`]), not by the rule:
    /// it may lack acknowledged writes, so a replica holding data refuses a full sync
    /// from it rather than discard that data (docs/FAILOVER.md "Election safety").
    #[serde(default, skip_serializing_if = "is_false")]
    pub forced: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `/kvd/<cluster>/handover`: a planned switchover (not leased, so it outlives the
/// master's lease revocation; valid only while `epoch` is the cluster's epoch).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoverRecord {
    /// The master handing over.
    pub from: u32,
    /// The node that is to campaign alone.
    pub target: u32,
    /// The epoch of the master handing over.
    pub epoch: u64,
}

/// `/kvd/<cluster>/force`: an operator's forced election (`ctlplane replication
/// force-elect`): while `epoch` is the cluster's epoch and the target is live, only
/// the target campaigns, whatever its data — it may lose acknowledged writes, and
/// the operator said so. Not leased; the target's campaign deletes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForceRecord {
    /// The node to elect.
    pub target: u32,
    /// The epoch whose master is to be replaced (the cluster's epoch when forced).
    pub epoch: u64,
}

/// Encodes a record as the JSON stored in etcd.
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail (no maps with non-string keys, no
    // custom serializers that error).
    serde_json::to_vec(v).unwrap_or_default()
}

/// Decodes a record read from etcd.
pub fn decode<'a, T: Deserialize<'a>>(what: &str, bytes: &'a [u8]) -> Result<T, ClusterError> {
    serde_json::from_slice(bytes).map_err(|e| ClusterError::Decode(format!("{what}: {e}")))
}

/// Decodes the epoch key's value: a decimal number.
pub fn decode_epoch(bytes: &[u8]) -> Result<u64, ClusterError> {
    std::str::from_utf8(bytes)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            ClusterError::Decode(format!(
                "epoch value {:?} is not a decimal number",
                String::from_utf8_lossy(bytes)
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    fn addr() -> NodeAddr {
        NodeAddr {
            mac: [2, 0, 0, 0, 0, 1],
            ip: Ipv4Addr::new(10, 0, 0, 1),
            qpn: 7,
        }
    }

    #[test]
    fn member_round_trip() {
        let m = MemberRecord {
            id: 3,
            addr: addr(),
            role: RoleName::Replica,
            offset: 1 << 40,
            epoch: 9,
            ready: Some(9),
            rank: 0,
            hist: 0,
            data: DataState::None,
        };
        let b = encode(&m);
        assert!(!String::from_utf8_lossy(&b).contains("rank"));
        assert_eq!(decode::<MemberRecord>("m", &b).unwrap(), m);
        let no_ready = MemberRecord {
            ready: None,
            ..m.clone()
        };
        let b = encode(&no_ready);
        assert!(!String::from_utf8_lossy(&b).contains("ready"));
        assert_eq!(decode::<MemberRecord>("m", &b).unwrap(), no_ready);
        let ranked = MemberRecord {
            rank: 2,
            ..m.clone()
        };
        assert_eq!(
            decode::<MemberRecord>("m", &encode(&ranked)).unwrap(),
            ranked
        );
        let live = MemberRecord {
            hist: 4,
            data: DataState::Live,
            ..m.clone()
        };
        let b = encode(&live);
        assert!(String::from_utf8_lossy(&b).contains(r#""data":"live""#));
        assert_eq!(decode::<MemberRecord>("m", &b).unwrap(), live);
        // An older node's record (no hist, no data) holds no data.
        let old = br#"{"id":3,"addr":{"mac":"02:00:00:00:00:01","ip":"10.0.0.1","qpn":7},"role":"replica","offset":5,"epoch":2}"#;
        let d = decode::<MemberRecord>("m", old).unwrap();
        assert_eq!((d.hist, d.data), (0, DataState::None));
        for d in [DataState::None, DataState::Loaded, DataState::Live] {
            assert_eq!(DataState::from_code(d.code()), d);
            assert_eq!(serde_json::to_value(d).unwrap(), d.name());
        }
        assert_eq!(DataState::from_code(3), DataState::None);
    }

    #[test]
    fn leader_round_trip() {
        let l = LeaderRecord {
            id: 4,
            epoch: 7,
            addr: addr(),
            forced: false,
        };
        let b = encode(&l);
        assert!(!String::from_utf8_lossy(&b).contains("forced"));
        assert_eq!(decode::<LeaderRecord>("l", &b).unwrap(), l);
        let f = LeaderRecord { forced: true, ..l };
        assert_eq!(decode::<LeaderRecord>("l", &encode(&f)).unwrap(), f);
    }

    #[test]
    fn epoch_values() {
        assert_eq!(decode_epoch(b"0").unwrap(), 0);
        assert_eq!(decode_epoch(b"42").unwrap(), 42);
        for bad in [
            &b""[..],
            b"-1",
            b"1.5",
            b" 1",
            b"99999999999999999999999",
            b"\xff",
        ] {
            assert!(decode_epoch(bad).is_err());
        }
    }

    proptest! {
        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode::<MemberRecord>("m", &bytes);
            let _ = decode::<LeaderRecord>("l", &bytes);
            let _ = decode::<HandoverRecord>("h", &bytes);
            let _ = decode::<ForceRecord>("f", &bytes);
            let _ = decode_epoch(&bytes);
        }
    }
}
