//! The cluster's tenants in etcd (`Keys::tenants`): the operator writes them once
//! (`ctlplane tenants add --cluster`), every node's control thread sees them through its
//! watch of the cluster prefix (`ClusterView::tenants`) and applies them, so a tenant
//! is the same on every node and survives a failover. Each value is the JSON of a
//! config `tenants[]` entry (`kvconf::TenantConfig`); this crate stores it as given.

use std::time::Duration;

use crate::discover::{block_on, connect, within};
use crate::{ClusterError, Keys};
use etcd_client::GetOptions;

/// Writes tenant `id`'s record (`json`, a config `tenants[]` entry): added, or replaced.
pub fn put_tenant(
    endpoints: &[String],
    cluster: &str,
    id: u32,
    json: &[u8],
    timeout: Duration,
) -> Result<(), ClusterError> {
    block_on(async {
        let mut c = connect(endpoints, cluster, timeout).await?;
        let key = Keys::new(cluster).tenant(id);
        within(timeout, "put tenant", c.put(key, json.to_vec(), None)).await?;
        Ok(())
    })
}

/// Deletes tenant `id`'s record; whether there was one.
pub fn delete_tenant(
    endpoints: &[String],
    cluster: &str,
    id: u32,
    timeout: Duration,
) -> Result<bool, ClusterError> {
    block_on(async {
        let mut c = connect(endpoints, cluster, timeout).await?;
        let key = Keys::new(cluster).tenant(id);
        let r = within(timeout, "delete tenant", c.delete(key, None)).await?;
        Ok(r.deleted() > 0)
    })
}

/// Every tenant record of the cluster as (id, stored JSON), by id.
pub fn list_tenants(
    endpoints: &[String],
    cluster: &str,
    timeout: Duration,
) -> Result<Vec<(u32, Vec<u8>)>, ClusterError> {
    block_on(async {
        let mut c = connect(endpoints, cluster, timeout).await?;
        let keys = Keys::new(cluster);
        let prefix = Some(GetOptions::new().with_prefix());
        let r = within(
            timeout,
            "list tenants",
            c.get(keys.tenants.as_str(), prefix),
        )
        .await?;
        let mut out: Vec<(u32, Vec<u8>)> = r
            .kvs()
            .iter()
            .filter_map(|kv| Some((keys.tenant_id(kv.key())?, kv.value().to_vec())))
            .collect();
        out.sort_by_key(|(id, _)| *id);
        Ok(out)
    })
}
