//! [`discover_master`]: where clients (kvclient, pktgen) find the master;
//! [`list_members`]: the live members and the chain order, for operators and clients;
//! [`force_election`]: the operator's override of the election's safety rule.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use crate::config::validate_cluster_name;
use crate::records::{decode, decode_epoch, encode, ForceRecord, LeaderRecord, MemberRecord};
use crate::{ClusterError, Keys, MasterInfo};

/// Reads the leader key of `cluster`: `Ok(None)` when the cluster has no master right now
/// (an election is under way, or nobody ever joined). A master found here may already be
/// fenced; a client that then gets a NOT_MASTER status asks again (docs/FAILOVER.md,
/// "What clients do"). Blocking: runs its own short-lived runtime; each step gives up
/// after `timeout`.
pub fn discover_master(
    endpoints: &[String],
    cluster: &str,
    timeout: Duration,
) -> Result<Option<MasterInfo>, ClusterError> {
    block_on(discover_master_async(endpoints, cluster, timeout))
}

/// The async form of [`discover_master`].
pub async fn discover_master_async(
    endpoints: &[String],
    cluster: &str,
    timeout: Duration,
) -> Result<Option<MasterInfo>, ClusterError> {
    let keys = Keys::new(cluster);
    let mut client = connect(endpoints, cluster, timeout).await?;
    let resp = within(
        timeout,
        "get leader",
        client.get(keys.leader.as_str(), None),
    )
    .await?;
    let Some(kv) = resp.kvs().first() else {
        return Ok(None);
    };
    let l: LeaderRecord = decode("leader", kv.value())?;
    Ok(Some(MasterInfo {
        id: l.id,
        epoch: l.epoch,
        addr: l.addr,
    }))
}

/// Runs `f` to completion on a short-lived current-thread runtime (the blocking
/// forms of this module's calls).
pub(crate) fn block_on<T>(
    f: impl std::future::Future<Output = Result<T, ClusterError>>,
) -> Result<T, ClusterError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClusterError::Thread(e.to_string()))?
        .block_on(f)
}

/// Connects to `endpoints` for `cluster` (validated), within `timeout`.
pub(crate) async fn connect(
    endpoints: &[String],
    cluster: &str,
    timeout: Duration,
) -> Result<Client, ClusterError> {
    validate_cluster_name(cluster)?;
    if endpoints.is_empty() {
        return Err(ClusterError::Config("no etcd endpoints".into()));
    }
    let opts = ConnectOptions::new().with_connect_timeout(timeout);
    within(timeout, "connect", Client::connect(endpoints, Some(opts))).await
}

/// One etcd request, given up after `timeout`; `what` names it in the error.
pub(crate) async fn within<T>(
    timeout: Duration,
    what: &str,
    f: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, ClusterError> {
    tokio::time::timeout(timeout, f)
        .await
        .map_err(|_| ClusterError::Etcd(format!("{what}: no answer within {timeout:?}")))?
        .map_err(|e| ClusterError::Etcd(format!("{what}: {e}")))
}

/// The live members of `cluster` (their member keys), in [`chain_order`], and the
/// master's id when there is one. A member key whose value does not parse is
/// skipped. Blocking, as [`discover_master`].
pub fn list_members(
    endpoints: &[String],
    cluster: &str,
    timeout: Duration,
) -> Result<(Option<u32>, Vec<MemberRecord>), ClusterError> {
    block_on(async {
        let keys = Keys::new(cluster);
        let mut client = connect(endpoints, cluster, timeout).await?;
        let prefix = Some(etcd_client::GetOptions::new().with_prefix());
        let resp = within(timeout, "get", client.get(keys.prefix.as_str(), prefix)).await?;
        let mut leader = None;
        let mut members = Vec::new();
        for kv in resp.kvs() {
            if kv.key() == keys.leader.as_bytes() {
                leader = decode::<LeaderRecord>("leader", kv.value())
                    .ok()
                    .map(|l| l.id);
            } else if keys.member_id(kv.key()).is_some() {
                if let Ok(m) = decode::<MemberRecord>("member", kv.value()) {
                    members.push(m);
                }
            }
        }
        chain_order(leader, &mut members);
        Ok((leader, members))
    })
}

/// Forces the election of node `target` while `cluster` has no master: writes the
/// force key (`{target, epoch}` with the cluster's current epoch) if there is no
/// leader and `target` is a live member, in one etcd transaction. The target then
/// campaigns alone, whatever its data — **acknowledged writes it lacks are lost**,
/// and every other node resyncs from it. Returns the epoch whose master it replaces.
/// For a cluster that waits for a quorum that will never come back (docs/FAILOVER.md,
/// "Election safety").
pub fn force_election(
    endpoints: &[String],
    cluster: &str,
    target: u32,
    timeout: Duration,
) -> Result<u64, ClusterError> {
    block_on(async {
        use etcd_client::{Compare, CompareOp, Txn, TxnOp};
        let keys = Keys::new(cluster);
        let mut client = connect(endpoints, cluster, timeout).await?;
        let resp = within(timeout, "get epoch", client.get(keys.epoch.as_str(), None)).await?;
        let (epoch, epoch_cmp) = match resp.kvs().first() {
            Some(kv) => (
                decode_epoch(kv.value())?,
                Compare::mod_revision(keys.epoch.as_str(), CompareOp::Equal, kv.mod_revision()),
            ),
            None => (
                0,
                Compare::version(keys.epoch.as_str(), CompareOp::Equal, 0),
            ),
        };
        let rec = ForceRecord { target, epoch };
        let txn = Txn::new()
            .when([
                Compare::version(keys.leader.as_str(), CompareOp::Equal, 0),
                Compare::version(keys.member(target), CompareOp::Greater, 0),
                epoch_cmp,
            ])
            .and_then([TxnOp::put(keys.force.as_str(), encode(&rec), None)]);
        let r = within(timeout, "force txn", client.txn(txn)).await?;
        if !r.succeeded() {
            return Err(ClusterError::Config(format!(
                "not forced: the cluster has a master, node {target} is not a live member, \
                 or the epoch moved (epoch {epoch})"
            )));
        }
        Ok(epoch)
    })
}

/// Sorts `members` as a chain runs: the master (`leader`) first, then by election
/// rank (a chain node's position; a node appended behind the tail ranks after every
/// other), then by id. In a star every replica has rank 0: they follow by id.
pub fn chain_order(leader: Option<u32>, members: &mut [MemberRecord]) {
    members.sort_by_key(|m| (Some(m.id) != leader, m.rank, m.id));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::RoleName;
    use std::net::Ipv4Addr;

    #[test]
    fn chain_order_puts_the_master_first_then_ranks() {
        let m = |id: u32, rank: u32| MemberRecord {
            id,
            addr: crate::NodeAddr {
                mac: [2, 0, 0, 0, 0, id as u8],
                ip: Ipv4Addr::new(10, 0, 0, id as u8),
                qpn: 1,
            },
            role: RoleName::Replica,
            offset: 0,
            epoch: 1,
            ready: None,
            rank,
            hist: 0,
            data: crate::records::DataState::None,
        };
        // Head 1 died; 2 (rank 1) is master; 3 (rank 2) behind it; 7, restarted at
        // configured rank 0, appended behind 3 with rank 3.
        let mut ms = vec![m(7, 3), m(3, 2), m(2, 1)];
        chain_order(Some(2), &mut ms);
        assert_eq!(ms.iter().map(|m| m.id).collect::<Vec<_>>(), [2, 3, 7]);
        // No master: by rank, then id.
        let mut ms = vec![m(9, 0), m(4, 1), m(5, 0)];
        chain_order(None, &mut ms);
        assert_eq!(ms.iter().map(|m| m.id).collect::<Vec<_>>(), [5, 9, 4]);
    }
}
