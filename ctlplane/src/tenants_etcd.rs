//! `ctlplane tenants ... --cluster`: a cluster's tenants in its etcd (docs/OPERATIONS.md
//! "Tenants"), each the JSON of a config `tenants[]` entry under
//! `/kvd/<cluster>/tenants/<id>`. Every node watches them and applies them at once
//! (`dataplane::control::tenant_sync`); a tenant so kept is the same on every node and
//! on whichever node is elected next. The secret (drawn by `tenants.rs`) is stored in etcd (the
//! cluster's trusted store, as a config file is a node's) and written to the
//! credentials file; it is never printed.

use crate::replication::etcd_section;
use crate::tenants::write_credentials;
use kvconf::TenantConfig;
use std::path::Path;
use std::time::Duration;

/// How long one etcd request may take.
const ETCD_TIMEOUT: Duration = Duration::from_secs(2);

/// The cluster's tenant records, read as config tenants (a record that does not read
/// is an error: the operator sees it rather than a shorter list).
fn read_all(endpoints: &[String], cluster: &str) -> Result<Vec<TenantConfig>, String> {
    kvcluster::list_tenants(endpoints, cluster, ETCD_TIMEOUT)
        .map_err(|e| format!("etcd: {e}"))?
        .into_iter()
        .map(|(id, json)| {
            serde_json::from_slice(&json).map_err(|e| format!("tenant record {id}: {e}"))
        })
        .collect()
}

fn put(endpoints: &[String], cluster: &str, t: &TenantConfig) -> Result<(), String> {
    let json = serde_json::to_vec(t).map_err(|e| e.to_string())?;
    kvcluster::put_tenant(endpoints, cluster, t.id, &json, ETCD_TIMEOUT)
        .map_err(|e| format!("etcd: {e}"))
}

/// `tenants list --cluster`.
pub fn list(config: &Path) -> Result<(), String> {
    let etcd = etcd_section(config)?;
    let all = read_all(&etcd.endpoints, &etcd.cluster)?;
    println!(
        "cluster {} (etcd): {} tenant(s)\n{}",
        etcd.cluster,
        all.len(),
        crate::tenants::table_header()
    );
    for t in &all {
        println!(
            "{}",
            crate::tenants::table_row(
                t.id,
                &t.name,
                &t.acl,
                t.max_connections,
                t.requests_per_s,
                t.max_credits
            )
        );
    }
    Ok(())
}

/// `tenants add --cluster`: `t` (its secret freshly drawn), refused if its id or name
/// is taken in the cluster.
pub fn add(config: &Path, t: TenantConfig, credentials_out: &Path) -> Result<(), String> {
    let etcd = etcd_section(config)?;
    if let Some(o) = read_all(&etcd.endpoints, &etcd.cluster)?
        .iter()
        .find(|o| o.id == t.id || o.name == t.name)
    {
        return Err(format!(
            "the cluster has tenant {} ({:?}): id or name taken",
            o.id, o.name
        ));
    }
    t.validate()?;
    put(&etcd.endpoints, &etcd.cluster, &t)?;
    write_credentials(credentials_out, t.id, &t.secret)?;
    println!(
        "added tenant {} ({}) to cluster {}, acl {}: every node applies it; credentials in {}",
        t.id,
        t.name,
        etcd.cluster,
        t.acl,
        credentials_out.display()
    );
    Ok(())
}

/// `tenants remove --cluster`: its clients' connections close on every node.
pub fn remove(config: &Path, id: u32, keep_data: bool) -> Result<(), String> {
    if keep_data {
        return Err(
            "--keep-data is for one node's tenants: a cluster tenant's keys are deleted by \
             the master when it goes (its replicas follow)"
                .into(),
        );
    }
    let etcd = etcd_section(config)?;
    let gone = kvcluster::delete_tenant(&etcd.endpoints, &etcd.cluster, id, ETCD_TIMEOUT)
        .map_err(|e| format!("etcd: {e}"))?;
    if !gone {
        return Err(format!("cluster {} has no tenant {id}", etcd.cluster));
    }
    println!(
        "removed tenant {id} from cluster {}: every node closes its connections, and the \
         master deletes its keys (its replicas follow)",
        etcd.cluster
    );
    Ok(())
}

/// `tenants rotate --cluster`: the new `secret` (its clients' connections close on
/// every node; they OPEN again with the new credentials).
pub fn rotate(
    config: &Path,
    id: u32,
    secret: String,
    credentials_out: &Path,
) -> Result<(), String> {
    let etcd = etcd_section(config)?;
    let mut t = read_all(&etcd.endpoints, &etcd.cluster)?
        .into_iter()
        .find(|t| t.id == id)
        .ok_or_else(|| format!("cluster {} has no tenant {id}", etcd.cluster))?;
    t.secret = secret;
    put(&etcd.endpoints, &etcd.cluster, &t)?;
    write_credentials(credentials_out, id, &t.secret)?;
    println!(
        "rotated tenant {id}'s secret in cluster {}; credentials in {}",
        etcd.cluster,
        credentials_out.display()
    );
    Ok(())
}
