//! `ctlplane replication status|failover|members`: the replication view of a running
//! node (`/kvd/replication`), a planned switchover (`/kvd/replication/failover`), and
//! an etcd-managed cluster's live members in chain order (from etcd).

use crate::target::Target;
use clap::Subcommand;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// Replication commands.
#[derive(Subcommand, Debug)]
pub enum ReplicationCmd {
    /// Role, epoch, stream offsets, and per replication link the peer's state,
    /// acknowledged offset, lag and syncs.
    Status {
        #[command(flatten)]
        target: Target,
        /// Print the raw reply as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Planned switchover: the master stops taking writes, waits until the named
    /// replica has acknowledged everything, and hands leadership to it (needs etcd).
    Failover {
        #[command(flatten)]
        target: Target,
        /// The node to hand over to (its node_id).
        #[arg(long)]
        to: String,
    },
    /// Elects NODE although the election waits for a quorum of members holding their
    /// acknowledged writes (docs/FAILOVER.md "Election safety"): only for a cluster
    /// that cannot get that quorum back. Acknowledged writes NODE lacks are lost, and
    /// every other node resyncs from it. Needs `--i-accept-data-loss`.
    ForceElect {
        /// A node's config: its `replication.etcd` endpoints and cluster.
        #[arg(long, default_value = "configs/memif.json")]
        config: PathBuf,
        /// The node to elect (its node_id, e.g. node1).
        #[arg(long)]
        node: String,
        /// Confirms that writes the node lacks may be lost.
        #[arg(long)]
        i_accept_data_loss: bool,
    },
    /// The live members of an etcd-managed cluster (their member keys), in chain
    /// order — the master first, then by election rank — with role, epoch, offset
    /// and rank (docs/FAILOVER.md "Keys").
    Members {
        /// A node's config: its `replication.etcd` endpoints and cluster.
        #[arg(long, default_value = "configs/memif.json")]
        config: PathBuf,
        /// Print JSON: `{"master", "order", "members"}`.
        #[arg(long)]
        json: bool,
    },
}

/// Runs one replication command.
pub fn run(cmd: ReplicationCmd) -> Result<(), String> {
    match cmd {
        ReplicationCmd::Status { target, json } => {
            let v = target.connect()?.query("/kvd/replication")?;
            if let Some(e) = v.get("error") {
                return Err(format!("dataplane: {e}"));
            }
            if json {
                println!("{v}");
            } else {
                print!("{}", render(&v));
            }
            Ok(())
        }
        ReplicationCmd::Failover { target, to } => {
            let v = target
                .connect()?
                .query(&format!("/kvd/replication/failover,{to}"))?;
            if let Some(e) = v.get("error") {
                return Err(format!("failover: {}", e.as_str().unwrap_or_default()));
            }
            println!("failover: {}", v["result"].as_str().unwrap_or("requested"));
            Ok(())
        }
        ReplicationCmd::Members { config, json } => members(&config, json),
        ReplicationCmd::ForceElect {
            config,
            node,
            i_accept_data_loss,
        } => force_elect(&config, &node, i_accept_data_loss),
    }
}

/// The config's `replication.etcd` section.
pub(crate) fn etcd_section(config: &std::path::Path) -> Result<kvconf::EtcdSection, String> {
    let cfg = kvconf::Config::load(config).map_err(|e| format!("{}: {e}", config.display()))?;
    cfg.replication
        .etcd
        .ok_or_else(|| format!("{}: no replication.etcd section", config.display()))
}

/// `replication force-elect`.
fn force_elect(config: &std::path::Path, node: &str, accepted: bool) -> Result<(), String> {
    if !accepted {
        return Err(format!(
            "force-elect makes {node} master whatever it holds: acknowledged writes it \
             lacks are lost. Run again with --i-accept-data-loss"
        ));
    }
    let etcd = etcd_section(config)?;
    let id = kvcluster::node_id_from_name(node);
    let epoch =
        kvcluster::force_election(&etcd.endpoints, &etcd.cluster, id, Duration::from_secs(2))
            .map_err(|e| format!("force-elect: {e}"))?;
    println!("force-elect: {node} (id {id}) will be elected after epoch {epoch}");
    Ok(())
}

/// `replication members`.
fn members(config: &std::path::Path, as_json: bool) -> Result<(), String> {
    let etcd = etcd_section(config)?;
    let (master, ms) =
        kvcluster::list_members(&etcd.endpoints, &etcd.cluster, Duration::from_secs(2))
            .map_err(|e| format!("etcd: {e}"))?;
    let order: Vec<u32> = ms.iter().map(|m| m.id).collect();
    if as_json {
        let v = json!({ "master": master, "order": order, "members": ms });
        println!("{v}");
        return Ok(());
    }
    let ids: Vec<String> = order.iter().map(u32::to_string).collect();
    println!(
        "cluster {}: {}",
        etcd.cluster,
        if ids.is_empty() {
            "no live member".into()
        } else {
            ids.join(" -> ")
        }
    );
    println!(
        "{:>10}  {:<8} {:>6} {:>14} {:>5}  {:<6} {:>5}  address",
        "id", "role", "epoch", "offset", "rank", "data", "hist"
    );
    for m in &ms {
        let role = serde_json::to_value(m.role)
            .ok()
            .and_then(|r| r.as_str().map(String::from))
            .unwrap_or_default();
        let data = serde_json::to_value(m.data)
            .ok()
            .and_then(|r| r.as_str().map(String::from))
            .unwrap_or_default();
        println!(
            "{:>10}  {:<8} {:>6} {:>14} {:>5}  {:<6} {:>5}  {} {}",
            m.id,
            role,
            m.epoch,
            m.offset,
            m.rank,
            data,
            m.hist,
            m.addr
                .mac
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":"),
            m.addr.ip
        );
    }
    Ok(())
}

/// The human-readable status.
fn render(v: &Value) -> String {
    let s = |k: &str| match &v[k] {
        Value::String(x) => x.clone(),
        other => other.to_string(),
    };
    let mut out = format!(
        "role {}  epoch {}  repl_id {}  offset {}  backlog_start {}  good_replicas {}{}\n",
        s("role"),
        s("epoch"),
        s("repl_id"),
        s("offset"),
        s("backlog_start"),
        s("good_replicas"),
        if v["short_of_replicas"].as_str() == Some("1") || v["short_of_replicas"] == 1 {
            "  (writes refused: not enough replicas)"
        } else {
            ""
        }
    );
    if let Some(w) = v["election_wait"].as_object() {
        let n = |k: &str| {
            w.get(k)
                .and_then(|x| x.as_u64().or_else(|| x.as_str()?.parse().ok()))
                .unwrap_or(0)
        };
        out += &format!(
            "  no master: the election waits for a quorum, {} of {} members holding \
             their acknowledged writes reported (writes unavailable; docs/FAILOVER.md)\n",
            n("have"),
            n("need"),
        );
    }
    let diverged = match &v["diverged"] {
        Value::String(x) => x.parse().unwrap_or(0),
        x => x.as_u64().unwrap_or(0),
    };
    if diverged > 0 {
        out += &format!(
            "  diverged: {diverged} full syncs refused from a force-elected master (they \
             would discard data this node holds); restart the node empty to follow it\n"
        );
    }
    if let Some(l) = v["log_file"].as_object() {
        let f = |k: &str| match &l[k] {
            Value::String(x) => x.clone(),
            other => other.to_string(),
        };
        out += &format!(
            "  log file {}  synced offset {}  blocks {}  errors {}\n",
            f("file"),
            f("synced_offset"),
            f("blocks"),
            f("errors")
        );
    }
    out += &render_peers(&v["peers"], "link");
    // Chain reconfiguration: HELLOs sent down the chain, REDIRECTs followed.
    let n = |x: &Value| x.as_u64().unwrap_or(0);
    let (sent, followed) = (
        n(&v["redirects_sent"]) + n(&v["relay"]["redirects_sent"]),
        n(&v["redirects_followed"]),
    );
    if sent + followed > 0 {
        out += &format!("  chain redirects: sent {sent}  followed {followed}\n");
    }
    let rolled = n(&v["rollbacks_refused"]) + n(&v["relay"]["rollbacks_refused"]);
    if rolled > 0 {
        out += &format!(
            "  rollbacks refused: {rolled} full syncs that would have replaced a node's \
             data with less of its own stream (chain; docs/REPLICATION.md §10.4)\n"
        );
    }
    out += &render_drops(&v["link_drops"]);
    for l in v["links"].as_array().into_iter().flatten() {
        if l["up"] == Value::Bool(false) {
            out += &format!(
                "  memif link {} down (redialed {} times)\n",
                l["link"].as_str().unwrap_or("?"),
                n(&l["redials"])
            );
        }
    }
    if v["relay"].is_object() {
        let t = |x: &Value| match x {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out += &format!(
            "  relay (chain): offset {}  backlog_start {}\n",
            t(&v["relay"]["offset"]),
            t(&v["relay"]["backlog_start"])
        );
        out += &render_peers(&v["relay"]["peers"], "  successor link");
    }
    out
}

/// The frames the links dropped, by reason (a line only when there are some).
fn render_drops(drops: &Value) -> String {
    let Some(d) = drops.as_object() else {
        return String::new();
    };
    let some: Vec<String> = d
        .iter()
        .filter_map(|(r, n)| n.as_u64().filter(|&n| n > 0).map(|n| format!("{r} {n}")))
        .collect();
    if some.is_empty() {
        return String::new();
    }
    format!("  link drops: {}\n", some.join("  "))
}

/// One line per peer of a `peers` object, each starting with `label` and its link.
fn render_peers(peers: &Value, label: &str) -> String {
    let mut out = String::new();
    let Some(peers) = peers.as_object() else {
        return out;
    };
    for (i, p) in peers {
        let f = |k: &str| match &p[k] {
            Value::String(x) => x.clone(),
            other => other.to_string(),
        };
        let heard = match f("last_heard_ms_ago").parse::<u64>() {
            Ok(u64::MAX) | Err(_) => "never".to_string(),
            Ok(ms) => format!("{ms} ms ago"),
        };
        out += &format!(
            "  {label} {i} {:<12} {:<13} acked {:>12}  lag {:>10} B  heard {heard}  syncs full {} partial {}  invalidations {}  resent {}\n",
            f("link"),
            f("state"),
            f("acked_offset"),
            f("lag_bytes"),
            f("full_syncs"),
            f("partial_syncs"),
            f("invalidations"),
            f("resent"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_roles_and_peers() {
        // Telemetry delivers numbers as strings or numbers: both render.
        let v: Value = serde_json::from_str(
            r#"{"role":"master","epoch":"3","repl_id":"00000000000000ab","offset":"1000",
                "backlog_start":"0","good_replicas":"1","short_of_replicas":"0","records":"9",
                "peers":{"0":{"link":"net_memif11","state":"online","acked_offset":"990",
                "sent_offset":"1000","lag_bytes":"10","last_heard_ms_ago":"4",
                "full_syncs":"1","partial_syncs":"0","invalidations":"0","resent":"0"}}}"#,
        )
        .unwrap();
        let r = render(&v);
        assert!(r.starts_with("role master  epoch 3"), "{r}");
        assert!(
            r.contains("online") && r.contains("lag         10 B") && r.contains("4 ms ago"),
            "{r}"
        );
        assert!(!r.contains("writes refused"));
        assert!(!r.contains("log file"));
        assert!(!r.contains("no master"));
        let v: Value =
            serde_json::from_str(r#"{"role":"replica","election_wait":{"have":"1","need":"2"}}"#)
                .unwrap();
        let r = render(&v);
        assert!(r.contains("a quorum, 1 of 2 members"), "{r}");
        let v: Value = serde_json::from_str(
            r#"{"role":"replica","log_file":{"file":"n1.aof","synced_offset":"77",
                "blocks":"3","errors":"0"}}"#,
        )
        .unwrap();
        let r = render(&v);
        assert!(
            r.contains("log file n1.aof  synced offset 77  blocks 3"),
            "{r}"
        );
        assert!(!r.contains("relay"));
        let v: Value = serde_json::from_str(
            r#"{"role":"replica","relay":{"offset":"500","backlog_start":"0",
                "peers":{"1":{"link":"net_memif12","state":"full_sync","acked_offset":"0",
                "lag_bytes":"500","last_heard_ms_ago":"2","full_syncs":"1",
                "partial_syncs":"0","invalidations":"0","resent":"0"}}}}"#,
        )
        .unwrap();
        let r = render(&v);
        assert!(
            r.contains("relay (chain): offset 500  backlog_start 0"),
            "{r}"
        );
        assert!(r.contains("successor link 1 net_memif12  full_sync"), "{r}");
        assert!(!r.contains("chain redirects"), "{r}");
        let v: Value = serde_json::from_str(
            r#"{"role":"replica","redirects_followed":2,"relay":{"redirects_sent":1}}"#,
        )
        .unwrap();
        let r = render(&v);
        assert!(r.contains("chain redirects: sent 1  followed 2"), "{r}");
        assert!(!r.contains("link drops"), "{r}");
        let v: Value = serde_json::from_str(
            r#"{"role":"master","link_drops":{"malformed":0,"stale_epoch":3,"no_room":1}}"#,
        )
        .unwrap();
        let r = render(&v);
        assert!(r.contains("link drops: no_room 1  stale_epoch 3"), "{r}");
        assert!(!r.contains("rollbacks") && !r.contains("memif link"), "{r}");
        let v: Value = serde_json::from_str(
            r#"{"role":"replica","relay":{"rollbacks_refused":2},
                "links":[{"link":"net_memif10","up":true,"redials":0},
                         {"link":"net_memif12","up":false,"redials":3}]}"#,
        )
        .unwrap();
        let r = render(&v);
        assert!(r.contains("rollbacks refused: 2 full syncs"), "{r}");
        assert!(
            r.contains("memif link net_memif12 down (redialed 3 times)"),
            "{r}"
        );
        assert!(!r.contains("net_memif10"), "{r}");
    }
}
