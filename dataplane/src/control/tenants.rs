//! Tenant changes at run time (`ctlplane tenants add|remove|rotate`, through the
//! telemetry socket): the authoritative rules live with the client list under one
//! generation, and every worker applies them between bursts (`poll_clients`).
//! A changed or removed tenant's QPs are closed by the workers as they apply it
//! (`Server::set_tenants`). Like `ctlplane clients add`, changes last until the
//! dataplane restarts; the config's `tenants` are the ones it starts with.

use super::{lock, ControlState};
use crate::server::TenantRule;
use std::sync::atomic::Ordering;

/// Why a tenant change was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantError {
    /// The id is 0 or beyond 24 bits.
    BadId(u32),
    /// A tenant with this id or name exists.
    Exists(u32, String),
    /// No tenant with this id.
    Unknown(u32),
    /// A secret shorter than 16 or longer than 64 bytes.
    BadSecret,
    /// The id's namespace is being purged (a tenant of that id was removed): it may
    /// be added again once the purge finished.
    Purging(u32),
}

impl std::fmt::Display for TenantError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TenantError::BadId(id) => write!(f, "tenant id {id} is not in 1..=16777215"),
            TenantError::Exists(id, name) => {
                write!(f, "a tenant with id {id} or name {name:?} exists")
            }
            TenantError::Unknown(id) => write!(f, "no tenant with id {id}"),
            TenantError::BadSecret => f.write_str("the secret must be 16 to 64 bytes"),
            TenantError::Purging(id) => write!(
                f,
                "tenant id {id}: the namespace of a removed tenant of that id is being \
                 purged; add it again once the purge finished"
            ),
        }
    }
}

impl std::error::Error for TenantError {}

impl ControlState {
    /// Sets the tenants the servers start with (generation 0: call it before the
    /// workers run).
    pub fn set_initial_tenants(&self, rules: Vec<TenantRule>, anonymous: bool) {
        let mut a = lock(&self.admission);
        a.tenants = rules;
        a.tenants.sort_by_key(|r| r.id);
        a.anonymous = anonymous;
    }

    /// The current generation, tenant rules and whether anonymous OPENs are taken.
    pub fn tenants(&self) -> (u64, Vec<TenantRule>, bool) {
        let a = lock(&self.admission);
        (
            self.generation.load(Ordering::Relaxed),
            a.tenants.clone(),
            a.anonymous,
        )
    }

    /// Adds tenant `rule`; returns the new generation (see `wait_applied`).
    pub fn add_tenant(&self, rule: TenantRule) -> Result<u64, TenantError> {
        if rule.id == 0 || rule.id > kvwire::tenant::MAX_TENANT_ID {
            return Err(TenantError::BadId(rule.id));
        }
        if !(16..=64).contains(&rule.secret.len()) {
            return Err(TenantError::BadSecret);
        }
        let mut a = lock(&self.admission);
        if a.tenants
            .iter()
            .any(|t| t.id == rule.id || t.name == rule.name)
        {
            return Err(TenantError::Exists(rule.id, rule.name));
        }
        if self.purging(&mut a, rule.id) {
            return Err(TenantError::Purging(rule.id));
        }
        a.tenants.push(rule);
        a.tenants.sort_by_key(|r| r.id);
        Ok(self.generation.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// Removes tenant `id`: its live QPs are closed and, unless `keep_data`, its
    /// namespace is purged (`purge.rs`). The new generation and the purge's sequence
    /// number.
    pub fn remove_tenant(
        &self,
        id: u32,
        keep_data: bool,
    ) -> Result<(u64, Option<u64>), TenantError> {
        let mut a = lock(&self.admission);
        let i = a
            .tenants
            .iter()
            .position(|t| t.id == id)
            .ok_or(TenantError::Unknown(id))?;
        a.tenants.remove(i);
        let seq = (!keep_data).then(|| Self::queue_purge(&mut a, id));
        Ok((self.generation.fetch_add(1, Ordering::AcqRel) + 1, seq))
    }

    /// Gives tenant `id` a new secret (its live QPs are closed: their clients OPEN
    /// again with the new one); the new generation.
    pub fn rotate_tenant(&self, id: u32, secret: Vec<u8>) -> Result<u64, TenantError> {
        if !(16..=64).contains(&secret.len()) {
            return Err(TenantError::BadSecret);
        }
        let mut a = lock(&self.admission);
        let t = a
            .tenants
            .iter_mut()
            .find(|t| t.id == id)
            .ok_or(TenantError::Unknown(id))?;
        t.secret = secret;
        Ok(self.generation.fetch_add(1, Ordering::AcqRel) + 1)
    }
}

impl ControlState {
    /// Makes the cluster's tenants (etcd: `tenant_sync`) the ones here: each is added
    /// or replaced (a changed one's QPs are closed, as for a rotation), a tenant the
    /// cluster had and no longer has is removed; tenants added on this node alone stay.
    /// A cluster tenant whose name a local tenant of another id has is refused (in the
    /// returned list). The new generation when anything changed.
    pub fn sync_cluster_tenants(&self, rules: Vec<TenantRule>) -> (Option<u64>, Vec<String>) {
        let mut a = lock(&self.admission);
        let mut changed = false;
        let mut refused = Vec::new();
        let before = std::mem::take(&mut a.cluster_tenants);
        let ids: Vec<u32> = rules.iter().map(|r| r.id).collect();
        for gone in before.iter().filter(|id| !ids.contains(id)) {
            if let Some(i) = a.tenants.iter().position(|t| t.id == *gone) {
                a.tenants.remove(i);
                // A cluster tenant removed: its namespace goes too (the master
                // deletes, its replicas follow the stream).
                Self::queue_purge(&mut a, *gone);
                changed = true;
            }
        }
        for r in rules {
            if a.tenants.iter().any(|t| t.name == r.name && t.id != r.id) {
                refused.push(format!(
                    "tenant {} ({:?}): the name is taken here",
                    r.id, r.name
                ));
                continue;
            }
            a.cluster_tenants.push(r.id);
            match a.tenants.iter_mut().find(|t| t.id == r.id) {
                Some(t) if *t == r => {}
                Some(t) => {
                    *t = r;
                    changed = true;
                }
                None => {
                    a.tenants.push(r);
                    changed = true;
                }
            }
        }
        if !changed {
            return (None, refused);
        }
        a.tenants.sort_by_key(|r| r.id);
        (
            Some(self.generation.fetch_add(1, Ordering::AcqRel) + 1),
            refused,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: u32, name: &str) -> TenantRule {
        TenantRule {
            id,
            name: name.into(),
            secret: vec![7; 16],
            acl: kvwire::tenant::ALL,
            max_connections: 0,
            requests_per_s: 0,
            max_credits: 0,
            reserved_connections: 0,
        }
    }

    #[test]
    fn changes_bump_the_generation_and_reach_the_workers() {
        let ctl = ControlState::new(vec![Default::default()], &[]);
        ctl.set_initial_tenants(vec![rule(3, "c")], true);
        let mut w = ctl.worker(0);
        assert!(!w.poll_clients(|_| panic!("nothing changed")));
        let g = ctl.add_tenant(rule(5, "e")).unwrap();
        assert_eq!(g, 1);
        assert_eq!(
            ctl.add_tenant(rule(5, "x")),
            Err(TenantError::Exists(5, "x".into()))
        );
        assert_eq!(
            ctl.add_tenant(rule(6, "c")),
            Err(TenantError::Exists(6, "c".into()))
        );
        assert_eq!(ctl.add_tenant(rule(0, "z")), Err(TenantError::BadId(0)));
        let mut seen = Vec::new();
        assert!(w.poll_clients(|a| seen = a.tenants.iter().map(|r| r.id).collect()));
        assert_eq!(seen, vec![3, 5]);
        assert_eq!(
            ctl.rotate_tenant(5, vec![1; 8]),
            Err(TenantError::BadSecret)
        );
        assert_eq!(ctl.rotate_tenant(5, vec![1; 20]), Ok(2));
        assert_eq!(ctl.remove_tenant(3, false), Ok((3, Some(1))));
        assert_eq!(ctl.remove_tenant(3, false), Err(TenantError::Unknown(3)));
        assert_eq!(
            ctl.add_tenant(rule(3, "again")),
            Err(TenantError::Purging(3)),
            "not before its namespace is purged"
        );
        let (g, t, anon) = ctl.tenants();
        assert_eq!((g, t.len(), t[0].secret.len(), anon), (3, 1, 20, true));
    }

    #[test]
    fn cluster_tenants_are_added_changed_and_removed_and_local_ones_stay() {
        let ctl = ControlState::new(vec![Default::default()], &[]);
        ctl.set_initial_tenants(vec![rule(3, "local")], true);
        let ids = |c: &ControlState| c.tenants().1.iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(
            ctl.sync_cluster_tenants(vec![rule(5, "e"), rule(7, "f")]).0,
            Some(1)
        );
        assert_eq!(ids(&ctl), vec![3, 5, 7]);
        assert_eq!(
            ctl.sync_cluster_tenants(vec![rule(5, "e"), rule(7, "f")]).0,
            None,
            "nothing changed"
        );
        let mut rotated = rule(5, "e");
        rotated.secret = vec![9; 32];
        assert_eq!(ctl.sync_cluster_tenants(vec![rotated]).0, Some(2));
        assert_eq!(ids(&ctl), vec![3, 5], "7 left the cluster");
        assert_eq!(ctl.tenants().1[1].secret, vec![9; 32]);
        let (g, refused) = ctl.sync_cluster_tenants(vec![rule(8, "local")]);
        assert_eq!((g, refused.len()), (Some(3), 1), "5 removed, 8 refused");
        assert_eq!(ids(&ctl), vec![3]);
        assert_eq!(ctl.sync_cluster_tenants(Vec::new()).0, None);
    }
}
