//! The endpoint and client configuration from the command line, and connecting.

use crate::args::{ConnArgs, EXIT_ERROR, EXIT_UNREACHABLE};
use crate::commands::Kv;
use kvclient::{kernel_client_config, ClientConfig, Endpoint, EndpointError};
use std::net::Ipv4Addr;

/// Largest `--timeout-ms` (one hour).
const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// Parses a u32 in decimal or `0x` hex.
fn parse_u32(what: &str, s: &str) -> Result<u32, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("bad {what} {s:?}: a number 0..=4294967295 (decimal or 0x hex)"))
}

fn parse_ip(what: &str, s: &str) -> Result<Ipv4Addr, String> {
    s.parse()
        .map_err(|_| format!("bad {what} {s:?}: an IPv4 address like 10.0.0.2"))
}

fn parse_mac(what: &str, s: &str) -> Result<[u8; 6], String> {
    kvconf::parse_mac(s).map_err(|e| format!("{what}: {e} (want aa:bb:cc:dd:ee:ff)"))
}

/// The QPs given with `--qpn`/`--rkey`; `rkeys` may be empty (looked up later).
fn qp_flags(a: &ConnArgs) -> Result<(Vec<u32>, Vec<u32>), String> {
    let qpns = a
        .qpn
        .iter()
        .map(|q| parse_u32("--qpn", q))
        .collect::<Result<Vec<_>, _>>()?;
    let rkeys = a
        .rkey
        .iter()
        .map(|k| parse_u32("--rkey", k))
        .collect::<Result<Vec<_>, _>>()?;
    if !rkeys.is_empty() && rkeys.len() != qpns.len() {
        return Err(format!(
            "{} --qpn but {} --rkey: give one --rkey per --qpn, in the same order",
            qpns.len(),
            rkeys.len()
        ));
    }
    Ok((qpns, rkeys))
}

/// The endpoint: by hand when `--server` is given, else from `--config`.
pub fn endpoint(a: &ConnArgs) -> Result<Endpoint, String> {
    let (qpns, rkeys) = qp_flags(a)?;
    let mut ep = if let Some(server) = &a.server {
        let need = |v: &Option<String>, flag: &str| {
            v.clone()
                .ok_or_else(|| format!("--server needs {flag} too (or use --config)"))
        };
        if qpns.len() != rkeys.len() {
            return Err(
                "--server needs a --rkey K for each --qpn N (or neither: the \
                        server opens a QP for this client)"
                    .into(),
            );
        }
        Endpoint {
            iface: a.iface.clone(),
            client_mac: parse_mac("--client-mac", &need(&a.client_mac, "--client-mac")?)?,
            client_ip: parse_ip("--client-ip", &need(&a.client_ip, "--client-ip")?)?,
            server_mac: parse_mac("--server-mac", &need(&a.server_mac, "--server-mac")?)?,
            server_ip: parse_ip("--server", server)?,
            udp_src_port: kvclient::endpoint::DEFAULT_UDP_SRC_PORT,
            partitions: 1,
            qps: qpns.iter().copied().zip(rkeys.iter().copied()).collect(),
            credentials: None,
            nodes: Vec::new(),
        }
    } else {
        let mut ep = Endpoint::from_config(&a.config, &a.iface).map_err(|e| e.to_string())?;
        if let Some(m) = &a.server_mac {
            ep.server_mac = parse_mac("--server-mac", m)?;
        }
        if let Some(m) = &a.client_mac {
            ep.client_mac = parse_mac("--client-mac", m)?;
        }
        if let Some(ip) = &a.client_ip {
            ep.client_ip = parse_ip("--client-ip", ip)?;
        }
        if !qpns.is_empty() {
            let mut qps = Vec::new();
            for (i, &q) in qpns.iter().enumerate() {
                let rkey = match rkeys.get(i) {
                    Some(&k) => k,
                    None => ep
                        .qps
                        .iter()
                        .find(|(n, _)| *n == q)
                        .map(|&(_, k)| k)
                        .ok_or_else(|| {
                            format!(
                                "--qpn {q} is not among the config's clients ({}); give \
                                 its --rkey",
                                a.config.display()
                            )
                        })?,
                };
                qps.push((q, rkey));
            }
            ep.qps = qps;
        } else {
            // The server opens this client's QPs: nothing shared with other clients.
            ep.qps.clear();
        }
        ep
    };
    if let Some(p) = &a.partitions {
        ep.partitions = parse_u32("--partitions", p)?;
    }
    if let Some(f) = &a.tenant_file {
        if !ep.qps.is_empty() {
            return Err("--tenant-file opens QPs for the tenant: give no --qpn".into());
        }
        ep.credentials = Some(kvclient::Credentials::load(f)?);
    }
    ep.validate().map_err(|e| e.to_string())?;
    Ok(ep)
}

/// The client configuration: the kernel defaults, with `--timeout-ms` as the
/// connect and per-request timeout.
pub fn client_config(a: &ConnArgs) -> Result<ClientConfig, String> {
    let mut cfg = kernel_client_config();
    if let Some(t) = &a.timeout_ms {
        let ms: u64 = t
            .trim()
            .parse()
            .ok()
            .filter(|ms| (1..=MAX_TIMEOUT_MS).contains(ms))
            .ok_or_else(|| format!("bad --timeout-ms {t:?}: 1..={MAX_TIMEOUT_MS}"))?;
        cfg.connect_timeout_ns = ms * 1_000_000;
        cfg.op_timeout_ns = ms * 1_000_000;
    }
    Ok(cfg)
}

/// The `--node MAC,IP` list.
fn nodes(a: &ConnArgs) -> Result<Vec<([u8; 6], Ipv4Addr)>, String> {
    a.node
        .iter()
        .map(|n| {
            let (m, ip) = n
                .split_once(',')
                .ok_or_else(|| format!("--node {n:?}: want MAC,IP"))?;
            let ip = ip
                .parse()
                .map_err(|_| format!("--node {n:?}: bad IPv4 address {ip:?}"))?;
            Ok((parse_mac("--node", m)?, ip))
        })
        .collect()
}

/// The interface the config's dataplane creates with net_tap (`iface=` of its
/// `net_tap` vdev), if any.
fn dataplane_tap(config: &std::path::Path) -> Option<String> {
    let cfg = kvconf::Config::load(config).ok()?;
    cfg.dataplane.vdevs.iter().find_map(|v| {
        let mut kv = v.split(',');
        kv.next()?.starts_with("net_tap").then_some(())?;
        kv.find_map(|p| p.strip_prefix("iface="))
            .map(str::to_string)
    })
}

/// Builds the endpoint and connects — to the server, else to each node of the
/// config's cluster and each `--node` in turn; on failure, the exit code and message
/// (of the server's attempt).
pub fn connect(a: &ConnArgs) -> Result<Kv, (i32, String)> {
    let mut ep = endpoint(a).map_err(|e| (EXIT_ERROR, e))?;
    let cfg = client_config(a).map_err(|e| (EXIT_ERROR, e))?;
    for n in nodes(a).map_err(|e| (EXIT_ERROR, e))? {
        if !ep.nodes.contains(&n) {
            ep.nodes.push(n);
        }
    }
    let c = ep.connect(cfg).map_err(|e| {
        if let EndpointError::Kernel(kvclient::kernel::KernelError::NoSuchInterface {
            name, ..
        }) = &e
        {
            if a.server.is_none() && dataplane_tap(&a.config).as_deref() == Some(name.as_str()) {
                // The dataplane's own net_tap interface: it exists while the dataplane
                // runs, so the server is unreachable rather than the input wrong.
                return (
                    EXIT_UNREACHABLE,
                    format!(
                        "{e}: it is the dataplane's net_tap interface ({}): is the \
                         dataplane running?",
                        a.config.display()
                    ),
                );
            }
        }
        let code = match e {
            EndpointError::Unreachable(_) => EXIT_UNREACHABLE,
            EndpointError::Config(_) | EndpointError::Kernel(_) => EXIT_ERROR,
        };
        let msg = match e {
            EndpointError::Unreachable(_) if ep.qps.is_empty() => {
                format!("{e} [server {} on {}, opened QPs]", ep.server_ip, ep.iface)
            }
            EndpointError::Unreachable(_) => format!(
                "{e} [server {} on {}, {} static QP(s)]",
                ep.server_ip,
                ep.iface,
                ep.qps.len()
            ),
            _ => e.to_string(),
        };
        (code, msg)
    })?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Cli;
    use clap::Parser;

    fn conn(extra: &[&str]) -> ConnArgs {
        let mut v = vec!["kvcli"];
        v.extend_from_slice(extra);
        v.push("stats");
        Cli::try_parse_from(v).unwrap().conn
    }

    fn cfg_path() -> String {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/tap.json").to_string()
    }

    #[test]
    fn node_list_parses_and_refuses_bad_forms() {
        let n = nodes(&conn(&["--node", "02:00:00:00:00:09,10.0.0.9"])).unwrap();
        assert_eq!(n, vec![([2, 0, 0, 0, 0, 9], Ipv4Addr::new(10, 0, 0, 9))]);
        for bad in [
            "02:00:00:00:00:09",
            "02:00:00:00:00:09,10.0.0",
            "zz,10.0.0.9",
        ] {
            let e = nodes(&conn(&["--node", bad])).unwrap_err();
            assert!(e.contains("--node"), "{e}");
        }
    }

    #[test]
    fn from_config_with_overrides() {
        let p = cfg_path();
        let ep = endpoint(&conn(&["--config", &p])).unwrap();
        assert!(ep.qps.is_empty(), "no --qpn: the server opens the QPs");
        let ep = endpoint(&conn(&["--config", &p, "--qpn", "18", "--partitions", "1"])).unwrap();
        assert_eq!(ep.qps, [(18, 305419897)]);
        let e = endpoint(&conn(&["--config", &p, "--qpn", "99"])).unwrap_err();
        assert!(e.contains("--qpn 99 is not among"), "{e}");
        let e = endpoint(&conn(&["--config", &p, "--partitions", "0"])).unwrap_err();
        assert!(e.contains("partitions"), "{e}");
        let e = endpoint(&conn(&["--config", "/nonexistent.json"])).unwrap_err();
        assert!(e.contains("/nonexistent.json"), "{e}");
    }

    #[test]
    fn by_hand() {
        let base = [
            "--server",
            "10.0.0.1",
            "--server-mac",
            "02:00:00:00:00:01",
            "--client-ip",
            "10.0.0.9",
            "--client-mac",
            "02:00:00:00:00:09",
            "--qpn",
            "17",
            "--rkey",
            "0x10",
        ];
        let ep = endpoint(&conn(&base)).unwrap();
        assert_eq!(ep.qps, [(17, 16)]);
        assert_eq!(ep.server_ip, Ipv4Addr::new(10, 0, 0, 1));
        // No --qpn: the server opens the QPs; a --qpn without --rkey is refused.
        assert!(endpoint(&conn(&base[..8])).unwrap().qps.is_empty());
        let e = endpoint(&conn(&base[..10])).unwrap_err();
        assert!(e.contains("--rkey K for each --qpn N"), "{e}");
        let e = endpoint(&conn(&base[..2])).unwrap_err();
        assert!(e.contains("--server needs"), "{e}");
        let mut bad = base.to_vec();
        bad[3] = "02:00";
        assert!(endpoint(&conn(&bad)).unwrap_err().contains("--server-mac"));
        let mut bad = base.to_vec();
        bad[11] = "0xzz";
        assert!(endpoint(&conn(&bad)).unwrap_err().contains("--rkey"));
    }

    #[test]
    fn timeouts() {
        let c = client_config(&conn(&["--timeout-ms", "250"])).unwrap();
        assert_eq!(c.connect_timeout_ns, 250_000_000);
        assert!(client_config(&conn(&["--timeout-ms", "0"])).is_err());
        assert!(client_config(&conn(&["--timeout-ms", "abc"])).is_err());
    }
}
