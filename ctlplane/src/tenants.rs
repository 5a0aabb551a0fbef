//! `ctlplane tenants list|add|remove|rotate`: tenants of a running dataplane
//! (docs/PROTOCOL.md §6.8, docs/OPERATIONS.md "Tenants"). `add` and `rotate` draw a
//! fresh secret from the OS random generator and write the tenant's credentials file
//! (mode 0600) for its clients (`kvcli --tenant-file`, `kvdirect.Client(tenant_file=)`);
//! the secret is never printed.

use crate::target::Target;
use clap::Subcommand;
use rand::RngCore;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Bytes of a generated secret.
const SECRET_LEN: usize = 32;

/// Tenant commands.
#[derive(Subcommand, Debug)]
pub enum TenantsCmd {
    /// Show the tenants (ids, names, ACLs, quotas; never secrets).
    List {
        #[command(flatten)]
        target: Target,
        /// The whole cluster's tenants, in etcd (the `replication.etcd` of `--config`):
        /// every node applies them at once, and after any failover.
        #[arg(long)]
        cluster: bool,
    },
    /// Add a tenant with a fresh secret; writes its credentials file.
    Add {
        #[command(flatten)]
        target: Target,
        /// The whole cluster's tenants, in etcd (the `replication.etcd` of `--config`):
        /// every node applies them at once, and after any failover.
        #[arg(long)]
        cluster: bool,
        /// A name for operators (unique).
        #[arg(long)]
        name: String,
        /// The tenant id, 1..=16777215 (unique).
        #[arg(long)]
        id: u32,
        /// Op categories allowed: read, write, atomic, txn joined by `,`, or all.
        #[arg(long, default_value = "all")]
        acl: String,
        /// Opened QPs per worker (0: no limit).
        #[arg(long, default_value_t = 0)]
        max_connections: u32,
        /// Requests per second per worker (0: no limit).
        #[arg(long, default_value_t = 0)]
        requests_per_s: u32,
        /// Requests in flight per opened QP (the window its ACCEPTs grant): a power of
        /// two (0: the server's `server.credits`).
        #[arg(long, default_value_t = 0)]
        max_credits: u16,
        /// Opened QPs per worker held for the tenant while it has fewer: anonymous
        /// clients and other tenants cannot take them (0: none).
        #[arg(long, default_value_t = kvconf::DEFAULT_RESERVED_CONNECTIONS)]
        reserved_connections: u32,
        /// Where to write the credentials file (refused if it exists).
        #[arg(long)]
        credentials_out: PathBuf,
    },
    /// Remove a tenant: its clients' connections close at once and its keys are
    /// deleted on every worker (and, through replication, on every replica); prints
    /// how many.
    Remove {
        #[command(flatten)]
        target: Target,
        /// The whole cluster's tenants, in etcd (the `replication.etcd` of `--config`):
        /// every node applies them at once, and after any failover.
        #[arg(long)]
        cluster: bool,
        /// The tenant id.
        #[arg(long)]
        id: u32,
        /// Keep the tenant's keys (fenced: no client can reach them until a tenant of
        /// this id is added again, or `tenants purge` deletes them).
        #[arg(long)]
        keep_data: bool,
    },
    /// Delete the keys of a tenant id that is not a tenant now (kept with
    /// `--keep-data`, or left by a master that failed during a purge); prints how many.
    Purge {
        #[command(flatten)]
        target: Target,
        /// The tenant id.
        #[arg(long)]
        id: u32,
    },
    /// Give a tenant a new secret: its clients' connections close at once; writes the
    /// new credentials file.
    Rotate {
        #[command(flatten)]
        target: Target,
        /// The whole cluster's tenants, in etcd (the `replication.etcd` of `--config`):
        /// every node applies them at once, and after any failover.
        #[arg(long)]
        cluster: bool,
        /// The tenant id.
        #[arg(long)]
        id: u32,
        /// Where to write the new credentials file (refused if it exists).
        #[arg(long)]
        credentials_out: PathBuf,
    },
}

/// A credentials file is never overwritten.
fn refuse_existing(path: &Path) -> Result<(), String> {
    if path.exists() {
        return Err(format!("{} exists: not overwritten", path.display()));
    }
    Ok(())
}

/// The checks of a new tenant's name and ACL (and its credentials file's path); the
/// ACL's bits.
fn check_new(name: &str, acl: &str, credentials_out: &Path) -> Result<u8, String> {
    let bits = kvwire::tenant::parse_acl(acl)?;
    if name.contains(',') || name.is_empty() {
        return Err("--name: a non-empty name without commas".into());
    }
    refuse_existing(credentials_out)?;
    Ok(bits)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A fresh secret, hex.
fn fresh_secret() -> String {
    let mut s = [0u8; SECRET_LEN];
    rand::rngs::OsRng.fill_bytes(&mut s);
    hex(&s)
}

/// Writes `{"tenant": id, "secret": hex}` to `path`, readable by its owner only;
/// refuses to overwrite.
pub(crate) fn write_credentials(path: &Path, id: u32, secret: &str) -> Result<(), String> {
    let text = serde_json::to_string(&kvconf::TenantCredentials {
        tenant: id,
        secret: secret.to_string(),
    })
    .map_err(|e| e.to_string())?;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts
        .open(path)
        .map_err(|e| format!("credentials file {}: {e}", path.display()))?;
    writeln!(f, "{text}").map_err(|e| format!("credentials file {}: {e}", path.display()))
}

/// Runs a tenant command: on the node `--config` names, or (`--cluster`) in its
/// cluster's etcd.
pub fn run(cmd: TenantsCmd) -> Result<(), String> {
    use crate::tenants_etcd as etcd;
    match cmd {
        TenantsCmd::List { target, cluster } => {
            if cluster {
                return etcd::list(&target.config);
            }
            let v = target.connect()?.query("/kvd/tenants")?;
            print!("{}", render_list(&v));
            Ok(())
        }
        TenantsCmd::Add {
            target,
            cluster,
            name,
            id,
            acl,
            max_connections,
            requests_per_s,
            max_credits,
            reserved_connections,
            credentials_out,
        } => {
            let bits = check_new(&name, &acl, &credentials_out)?;
            let t = kvconf::TenantConfig {
                name,
                id,
                secret: fresh_secret(),
                acl,
                max_connections,
                requests_per_s,
                max_credits,
                reserved_connections,
            };
            t.validate()?;
            if cluster {
                etcd::add(&target.config, t, &credentials_out)
            } else {
                add_on_node(&target, &t, bits, &credentials_out)
            }
        }
        TenantsCmd::Remove {
            target,
            cluster,
            id,
            keep_data,
        } => {
            if cluster {
                return etcd::remove(&target.config, id, keep_data);
            }
            let mut t = target.connect()?;
            let v = t.query(&format!("/kvd/tenants/remove,{id},{}", u8::from(keep_data)))?;
            println!(
                "removed tenant {id}: generation {} applied by {} worker(s)",
                v["generation"], v["applied_by_workers"]
            );
            match v["purge"].as_u64() {
                Some(seq) if seq > 0 => wait_purge(&mut t, seq),
                _ => {
                    println!("kept its keys (fenced: no client reaches them)");
                    Ok(())
                }
            }
        }
        TenantsCmd::Purge { target, id } => {
            let mut t = target.connect()?;
            let v = t.query(&format!("/kvd/tenants/purge,{id}"))?;
            match v["purge"].as_u64() {
                Some(seq) if seq > 0 => wait_purge(&mut t, seq),
                _ => Err(format!("purge of tenant {id}: no purge started: {v}")),
            }
        }
        TenantsCmd::Rotate {
            target,
            cluster,
            id,
            credentials_out,
        } => {
            refuse_existing(&credentials_out)?;
            let secret = fresh_secret();
            if cluster {
                return etcd::rotate(&target.config, id, secret, &credentials_out);
            }
            let v = target
                .connect()?
                .query(&format!("/kvd/tenants/rotate,{id},{secret}"))?;
            write_credentials(&credentials_out, id, &secret)?;
            println!(
                "rotated tenant {id}'s secret: generation {} applied by {} worker(s); \
                 credentials in {}",
                v["generation"],
                v["applied_by_workers"],
                credentials_out.display()
            );
            Ok(())
        }
    }
}

/// Waits for purge `seq` of a node to finish (printing progress each second) and
/// prints the keys it deleted and the rate.
fn wait_purge(t: &mut crate::telemetry::Telemetry, seq: u64) -> Result<(), String> {
    let t0 = std::time::Instant::now();
    let mut last_print = t0;
    loop {
        let v = t.query(&format!("/kvd/tenants/purge_status,{seq}"))?;
        match v["state"].as_str() {
            Some("finished") => {
                let n = v["deleted"].as_u64().unwrap_or(0);
                let s = t0.elapsed().as_secs_f64();
                println!(
                    "purged tenant {}'s namespace: {n} key(s) deleted in {s:.2} s ({:.0} keys/s)",
                    v["id"],
                    n as f64 / s.max(1e-9)
                );
                return Ok(());
            }
            Some("running") => {
                if last_print.elapsed() >= std::time::Duration::from_secs(1) {
                    println!(
                        "purging: {} of {} worker(s) done",
                        v["workers_done"], v["workers"]
                    );
                    last_print = std::time::Instant::now();
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            _ => return Err(format!("purge {seq}: not known to the dataplane ({v})")),
        }
    }
}

/// `tenants add` on one node (its telemetry socket): `t` with ACL bits `bits`.
fn add_on_node(
    target: &Target,
    t: &kvconf::TenantConfig,
    bits: u8,
    credentials_out: &Path,
) -> Result<(), String> {
    let v = target.connect()?.query(&format!(
        "/kvd/tenants/add,{},{},{},{bits},{},{},{},{}",
        t.name,
        t.id,
        t.secret,
        t.max_connections,
        t.requests_per_s,
        t.max_credits,
        t.reserved_connections
    ))?;
    write_credentials(credentials_out, t.id, &t.secret)?;
    println!(
        "added tenant {} ({}), acl {}: generation {} applied by {} worker(s); \
         credentials in {}",
        t.id,
        t.name,
        kvwire::tenant::acl_names(bits),
        v["generation"],
        v["applied_by_workers"],
        credentials_out.display()
    );
    Ok(())
}

/// The header line of a tenants table (node or cluster).
pub(crate) fn table_header() -> String {
    format!(
        "{:>9}  {:<16} {:<22} {:>9} {:>9} {:>7}",
        "id", "name", "acl", "max_conns", "req/s", "credits"
    )
}

/// One tenant's line of a tenants table (`credits` 0: the server's).
pub(crate) fn table_row(
    id: u32,
    name: &str,
    acl: &str,
    maxc: u32,
    rps: u32,
    credits: u16,
) -> String {
    let credits = match credits {
        0 => "server".to_string(),
        w => w.to_string(),
    };
    format!("{id:>9}  {name:<16} {acl:<22} {maxc:>9} {rps:>9} {credits:>7}")
}

/// The `list` table of a `/kvd/tenants` reply.
fn render_list(v: &Value) -> String {
    let col = |k: &str| -> Vec<u64> {
        v[k].as_array()
            .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
            .unwrap_or_default()
    };
    let mut out = format!(
        "generation {}, clients without a tenant {}\n{}\n",
        v["generation"],
        if v["anonymous"].as_u64() == Some(1) {
            "allowed"
        } else {
            "refused"
        },
        table_header()
    );
    let (ids, acl, maxc, rps, credits) = (
        col("id"),
        col("acl"),
        col("max_connections"),
        col("requests_per_s"),
        col("max_credits"),
    );
    let at = |c: &[u64], i: usize| c.get(i).copied().unwrap_or(0);
    for (i, &id) in ids.iter().enumerate() {
        let name = v["name"][id.to_string()].as_str().unwrap_or("?");
        let acl = kvwire::tenant::acl_names(at(&acl, i) as u8);
        out += &table_row(
            id as u32,
            name,
            &acl,
            at(&maxc, i) as u32,
            at(&rps, i) as u32,
            at(&credits, i) as u16,
        );
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_renders_and_credentials_are_private_and_never_overwritten() {
        let v = json!({"generation": 3, "anonymous": 0, "id": [7, 9], "acl": [3, 1],
            "max_connections": [10, 0], "requests_per_s": [0, 5], "max_credits": [4, 0],
            "name": {"7": "app", "9": "ro"}});
        let t = render_list(&v);
        assert!(
            t.contains("refused") && t.contains("app") && t.contains("read,write"),
            "{t}"
        );
        let rows: Vec<Vec<&str>> = t
            .lines()
            .skip(2)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0], ["7", "app", "read,write", "10", "0", "4"], "{t}");
        assert_eq!(rows[1], ["9", "ro", "read", "0", "5", "server"], "{t}");
        let dir = std::env::temp_dir().join(format!("kvd-tenants-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let p = dir.join("c.json");
        let _ = std::fs::remove_file(&p);
        let s = fresh_secret();
        assert_eq!(s.len(), 2 * SECRET_LEN);
        write_credentials(&p, 7, &s).unwrap();
        assert_eq!(kvconf::TenantCredentials::load(&p).unwrap().0, 7);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "readable by its owner only");
        }
        assert!(write_credentials(&p, 7, &s).is_err(), "not overwritten");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
