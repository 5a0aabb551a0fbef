//! `ctlplane metrics`: a Prometheus exporter of the dataplane's telemetry.
//!
//! A small HTTP server (`tiny_http`) answers `GET /metrics` with the Prometheus text
//! exposition format, written by the `prometheus` crate's text encoder from metric
//! families built on each scrape from a fresh `/kvd/stats` and `/kvd/engine` reply
//! ([`collect`]) and, on a replicated node, `/kvd/replication` ([`replication`]); `GET /` points there. Requests are served one at a time over one
//! telemetry connection, kept between scrapes and opened again after an error
//! ([`source`]). While the dataplane is down the exporter keeps answering, with
//! `kvd_up 0` only.

mod collect;
mod families;
mod replication;
mod source;
#[cfg(test)]
mod tests;

use crate::target::Target;
use source::Source;
use std::io::{Cursor, Write};
use std::time::Duration;
use tiny_http::{Header, Method, Response, Server};

/// `ctlplane metrics` arguments.
#[derive(clap::Args, Debug)]
pub struct MetricsArgs {
    /// Address to serve HTTP on (port 0: any free port; the address taken is
    /// printed).
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub listen: String,
    /// The most one scrape may take, in ms: connect, greeting and every reply
    /// (keep it under Prometheus's scrape_timeout; a dataplane that does not answer
    /// in time is `kvd_up 0`).
    #[arg(long, default_value_t = 2500)]
    pub timeout_ms: u64,
    #[command(flatten)]
    pub target: Target,
}

/// Runs the exporter until the process is stopped.
pub fn run(a: MetricsArgs) -> Result<(), String> {
    let prefix = a.target.prefix()?;
    if a.timeout_ms == 0 {
        return Err("--timeout-ms must be at least 1".into());
    }
    let server = Server::http(&a.listen).map_err(|e| format!("listen on {}: {e}", a.listen))?;
    let addr = server
        .server_addr()
        .to_ip()
        .map_or_else(|| a.listen.clone(), |s| s.to_string());
    println!("ctlplane metrics: serving http://{addr}/metrics (dataplane --file-prefix {prefix})");
    let _ = std::io::stdout().flush();
    let mut src = Source::new(prefix, Duration::from_millis(a.timeout_ms));
    serve(&server, &mut src);
    Ok(())
}

/// A response of `status` with `body` as `text/plain; charset=UTF-8`, or as
/// `content_type` when given.
fn reply(status: u16, body: String, content_type: Option<&str>) -> Response<Cursor<Vec<u8>>> {
    let mut r = Response::from_string(body).with_status_code(status);
    // The content types used are constant ASCII, which `tiny_http` always takes.
    if let Some(Ok(h)) = content_type.map(|t| Header::from_bytes("Content-Type", t)) {
        r.add_header(h);
    }
    r
}

/// Answers requests until the server is unblocked: `/metrics` scrapes `src`.
pub fn serve(server: &Server, src: &mut Source) {
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("");
        let resp = match (req.method(), path) {
            (Method::Get | Method::Head, "/metrics") => match src.exposition() {
                Ok(body) => reply(200, body, Some(prometheus::TEXT_FORMAT)),
                Err(e) => reply(500, format!("{e}\n"), None),
            },
            (Method::Get | Method::Head, "/") => reply(
                200,
                "KV-Direct dataplane exporter: Prometheus metrics at /metrics\n".into(),
                None,
            ),
            (Method::Get | Method::Head, _) => reply(404, "not found: try /metrics\n".into(), None),
            _ => reply(405, "only GET\n".into(), None),
        };
        // A scraper that went away is no error of ours.
        let _ = req.respond(resp);
    }
}
