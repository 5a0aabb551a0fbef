//! The replication families of `ctlplane metrics`, from a `/kvd/replication` reply
//! (a node with replication): the node's role, epoch and stream position, each
//! link's peer (online, lag, syncs, invalidations, resends), memif redials, and the
//! frames the links dropped by reason. A chain node's relay (its successors) is
//! exported the same way under `view="relay"`.

use super::families::Families;
use serde_json::Value;

/// The node's figures exported as gauges: (key, metric, help).
const NODE_GAUGES: [(&str, &str, &str); 4] = [
    (
        "epoch",
        "kvd_repl_epoch",
        "The epoch the node serves at (etcd elections number them).",
    ),
    (
        "offset",
        "kvd_repl_offset_bytes",
        "Master: end of the replication stream; replica: the offset every worker applied.",
    ),
    (
        "good_replicas",
        "kvd_repl_good_replicas",
        "Replicas counted for min_replicas at the last check (master).",
    ),
    (
        "short_of_replicas",
        "kvd_repl_writes_refused",
        "1 while writes are refused for want of replicas (min_replicas unmet).",
    ),
];

/// Per-peer figures that only grow: (key, metric, help).
const PEER_COUNTERS: [(&str, &str, &str); 4] = [
    (
        "full_syncs",
        "kvd_repl_peer_full_syncs_total",
        "Full syncs of the peer on this link.",
    ),
    (
        "partial_syncs",
        "kvd_repl_peer_partial_syncs_total",
        "Partial resyncs of the peer on this link.",
    ),
    (
        "invalidations",
        "kvd_repl_peer_invalidations_total",
        "Times the peer on this link was declared invalid (silent for the waiting time).",
    ),
    (
        "resent",
        "kvd_repl_peer_resent_segments_total",
        "Segments resent to the peer on this link.",
    ),
];

fn u64_of(v: &Value, k: &str) -> Result<u64, String> {
    v.get(k)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("`{k}` is missing or not an unsigned integer"))
}

/// Adds the replication families of reply `r`.
pub fn collect(f: &mut Families<'_>, r: &Value) -> Result<(), String> {
    let role = r.get("role").and_then(Value::as_str).ok_or("no `role`")?;
    f.gauge(
        "kvd_repl_role",
        "1 for the node's replication role (label role: master, replica, fenced, standalone).",
        &[("role", role)],
        1.0,
    );
    for (k, name, help) in NODE_GAUGES {
        f.gauge(name, help, &[], u64_of(r, k)? as f64);
    }
    for (k, name, help) in [
        (
            "promotions",
            "kvd_repl_promotions_total",
            "Times the node was elected master.",
        ),
        (
            "demotions",
            "kvd_repl_demotions_total",
            "Times the node stopped being master because another was elected.",
        ),
    ] {
        f.counter(name, help, &[], u64_of(r, k)?);
    }
    peers(f, r, "node")?;
    if let Some(relay) = r.get("relay").filter(|x| !x.is_null()) {
        peers(f, relay, "relay")?;
    }
    links(f, r)
}

/// One series per link of `r`'s `peers` (the peers a master or relay ships to; a
/// replica's upstream), labelled with the link and `view`.
fn peers(f: &mut Families<'_>, r: &Value, view: &str) -> Result<(), String> {
    let Some(ps) = r.get("peers").and_then(Value::as_object) else {
        return Ok(());
    };
    for (i, p) in ps {
        let link = p.get("link").and_then(Value::as_str).unwrap_or(i.as_str());
        let l = [("link", link), ("view", view)];
        let online = p.get("state").and_then(Value::as_str) == Some("online");
        f.gauge(
            "kvd_repl_peer_online",
            "1 while the peer on this link is online (counted for min_replicas), else 0.",
            &l,
            f64::from(u8::from(online)),
        );
        f.gauge(
            "kvd_repl_peer_lag_bytes",
            "Stream bytes the peer on this link has not acknowledged.",
            &l,
            u64_of(p, "lag_bytes")? as f64,
        );
        for (k, name, help) in PEER_COUNTERS {
            f.counter(name, help, &l, u64_of(p, k)?);
        }
    }
    Ok(())
}

/// Memif redials per link and the frames dropped by reason.
fn links(f: &mut Families<'_>, r: &Value) -> Result<(), String> {
    for l in r
        .get("links")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = l
            .get("link")
            .and_then(Value::as_str)
            .ok_or("a link without a name")?;
        f.counter(
            "kvd_repl_link_redials_total",
            "Times a memif client link was redialed (its server restarted).",
            &[("link", name)],
            u64_of(l, "redials")?,
        );
    }
    let drops = r
        .get("link_drops")
        .and_then(Value::as_object)
        .ok_or("no `link_drops` dict")?;
    for (reason, n) in drops {
        let n = n
            .as_u64()
            .ok_or_else(|| format!("link_drops `{reason}` is {n}"))?;
        f.counter(
            "kvd_repl_link_drops_total",
            "Frames the replication links brought that were dropped, by reason (docs/OPERATIONS.md).",
            &[("reason", reason)],
            n,
        );
    }
    Ok(())
}
