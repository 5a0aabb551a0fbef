//! `ctlplane slab merge`: lazy slab merging on demand.

use crate::target::Target;
use clap::Subcommand;

/// Slab commands.
#[derive(Subcommand, Debug)]
pub enum SlabCmd {
    /// Flush every worker's slab cache to the shared pool and merge free buddies;
    /// prints what each worker merged.
    Merge {
        #[command(flatten)]
        target: Target,
        /// Print the raw reply as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs one slab command.
pub fn run(cmd: SlabCmd) -> Result<(), String> {
    let SlabCmd::Merge { target, json } = cmd;
    let v = target.connect()?.query("/kvd/slab_merge")?;
    if json {
        println!("{v}");
        return Ok(());
    }
    println!("slab merge request {}", v["request"]);
    let empty = serde_json::Map::new();
    let workers = v["per_worker"].as_object().unwrap_or(&empty);
    for (w, m) in workers {
        println!(
            "worker {w}: scanned {} free blocks, merged {} buddy pairs in {} us",
            m["scanned"], m["merged_total"], m["elapsed_us"]
        );
        let cols = |k: &str| -> Vec<u64> {
            m[k].as_array()
                .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
                .unwrap_or_default()
        };
        for (b, n) in cols("class_bytes").iter().zip(cols("merged")) {
            println!("  class {b:>4} B: {n:>8} pairs merged into {} B", b * 2);
        }
    }
    Ok(())
}
