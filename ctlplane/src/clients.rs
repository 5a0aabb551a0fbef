//! `ctlplane clients list|add|remove`: client QP admission on a running dataplane;
//! `ctlplane clients gen`: a config file with many generated clients (offline).

use crate::target::Target;
use clap::Subcommand;
use kvconf::ClientConfig;
use rand::RngCore;
use serde_json::Value;
use std::path::PathBuf;

/// The largest static client QPN (the ones above are opened by the server).
const MAX_QPN: u32 = kvconf::FIRST_OPENED_QPN - 1;

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
    /// Write a copy of a config file whose `clients` list is replaced by (or, with
    /// `--append`, extended with) COUNT clients: consecutive QPNs from FIRST_QPN and
    /// random non-zero R_Keys. Every other field is kept (object keys come out sorted).
    Gen {
        /// How many clients to generate (at least 1).
        #[arg(long)]
        count: u32,
        /// The QPN of the first generated client; the others follow consecutively (the
        /// last must fit in 24 bits).
        #[arg(long, default_value_t = 100)]
        first_qpn: u32,
        /// The config file to start from (JSON).
        #[arg(long)]
        config: PathBuf,
        /// Where to write the new config (may be the input file).
        #[arg(long)]
        out: PathBuf,
        /// Keep the clients of the input and add the generated ones after them.
        #[arg(long)]
        append: bool,
    },
}

/// `count` clients with consecutive QPNs from `first_qpn` and R_Keys drawn from `rng`
/// (zero is never used: redrawn). Refuses `count == 0` and a last QPN past 2^24 - 1.
pub fn generate(
    count: u32,
    first_qpn: u32,
    rng: &mut impl RngCore,
) -> Result<Vec<ClientConfig>, String> {
    if count == 0 {
        return Err("clients gen: --count must be at least 1".into());
    }
    if first_qpn < 2 {
        return Err(format!(
            "clients gen: --first-qpn {first_qpn}: QPs 0 and 1 are not client QPs"
        ));
    }
    let last = u64::from(first_qpn) + u64::from(count) - 1;
    if last > u64::from(MAX_QPN) {
        return Err(format!(
            "clients gen: {count} QPNs from {first_qpn} end at {last}, past the largest \
             static client QPN {MAX_QPN} (2^23 - 1)"
        ));
    }
    Ok((first_qpn..=last as u32)
        .map(|qpn| {
            let rkey = loop {
                let k = rng.next_u32();
                if k != 0 {
                    break k;
                }
            };
            ClientConfig {
                qpn,
                rkey,
                mac: None,
                ip: None,
            }
        })
        .collect())
}

/// Puts `clients` into the config document `doc` (a JSON object): in place of its
/// `clients` list, or after it with `append` (refusing a QPN listed twice). Every other
/// field is left as it is. Returns how many clients of `doc` were kept.
pub fn apply(doc: &mut Value, clients: &[ClientConfig], append: bool) -> Result<usize, String> {
    let obj = doc
        .as_object_mut()
        .ok_or("clients gen: the config is not a JSON object")?;
    let mut list = match obj.remove("clients") {
        Some(Value::Array(a)) if append => a,
        Some(Value::Null) | None => Vec::new(),
        Some(Value::Array(_)) => Vec::new(),
        Some(other) => {
            return Err(format!(
                "clients gen: `clients` must be a list, found {other}"
            ))
        }
    };
    let kept = list.len();
    for old in &list {
        let qpn = old.get("qpn").and_then(Value::as_u64);
        if let Some(c) = clients.iter().find(|c| Some(u64::from(c.qpn)) == qpn) {
            return Err(format!(
                "clients gen: qpn {} is already a client of the config (choose another \
                 --first-qpn, or replace the list without --append)",
                c.qpn
            ));
        }
    }
    for c in clients {
        list.push(serde_json::to_value(c).map_err(|e| e.to_string())?);
    }
    obj.insert("clients".into(), Value::Array(list));
    Ok(kept)
}

/// `clients gen`: reads `config`, writes `out`, prints one line.
fn gen(
    count: u32,
    first_qpn: u32,
    config: &PathBuf,
    out: &PathBuf,
    append: bool,
) -> Result<(), String> {
    let text = std::fs::read_to_string(config).map_err(|e| format!("{}: {e}", config.display()))?;
    let mut doc: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", config.display()))?;
    let clients = generate(count, first_qpn, &mut rand::rngs::OsRng)?;
    let kept =
        apply(&mut doc, &clients, append).map_err(|e| format!("{e} ({})", config.display()))?;
    let mut json = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    json.push('\n');
    std::fs::write(out, json).map_err(|e| format!("{}: {e}", out.display()))?;
    println!(
        "wrote {}: {count} generated clients (qpn {first_qpn}..={}, random rkeys) after {kept} kept from {}",
        out.display(),
        first_qpn + count - 1,
        config.display()
    );
    Ok(())
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
        ClientsCmd::Gen {
            count,
            first_qpn,
            config,
            out,
            append,
        } => gen(count, first_qpn, &config, &out, append),
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::mock::StepRng;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn consecutive_qpns_nonzero_keys() {
        let c = generate(5, 100, &mut StdRng::seed_from_u64(1)).unwrap();
        assert_eq!(
            c.iter().map(|c| c.qpn).collect::<Vec<_>>(),
            [100, 101, 102, 103, 104]
        );
        assert!(c.iter().all(|c| c.rkey != 0));
        // Zero keys are redrawn: a counting source gives 0, 1, 2, ...
        let c = generate(2, 7, &mut StepRng::new(0, 1)).unwrap();
        assert_eq!(
            c,
            [
                ClientConfig {
                    qpn: 7,
                    rkey: 1,
                    mac: None,
                    ip: None
                },
                ClientConfig {
                    qpn: 8,
                    rkey: 2,
                    mac: None,
                    ip: None
                }
            ]
        );
    }

    #[test]
    fn refuses_zero_and_overflow() {
        let rng = &mut StdRng::seed_from_u64(1);
        assert!(generate(0, 100, rng).unwrap_err().contains("--count"));
        // The last QPN may be 2^23 - 1, not more.
        let c = generate(2, MAX_QPN - 1, rng).unwrap();
        assert_eq!(c[1].qpn, MAX_QPN);
        let e = generate(3, MAX_QPN - 1, rng).unwrap_err();
        assert!(e.contains("2^23 - 1"), "{e}");
        assert!(generate(u32::MAX, u32::MAX, rng).is_err());
    }

    #[test]
    fn replace_or_append_keeps_other_fields() {
        let text = r#"{"name": "x", "extra": {"a": [1, 2]}, "clients": [{"qpn": 17, "rkey": 9}]}"#;
        let gen = generate(2, 100, &mut StdRng::seed_from_u64(2)).unwrap();

        let mut doc: Value = serde_json::from_str(text).unwrap();
        assert_eq!(apply(&mut doc, &gen, false).unwrap(), 0);
        assert_eq!(doc["name"], "x");
        assert_eq!(doc["extra"]["a"][1], 2);
        let qpns: Vec<u64> = doc["clients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["qpn"].as_u64().unwrap())
            .collect();
        assert_eq!(qpns, [100, 101]);

        let mut doc: Value = serde_json::from_str(text).unwrap();
        assert_eq!(apply(&mut doc, &gen, true).unwrap(), 1);
        assert_eq!(doc["clients"].as_array().unwrap().len(), 3);
        assert_eq!(doc["clients"][0]["rkey"], 9);
        assert_eq!(doc["clients"][2]["qpn"], 101);

        // No clients list yet: appending creates one.
        let mut doc: Value = serde_json::from_str(r#"{"name": "y"}"#).unwrap();
        assert_eq!(apply(&mut doc, &gen, true).unwrap(), 0);
        assert_eq!(doc["clients"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn refuses_duplicates_and_bad_documents() {
        let gen = generate(2, 17, &mut StdRng::seed_from_u64(3)).unwrap();
        let mut doc: Value =
            serde_json::from_str(r#"{"clients": [{"qpn": 18, "rkey": 1}]}"#).unwrap();
        let e = apply(&mut doc, &gen, true).unwrap_err();
        assert!(e.contains("qpn 18"), "{e}");
        // Replacing is fine.
        assert!(apply(&mut doc, &gen, false).is_ok());
        assert!(apply(&mut Value::from(3), &gen, false).is_err());
        let mut doc: Value = serde_json::from_str(r#"{"clients": 5}"#).unwrap();
        assert!(apply(&mut doc, &gen, false)
            .unwrap_err()
            .contains("must be a list"));
    }
}
