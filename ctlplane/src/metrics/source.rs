//! One scrape's worth of metrics from the dataplane: a telemetry connection kept
//! between scrapes and opened again after an error, and `kvd_up`.

use super::collect::collect;
use super::families::{Families, Monotonic};
use crate::telemetry::Telemetry;
use prometheus::proto::MetricFamily;
use prometheus::{Encoder, TextEncoder};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Help of `kvd_up`.
const UP_HELP: &str =
    "1 when the last scrape read the dataplane's telemetry, 0 when it could not (then no other kvd_ metric is exported).";

/// Where the metrics come from: the dataplane started with one EAL file prefix.
pub struct Source {
    prefix: String,
    /// The budget of one scrape: every telemetry step of it (connect, greeting,
    /// each reply, a retry on a fresh connection) ends within it.
    timeout: Duration,
    conn: Option<Telemetry>,
    mono: Monotonic,
    /// Whether the last scrape reached the dataplane (`None` before the first):
    /// changes are logged to stderr, once each.
    was_up: Option<bool>,
    /// Scrapes served, and those that could not read the dataplane.
    scrapes: u64,
    scrape_errors: u64,
}

/// Caps the workers asked for one by one (a reply names the count).
const MAX_WORKERS: u64 = 1024;

/// `/kvd/stats` as one reply with every worker's dict, asked worker by worker
/// (`/kvd/stats,W`): with its latency histogram a worker's dict is about 2 KB and
/// DPDK caps a telemetry reply at 16 KB, so one `/kvd/stats` reply could not hold
/// many workers. The `total` dict is left out (PromQL sums the workers).
fn per_worker_stats(t: &mut Telemetry, deadline: Instant) -> Result<Value, String> {
    let mut all = query_by(t, "/kvd/stats,0", deadline)?;
    let n = all
        .get("workers")
        .and_then(Value::as_u64)
        .ok_or("/kvd/stats: no worker count")?;
    if n > MAX_WORKERS {
        return Err(format!("/kvd/stats: {n} workers?"));
    }
    for w in 1..n {
        let mut one = query_by(t, &format!("/kvd/stats,{w}"), deadline)?;
        let id = w.to_string();
        let dict = one
            .get_mut("per_worker")
            .and_then(|p| p.get_mut(&id))
            .map(Value::take)
            .ok_or_else(|| format!("/kvd/stats,{w}: no dict for worker {w}"))?;
        all.get_mut("per_worker")
            .and_then(Value::as_object_mut)
            .ok_or("/kvd/stats: no `per_worker` dict")?
            .insert(id, dict);
    }
    Ok(all)
}

/// The time left until `deadline`, or an error once it passed.
fn left(deadline: Instant) -> Result<Duration, String> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        return Err("the scrape's time is up".into());
    }
    Ok(d)
}

/// `cmd`'s reply, which must come before `deadline`.
fn query_by(t: &mut Telemetry, cmd: &str, deadline: Instant) -> Result<Value, String> {
    t.set_timeout(left(deadline)?)?;
    t.query(cmd)
}

impl Source {
    /// The dataplane with EAL file prefix `prefix`; every reply must come within
    /// `timeout`. Nothing is opened before the first scrape.
    pub fn new(prefix: String, timeout: Duration) -> Source {
        Source {
            prefix,
            timeout,
            conn: None,
            mono: Monotonic::default(),
            was_up: None,
            scrapes: 0,
            scrape_errors: 0,
        }
    }

    /// The telemetry connection, opened if there is none. A new connection may be
    /// to a new dataplane process: counters start from scratch.
    fn conn(&mut self, deadline: Instant) -> Result<&mut Telemetry, String> {
        if self.conn.is_none() {
            let t = Telemetry::connect_within(&self.prefix, left(deadline)?)?;
            self.mono.reset();
            self.conn = Some(t);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| "no connection".to_string())
    }

    /// `/kvd/stats` and `/kvd/engine`. Any error drops the connection.
    fn query(&mut self, deadline: Instant) -> Result<(Value, Value), String> {
        let r = self.conn(deadline).and_then(|t| {
            let mut stats = per_worker_stats(t, deadline)?;
            let engine = query_by(t, "/kvd/engine", deadline)?;
            // Per-tenant counters (a dataplane without tenants answers empty arrays).
            let tenants = query_by(t, "/kvd/tenants/stats", deadline)?;
            // Replication (a node without it does not know the command).
            t.set_timeout(left(deadline)?)?;
            let replication = t.query_opt("/kvd/replication")?;
            if let Some(o) = stats.as_object_mut() {
                o.insert("tenant_stats".into(), tenants);
                o.insert("replication".into(), replication.unwrap_or(Value::Null));
            }
            Ok((stats, engine))
        });
        if r.is_err() {
            self.conn = None;
        }
        r
    }

    /// The families of one scrape from the replies, or the error.
    fn families_up(&mut self) -> Result<Vec<MetricFamily>, String> {
        let deadline = Instant::now() + self.timeout;
        let had_conn = self.conn.is_some();
        let (stats, engine) = match self.query(deadline) {
            // A kept connection fails first after the dataplane restarted: try a
            // fresh one at once, within the same budget.
            Err(_) if had_conn => self.query(deadline)?,
            r => r?,
        };
        let mut f = Families::new(&mut self.mono);
        f.gauge("kvd_up", UP_HELP, &[], 1.0);
        collect(&mut f, &stats, &engine)?;
        Ok(f.finish())
    }

    /// Every metric of one scrape: the dataplane's, with `kvd_up 1`; or only
    /// `kvd_up 0` when the dataplane cannot be reached or answers out of format.
    pub fn scrape(&mut self) -> Vec<MetricFamily> {
        let t0 = Instant::now();
        let r = self.families_up();
        let up = r.is_ok();
        self.scrapes += 1;
        self.scrape_errors += u64::from(!up);
        if self.was_up != Some(up) {
            match &r {
                Ok(_) => eprintln!("ctlplane metrics: dataplane {} reachable", self.prefix),
                Err(e) => eprintln!("ctlplane metrics: dataplane {} down: {e}", self.prefix),
            }
            self.was_up = Some(up);
        }
        let mut families = r.unwrap_or_else(|_| {
            let mut mono = Monotonic::default();
            let mut f = Families::new(&mut mono);
            f.gauge("kvd_up", UP_HELP, &[], 0.0);
            f.finish()
        });
        families.extend(self.own_families(t0.elapsed()));
        families
    }

    /// The exporter's own series, up or down: its build, its scrapes and the time
    /// this one took.
    fn own_families(&self, took: Duration) -> Vec<MetricFamily> {
        let mut mono = Monotonic::default();
        let mut f = Families::new(&mut mono);
        f.gauge(
            "kvd_build_info",
            "The exporter's build (always 1): version and the dataplane prefix it reads.",
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("prefix", &self.prefix),
            ],
            1.0,
        );
        f.counter(
            "kvd_exporter_scrapes_total",
            "Scrapes the exporter served.",
            &[],
            self.scrapes,
        );
        f.counter(
            "kvd_exporter_scrape_errors_total",
            "Scrapes that could not read the dataplane (kvd_up 0).",
            &[],
            self.scrape_errors,
        );
        f.gauge(
            "kvd_exporter_scrape_seconds",
            "How long reading the dataplane took in this scrape.",
            &[],
            took.as_secs_f64(),
        );
        f.finish()
    }

    /// One scrape in the Prometheus text exposition format (version 0.0.4).
    pub fn exposition(&mut self) -> Result<String, String> {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.scrape(), &mut buf)
            .map_err(|e| format!("encode: {e}"))?;
        String::from_utf8(buf).map_err(|e| format!("encode: {e}"))
    }
}
