//! The tenant commands of the telemetry socket (`ctlplane tenants`): list, add,
//! remove, rotate. Secrets travel only over this local socket, never back out: the
//! list shows ids, names, ACLs and quotas.

use super::{error, parse_u32, report_applied};
use dataplane::control::ControlState;
use dataplane::server::TenantRule;
use dataplane::tenant_stats::OTHER;
use dpdk::telemetry::{register_cmd, TelDict};
use std::sync::Arc;

/// Registers `/kvd/tenants` and its `add`, `remove`, `rotate`.
pub fn register(ctl: &Arc<ControlState>) -> dpdk::Result<()> {
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/tenants",
        "Tenants (ids, names, ACL bits, quotas; no secrets) and the generation",
        move |_, d| list(&c, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/tenants/stats",
        "Per-tenant counters summed over the workers (the first 64 tenants by id; id 0: the others)",
        move |_, d| tenant_stats(&c, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/tenants/add",
        "Add a tenant. Params: NAME,ID,SECRET_HEX,ACL_BITS,MAX_CONNECTIONS,REQUESTS_PER_S,\
         MAX_CREDITS,RESERVED_CONNECTIONS",
        move |p, d| add(&c, p, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/tenants/remove",
        "Remove a tenant (its connections close; its keys are purged unless KEEP is 1). \
         Params: ID[,KEEP]",
        move |p, d| remove(&c, p, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/tenants/purge",
        "Purge the namespace of a tenant id that is not a tenant now. Param: ID",
        move |p, d| purge(&c, p, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/tenants/purge_status",
        "Where a purge stands: state (running, finished, unknown), workers done, keys deleted. \
         Param: SEQ",
        move |p, d| purge_status(&c, p, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/tenants/rotate",
        "Give a tenant a new secret (its connections close). Params: ID,SECRET_HEX",
        move |p, d| rotate(&c, p, d),
    )
}

fn list(ctl: &ControlState, d: &mut TelDict<'_>) {
    let (generation, rules, anonymous) = ctl.tenants();
    let _ = d.add_u64("generation", generation);
    let _ = d.add_u64("anonymous", u64::from(anonymous));
    let col = |f: &dyn Fn(&TenantRule) -> u64| rules.iter().map(f).collect::<Vec<u64>>();
    let _ = d.add_u64_array("id", &col(&|r| u64::from(r.id)));
    let _ = d.add_u64_array("acl", &col(&|r| u64::from(r.acl)));
    let _ = d.add_u64_array("max_connections", &col(&|r| u64::from(r.max_connections)));
    let _ = d.add_u64_array("requests_per_s", &col(&|r| u64::from(r.requests_per_s)));
    let _ = d.add_u64_array("max_credits", &col(&|r| u64::from(r.max_credits)));
    let _ = d.add_dict("name", |x| {
        for r in &rules {
            let _ = x.add_str(&r.id.to_string(), &r.name);
        }
    });
}

/// Per tenant (by id; `other` as 0), the counters of every worker's slots summed.
fn tenant_stats(ctl: &ControlState, d: &mut TelDict<'_>) {
    use kvwire::counters::TENANT_FAMILIES;
    use std::collections::BTreeMap;
    use std::sync::atomic::Ordering;
    let mut by_id: BTreeMap<u32, [u64; TENANT_FAMILIES.len()]> = BTreeMap::new();
    for w in 0..ctl.workers() {
        let t = &ctl.stats(w).tenants;
        for (i, s) in t.0.iter().enumerate() {
            let id = if i == usize::from(OTHER) {
                0
            } else {
                s.id.load(Ordering::Relaxed)
            };
            let v = s.values();
            // An unused slot, or `other` with nothing counted.
            if id == 0 && (i != usize::from(OTHER) || v.iter().all(|&x| x == 0)) {
                continue;
            }
            let e = by_id.entry(id).or_default();
            for (a, b) in e.iter_mut().zip(v) {
                *a += b;
            }
        }
    }
    let col = |k: usize| by_id.values().map(|v| v[k]).collect::<Vec<u64>>();
    let ids: Vec<u64> = by_id.keys().map(|&i| u64::from(i)).collect();
    let _ = d.add_u64_array("id", &ids);
    for (k, f) in TENANT_FAMILIES.iter().enumerate() {
        let _ = d.add_u64_array(f.key, &col(k));
    }
}

/// `p` split at commas into exactly `N` fields.
fn fields<'a, const N: usize>(p: &'a str, usage: &str) -> Result<[&'a str; N], String> {
    let parts: Vec<&str> = p.split(',').map(str::trim).collect();
    <[&str; N]>::try_from(parts).map_err(|_| format!("expected parameters {usage}, got {p:?}"))
}

fn add(ctl: &ControlState, p: &str, d: &mut TelDict<'_>) {
    let usage =
        "NAME,ID,SECRET_HEX,ACL_BITS,MAX_CONNECTIONS,REQUESTS_PER_S,MAX_CREDITS,RESERVED_CONNECTIONS";
    let rule =
        fields::<8>(p, usage).and_then(|[name, id, secret, acl, maxc, rps, credits, reserved]| {
            if name.is_empty() {
                return Err("empty tenant name".to_string());
            }
            Ok(TenantRule {
                id: parse_u32(id)?,
                name: name.to_string(),
                secret: kvconf::parse_hex(secret)?,
                acl: u8::try_from(parse_u32(acl)?)
                    .ok()
                    .filter(|a| a & !kvwire::tenant::ALL == 0)
                    .ok_or("ACL_BITS: a mask of read 1, write 2, atomic 4, txn 8")?,
                max_connections: parse_u32(maxc)?,
                requests_per_s: parse_u32(rps)?,
                max_credits: u16::try_from(parse_u32(credits)?)
                    .ok()
                    .filter(|&w| w == 0 || w.is_power_of_two())
                    .ok_or("MAX_CREDITS: a power of two, or 0 for the server's credits")?,
                reserved_connections: parse_u32(reserved)?,
            })
        });
    let rule = match rule {
        Ok(r) => r,
        Err(e) => return error(d, &e),
    };
    let id = rule.id;
    match ctl.add_tenant(rule) {
        Ok(g) => {
            let _ = d.add_str("action", "add");
            let _ = d.add_u64("id", u64::from(id));
            report_applied(ctl, g, d);
        }
        Err(e) => error(d, &e.to_string()),
    }
}

fn remove(ctl: &ControlState, p: &str, d: &mut TelDict<'_>) {
    let parsed = match p.split(',').count() {
        1 => fields::<1>(p, "ID[,KEEP]").and_then(|[id]| Ok((parse_u32(id)?, false))),
        _ => fields::<2>(p, "ID[,KEEP]").and_then(|[id, keep]| match keep {
            "0" => Ok((parse_u32(id)?, false)),
            "1" => Ok((parse_u32(id)?, true)),
            _ => Err("KEEP: 1 to keep the tenant's keys, 0 to purge them".to_string()),
        }),
    };
    let (id, keep) = match parsed {
        Ok(x) => x,
        Err(e) => return error(d, &e),
    };
    match ctl.remove_tenant(id, keep) {
        Ok((g, seq)) => {
            let _ = d.add_str("action", "remove");
            let _ = d.add_u64("id", u64::from(id));
            // 0: no purge (the keys are kept, fenced: no tenant can reach them).
            let _ = d.add_u64("purge", seq.unwrap_or(0));
            report_applied(ctl, g, d);
        }
        Err(e) => error(d, &e.to_string()),
    }
}

fn purge(ctl: &ControlState, p: &str, d: &mut TelDict<'_>) {
    let id = match fields::<1>(p, "ID").and_then(|[id]| parse_u32(id)) {
        Ok(id) => id,
        Err(e) => return error(d, &e),
    };
    match ctl.purge_namespace(id) {
        Ok((seq, g)) => {
            let _ = d.add_str("action", "purge");
            let _ = d.add_u64("id", u64::from(id));
            let _ = d.add_u64("purge", seq);
            report_applied(ctl, g, d);
        }
        Err(e) => error(d, &e.to_string()),
    }
}

fn purge_status(ctl: &ControlState, p: &str, d: &mut TelDict<'_>) {
    use dataplane::control::PurgeStatus;
    let seq = match fields::<1>(p, "SEQ").and_then(|[s]| parse_u32(s)) {
        Ok(s) => u64::from(s),
        Err(e) => return error(d, &e),
    };
    let _ = d.add_u64("purge", seq);
    match ctl.purge_status(seq) {
        PurgeStatus::Running(done, of) => {
            let _ = d.add_str("state", "running");
            let _ = d.add_u64("workers_done", done as u64);
            let _ = d.add_u64("workers", of as u64);
        }
        PurgeStatus::Finished(r) => {
            let _ = d.add_str("state", "finished");
            let _ = d.add_u64("id", u64::from(r.id));
            let _ = d.add_u64("deleted", r.deleted);
        }
        PurgeStatus::Unknown => {
            let _ = d.add_str("state", "unknown");
        }
    }
}

fn rotate(ctl: &ControlState, p: &str, d: &mut TelDict<'_>) {
    let parsed = fields::<2>(p, "ID,SECRET_HEX")
        .and_then(|[id, s]| Ok((parse_u32(id)?, kvconf::parse_hex(s)?)));
    let (id, secret) = match parsed {
        Ok(x) => x,
        Err(e) => return error(d, &e),
    };
    match ctl.rotate_tenant(id, secret) {
        Ok(g) => {
            let _ = d.add_str("action", "rotate");
            let _ = d.add_u64("id", u64::from(id));
            report_applied(ctl, g, d);
        }
        Err(e) => error(d, &e.to_string()),
    }
}
