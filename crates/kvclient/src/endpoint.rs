//! [`Endpoint`]: where a kernel-socket client talks to (interface, addresses, QPs,
//! partitions), from a config file or by hand, and how it connects.

use crate::kernel::{KernelError, KernelIo};
use crate::{Client, ClientConfig, Config};
use kvwire::{FrameParams, MacAddr};
use std::fmt;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// UDP source port of the requests (RoCEv2 flow entropy range; pktgen's too).
pub const DEFAULT_UDP_SRC_PORT: u16 = 0xC000;

/// Everything a kernel-socket client needs to reach a dataplane.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The network interface of the raw socket (e.g. `kvtap0`).
    pub iface: String,
    /// The client's MAC (source of requests, destination of responses).
    pub client_mac: MacAddr,
    /// The client's IPv4 address (best one not configured on the host: see
    /// [`crate::kernel`]).
    pub client_ip: Ipv4Addr,
    /// The dataplane's MAC.
    pub server_mac: MacAddr,
    /// The dataplane's IPv4 address.
    pub server_ip: Ipv4Addr,
    /// UDP source port of the requests.
    pub udp_src_port: u16,
    /// The dataplane's worker count (key partitions): one per EAL lcore.
    pub partitions: u32,
    /// Static client QPs `(qpn, rkey)` the operator admitted for this client; empty
    /// (the default of the tools): the server opens one QP per partition for this
    /// client on connect (docs/PROTOCOL.md §6.1).
    pub qps: Vec<(u32, u32)>,
    /// The tenant this client opens its QPs for (`None`: no tenant).
    pub credentials: Option<crate::Credentials>,
    /// The other nodes of a replicated cluster (client-facing MAC, IPv4): connect to
    /// the first that answers when the server does not, and follow the master among
    /// them (docs/FAILOVER.md "Clients"). Empty: one server.
    pub nodes: Vec<crate::follow::NodeAddr>,
}

/// Why an [`Endpoint`] could not be built or connected.
#[derive(Debug)]
pub enum EndpointError {
    /// A bad config file or endpoint description.
    Config(String),
    /// The raw socket could not be opened.
    Kernel(KernelError),
    /// The server did not answer (no ACCEPT within the connect timeout).
    Unreachable(crate::Error),
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointError::Config(s) => write!(f, "config: {s}"),
            EndpointError::Kernel(e) => e.fmt(f),
            EndpointError::Unreachable(crate::Error::ConnectTimeout) => f.write_str(
                "server unreachable: no ACCEPT within the connect timeout (is the \
                 dataplane running on this link, are the client QPs admitted, are the \
                 MAC/IP addresses right?)",
            ),
            EndpointError::Unreachable(e) => write!(f, "server unreachable: {e}"),
        }
    }
}

impl std::error::Error for EndpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EndpointError::Kernel(e) => Some(e),
            EndpointError::Unreachable(e) => Some(e),
            EndpointError::Config(_) => None,
        }
    }
}

impl From<KernelError> for EndpointError {
    fn from(e: KernelError) -> Self {
        EndpointError::Kernel(e)
    }
}

impl Endpoint {
    /// Server = the config's `dataplane` mac/ip, client = its `pktgen` mac/ip, qps =
    /// its `clients`, partitions = the dataplane's worker count (one per lcore of
    /// `dataplane.lcores`, as the dataplane starts one worker per EAL lcore, less the
    /// replication lcore of a replicated node).
    pub fn from_config(path: &Path, iface: &str) -> Result<Endpoint, EndpointError> {
        let cfg = kvconf::Config::load(path).map_err(|e| EndpointError::Config(e.to_string()))?;
        Endpoint::from_kvconf(&cfg, iface)
            .map_err(|e| EndpointError::Config(format!("{}: {e}", path.display())))
    }

    /// [`Endpoint::from_config`] of an already loaded config; `nodes` = the
    /// config's `replication.client_nodes`.
    pub fn from_kvconf(cfg: &kvconf::Config, iface: &str) -> Result<Endpoint, String> {
        let mac = |who: &str, s: &str| kvconf::parse_mac(s).map_err(|e| format!("{who}.mac: {e}"));
        let nodes = cfg
            .replication
            .client_nodes
            .iter()
            .map(|n| Ok((mac("replication.client_nodes[]", &n.mac)?, n.ip)))
            .collect::<Result<Vec<_>, String>>()?;
        // A replicated node keeps its last lcore for replication: not a partition.
        let partitions = lcore_count(&cfg.dataplane.lcores)
            .map_err(|e| format!("dataplane.lcores {:?}: {e}", cfg.dataplane.lcores))?
            .saturating_sub(kvconf::ReplicationSection::lcores_for(cfg.replication.role))
            .max(1);
        Ok(Endpoint {
            iface: iface.to_string(),
            client_mac: mac("pktgen", &cfg.pktgen.mac)?,
            client_ip: cfg.pktgen.ip,
            server_mac: mac("dataplane", &cfg.dataplane.mac)?,
            server_ip: cfg.dataplane.ip,
            udp_src_port: DEFAULT_UDP_SRC_PORT,
            partitions,
            qps: cfg.clients.iter().map(|c| (c.qpn, c.rkey)).collect(),
            credentials: None,
            nodes,
        })
    }

    /// The frame addresses of requests.
    pub fn frame_params(&self) -> FrameParams {
        FrameParams::new(
            self.client_mac,
            self.server_mac,
            self.client_ip,
            self.server_ip,
            self.udp_src_port,
        )
    }

    /// Checks what the client needs: one partition at least; for static QPs, QPNs of
    /// 24 bits and a QP for every partition.
    pub fn validate(&self) -> Result<(), EndpointError> {
        let bad = |s: String| Err(EndpointError::Config(s));
        if self.partitions == 0 || self.partitions > 1024 {
            return bad(format!(
                "partitions must be in 1..=1024, not {}",
                self.partitions
            ));
        }
        if self.qps.is_empty() {
            return Ok(());
        }
        if let Some(&(q, _)) = self.qps.iter().find(|(q, _)| *q >= 1 << 24) {
            return bad(format!("client qpn {q} does not fit in 24 bits"));
        }
        let n = self.partitions;
        for p in 0..n {
            if !self.qps.iter().any(|&(q, _)| q % n == p) {
                return bad(format!(
                    "no client QP serves partition {p} of {n} (a QP serves partition \
                     qpn % {n}); admit one with `ctlplane clients add`"
                ));
            }
        }
        Ok(())
    }

    /// Opens the socket and connects every QP — has the server open one per
    /// partition when [`Endpoint::qps`] is empty — (blocking, up to
    /// `cfg.connect_timeout_ns` per node). When the server does not answer, each of
    /// [`Endpoint::nodes`] is tried in turn; the client then follows the master among
    /// the server and the nodes. `cfg.partitions` is replaced by
    /// [`Endpoint::partitions`]. The error is the server's.
    pub fn connect(&self, cfg: ClientConfig) -> Result<Client<KernelIo>, EndpointError> {
        let server = (self.server_mac, self.server_ip);
        let mut all = vec![server];
        all.extend(self.nodes.iter().copied().filter(|&n| n != server));
        let mut c = match self.connect_one(cfg) {
            Err(e @ EndpointError::Unreachable(_)) if all.len() > 1 => all[1..]
                .iter()
                .find_map(|&(mac, ip)| {
                    let other = Endpoint {
                        server_mac: mac,
                        server_ip: ip,
                        ..self.clone()
                    };
                    other.connect_one(cfg).ok()
                })
                .ok_or(e)?,
            r => r?,
        };
        if all.len() > 1 {
            c.set_nodes(&all);
        }
        Ok(c)
    }

    /// [`Endpoint::connect`] to the server alone.
    fn connect_one(&self, cfg: ClientConfig) -> Result<Client<KernelIo>, EndpointError> {
        self.validate()?;
        let io = KernelIo::open(&self.iface)?;
        let cfg = ClientConfig {
            partitions: self.partitions,
            ..cfg
        };
        let mut c = if self.qps.is_empty() {
            Client::opened(io, cfg, self.frame_params(), clock())
        } else {
            Client::new(io, cfg, &self.qps, self.frame_params(), clock())
        };
        c.set_credentials(self.credentials.clone());
        c.connect().map_err(EndpointError::Unreachable)?;
        Ok(c)
    }
}

/// [`ClientConfig`] defaults suited to the kernel path.
///
/// Measured with `kvcli stats` over net_tap (raw socket → TAP → dataplane with
/// its idle yield, on a 2-core host shared with other work): GET round trips of
/// 17–24 µs typically (p50), but a p99 of up to 1.8 ms and single outliers of
/// up to 18 ms whenever the scheduler runs something else first. The DPDK path's 1 ms
/// initial and 200 µs minimum RTO would fire spuriously on those (harmless for
/// correctness, the server answers a duplicate from its replay cache, but
/// wasted frames), so here the initial RTO is 20 ms and the adaptive RTO's floor
/// 10 ms, above all but the rarest stalls (docs/CLIENTS.md). CONNECTs are
/// resent every 50 ms; at most 64 requests are in flight; the connect timeout is
/// 1 s and an operation gives up after 3 s.
pub fn kernel_client_config() -> ClientConfig {
    ClientConfig {
        transport: Config {
            rto_initial_ns: 20_000_000,
            rto_min_ns: 10_000_000,
            rto_max_ns: 200_000_000,
            max_retries: 8,
            connect_timeout_ns: 50_000_000,
            max_outstanding: 64,
            ..Config::default()
        },
        connect_timeout_ns: 1_000_000_000,
        op_timeout_ns: 3_000_000_000,
        ..ClientConfig::default()
    }
}

/// The transport clock: wall-clock ns at the first call, advanced by
/// [`Instant`]. Monotonic within the process, and larger than the clock of any
/// earlier process (as pktgen's), so each new process's CONNECT nonce is larger
/// than the previous incarnation's and the server accepts it.
pub fn clock() -> Box<dyn FnMut() -> u64 + Send> {
    let base = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 2))
        .unwrap_or(0);
    let t0 = Instant::now();
    Box::new(move || {
        let dt = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX / 2);
        base.saturating_add(dt)
    })
}

/// Number of distinct lcores in an EAL `-l` list (`"0"`, `"0,1"`, `"0-3,6"`) or
/// `--lcores` map (`"0@0,1@1,2@1"`, `"(0-1)@0,2@1"`: lcores before each `@`, CPUs
/// after): the dataplane's lcore count.
pub fn lcore_count(list: &str) -> Result<u32, String> {
    let mut cores = std::collections::BTreeSet::new();
    let num = |s: &str| {
        s.trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| n < 1 << 16)
            .ok_or_else(|| format!("bad lcore {s:?}"))
    };
    // Items split at the commas outside parentheses.
    let mut items = Vec::new();
    let (mut depth, mut from) = (0i32, 0usize);
    for (i, ch) in list.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&list[from..i]);
                from = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(format!("bad lcore list {list:?}"));
        }
    }
    items.push(&list[from..]);
    for item in items {
        // The lcores of `L@CPUS` (a `-l` item has no `@`), without their parentheses.
        let lc = item.split_once('@').map_or(item, |(l, _)| l).trim();
        let lc = match (lc.strip_prefix('('), lc.ends_with(')')) {
            (Some(inner), true) => &inner[..inner.len() - 1],
            (None, false) => lc,
            _ => return Err(format!("bad lcore group {item:?}")),
        };
        for part in lc.split(',') {
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(format!("bad lcore range {part:?}"));
                    }
                    cores.extend(a..=b);
                }
                None => {
                    cores.insert(num(part)?);
                }
            }
        }
    }
    u32::try_from(cores.len()).map_err(|_| "too many lcores".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn configs() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../configs")
    }

    #[test]
    fn tap_config() {
        let e = Endpoint::from_config(&configs().join("tap.json"), "kvtap0").unwrap();
        assert_eq!(e.iface, "kvtap0");
        assert_eq!(e.server_mac, [2, 0, 0, 0, 0, 1]);
        assert_eq!(e.client_mac, [2, 0, 0, 0, 0, 2]);
        assert_eq!(e.server_ip, Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(e.client_ip, Ipv4Addr::new(127, 0, 0, 3));
        assert_eq!(e.partitions, 1);
        assert_eq!(e.qps[0], (17, 305419896));
        assert_eq!(e.qps.len(), 4);
        e.validate().unwrap();
        let p = e.frame_params();
        assert_eq!((p.src_mac, p.dst_mac), (e.client_mac, e.server_mac));
        assert_eq!((p.src_ip, p.dst_ip), (e.client_ip, e.server_ip));
    }

    #[test]
    fn partitions_follow_the_dataplane_lcores() {
        let text = std::fs::read_to_string(configs().join("tap.json")).unwrap();
        let mut cfg = kvconf::Config::parse(&text).unwrap();
        cfg.dataplane.lcores = "0,1".into();
        cfg.pktgen.lcores = "5".into();
        let e = Endpoint::from_kvconf(&cfg, "x").unwrap();
        assert_eq!(e.partitions, 2);
        // A replicated node's last lcore is its replication lcore, not a partition
        // (issue 29: kvcli counted it against a cluster node).
        let mut repl = cfg.clone();
        repl.replication.role = kvconf::ReplRole::Replica;
        assert_eq!(Endpoint::from_kvconf(&repl, "x").unwrap().partitions, 1);
        repl.dataplane.lcores = "0-2".into();
        assert_eq!(Endpoint::from_kvconf(&repl, "x").unwrap().partitions, 2);
        e.validate().unwrap(); // QPNs 17..=20 cover both partitions
        let e1 = Endpoint {
            qps: vec![(18, 1), (20, 2)],
            ..e.clone()
        };
        let msg = e1.validate().unwrap_err().to_string();
        assert!(
            msg.contains("no client QP serves partition 1 of 2"),
            "{msg}"
        );
        cfg.dataplane.lcores = "x".into();
        let msg = Endpoint::from_kvconf(&cfg, "x").unwrap_err();
        assert!(msg.contains("dataplane.lcores"), "{msg}");
    }

    #[test]
    fn cluster_nodes_come_from_the_config() {
        let text = std::fs::read_to_string(configs().join("tap.json")).unwrap();
        let mut cfg = kvconf::Config::parse(&text).unwrap();
        assert!(Endpoint::from_kvconf(&cfg, "x").unwrap().nodes.is_empty());
        let addr = |mac: &str, ip: [u8; 4]| kvconf::replication::LinkAddr {
            mac: mac.into(),
            ip: ip.into(),
        };
        cfg.replication.client_nodes = vec![
            addr("02:00:00:00:20:00", [10, 78, 0, 1]),
            addr("02:00:00:00:20:01", [10, 78, 0, 2]),
        ];
        let e = Endpoint::from_kvconf(&cfg, "x").unwrap();
        assert_eq!(
            e.nodes,
            vec![
                ([2, 0, 0, 0, 0x20, 0], Ipv4Addr::new(10, 78, 0, 1)),
                ([2, 0, 0, 0, 0x20, 1], Ipv4Addr::new(10, 78, 0, 2)),
            ]
        );
        cfg.replication.client_nodes[1].mac = "zz".into();
        let msg = Endpoint::from_kvconf(&cfg, "x").unwrap_err();
        assert!(msg.contains("client_nodes"), "{msg}");
    }

    #[test]
    fn lcore_lists() {
        assert_eq!(lcore_count("0"), Ok(1));
        assert_eq!(lcore_count("0,1"), Ok(2));
        assert_eq!(lcore_count("0-3,6"), Ok(5));
        assert_eq!(lcore_count("1,1,0-1"), Ok(2));
        assert_eq!(lcore_count("0@0,1@1,2@1"), Ok(3));
        assert_eq!(lcore_count("(0-1)@0,2@(0,1)"), Ok(3));
        assert!(lcore_count("(0@0").is_err());
        for bad in ["", "a", "3-1", "0,", "-1", "1-", "99999"] {
            assert!(lcore_count(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn config_errors() {
        let e = Endpoint::from_config(Path::new("/nonexistent/kv.json"), "lo").unwrap_err();
        assert!(matches!(e, EndpointError::Config(_)));
        assert!(e.to_string().contains("/nonexistent/kv.json"), "{e}");
        let e = Endpoint::from_config(&configs().join("tap.json"), "nosuch0").unwrap();
        let Err(err) = e.connect(kernel_client_config()) else {
            panic!("connected through a missing interface");
        };
        // Without root the socket cannot be opened at all; as root the name is
        // checked first. Either way, no panic and a clear message.
        let msg = err.to_string();
        assert!(
            msg.contains("nosuch0") || msg.contains("CAP_NET_RAW"),
            "{msg}"
        );
        // No static QP: the server opens them (docs/PROTOCOL.md §6.1).
        let empty = Endpoint { qps: vec![], ..e };
        assert!(empty.validate().is_ok());
    }

    #[test]
    fn clock_is_monotonic_and_wall_based() {
        let mut c = clock();
        let a = c();
        let b = c();
        assert!(b >= a);
        assert!(a > 1_600_000_000 * 1_000_000_000, "wall-clock based");
        let mut c2 = clock();
        assert!(c2() >= a, "a later client's nonces are larger");
    }

    #[test]
    fn kernel_config_is_slower_than_dpdk() {
        let k = kernel_client_config();
        let d = ClientConfig::default();
        assert!(k.transport.rto_initial_ns > d.transport.rto_initial_ns);
        assert!(k.transport.rto_min_ns > d.transport.rto_min_ns);
        assert!(k.transport.rto_min_ns <= k.transport.rto_initial_ns);
        assert!(k.transport.rto_initial_ns <= k.transport.rto_max_ns);
    }
}
