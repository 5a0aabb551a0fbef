//! The exporter's output for sample telemetry replies, read back line by line.

use super::collect::collect;
use super::families::{Families, Monotonic};
use super::source::Source;
use super::{reply, serve};
use prometheus::{Encoder, TextEncoder};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;
use tiny_http::Server;

/// A `/kvd/stats` reply of two workers as the dataplane writes it (worker 1 idle,
/// with sampling on but nothing sampled yet).
const STATS: &str = r#"{"workers": 2, "tsc": 123456789, "tsc_hz": 2000000000,
  "total": {"rx_packets": 1200, "tx_packets": 1190, "requests": 1100, "responses": 1100,
            "ops": 8800, "gets": 4400, "get_hits": 4000, "get_misses": 400,
            "drop": {"unknown_qp": 3, "bad_icrc": 0},
            "latency": {"sample_every": 64, "sampled": 17, "sum_ns": 9000,
                        "le_ns": [256, 320, 384, 448, 512], "counts": [1, 3, 9, 2, 1, 1]}},
  "per_worker": {
    "1": {"rx_packets": 0, "tx_packets": 0, "requests": 0, "responses": 0,
          "replays": 0, "replayed_frames": 0, "naks_sent": 0, "rnr_naks_sent": 0,
          "connects": 0, "accepts_sent": 0, "ops": 0, "gets": 0, "get_hits": 0,
          "get_misses": 0, "puts": 0, "deletes": 0, "op_errors": 0, "atomics": 0,
          "vector_updates": 0, "reduces": 0, "filters": 0, "batches": 0,
          "station_chunks": 0, "station_forwarded": 0, "station_merged": 0,
          "station_write_backs": 0, "station_stalls": 0, "handed_off": 0,
          "handed_in": 0, "echoed": 0, "drops": 0,
          "drop": {"unknown_qp": 0, "bad_icrc": 0},
          "latency": {"sample_every": 64, "sampled": 0, "sum_ns": 0,
                      "le_ns": [256, 320, 384, 448, 512], "counts": [0, 0, 0, 0, 0, 0]}},
    "0": {"rx_packets": 1200, "tx_packets": 1190, "requests": 1100, "responses": 1100,
          "replays": 2, "replayed_frames": 9, "naks_sent": 1, "rnr_naks_sent": 4,
          "connects": 4, "accepts_sent": 4, "ops": 8800, "gets": 4400, "get_hits": 4000,
          "get_misses": 400, "puts": 4000, "deletes": 400, "op_errors": 5, "atomics": 0,
          "vector_updates": 0, "reduces": 0, "filters": 0, "batches": 1100,
          "station_chunks": 70, "station_forwarded": 6, "station_merged": 2,
          "station_write_backs": 1, "station_stalls": 0, "handed_off": 0,
          "handed_in": 0, "echoed": 0, "drops": 3,
          "drop": {"unknown_qp": 3, "bad_icrc": 0},
          "latency": {"sample_every": 64, "sampled": 17, "sum_ns": 9000,
                      "le_ns": [256, 320, 384, 448, 512], "counts": [1, 3, 9, 2, 1, 1]}}}}"#;

/// A `/kvd/engine` reply of the same two workers.
const ENGINE: &str = r#"{"workers": 2, "per_worker": {
  "0": {"published": 12, "stored_kvs": 2000, "stored_kv_bytes": 90000,
        "region_bytes": 1000000, "utilization_ppm": 90000, "hash_buckets": 4096,
        "chained_buckets": 7, "slab_allocs": 4000, "slab_frees": 2100,
        "pool_refills": 3, "pool_spills": 1, "frontier_bytes": 500000,
        "slab": {"class_bytes": [32, 64], "worker_cached": [10, 2],
                 "shared_free": [0, 5], "allocated": [1500, 400]},
        "extra": {}},
  "1": {"published": 12, "stored_kvs": 0, "stored_kv_bytes": 0,
        "region_bytes": 1000000, "utilization_ppm": 0, "hash_buckets": 4096,
        "chained_buckets": 0, "slab_allocs": 0, "slab_frees": 0,
        "pool_refills": 0, "pool_spills": 0, "frontier_bytes": 1000000,
        "slab": {"class_bytes": [32, 64], "worker_cached": [0, 0],
                 "shared_free": [0, 0], "allocated": [0, 0]},
        "extra": {}}}}"#;

fn render(mono: &mut Monotonic, stats: &Value, engine: &Value) -> Result<String, String> {
    let mut f = Families::new(mono);
    collect(&mut f, stats, engine)?;
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&f.finish(), &mut buf)
        .map_err(|e| e.to_string())?;
    String::from_utf8(buf).map_err(|e| e.to_string())
}

fn sample() -> (Value, Value) {
    (
        serde_json::from_str(STATS).unwrap(),
        serde_json::from_str(ENGINE).unwrap(),
    )
}

/// One sample line: name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// Reads an exposition back, checking every line's syntax: `# HELP name text`,
/// `# TYPE name type` (once per family, before its samples), then samples of that
/// family only (`_bucket`, `_sum`, `_count` for histograms), `name{k="v",...} value`.
fn parse(text: &str) -> (HashMap<String, (String, String)>, Vec<Sample>) {
    let is_name = |s: &str| {
        !s.is_empty()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    let mut families: HashMap<String, (String, String)> = HashMap::new();
    let mut help: Option<(String, String)> = None;
    let mut current: Option<(String, String)> = None;
    let mut samples = Vec::new();
    assert!(text.ends_with('\n'), "no final newline");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, h) = rest.split_once(' ').expect(line);
            assert!(is_name(name) && !h.trim().is_empty(), "{line}");
            help = Some((name.into(), h.into()));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, t) = rest.split_once(' ').expect(line);
            assert!(["counter", "gauge", "histogram"].contains(&t), "{line}");
            let (hn, h) = help.take().expect("TYPE without HELP");
            assert_eq!(hn, name, "HELP and TYPE of different families");
            assert!(!families.contains_key(name), "family {name} twice");
            assert_eq!(t == "counter", name.ends_with("_total"), "{line}");
            families.insert(name.into(), (t.into(), h));
            current = Some((name.into(), t.into()));
        } else {
            let (series, value) = line.rsplit_once(' ').expect(line);
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().expect(line),
            };
            let (name, labels) = match series.split_once('{') {
                None => (series, Vec::new()),
                Some((n, l)) => (n, parse_labels(l.strip_suffix('}').expect(line))),
            };
            let (fam, t) = current.as_ref().expect("sample before any TYPE");
            let ok = name == fam
                || (t == "histogram"
                    && ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|s| name.strip_suffix(s) == Some(fam.as_str())));
            assert!(ok, "sample {name} in family {fam}");
            samples.push((name.to_string(), labels, value));
        }
    }
    (families, samples)
}

fn parse_labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (k, v) = rest.split_once("=\"").expect(s);
        assert!(
            k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{s}"
        );
        let mut value = String::new();
        let mut chars = v.char_indices();
        let end = loop {
            match chars.next().expect("unterminated label value") {
                (i, '"') => break i,
                (_, '\\') => value.push(chars.next().expect(s).1),
                (_, c) => value.push(c),
            }
        };
        out.push((k.to_string(), value));
        rest = &v[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    out
}

fn has(labels: &[(String, String)], k: &str, v: &str) -> bool {
    labels.iter().any(|(a, b)| a == k && b == v)
}

/// The value of the one sample `name` with all of `want` among its labels.
fn value(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> f64 {
    let m: Vec<f64> = samples
        .iter()
        .filter(|(n, l, _)| n == name && want.iter().all(|(k, v)| has(l, k, v)))
        .map(|s| s.2)
        .collect();
    assert_eq!(m.len(), 1, "{name} {want:?}: {m:?}");
    m[0]
}

#[test]
fn sample_reply_renders_well_formed_metrics() {
    let (stats, engine) = sample();
    let text = render(&mut Monotonic::default(), &stats, &engine).unwrap();
    let (families, samples) = parse(&text);
    for f in [
        "kvd_rx_packets_total",
        "kvd_ops_total",
        "kvd_drops_total",
        "kvd_transport_naks_total",
        "kvd_station_forwarded_total",
        "kvd_store_kvs",
        "kvd_store_utilization_ratio",
        "kvd_slab_allocated_bytes",
        "kvd_latency_sample_every",
    ] {
        assert!(families.contains_key(f), "{f} missing");
    }
    assert_eq!(families["kvd_service_latency_seconds"].0, "histogram");
    let w0 = [("worker", "0")];
    assert_eq!(value(&samples, "kvd_rx_packets_total", &w0), 1200.0);
    assert_eq!(value(&samples, "kvd_workers", &[]), 2.0);
    assert_eq!(value(&samples, "kvd_tsc_hz", &[]), 2e9);
    let get = [("worker", "0"), ("op", "get")];
    assert_eq!(value(&samples, "kvd_ops_total", &get), 4400.0);
    let uq = [("worker", "0"), ("reason", "unknown_qp")];
    assert_eq!(value(&samples, "kvd_drops_total", &uq), 3.0);
    assert_eq!(value(&samples, "kvd_store_utilization_ratio", &w0), 0.09);
    let c32 = [("worker", "0"), ("class", "32")];
    assert_eq!(value(&samples, "kvd_slab_allocated_bytes", &c32), 48000.0);
    // Per worker only: no series for the `total` column.
    assert!(samples.iter().all(|(n, l, _)| n == "kvd_workers"
        || n == "kvd_tsc_hz"
        || l.iter()
            .any(|(k, v)| k == "worker" && (v == "0" || v == "1"))));
}

#[test]
fn histogram_is_cumulative_and_counts_the_samples() {
    let (stats, engine) = sample();
    let text = render(&mut Monotonic::default(), &stats, &engine).unwrap();
    let (_, samples) = parse(&text);
    for w in ["0", "1"] {
        let buckets: Vec<(f64, f64)> = samples
            .iter()
            .filter(|(n, l, _)| n == "kvd_service_latency_seconds_bucket" && has(l, "worker", w))
            .map(|(_, l, v)| {
                let le = &l.iter().find(|(k, _)| k == "le").expect("le").1;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                (le, *v)
            })
            .collect();
        // Of the five finite bounds only the powers of two (256, 512 ns) go out.
        assert_eq!(buckets.len(), 3, "2 finite bounds and +Inf");
        assert!(buckets
            .windows(2)
            .all(|p| p[0].0 < p[1].0 && p[0].1 <= p[1].1));
        assert_eq!(buckets[0].0, 256e-9);
        let count = value(
            &samples,
            "kvd_service_latency_seconds_count",
            &[("worker", w)],
        );
        let sampled = stats["per_worker"][w]["latency"]["sampled"]
            .as_f64()
            .unwrap();
        assert_eq!(count, sampled);
        assert_eq!(buckets[2], (f64::INFINITY, count));
        let sum = value(
            &samples,
            "kvd_service_latency_seconds_sum",
            &[("worker", w)],
        );
        let sum_ns = stats["per_worker"][w]["latency"]["sum_ns"]
            .as_f64()
            .unwrap();
        assert!((sum - sum_ns / 1e9).abs() < 1e-12);
    }
    let w0 = [("worker", "0"), ("le", "0.000000512")];
    assert_eq!(
        value(&samples, "kvd_service_latency_seconds_bucket", &w0),
        16.0,
        "the buckets left out are counted in the next one"
    );
}

#[test]
fn full_scale_bounds_encode_as_seconds() {
    // 4 bounds per power of two from 256 ns to 2^28 ns, as the dataplane has them.
    let le: Vec<u64> = (0..=80)
        .map(|i| (256.0 * 2f64.powf(i as f64 / 4.0)).round() as u64)
        .collect();
    let mut counts = vec![0u64; le.len() + 1];
    counts[10] = 5;
    counts[le.len()] = 1;
    let mut stats: Value = serde_json::from_str(STATS).unwrap();
    stats["per_worker"]["0"]["latency"] = json!({"sample_every": 64, "sampled": 6, "sum_ns": 1_000_000_000u64,
               "le_ns": le, "counts": counts});
    let (_, engine) = sample();
    let text = render(&mut Monotonic::default(), &stats, &engine).unwrap();
    let (_, samples) = parse(&text);
    let w0 = [("worker", "0"), ("le", "0.268435456")];
    assert_eq!(
        value(&samples, "kvd_service_latency_seconds_bucket", &w0),
        5.0
    );
    let buckets = samples
        .iter()
        .filter(|(n, l, _)| n == "kvd_service_latency_seconds_bucket" && has(l, "worker", "0"))
        .count();
    assert_eq!(
        buckets, 22,
        "21 powers of two from 256 ns to 2^28 ns, and +Inf"
    );
    let inf = [("worker", "0"), ("le", "+Inf")];
    assert_eq!(
        value(&samples, "kvd_service_latency_seconds_bucket", &inf),
        6.0
    );
    assert_eq!(
        value(
            &samples,
            "kvd_service_latency_seconds_sum",
            &[("worker", "0")]
        ),
        1.0
    );
}

#[test]
fn counters_stay_monotonic_across_scrapes() {
    let (mut stats, engine) = sample();
    let mut mono = Monotonic::default();
    render(&mut mono, &stats, &engine).unwrap();
    // A racy read of a derived counter dips; the export does not.
    stats["per_worker"]["0"]["get_misses"] = json!(399);
    stats["per_worker"]["0"]["latency"]["counts"] = json!([1, 3, 8, 2, 1, 1]);
    let (_, samples) = parse(&render(&mut mono, &stats, &engine).unwrap());
    let w0 = [("worker", "0")];
    assert_eq!(value(&samples, "kvd_get_misses_total", &w0), 400.0);
    assert_eq!(
        value(&samples, "kvd_service_latency_seconds_count", &w0),
        17.0
    );
}

#[test]
fn malformed_replies_are_errors() {
    let (stats, engine) = sample();
    let mut mono = Monotonic::default();
    let bad_stats = [
        json!({"workers": 1}),
        json!({"per_worker": []}),
        json!({"per_worker": {"x": {}}}),
        json!({"per_worker": {"0": {"rx_packets": -1}}}),
        json!({"per_worker": {"0": {"drop": {"unknown_qp": "3"}}}}),
        json!({"per_worker": {"0": {"latency": {"sample_every": 1}}}}),
    ];
    for b in bad_stats {
        assert!(render(&mut mono, &b, &engine).is_err(), "{b}");
    }
    let bad_engine = [
        json!({"per_worker": {"0": {"slab": {"class_bytes": [32], "allocated": [1, 2]}}}}),
        json!({"per_worker": {"0": {"stored_kvs": 1.5}}}),
    ];
    for b in bad_engine {
        assert!(render(&mut mono, &stats, &b).is_err(), "{b}");
    }
}

const DOWN: &str = "kvd-no-such-prefix-for-metrics-tests";

#[test]
fn dataplane_down_exports_only_kvd_up_0_and_the_exporters_own() {
    let mut src = Source::new(DOWN.into(), Duration::from_millis(200));
    for n in 1..=2 {
        let text = src.exposition().unwrap();
        let (families, samples) = parse(&text);
        let own = |name: &str| name.starts_with("kvd_exporter_") || name == "kvd_build_info";
        let theirs: Vec<_> = samples.iter().filter(|s| !own(&s.0)).collect();
        assert_eq!(theirs, [&("kvd_up".to_string(), vec![], 0.0)], "{text}");
        assert_eq!(families.len(), 5, "{text}");
        let value = |name: &str| samples.iter().find(|s| s.0 == name).unwrap().2;
        assert_eq!(value("kvd_exporter_scrapes_total"), f64::from(n));
        assert_eq!(value("kvd_exporter_scrape_errors_total"), f64::from(n));
        assert_eq!(value("kvd_build_info"), 1.0);
        assert!(value("kvd_exporter_scrape_seconds") < 1.0, "{text}");
    }
}

fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn http_server_answers_metrics_root_and_404() {
    let server = Arc::new(Server::http("127.0.0.1:0").unwrap());
    let addr = server.server_addr().to_ip().unwrap().to_string();
    let srv = Arc::clone(&server);
    let t = std::thread::spawn(move || {
        serve(
            &srv,
            &mut Source::new(DOWN.into(), Duration::from_millis(200)),
        );
    });
    let m = get(&addr, "/metrics");
    assert!(
        m.starts_with("HTTP/1.1 200") || m.starts_with("HTTP/1.0 200"),
        "{m}"
    );
    assert!(m.contains("text/plain; version=0.0.4"), "{m}");
    assert!(m.contains("\nkvd_up 0\n"), "{m}");
    assert!(m.contains("\nkvd_exporter_scrapes_total 1\n"), "{m}");
    assert!(get(&addr, "/").contains("/metrics"));
    assert!(get(&addr, "/nope").contains(" 404 "));
    server.unblock();
    t.join().unwrap();
    assert_eq!(reply(405, String::new(), None).status_code().0, 405);
}

#[test]
fn tenant_series_are_labelled_by_tenant_and_bounded() {
    let (mut stats, engine) = sample();
    stats["tenant_stats"] = json!({"id": [7, 9, 0], "requests": [10, 20, 5],
        "request_bytes": [640, 0, 1], "denied": [1, 0, 0], "over_quota": [0, 3, 0],
        "opens": [2, 1, 9], "bad_credentials": [0, 4, 0], "connections": [2, 0, 4]});
    let text = render(&mut Monotonic::default(), &stats, &engine).unwrap();
    assert!(text.contains("kvd_tenant_request_bytes_total{tenant=\"7\"} 640"));
    assert!(
        text.contains("# TYPE kvd_tenant_connections gauge"),
        "{text}"
    );
    assert!(
        text.contains("kvd_tenant_connections{tenant=\"other\"} 4"),
        "{text}"
    );
    assert!(
        text.contains("kvd_tenant_requests_total{tenant=\"7\"} 10"),
        "{text}"
    );
    assert!(text.contains("kvd_tenant_over_quota_total{tenant=\"9\"} 3"));
    assert!(text.contains("kvd_tenant_opens_total{tenant=\"other\"} 9"));
    // An array of another length is a format error, not a wrong series.
    stats["tenant_stats"]["denied"] = json!([1]);
    assert!(render(&mut Monotonic::default(), &stats, &engine).is_err());
}

/// A `/kvd/replication` reply of a chain head (one peer online, one invalid; a relay
/// view with one successor), in the dataplane's format.
const REPLICATION: &str = r#"{"role": "master", "epoch": 3, "repl_id": "9f2e28159eec52b4",
    "offset": 513735, "backlog_start": 0, "good_replicas": 1, "short_of_replicas": 0,
    "records": 10, "promotions": 2, "demotions": 1, "redirects_sent": 0,
    "redirects_followed": 0, "foreign_refused": 0, "data": "live", "hist": 2,
    "diverged": 0, "rollbacks_refused": 0, "election_wait": null,
    "peers": {"0": {"link": "net_memif10", "state": "invalid", "acked_offset": 0,
                    "sent_offset": 0, "lag_bytes": 513735, "last_heard_ms_ago": 4,
                    "full_syncs": 1, "partial_syncs": 0, "invalidations": 2, "resent": 7},
              "1": {"link": "net_memif12", "state": "online", "acked_offset": 513735,
                    "sent_offset": 513735, "lag_bytes": 0, "last_heard_ms_ago": 1,
                    "full_syncs": 1, "partial_syncs": 3, "invalidations": 0, "resent": 0}},
    "links": [{"link": "net_memif10", "up": true, "redials": 3},
              {"link": "net_memif12", "up": null, "redials": 0}],
    "link_drops": {"malformed": 0, "wrong_destination": 5, "bad_control": 0,
                   "foreign_segment": 0, "stale_epoch": 0, "no_room": 0},
    "idle_sleeps": 0, "idle_sleep_us": 0, "doorbells": {}, "log_file": null,
    "relay": {"offset": 90608, "peers": {"1": {"link": "net_memif12",
        "state": "connecting", "acked_offset": 90608, "sent_offset": 0, "lag_bytes": 0,
        "last_heard_ms_ago": 9, "full_syncs": 0, "partial_syncs": 0, "invalidations": 0,
        "resent": 0}}}}"#;

#[test]
fn replication_series_name_the_role_the_peers_and_the_drops() {
    let (mut stats, engine) = sample();
    stats["replication"] = serde_json::from_str(REPLICATION).unwrap();
    let text = render(&mut Monotonic::default(), &stats, &engine).unwrap();
    let (_, samples) = parse(&text);
    assert_eq!(value(&samples, "kvd_repl_role", &[("role", "master")]), 1.0);
    assert_eq!(value(&samples, "kvd_repl_epoch", &[]), 3.0);
    let node = [("link", "net_memif10"), ("view", "node")];
    assert_eq!(value(&samples, "kvd_repl_peer_online", &node), 0.0);
    assert_eq!(value(&samples, "kvd_repl_peer_lag_bytes", &node), 513735.0);
    assert_eq!(
        value(&samples, "kvd_repl_peer_invalidations_total", &node),
        2.0
    );
    let ok = [("link", "net_memif12"), ("view", "node")];
    assert_eq!(value(&samples, "kvd_repl_peer_online", &ok), 1.0);
    let relay = [("link", "net_memif12"), ("view", "relay")];
    assert_eq!(value(&samples, "kvd_repl_peer_online", &relay), 0.0);
    assert_eq!(
        value(
            &samples,
            "kvd_repl_link_drops_total",
            &[("reason", "wrong_destination")]
        ),
        5.0
    );
    assert_eq!(
        value(
            &samples,
            "kvd_repl_link_redials_total",
            &[("link", "net_memif10")]
        ),
        3.0
    );
    // A node without replication exports none of them; a broken reply is an error.
    let (plain, _) = sample();
    let text = render(&mut Monotonic::default(), &plain, &engine).unwrap();
    assert!(!text.contains("kvd_repl_"), "{text}");
    stats["replication"]["link_drops"] = json!([1, 2]);
    assert!(render(&mut Monotonic::default(), &stats, &engine).is_err());
}

/// The dashboard's replication panels query only metrics this exporter writes for a
/// replicated node (scripts/e2e/metrics.sh checks the others on a standalone one).
#[test]
fn the_dashboards_replication_metrics_are_exported() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/grafana/kvd-dashboard.json"
    );
    let d: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (mut stats, engine) = sample();
    stats["replication"] = serde_json::from_str(REPLICATION).unwrap();
    let text = render(&mut Monotonic::default(), &stats, &engine).unwrap();
    let mut used = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            let e = t["expr"].as_str().unwrap();
            for (i, _) in e.match_indices("kvd_repl_") {
                let name: String = e[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                used.push(name);
            }
        }
    }
    assert!(!used.is_empty(), "the dashboard has replication panels");
    for m in used {
        assert!(
            text.contains(&format!("\n{m}{{")) || text.contains(&format!("\n{m} ")),
            "{m} is not exported"
        );
    }
}

/// Every worker counter the schema declares (`kvwire::counters::WORKER_COUNTERS`) is
/// exported with its worker's value — as its own family or as its series of a shared
/// one — unless the schema says why not (`Export::Skip`): a counter added to the
/// dataplane cannot be forgotten by the exporter.
#[test]
fn every_declared_counter_is_exported() {
    use kvwire::counters::{Export, WORKER_COUNTERS};
    let (mut stats, engine) = sample();
    for (i, c) in WORKER_COUNTERS.iter().enumerate() {
        stats["per_worker"]["0"][c.name] = json!(1000 + i);
    }
    let text = render(&mut Monotonic::default(), &stats, &engine).unwrap();
    let (families, samples) = parse(&text);
    let w0 = [("worker", "0")];
    let mut checked = 0;
    for (i, c) in WORKER_COUNTERS.iter().enumerate() {
        let want = (1000 + i) as f64;
        match c.export {
            Export::Family(f) => {
                assert!(families.contains_key(f), "{}: family {f} missing", c.name);
                assert_eq!(value(&samples, f, &w0), want, "{}", c.name);
            }
            Export::Series(f, label, v) => {
                assert_eq!(
                    value(&samples, f, &[("worker", "0"), (label, v)]),
                    want,
                    "{}",
                    c.name
                );
            }
            Export::Skip(why) => {
                assert!(!why.is_empty(), "{}: skipped without a reason", c.name);
                continue;
            }
        }
        checked += 1;
    }
    assert!(checked > 30, "only {checked} counters exported");
}
