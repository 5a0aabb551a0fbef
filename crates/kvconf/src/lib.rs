//! Configuration shared by the dataplane, pktgen and ctlplane.
//!
//! One JSON file under `configs/` describes a whole topology: the dataplane's
//! EAL/port settings, the pktgen's, the server identity (MAC, IP, QPN, Q_Key,
//! request region), the admitted clients (QPN + R_Key), and the storage engine
//! parameters. Both DPDK processes read the same file so they cannot drift apart.
//!
//! Parsing is strict (`deny_unknown_fields`): a typo in a config is an error with
//! the field name, never a silently ignored setting.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;
use std::path::Path;

pub mod replication;
mod tenants;
pub use replication::{EtcdSection, FsyncPolicy, ReplMode, ReplRole, ReplicationSection, Topology};
pub use tenants::{
    parse_hex, validate_tenants, TenantConfig, TenantCredentials, DEFAULT_RESERVED_CONNECTIONS,
};

/// Where the DPDK plugin PMDs of Debian's DPDK 22.11 packages live.
pub const DEFAULT_PMD_DIR: &str = "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0";

/// A whole topology: both processes, the server identity, clients and engine.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Human-readable name of the topology ("memif", "tap", "nic").
    pub name: String,
    /// The KV server process.
    pub dataplane: ProcessConfig,
    /// The traffic generator process.
    pub pktgen: ProcessConfig,
    /// Server identity and request-processing settings.
    pub server: ServerConfig,
    /// Storage engine parameters.
    #[serde(default)]
    pub engine: EngineSection,
    /// Client QPs admitted at start-up.
    pub clients: Vec<ClientConfig>,
    /// Tenants (docs/PROTOCOL.md §6.8): credentials, ACLs, namespaces; empty: none.
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    /// Replication and failover (absent: a standalone node).
    #[serde(default)]
    pub replication: ReplicationSection,
}

/// Whether to back DPDK memory with hugepages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HugeMode {
    /// Use hugepages when enough are free and hugetlbfs is mounted, else `--no-huge`.
    #[default]
    Auto,
    /// Require hugepages.
    On,
    /// Always `--no-huge`.
    Off,
}

/// EAL and port settings of one DPDK process.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessConfig {
    /// EAL `--file-prefix`; must differ between the two processes on one host.
    pub file_prefix: String,
    /// EAL `-l` lcore list, e.g. `"0"` or `"0,1"`; the first is the main lcore. A
    /// list with `@` or parentheses is an EAL `--lcores` map instead (lcores on
    /// CPUs, e.g. `"0@0,1@1,2@1"`: three lcores on two CPUs).
    pub lcores: String,
    /// EAL `--vdev` arguments, e.g. `net_memif0,role=server,socket=...`.
    #[serde(default)]
    pub vdevs: Vec<String>,
    /// EAL `-a` PCI allow-list (real NICs). Empty means `--no-pci`.
    #[serde(default)]
    pub pci: Vec<String>,
    /// The ethdev name of the port to use (`net_memif0`, `net_tap0`, or a PCI address).
    pub port: String,
    /// DPDK memory in MiB (`-m` with `--no-huge`, `--socket-mem` otherwise).
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u32,
    /// Hugepage policy.
    #[serde(default)]
    pub hugepages: HugeMode,
    /// Extra EAL arguments appended verbatim.
    #[serde(default)]
    pub extra_eal: Vec<String>,
    /// This endpoint's MAC address (`aa:bb:cc:dd:ee:ff`).
    pub mac: String,
    /// This endpoint's IPv4 address.
    pub ip: Ipv4Addr,
    /// RX descriptors per queue.
    #[serde(default = "default_desc")]
    pub rxd: u16,
    /// TX descriptors per queue.
    #[serde(default = "default_desc")]
    pub txd: u16,
    /// Packets per rx/tx burst.
    #[serde(default = "default_burst")]
    pub burst: usize,
    /// Mbufs in the packet pool.
    #[serde(default = "default_mbufs")]
    pub mbufs: u32,
}

/// Server identity and request handling.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The server's QPN, used as the DETH source QP of responses.
    pub qpn: u32,
    /// Q_Key carried in response DETHs.
    pub qkey: u32,
    /// Base virtual address of the request region clients RDMA-WRITE into.
    pub request_region_va: u64,
    /// Size of the request region in bytes.
    pub request_region_len: u64,
    /// TX drain period in microseconds (a half-full tx batch never waits longer).
    #[serde(default = "default_drain_us")]
    pub tx_drain_us: u64,
    /// Statistics print interval in seconds (0 = only at exit).
    #[serde(default)]
    pub stats_interval_s: u64,
    /// After this many consecutive empty polls a worker yields its CPU on every further
    /// empty poll (`sched_yield`), so a thread sharing its core (pktgen on a 2-core
    /// host) runs instead of waiting out a scheduler slice; 0 = never yield (pure
    /// busy polling). Costs nothing under load: a busy worker never polls empty.
    #[serde(default = "default_idle_yield_polls")]
    pub idle_yield_polls: u32,
    /// What a worker or replication lcore does once `idle_yield_polls` empty polls
    /// in a row found nothing ([`IdleMode`]; default `adaptive`).
    #[serde(default)]
    pub idle: IdleMode,
    /// `idle: adaptive`: the longest sleep, microseconds (the first is 1 µs,
    /// doubling while the loop stays idle): the most an idle lcore adds to the first
    /// request after a quiet spell, and one wake-up per this long while idle.
    #[serde(default = "default_idle_sleep_max_us")]
    pub idle_sleep_max_us: u32,
    /// `idle: adaptive`: the longest sleep of a worker that only a packet wakes
    /// (net_tap's Rx interrupts, memif's ring signals; no doorbell: one worker, no
    /// replication), microseconds. Its timeout is then only a safety net (a ring
    /// signal memif's sender missed; docs/OPERATIONS.md "Idle lcores"), so it can be
    /// long: fewer wake-ups of an idle worker. At least `idle_sleep_max_us`.
    #[serde(default = "default_idle_sleep_max_rx_us")]
    pub idle_sleep_max_rx_us: u32,
    /// `idle: adaptive`: microseconds without work before the first sleep (a
    /// loaded lcore's short gaps between bursts never sleep).
    #[serde(default = "default_idle_quiet_us")]
    pub idle_quiet_us: u32,
    /// Reservation station mode: `true` (default) executes dependent operations out of
    /// order with data forwarding (KV-Direct); `false` stalls the pipeline on every key
    /// conflict instead (the paper's baseline). See docs/OPERATIONS.md.
    #[serde(default = "default_ooo")]
    pub ooo: bool,
    /// Route GET/PUT/DELETE chunks in which a key repeats through the reservation
    /// station as well (default `false`: only chunks with read-modify-write ops; the
    /// engine's batch runs repeated plain ops in order and was measured faster).
    #[serde(default)]
    pub station_kv: bool,
    /// User functions to register at start-up, by ID (128–255) and catalog name.
    #[serde(default)]
    pub functions: Vec<FunctionConfig>,
    /// Request window `W` per client QP (protocol v2 credits): the requests a client
    /// may have outstanding, the slots its request region is split into and the
    /// responses the server keeps for replays per QP. A power of two in 1..=1024;
    /// `request_region_len / W` (rounded down to 64 B) must hold the largest request
    /// of the MTU.
    #[serde(default = "default_credits")]
    pub credits: u16,
    /// Bytes (in KiB) of each worker's response cache, from which retransmitted
    /// requests are answered without executing them again (exactly-once). A response
    /// evicted from it answers a retransmission with nothing (`replay_missing`).
    #[serde(default = "default_replay_cache_kb")]
    pub replay_cache_kb: u32,
    /// Sample the service latency (rx burst to the response's hand-off to the NIC)
    /// of one in this many request packets into each worker's histogram (telemetry
    /// `/kvd/stats` `latency`); 0 turns sampling off. Default 64.
    #[serde(default = "default_latency_sample_every")]
    pub latency_sample_every: u32,
    /// IP MTU of requests and responses on the client-facing port: 1500 (default) or
    /// up to 9000 (jumbo frames; every client must use the same). Packet buffers of
    /// both processes are sized for it ([`mbuf_data_room`]).
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// Opened QPs (one per client connection, docs/PROTOCOL.md §6.1) each worker
    /// keeps at most: 1..=60000, default 16384. Each costs about 856 B (`W` = 32)
    /// while open.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// An opened QP whose client sent nothing for this many seconds is closed
    /// (its client opens another on its next request); 0 never closes one. Default
    /// 300.
    #[serde(default = "default_connection_idle_s")]
    pub connection_idle_s: u32,
    /// Whether a client may OPEN without a tenant (default `true`); such a client
    /// may not use keys in the tenants' namespaces (first byte `0xFE`).
    #[serde(default = "default_true")]
    pub anonymous: bool,
}

/// Static client QPNs (`clients[]`) are in `2..FIRST_OPENED_QPN`: QP 1 is the
/// connection manager's and the QPNs from here on are the ones the server opens
/// (`kvwire::transport::OPENED_QPN_BASE`; the dataplane's tests check the two agree).
pub const FIRST_OPENED_QPN: u32 = 1 << 23;

/// Largest request payload of the default MTU (1500):
/// `kvwire::request_payload_capacity(kvwire::DEFAULT_MTU)` (kvconf does not depend on
/// kvwire; the dataplane's tests check the two agree). A request slot must hold it.
pub const REQUEST_PAYLOAD_CAPACITY: u64 = request_payload_capacity(DEFAULT_MTU);

/// Default IP MTU (`kvwire::DEFAULT_MTU`).
pub const DEFAULT_MTU: u16 = 1500;
/// Smallest IP MTU accepted (IPv4's minimum datagram every host must take).
pub const MIN_MTU: u16 = 576;
/// Largest IP MTU accepted: jumbo frames (`kvwire::MAX_MTU`).
pub const MAX_MTU: u16 = 9000;

/// Largest request payload of an IP MTU (`kvwire::request_payload_capacity`: the MTU
/// less the IPv4, UDP, BTH, RETH headers and the ICRC, rounded down to 4 bytes).
pub const fn request_payload_capacity(mtu: u16) -> u64 {
    (mtu as u64).saturating_sub(20 + 8 + 12 + 16 + 4) & !3
}

/// Memif's `bsize` devarg of a vdev, if it is a memif vdev that sets one.
fn memif_bsize(vdev: &str) -> Option<Result<u32, String>> {
    if !vdev.starts_with("net_memif") {
        return None;
    }
    let v = vdev.split(',').find_map(|kv| kv.strip_prefix("bsize="))?;
    Some(v.parse().map_err(|_| format!("bad bsize {v:?}")))
}

/// `vdev` with memif's buffer size set to the packet mbufs' data size for `mtu` when
/// it is a memif vdev without one (any other vdev, or the default 2048 of MTU 1500,
/// unchanged). Memif copies between its buffers and mbufs, and DPDK 22.11's copy path
/// for mbufs larger than memif's buffers loses and repeats frames (measured with
/// jumbo mbufs: millions of duplicate frames a second); equal sizes keep every frame
/// in one buffer, as at MTU 1500.
pub fn memif_vdev(vdev: &str, mtu: u16) -> String {
    let need = u32::from(mbuf_data_room(mtu) - MBUF_HEADROOM);
    if !vdev.starts_with("net_memif") || need == 2048 || memif_bsize(vdev).is_some() {
        return vdev.to_string();
    }
    format!("{vdev},bsize={need}")
}

/// The error of a port that refused `mtu` (`rte_eth_dev_set_mtu` failing), with
/// what to do about it.
pub fn mtu_refused(port: &str, mtu: u16, err: impl fmt::Display) -> String {
    format!(
        "port {port:?} cannot take server.mtu {mtu} ({err}): its PMD's largest frame is \
         smaller (DPDK 22.11's net_tap takes at most MTU 1500; memif takes 9000); lower \
         server.mtu"
    )
}

/// Mbuf headroom DPDK reserves before the frame (`RTE_PKTMBUF_HEADROOM`).
pub const MBUF_HEADROOM: u16 = 128;

/// Data room of the packet mbufs for frames of `mtu`: headroom plus the Ethernet
/// frame, at least the usual 2048 + headroom, so a frame always fits one mbuf.
pub const fn mbuf_data_room(mtu: u16) -> u16 {
    let frame = mtu + 14 + 4; // Ethernet header, room for a VLAN tag
    let room = if frame > 2048 {
        frame.next_multiple_of(1024)
    } else {
        2048
    };
    room + MBUF_HEADROOM
}

/// Largest request window (`kvwire::transport::MAX_CREDITS`).
pub const MAX_CREDITS: u16 = 1024;

/// Bytes per request slot: the request region split into `credits` slots, rounded
/// down to 64 bytes (`kvwire::transport::slot_size`).
pub const fn slot_size(region_len: u64, credits: u16) -> u64 {
    if credits == 0 {
        return 0;
    }
    (region_len / credits as u64) & !63
}

fn default_mtu() -> u16 {
    DEFAULT_MTU
}

fn default_true() -> bool {
    true
}

fn default_max_connections() -> u32 {
    16_384
}

fn default_connection_idle_s() -> u32 {
    300
}

fn default_credits() -> u16 {
    32
}

fn default_replay_cache_kb() -> u32 {
    16384
}

fn default_latency_sample_every() -> u32 {
    64
}

fn default_idle_yield_polls() -> u32 {
    64
}

fn default_idle_sleep_max_us() -> u32 {
    1000
}

fn default_idle_sleep_max_rx_us() -> u32 {
    5000
}

fn default_idle_quiet_us() -> u32 {
    200
}

/// What an lcore does on empty polls (docs/OPERATIONS.md, "Idle lcores").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IdleMode {
    /// Keep polling: a dedicated core, the lowest latency, a whole core always.
    Poll,
    /// `sched_yield` on empty polls: a thread sharing the core runs; a whole core
    /// still when alone on it.
    Yield,
    /// Yield as `Yield`, and once idle for `idle_quiet_us` sleep, 1 µs doubling to
    /// `idle_sleep_max_us` (woken at once by a packet where the port has Rx
    /// interrupts): an idle lcore costs next to nothing, the first request after a
    /// quiet spell waits up to the longest sleep on a port without them. The default.
    #[default]
    Adaptive,
}

fn default_ooo() -> bool {
    true
}

/// A user function the dataplane registers at start-up (docs/OPERATIONS.md).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FunctionConfig {
    /// Wire function ID, 128–255.
    pub id: u8,
    /// Name of a function compiled into the dataplane's catalog.
    pub name: String,
}

/// One admitted client QP.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// The client's QPN: the BTH destination QP of its requests (it identifies the
    /// client and selects its R_Key) and of the server's responses to it.
    pub qpn: u32,
    /// The R_Key the client must present in every RETH.
    pub rkey: u32,
    /// The source MAC its frames must come from (with `ip`); absent: any source,
    /// and only while the server takes anonymous clients (`server.anonymous`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// The source IPv4 address its frames must come from (with `mac`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Ipv4Addr>,
}

impl ClientConfig {
    /// The source the QP is bound to: `Some((mac, ip))` when the config names both,
    /// `None` when neither; naming one alone is an error.
    pub fn origin(&self) -> Result<Option<([u8; 6], Ipv4Addr)>, String> {
        match (&self.mac, self.ip) {
            (None, None) => Ok(None),
            (Some(m), Some(ip)) => Ok(Some((parse_mac(m).map_err(|e| e.0)?, ip))),
            _ => Err(format!(
                "client qpn {}: name both mac and ip to bind it to a source, or neither",
                self.qpn
            )),
        }
    }
}

/// Storage engine parameters (see docs/ENGINE.md).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    /// Store region size in MiB (hash index + slab memory).
    #[serde(default = "default_engine_mb")]
    pub mem_mb: usize,
    /// Fraction of the store region used for hash buckets.
    #[serde(default = "default_ratio")]
    pub hash_index_ratio: f64,
    /// KVs with key+value size below this are stored inline in buckets.
    #[serde(default = "default_inline")]
    pub inline_threshold: usize,
}

impl Default for EngineSection {
    fn default() -> Self {
        EngineSection {
            mem_mb: default_engine_mb(),
            hash_index_ratio: default_ratio(),
            inline_threshold: default_inline(),
        }
    }
}

fn default_memory_mb() -> u32 {
    512
}
fn default_desc() -> u16 {
    1024
}
fn default_burst() -> usize {
    32
}
fn default_mbufs() -> u32 {
    8191
}
fn default_drain_us() -> u64 {
    100
}
fn default_engine_mb() -> usize {
    256
}
fn default_ratio() -> f64 {
    0.5
}
fn default_inline() -> usize {
    16
}

/// A configuration error with enough context to fix the file.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        let cfg =
            Config::parse(&text).map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        Ok(cfg)
    }

    /// Parses and validates config text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let cfg: Config = serde_json::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks cross-field rules that serde cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (who, p) in [("dataplane", &self.dataplane), ("pktgen", &self.pktgen)] {
            parse_mac(&p.mac).map_err(|e| ConfigError(format!("{who}.mac: {e}")))?;
            if p.burst == 0 || p.burst > 64 {
                return Err(ConfigError(format!("{who}.burst must be 1..=64")));
            }
            if p.file_prefix.is_empty() {
                return Err(ConfigError(format!("{who}.file_prefix must not be empty")));
            }
        }
        if self.dataplane.file_prefix == self.pktgen.file_prefix {
            return Err(ConfigError(
                "dataplane and pktgen need distinct file_prefix values".into(),
            ));
        }
        if self.server.qpn >= 1 << 24 {
            return Err(ConfigError("server.qpn must fit in 24 bits".into()));
        }
        validate_tenants(&self.tenants).map_err(ConfigError)?;
        for c in &self.clients {
            let origin = c.origin().map_err(ConfigError)?;
            if origin.is_none() && !self.server.anonymous {
                return Err(ConfigError(format!(
                    "client qpn {}: server.anonymous is false, so a static QP must be bound \
                     to its source (\"mac\" and \"ip\")",
                    c.qpn
                )));
            }
        }
        let s = &self.server;
        if s.credits == 0 || s.credits > MAX_CREDITS || !s.credits.is_power_of_two() {
            return Err(ConfigError(format!(
                "server.credits must be a power of two in 1..={MAX_CREDITS}, not {}",
                s.credits
            )));
        }
        if !(MIN_MTU..=MAX_MTU).contains(&s.mtu) {
            return Err(ConfigError(format!(
                "server.mtu must be in {MIN_MTU}..={MAX_MTU}, not {}",
                s.mtu
            )));
        }
        let need = u32::from(mbuf_data_room(s.mtu) - MBUF_HEADROOM);
        let vdevs = (self.dataplane.vdevs.iter())
            .chain(&self.pktgen.vdevs)
            .chain(&self.replication.vdevs);
        for v in vdevs {
            match memif_bsize(v) {
                Some(Err(e)) => return Err(ConfigError(format!("vdev {v:?}: {e}"))),
                Some(Ok(b)) if b < need => {
                    return Err(ConfigError(format!(
                        "vdev {v:?}: bsize={b} is smaller than the {need} B packet buffers \
                         of server.mtu {}: leave bsize out (it is set to {need}) or raise it",
                        s.mtu
                    )))
                }
                _ => {}
            }
        }
        let slot = slot_size(s.request_region_len, s.credits);
        let need = request_payload_capacity(s.mtu);
        if slot < need {
            return Err(ConfigError(format!(
                "server.request_region_len {} split into server.credits = {} slots gives \
                 {slot} B per slot, less than the {need} B of a full request at MTU {}: \
                 raise request_region_len to at least {} or lower credits",
                s.request_region_len,
                s.credits,
                s.mtu,
                need.next_multiple_of(64) * u64::from(s.credits)
            )));
        }
        if s.replay_cache_kb == 0 || s.replay_cache_kb > 4 << 20 {
            return Err(ConfigError(format!(
                "server.replay_cache_kb must be in 1..=4194304 (4 GiB), not {}",
                s.replay_cache_kb
            )));
        }
        if s.max_connections == 0 || s.max_connections > 60_000 {
            return Err(ConfigError(format!(
                "server.max_connections must be in 1..=60000, not {}",
                s.max_connections
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for c in &self.clients {
            if !(2..FIRST_OPENED_QPN).contains(&c.qpn) {
                return Err(ConfigError(format!(
                    "client qpn {} must be in 2..{FIRST_OPENED_QPN} (QP 1 is the connection \
                     manager's, QPNs from {FIRST_OPENED_QPN} on are opened by the server)",
                    c.qpn
                )));
            }
            if !seen.insert(c.qpn) {
                return Err(ConfigError(format!("client qpn {} listed twice", c.qpn)));
            }
        }
        let mut ids = std::collections::HashSet::new();
        let mut names = std::collections::HashSet::new();
        for t in &self.tenants {
            t.validate().map_err(ConfigError)?;
            if !ids.insert(t.id) || !names.insert(t.name.as_str()) {
                return Err(ConfigError(format!(
                    "tenant {:?} (id {}): name or id listed twice",
                    t.name, t.id
                )));
            }
        }
        let e = &self.engine;
        if !(e.hash_index_ratio > 0.0 && e.hash_index_ratio < 1.0) {
            return Err(ConfigError(
                "engine.hash_index_ratio must be in (0, 1)".into(),
            ));
        }
        if e.mem_mb == 0 {
            return Err(ConfigError("engine.mem_mb must be > 0".into()));
        }
        self.replication.validate(self.replication.role)?;
        Ok(())
    }
}

/// Which process of a topology a program is: selects its [`ProcessConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The KV server (`dataplane` section).
    Dataplane,
    /// The traffic generator (`pktgen` section).
    Pktgen,
}

/// Command-line flags that override fields of a loaded config; `None` keeps the
/// file's value. The dataplane and pktgen take the same flags (`--vdev`,
/// `--file-prefix`, `--lcores`; the dataplane also `--mem-mb`) and apply them with
/// [`Config::apply_overrides`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Replaces the first EAL vdev of the process (added when it has none).
    pub vdev: Option<String>,
    /// Replaces the EAL file prefix of the process.
    pub file_prefix: Option<String>,
    /// Replaces the EAL lcore list of the process.
    pub lcores: Option<String>,
    /// Replaces `engine.mem_mb` (the store size in MiB).
    pub mem_mb: Option<usize>,
}

impl Config {
    /// The settings of the process playing `role`.
    pub fn process_mut(&mut self, role: Role) -> &mut ProcessConfig {
        match role {
            Role::Dataplane => &mut self.dataplane,
            Role::Pktgen => &mut self.pktgen,
        }
    }

    /// Applies command-line overrides to the process playing `role` (and to the
    /// engine section). Nothing is re-validated: the flags are the operator's.
    pub fn apply_overrides(&mut self, role: Role, o: &Overrides) {
        let p = self.process_mut(role);
        if let Some(v) = &o.vdev {
            match p.vdevs.first_mut() {
                Some(first) => *first = v.clone(),
                None => p.vdevs.push(v.clone()),
            }
        }
        if let Some(f) = &o.file_prefix {
            p.file_prefix = f.clone();
        }
        if let Some(l) = &o.lcores {
            p.lcores = l.clone();
        }
        if let Some(m) = o.mem_mb {
            self.engine.mem_mb = m;
        }
    }
}

impl ProcessConfig {
    /// The EAL argument vector (with a program name first) for this process.
    ///
    /// `hugepages` is the resolved hugepage decision (see [`resolve_hugepages`]);
    /// `mtu` the server's ([`ServerConfig::mtu`]): memif vdevs get the buffer size of
    /// its mbufs ([`memif_vdev`]).
    pub fn eal_args(&self, prog: &str, hugepages: bool, mtu: u16) -> Vec<String> {
        let map = self.lcores.contains('@') || self.lcores.contains('(');
        let mut a = vec![
            prog.to_string(),
            if map { "--lcores" } else { "-l" }.into(),
            self.lcores.clone(),
            format!("--file-prefix={}", self.file_prefix),
            "--log-level=lib.eal:notice".into(),
        ];
        if Path::new(DEFAULT_PMD_DIR).is_dir() && !self.extra_eal.iter().any(|x| x == "-d") {
            a.push("-d".into());
            a.push(DEFAULT_PMD_DIR.into());
        }
        for v in &self.vdevs {
            a.push(format!("--vdev={}", memif_vdev(v, mtu)));
        }
        if self.pci.is_empty() {
            a.push("--no-pci".into());
        } else {
            for p in &self.pci {
                a.push("-a".into());
                a.push(p.clone());
            }
        }
        if hugepages {
            a.push(format!("--socket-mem={}", self.memory_mb));
        } else {
            a.push("--no-huge".into());
            a.push("--iova-mode=va".into());
            a.push("-m".into());
            a.push(self.memory_mb.to_string());
        }
        a.extend(self.extra_eal.iter().cloned());
        a
    }

    /// This endpoint's MAC as bytes (validated at load time).
    pub fn mac_bytes(&self) -> [u8; 6] {
        parse_mac(&self.mac).unwrap_or([0; 6])
    }
}

/// Decides whether hugepages back DPDK memory for `mode` and `memory_mb`.
pub fn resolve_hugepages(mode: HugeMode, memory_mb: u32) -> Result<bool, ConfigError> {
    match mode {
        HugeMode::Off => Ok(false),
        HugeMode::On => {
            if hugepages_available(memory_mb) {
                Ok(true)
            } else {
                Err(ConfigError(format!(
                    "hugepages = \"on\" but {memory_mb} MiB of free hugepages on a mounted hugetlbfs are not available"
                )))
            }
        }
        HugeMode::Auto => Ok(hugepages_available(memory_mb)),
    }
}

/// True when hugetlbfs is mounted and at least `memory_mb` MiB of hugepages are free.
pub fn hugepages_available(memory_mb: u32) -> bool {
    let mounted = std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
        })
        .unwrap_or(false);
    if !mounted {
        return false;
    }
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| -> u64 {
        info.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let free_kib = field("HugePages_Free:") * field("Hugepagesize:");
    free_kib >= u64::from(memory_mb) * 1024
}

/// Parses a MAC address (`aa:bb:cc:dd:ee:ff`; [`kvwire::ethernet::parse_mac`]).
pub fn parse_mac(s: &str) -> Result<[u8; 6], ConfigError> {
    kvwire::ethernet::parse_mac(s).ok_or_else(|| ConfigError(format!("bad MAC address {s:?}")))
}

#[cfg(test)]
mod tests;
