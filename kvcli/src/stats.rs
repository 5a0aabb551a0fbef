//! `stats`: this client's transport and socket counters, its QPs, and round
//! trips measured with GETs of a probe key (the protocol has no server-statistics
//! op; `ctlplane` shows the server's counters).

use crate::commands::{ok, parse_count, Done, Fail, Kv};
use serde_json::{json, Map, Value as Json};
use std::time::Instant;

/// Round trips: GETs of a probe key (absent or not, the server answers either
/// way), timed one at a time.
pub(crate) fn run(kv: &mut Kv, j: &mut Map<String, Json>, count: &str) -> Result<Done, Fail> {
    let n = parse_count(count)?;
    let probe = b"\x00kvcli-rtt-probe";
    let mut us: Vec<f64> = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        kv.get(probe)?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    us.sort_by(f64::total_cmp);
    let pct = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
    let (min, p50, p99, max) = (us[0], pct(0.5), pct(0.99), us[us.len() - 1]);
    let s = *kv.transport().stats();
    let io = kv.io_mut().stats();
    let t = kv.transport();
    let counters = json!({
        "sent": s.sent, "retransmitted": s.retransmitted, "connects_sent": s.connects_sent,
        "naks_seq": s.naks_seq, "rnr_naks": s.rnr_naks, "naks_invalid": s.naks_invalid,
        "acks": s.acks, "timeouts": s.timeouts, "fast_retransmits": s.fast_retransmits,
        "dup_frames": s.dup_frames, "stale_frames": s.stale_frames,
        "gap_frames": s.gap_frames, "bad_frames": s.bad_frames,
        "completed": s.completed, "failed": s.failed,
    });
    let socket = json!({
        "tx_frames": io.tx_frames, "tx_errors": io.tx_errors, "rx_frames": io.rx_frames,
        "rx_filtered": io.rx_filtered, "rx_errors": io.rx_errors,
    });
    let qps: Vec<Json> = (0..t.qp_count())
        .map(|q| json!({"qpn": t.qpn(q), "state": format!("{:?}", t.state(q)), "credits": t.credits(q)}))
        .collect();
    let round = |x: f64| (x * 10.0).round() / 10.0;
    j.insert(
        "rtt_us".into(),
        json!({"samples": n, "min": round(min), "p50": round(p50), "p99": round(p99), "max": round(max)}),
    );
    j.insert("rto_us".into(), (t.rto_ns() / 1000).into());
    j.insert("transport".into(), counters.clone());
    j.insert("socket".into(), socket.clone());
    j.insert("qps".into(), Json::Array(qps.clone()));
    j.insert(
        "note".into(),
        "client-side counters; server counters: ctlplane".into(),
    );
    let mut text = format!(
        "round trip (GET, {n} samples): min {min:.1} us, p50 {p50:.1} us, p99 {p99:.1} us, \
         max {max:.1} us; current RTO {} us\n",
        t.rto_ns() / 1000
    );
    for (title, obj) in [("transport", &counters), ("socket", &socket)] {
        let parts: Vec<String> = obj
            .as_object()
            .map(|m| m.iter().map(|(k, v)| format!("{k} {v}")).collect())
            .unwrap_or_default();
        text.push_str(&format!("{title}: {}\n", parts.join(", ")));
    }
    let q: Vec<String> = qps
        .iter()
        .map(|q| {
            format!(
                "{} {} W {}",
                q["qpn"],
                q["state"].as_str().unwrap_or("?"),
                q["credits"]
            )
        })
        .collect();
    text.push_str(&format!("qps: {}\n", q.join("; ")));
    text.push_str("(this client's counters; the server's: ctlplane)");
    ok(text)
}
