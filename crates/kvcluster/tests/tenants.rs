//! The cluster's tenants in etcd reach every node's view (real etcd, nodes in this
//! process): written once, seen by each node's watch, changed and removed the same way,
//! and found again by a node that starts later (its snapshot).

mod common;

use std::time::{Duration, Instant};

use common::*;
use kvcluster::{delete_tenant, list_tenants, put_tenant, ClusterView};

const T: Duration = Duration::from_secs(2);

/// Waits until `view`'s tenant records satisfy `pred`; the records.
fn wait_tenants(
    view: &ClusterView,
    pred: impl Fn(&[(u32, Vec<u8>)]) -> bool,
) -> Vec<(u32, Vec<u8>)> {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, t) = view.tenants();
        if pred(&t) {
            return t;
        }
        assert!(Instant::now() < end, "tenant records never matched: {t:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn tenant_records_reach_every_node_and_follow_changes() {
    let etcd = Etcd::start();
    let (c, eps) = ("tenants", etcd.endpoints());
    let n1 = Node::start(config(&etcd, c, 1), 0);
    let g0 = n1.view.tenants_generation();
    put_tenant(&eps, c, 7, br#"{"name":"app","id":7,"secret":"00"}"#, T).unwrap();
    put_tenant(&eps, c, 9, br#"{"name":"ro","id":9,"secret":"11"}"#, T).unwrap();
    let t = wait_tenants(&n1.view, |t| t.len() == 2);
    assert_eq!(t[0].0, 7);
    assert!(n1.view.tenants_generation() > g0);
    // A node that starts now finds them in its snapshot.
    let n2 = Node::start(config(&etcd, c, 2), 0);
    wait_tenants(&n2.view, |t| t.len() == 2);
    // A change (a rotated secret) and a removal reach both.
    put_tenant(&eps, c, 7, br#"{"name":"app","id":7,"secret":"22"}"#, T).unwrap();
    assert!(delete_tenant(&eps, c, 9, T).unwrap());
    assert!(!delete_tenant(&eps, c, 9, T).unwrap(), "already gone");
    for v in [&n1.view, &n2.view] {
        let t = wait_tenants(v, |t| t.len() == 1 && t[0].1.ends_with(br#""22"}"#));
        assert_eq!(t[0].0, 7);
    }
    // The generation stays put while nothing changes.
    let g = n1.view.tenants_generation();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(n1.view.tenants_generation(), g);
    assert_eq!(list_tenants(&eps, c, T).unwrap().len(), 1);
}
