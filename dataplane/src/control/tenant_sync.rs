//! The cluster's tenants from etcd (`kvcluster`'s tenant records, docs/OPERATIONS.md
//! "Tenants"): the node's cluster thread polls the view's generation between its
//! events (every 100 ms at most) and, when it moved, makes the records the node's
//! cluster tenants ([`ControlState::sync_cluster_tenants`]); the workers apply them
//! between bursts as any tenant change. A record is the JSON of a config `tenants[]`
//! entry, read as the config's are ([`tenant_rule`]).

use super::ControlState;
use crate::server::TenantRule;
use kvcluster::ClusterView;

/// A config tenant as the workers apply it.
pub fn tenant_rule(t: &kvconf::TenantConfig) -> Result<TenantRule, String> {
    t.validate()?;
    Ok(TenantRule {
        id: t.id,
        name: t.name.clone(),
        secret: t.secret_bytes()?,
        acl: t.acl_bits()?,
        max_connections: t.max_connections,
        requests_per_s: t.requests_per_s,
        max_credits: t.max_credits,
        reserved_connections: t.reserved_connections,
    })
}

/// The tenant records of etcd as rules; a record that does not read as a tenant
/// of its key's id is left out and named in `bad`.
pub fn rules_of(records: &[(u32, Vec<u8>)], bad: &mut Vec<String>) -> Vec<TenantRule> {
    let mut out = Vec::with_capacity(records.len());
    for (id, json) in records {
        let rule = serde_json::from_slice::<kvconf::TenantConfig>(json)
            .map_err(|e| e.to_string())
            .and_then(|t| tenant_rule(&t))
            .and_then(|r| {
                (r.id == *id)
                    .then_some(r)
                    .ok_or_else(|| "its id differs from its key's".to_string())
            });
        match rule {
            Ok(r) => out.push(r),
            Err(e) => bad.push(format!("tenant record {id}: {e}")),
        }
    }
    out
}

/// Follows the view's tenant records (the cluster thread's state).
#[derive(Debug, Default)]
pub struct TenantSync {
    seen: u64,
}

impl TenantSync {
    /// Applies the view's tenant records if they changed since the last call;
    /// prints what it did (a control thread's log line, not the request path).
    pub fn poll(&mut self, view: &ClusterView, control: &ControlState) {
        if view.tenants_generation() == self.seen {
            return;
        }
        let (generation, records) = view.tenants();
        self.seen = generation;
        let mut problems = Vec::new();
        let rules = rules_of(&records, &mut problems);
        let n = rules.len();
        let (applied, refused) = control.sync_cluster_tenants(rules);
        problems.extend(refused);
        for p in &problems {
            eprintln!("dataplane: cluster tenants: {p}: not applied");
        }
        if let Some(g) = applied {
            println!("dataplane: cluster tenants: {n} from etcd, generation {g}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tenant record with window `w`.
    fn windowed(id: u32, w: u16) -> Vec<u8> {
        format!(
            r#"{{"name":"w{id}","id":{id},"secret":"000102030405060708090a0b0c0d0e0f","max_credits":{w}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn records_read_as_config_tenants_and_bad_ones_are_named() {
        let good =
            br#"{"name":"app","id":7,"secret":"000102030405060708090a0b0c0d0e0f","acl":"read"}"#;
        let records = vec![
            (7, good.to_vec()),
            (8, good.to_vec()),
            (9, b"{not json".to_vec()),
            (10, br#"{"name":"x","id":10,"secret":"00"}"#.to_vec()),
            (11, windowed(11, 8)),
            (12, windowed(12, 3)),
        ];
        let mut bad = Vec::new();
        let rules = rules_of(&records, &mut bad);
        assert_eq!(rules.len(), 2);
        assert_eq!(
            (rules[0].id, rules[0].acl, rules[0].max_credits),
            (7, kvwire::tenant::parse_acl("read").unwrap(), 0)
        );
        assert_eq!((rules[1].id, rules[1].max_credits), (11, 8));
        assert_eq!(bad.len(), 4, "{bad:?}");
        assert!(bad[3].contains("power of two"), "{bad:?}");
        assert!(bad[0].contains("differs"));
    }
}
