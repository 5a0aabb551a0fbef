//! `ctlplane snapshot save FILE` / `ctlplane snapshot status`: snapshots of a running
//! dataplane (docs/OPERATIONS.md, "Snapshots and persistence").

use crate::target::Target;
use clap::Subcommand;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Snapshot commands.
#[derive(Subcommand, Debug)]
pub enum SnapshotCmd {
    /// Save every partition to FILE while the dataplane serves; waits until the file
    /// is complete and prints records, bytes and duration. Exit 1 if it fails.
    Save {
        /// The file to write (created by the dataplane process, on this host; a
        /// relative path is taken from the current directory).
        file: PathBuf,
        #[command(flatten)]
        target: Target,
        /// Give up waiting after this many seconds (the snapshot goes on).
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Print the final status reply as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The last snapshot's state, progress per worker, records, bytes, duration.
    Status {
        #[command(flatten)]
        target: Target,
        /// Print the raw reply as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs one snapshot command.
pub fn run(cmd: SnapshotCmd) -> Result<(), String> {
    match cmd {
        SnapshotCmd::Save {
            file,
            target,
            timeout,
            json,
        } => save(&file, &target, Duration::from_secs(timeout), json),
        SnapshotCmd::Status { target, json } => {
            let v = target.connect()?.query("/kvd/snapshot/status")?;
            if json {
                println!("{v}");
            } else {
                print_status(&v);
            }
            Ok(())
        }
    }
}

/// `file` as an absolute path (the dataplane has its own working directory).
fn absolute(file: &Path) -> Result<PathBuf, String> {
    let p = std::path::absolute(file).map_err(|e| format!("{}: {e}", file.display()))?;
    if p.to_str().is_none_or(|s| s.contains(',')) {
        return Err(format!(
            "{}: the path must be UTF-8 without commas (telemetry parameter)",
            p.display()
        ));
    }
    Ok(p)
}

fn save(file: &Path, target: &Target, timeout: Duration, json: bool) -> Result<(), String> {
    let path = absolute(file)?;
    let mut t = target.connect()?;
    let started = t.query(&format!("/kvd/snapshot/save,{}", path.display()))?;
    let id = started["id"]
        .as_u64()
        .ok_or_else(|| format!("unexpected reply {started}"))?;
    let deadline = Instant::now() + timeout;
    let v = loop {
        let v = t.query("/kvd/snapshot/status")?;
        if v["id"].as_u64() != Some(id) {
            return Err(format!("snapshot {id} was replaced: {v}"));
        }
        if v["state"] != "running" {
            break v;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "snapshot {id} still running after {} s (see `ctlplane snapshot status`)",
                timeout.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if json {
        println!("{v}");
    }
    if v["state"] != "done" {
        return Err(format!(
            "snapshot {id} to {} failed: {}",
            path.display(),
            v["failure"].as_str().unwrap_or("(no reason given)")
        ));
    }
    if !json {
        println!(
            "snapshot {id} saved to {}: {} records ({} scanned, {} post-images of writes meanwhile), {} bytes in {:.1} ms",
            path.display(),
            v["records"],
            v["scanned"],
            v["records"]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(v["scanned"].as_u64().unwrap_or(0)),
            v["bytes"],
            v["duration_us"].as_u64().unwrap_or(0) as f64 / 1000.0
        );
    }
    Ok(())
}

fn print_status(v: &Value) {
    if v["state"] == "none" {
        println!("no snapshot yet");
        return;
    }
    println!(
        "snapshot {} to {}: {}{}",
        v["id"],
        v["path"].as_str().unwrap_or("?"),
        v["state"].as_str().unwrap_or("?"),
        v["failure"]
            .as_str()
            .map(|f| format!(" ({f})"))
            .unwrap_or_default()
    );
    println!(
        "  records {} (scanned {}), bytes {}, {:.1} ms",
        v["records"],
        v["scanned"],
        v["bytes"],
        v["duration_us"].as_u64().unwrap_or(0) as f64 / 1000.0
    );
    if let Some(ws) = v["per_worker"].as_object() {
        for (w, x) in ws {
            println!(
                "  worker {w}: {} ({} of {} buckets)",
                x["state"].as_str().unwrap_or("?"),
                x["buckets_done"],
                x["buckets_total"]
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_absolute_and_commas_are_refused() {
        let p = absolute(Path::new("snap.kvd")).unwrap();
        assert!(p.is_absolute() && p.ends_with("snap.kvd"));
        assert!(absolute(Path::new("/tmp/a,b")).is_err());
    }

    #[test]
    fn status_prints_without_panicking_on_any_reply() {
        print_status(&serde_json::json!({"state": "none"}));
        print_status(&serde_json::json!({}));
        print_status(
            &serde_json::json!({"id": 1, "state": "failed", "failure": "x",
            "per_worker": {"0": {"state": "done"}}}),
        );
    }
}
