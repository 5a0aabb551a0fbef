//! [`discover_master`]: where clients (kvclient, pktgen) find the master.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use crate::config::validate_cluster_name;
use crate::records::{decode, LeaderRecord};
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClusterError::Thread(e.to_string()))?;
    rt.block_on(discover_master_async(endpoints, cluster, timeout))
}

/// The async form of [`discover_master`].
pub async fn discover_master_async(
    endpoints: &[String],
    cluster: &str,
    timeout: Duration,
) -> Result<Option<MasterInfo>, ClusterError> {
    validate_cluster_name(cluster)?;
    if endpoints.is_empty() {
        return Err(ClusterError::Config("no etcd endpoints".into()));
    }
    let keys = Keys::new(cluster);
    let opts = ConnectOptions::new().with_connect_timeout(timeout);
    let too_slow = |what: &str| ClusterError::Etcd(format!("{what}: no answer within {timeout:?}"));
    let mut client = tokio::time::timeout(timeout, Client::connect(endpoints, Some(opts)))
        .await
        .map_err(|_| too_slow("connect"))?
        .map_err(|e| ClusterError::Etcd(format!("connect: {e}")))?;
    let resp = tokio::time::timeout(timeout, client.get(keys.leader.as_str(), None))
        .await
        .map_err(|_| too_slow("get leader"))?
        .map_err(|e| ClusterError::Etcd(format!("get leader: {e}")))?;
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
