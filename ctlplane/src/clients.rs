//! `ctlplane clients list|add|remove`: client QP admission.

use crate::target::Target;
use clap::Subcommand;

/// Client admission commands.
#[derive(Subcommand, Debug)]
pub enum ClientsCmd {
    /// Show the admitted client QPs.
    List {
        #[command(flatten)]
        target: Target,
    },
    /// Admit a client QP; returns once every worker serves it.
    Add {
        #[command(flatten)]
        target: Target,
        /// The client's QPN (the BTH destination QP of its requests).
        #[arg(long)]
        qpn: u32,
        /// Its R_Key (decimal or 0x hex).
        #[arg(long, value_parser = parse_u32)]
        rkey: u32,
    },
    /// Revoke a client QP; returns once every worker refuses it.
    Remove {
        #[command(flatten)]
        target: Target,
        /// The client's QPN.
        #[arg(long)]
        qpn: u32,
    },
}

fn parse_u32(s: &str) -> Result<u32, String> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("{s:?}: {e}"))
}

/// Runs one clients command.
pub fn run(cmd: ClientsCmd) -> Result<(), String> {
    match cmd {
        ClientsCmd::List { target } => {
            let v = target.connect()?.query("/kvd/clients")?;
            let col = |k: &str| -> Vec<u64> {
                v[k].as_array()
                    .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
                    .unwrap_or_default()
            };
            println!(
                "generation {} (applied per worker: {:?})",
                v["generation"],
                col("applied_generation")
            );
            println!("{:>10}  {:>10}", "qpn", "rkey");
            for (q, k) in col("qpn").iter().zip(col("rkey")) {
                println!("{q:>10}  {k:#10x}");
            }
            Ok(())
        }
        ClientsCmd::Add { target, qpn, rkey } => {
            let v = target
                .connect()?
                .query(&format!("/kvd/clients/add,{qpn},{rkey}"))?;
            println!(
                "admitted qpn {qpn} rkey {rkey:#x}: generation {} applied by {} worker(s)",
                v["generation"], v["applied_by_workers"]
            );
            Ok(())
        }
        ClientsCmd::Remove { target, qpn } => {
            let v = target
                .connect()?
                .query(&format!("/kvd/clients/remove,{qpn}"))?;
            println!(
                "revoked qpn {qpn} (rkey {:#x}): generation {} applied by {} worker(s)",
                v["rkey"].as_u64().unwrap_or(0),
                v["generation"],
                v["applied_by_workers"]
            );
            Ok(())
        }
    }
}
