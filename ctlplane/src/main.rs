//! `ctlplane`: the operator's tool (the paper's host daemon).
//!
//! Today it validates and shows configurations; live stats, tuning, client admission
//! and slab service against a running dataplane come with the control-plane issue.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use std::path::PathBuf;

mod dispatch;
mod tune;

#[derive(Parser, Debug)]
#[command(version, about = "KV-Direct control plane")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Configuration files.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Parameter tuning: hash index (simulation) and DRAM load dispatch (model).
    Tune {
        #[command(subcommand)]
        cmd: tune::TuneCmd,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigCmd {
    /// Validate a config file and print it with every default filled in.
    Show {
        /// The config file.
        #[arg(long, default_value = "configs/memif.json")]
        config: PathBuf,
    },
}

fn main() {
    let args = Args::parse();
    match args.cmd {
        Cmd::Config {
            cmd: ConfigCmd::Show { config },
        } => match kvconf::Config::load(&config) {
            Ok(c) => match serde_json::to_string_pretty(&c) {
                Ok(s) => println!("{s}"),
                Err(e) => {
                    eprintln!("ctlplane: {e}");
                    std::process::exit(1);
                }
            },
            Err(e) => {
                eprintln!("ctlplane: {e}");
                std::process::exit(1);
            }
        },
        Cmd::Tune { cmd } => {
            if let Err(e) = cmd.run() {
                eprintln!("ctlplane: {e}");
                std::process::exit(1);
            }
        }
    }
}
