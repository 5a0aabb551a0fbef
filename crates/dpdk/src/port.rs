//! Ethernet ports (ethdev): configuration, burst I/O through queue handles, stats.
//!
//! Thread-safety model: DPDK queues are not thread-safe, so I/O goes through
//! [`RxQueue`]/[`TxQueue`] handles that exist once per queue (created by
//! [`Port::configure`]), are `Send` but not `Sync`/`Clone`, and take `&mut self`.
//! [`Port::stop`]/[`Port::close`]/re-configure fail with `EBUSY` while any queue handle
//! of the port is alive.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{cstring, DpdkError, Result, ToResult};
use crate::mbuf::MbufBurst;
use crate::memif_unmap::BurstGuard;
use crate::mempool::Mempool;
use crate::SocketId;

/// An ethdev port id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub u16);

/// A queue index within a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId(pub u16);

const MAX_PORTS: usize = dpdk_sys::RTE_MAX_ETHPORTS as usize;

/// Live queue handles per port.
static LIVE_QUEUES: [AtomicU32; MAX_PORTS] = [const { AtomicU32::new(0) }; MAX_PORTS];

/// How to bring a port up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Number of rx queues.
    pub nb_rxq: u16,
    /// Number of tx queues.
    pub nb_txq: u16,
    /// Rx descriptors per queue (adjusted to the device's limits).
    pub rxd: u16,
    /// Tx descriptors per queue (adjusted to the device's limits).
    pub txd: u16,
    /// MTU to set, if any (ignored by a PMD without an MTU setting, e.g. memif).
    pub mtu: Option<u16>,
    /// Enable promiscuous mode (errors ignored if the PMD does not support it).
    pub promisc: bool,
    /// Use RSS (IP/UDP hash) across rx queues when `nb_rxq > 1`.
    pub rss: bool,
    /// Start the port (default). `false` leaves it set up but stopped, its queue
    /// handles returned: start it later with [`Port::restart`] (e.g. a memif client
    /// whose server is not up yet, whose start would fail).
    pub start: bool,
    /// Ask for Rx interrupts (`intr_conf.rxq`) where the PMD gives each rx queue a
    /// level-triggered descriptor ([`RX_INTR_DRIVERS`]: net_tap, whose queue fd is
    /// the tap's own): an idle loop can then sleep until a packet is there
    /// ([`RxQueue::intr_fd`]). Ignored for any other PMD.
    pub rx_intr: bool,
}

/// The PMDs whose rx queue interrupt descriptor is readable exactly while packets
/// wait (so polling it needs no arming and can miss none): net_tap's is the queue's
/// tap file descriptor. A PMD whose interrupts must be armed per sleep (most NICs'
/// MSI-X vectors, with `rte_eth_dev_rx_intr_enable` and a last rx poll after it)
/// is not in the list; memif has no Rx interrupts in DPDK 22.11.
pub const RX_INTR_DRIVERS: &[&str] = &["net_tap"];

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            nb_rxq: 1,
            nb_txq: 1,
            rxd: 1024,
            txd: 1024,
            mtu: None,
            promisc: true,
            rss: true,
            start: true,
            rx_intr: false,
        }
    }
}

/// Link state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkStatus {
    /// Link up.
    pub up: bool,
    /// Speed in Mbit/s (0 if unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// Basic port counters (`rte_eth_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Rx packets dropped by the hardware/PMD (queue full).
    pub imissed: u64,
    /// Erroneous rx packets.
    pub ierrors: u64,
    /// Failed tx packets.
    pub oerrors: u64,
    /// Rx mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// A port handle (just the id; cheap to copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Port {
    id: PortId,
}

/// The queue handles of a configured, started port.
#[derive(Debug)]
pub struct PortQueues {
    /// Rx queues `0..nb_rxq`.
    pub rx: Vec<RxQueue>,
    /// Tx queues `0..nb_txq`.
    pub tx: Vec<TxQueue>,
    /// Rx descriptors per queue after adjustment.
    pub rxd: u16,
    /// Tx descriptors per queue after adjustment.
    pub txd: u16,
}

impl Port {
    /// Number of available ports.
    pub fn count() -> u16 {
        if crate::eal::ensure("rte_eth_dev_count_avail").is_err() {
            return 0;
        }
        // SAFETY: EAL initialised.
        unsafe { dpdk_sys::rte_eth_dev_count_avail() }
    }

    /// The port with a device name, e.g. `"net_memif0"`, `"net_ring0"`, `"net_tap0"`, or
    /// a PCI address.
    pub fn by_name(name: &str) -> Result<Port> {
        const OP: &str = "rte_eth_dev_get_port_by_name";
        crate::eal::ensure(OP)?;
        let c = cstring(OP, name)?;
        let mut id = 0u16;
        // SAFETY: EAL initialised; valid C string and out-pointer.
        unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut id) }.neg_errno(OP)?;
        Ok(Port { id: PortId(id) })
    }

    /// The port with id `id`, if valid.
    pub fn from_id(id: PortId) -> Result<Port> {
        const OP: &str = "rte_eth_dev_is_valid_port";
        crate::eal::ensure(OP)?;
        // SAFETY: EAL initialised; any id may be queried.
        if unsafe { dpdk_sys::rte_eth_dev_is_valid_port(id.0) } == 0 {
            return Err(DpdkError::new(OP, libc::ENODEV));
        }
        Ok(Port { id })
    }

    /// All available ports.
    pub fn all() -> Vec<Port> {
        (0..MAX_PORTS as u16)
            .filter_map(|i| Port::from_id(PortId(i)).ok())
            .collect()
    }

    /// The port id.
    pub fn id(&self) -> PortId {
        self.id
    }

    /// Device name (`rte_eth_dev_get_name_by_port`).
    pub fn name(&self) -> Result<String> {
        let mut buf = [0 as std::ffi::c_char; dpdk_sys::RTE_ETH_NAME_MAX_LEN as usize];
        // SAFETY: valid port (checked at construction); buffer of RTE_ETH_NAME_MAX_LEN.
        unsafe { dpdk_sys::rte_eth_dev_get_name_by_port(self.id.0, buf.as_mut_ptr()) }
            .neg_errno("rte_eth_dev_get_name_by_port")?;
        // SAFETY: DPDK wrote a NUL-terminated string into `buf`.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// NUMA socket of the device ([`crate::SOCKET_ID_ANY`] for virtual devices).
    pub fn socket_id(&self) -> SocketId {
        // SAFETY: any port id may be queried.
        unsafe { dpdk_sys::rte_eth_dev_socket_id(self.id.0) }
    }

    /// The name of the port's driver (its PMD), e.g. `net_tap`, `net_memif`.
    pub fn driver_name(&self) -> Result<String> {
        Ok(driver_name(&self.dev_info()?).to_string())
    }

    fn dev_info(&self) -> Result<dpdk_sys::rte_eth_dev_info> {
        let mut info = dpdk_sys::rte_eth_dev_info::default();
        // SAFETY: valid port id, valid out-pointer.
        unsafe { dpdk_sys::rte_eth_dev_info_get(self.id.0, &mut info) }
            .neg_errno("rte_eth_dev_info_get")?;
        Ok(info)
    }

    /// Configures and starts the port, in the DPDK-examples order: dev_info →
    /// configure → adjust descriptors → rx/tx queue setup on the port's NUMA socket →
    /// MTU → start → promiscuous (start and promiscuous only with `cfg.start`). Rx
    /// queues take buffers from `pool`.
    ///
    /// Returns one handle per queue. Fails with `EBUSY` if handles from an earlier
    /// configure are still alive.
    pub fn configure(&self, cfg: &PortConfig, pool: &Mempool) -> Result<PortQueues> {
        let port = self.id.0;
        if LIVE_QUEUES[port as usize].load(Ordering::Acquire) != 0 {
            return Err(DpdkError::new("rte_eth_dev_configure", libc::EBUSY));
        }
        let info = self.dev_info()?;

        let mut conf = dpdk_sys::rte_eth_conf::default();
        if cfg.rss && cfg.nb_rxq > 1 {
            let want = dpdk_sys::RTE_ETH_RSS_IP | dpdk_sys::RTE_ETH_RSS_UDP;
            let hf = want & info.flow_type_rss_offloads;
            if hf != 0 {
                conf.rxmode.mq_mode = dpdk_sys::RTE_ETH_MQ_RX_RSS;
                conf.rx_adv_conf.rss_conf.rss_hf = hf;
            }
        }
        if info.tx_offload_capa & dpdk_sys::RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE != 0 {
            conf.txmode.offloads |= dpdk_sys::RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
        }
        if cfg.rx_intr && RX_INTR_DRIVERS.contains(&driver_name(&info)) {
            conf.intr_conf.set_rxq(1);
        }
        // SAFETY: valid port, conf fully initialised.
        unsafe { dpdk_sys::rte_eth_dev_configure(port, cfg.nb_rxq, cfg.nb_txq, &conf) }
            .neg_errno("rte_eth_dev_configure")?;

        let (mut rxd, mut txd) = (cfg.rxd, cfg.txd);
        // SAFETY: valid port, valid out-pointers.
        unsafe { dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(port, &mut rxd, &mut txd) }
            .neg_errno("rte_eth_dev_adjust_nb_rx_tx_desc")?;

        let socket = self.socket_id();
        let socket_u = if socket < 0 {
            dpdk_sys::SOCKET_ID_ANY as u32
        } else {
            socket as u32
        };
        for q in 0..cfg.nb_rxq {
            // SAFETY: configured port, q < nb_rxq; NULL rxconf = driver defaults; the
            // pool is never freed, so the queue may keep it.
            unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(
                    port,
                    q,
                    rxd,
                    socket_u,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            }
            .neg_errno("rte_eth_rx_queue_setup")?;
        }
        let mut txconf = info.default_txconf;
        txconf.offloads = conf.txmode.offloads;
        for q in 0..cfg.nb_txq {
            // SAFETY: configured port, q < nb_txq, txconf valid for the call.
            unsafe { dpdk_sys::rte_eth_tx_queue_setup(port, q, txd, socket_u, &txconf) }
                .neg_errno("rte_eth_tx_queue_setup")?;
        }
        if let Some(mtu) = cfg.mtu {
            // SAFETY: `port` is a valid port id, configured above with its queues set
            // up; the call takes no pointers.
            let rc = unsafe { dpdk_sys::rte_eth_dev_set_mtu(port, mtu) };
            // -ENOTSUP: the PMD has no MTU to set (memif carries a frame of any length
            // in chained descriptors); any other error (an MTU beyond the device) stops.
            if rc != -libc::ENOTSUP {
                rc.neg_errno("rte_eth_dev_set_mtu")?;
            }
        }
        if cfg.start {
            // SAFETY: `port` is configured with all its queues set up above, and no
            // queue handle exists yet (checked at entry), so no burst is in flight.
            unsafe { dpdk_sys::rte_eth_dev_start(port) }.neg_errno("rte_eth_dev_start")?;
        }
        if cfg.promisc && cfg.start {
            // SAFETY: valid port; unsupported promisc is not an error for us.
            let _ignored_unsupported = unsafe { dpdk_sys::rte_eth_promiscuous_enable(port) };
        }

        let rx = (0..cfg.nb_rxq)
            .map(|q| RxQueue::new(self.id, QueueId(q)))
            .collect();
        let tx = (0..cfg.nb_txq)
            .map(|q| TxQueue::new(self.id, QueueId(q)))
            .collect();
        Ok(PortQueues { rx, tx, rxd, txd })
    }

    /// MAC address.
    pub fn mac_addr(&self) -> Result<[u8; 6]> {
        let mut a = dpdk_sys::rte_ether_addr::default();
        // SAFETY: valid port and out-pointer.
        unsafe { dpdk_sys::rte_eth_macaddr_get(self.id.0, &mut a) }
            .neg_errno("rte_eth_macaddr_get")?;
        Ok(a.addr_bytes)
    }

    /// Link state without waiting (`rte_eth_link_get_nowait`).
    pub fn link(&self) -> Result<LinkStatus> {
        let mut l = dpdk_sys::rte_eth_link::default();
        // SAFETY: valid port and out-pointer.
        unsafe { dpdk_sys::rte_eth_link_get_nowait(self.id.0, &mut l) }
            .neg_errno("rte_eth_link_get_nowait")?;
        Ok(LinkStatus {
            up: l.link_status() != 0,
            speed_mbps: l.link_speed,
            full_duplex: l.link_duplex() != 0,
        })
    }

    /// Basic counters.
    pub fn stats(&self) -> Result<PortStats> {
        let mut s = dpdk_sys::rte_eth_stats::default();
        // SAFETY: valid port and out-pointer.
        unsafe { dpdk_sys::rte_eth_stats_get(self.id.0, &mut s) }.neg_errno("rte_eth_stats_get")?;
        Ok(PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Resets the basic counters.
    pub fn reset_stats(&self) -> Result<()> {
        // SAFETY: valid port.
        unsafe { dpdk_sys::rte_eth_stats_reset(self.id.0) }.neg_errno("rte_eth_stats_reset")?;
        Ok(())
    }

    fn check_quiesced(&self, op: &'static str) -> Result<()> {
        if LIVE_QUEUES[self.id.0 as usize].load(Ordering::Acquire) != 0 {
            Err(DpdkError::new(op, libc::EBUSY))
        } else {
            Ok(())
        }
    }

    /// Stops the port. `EBUSY` while queue handles are alive (drop them first).
    pub fn stop(&self) -> Result<()> {
        self.check_quiesced("rte_eth_dev_stop")?;
        // SAFETY: no queue handle exists, so no thread is inside a burst function.
        unsafe { dpdk_sys::rte_eth_dev_stop(self.id.0) }.neg_errno("rte_eth_dev_stop")?;
        Ok(())
    }

    /// Stops and starts again a port whose only queues are `rxq` and `txq`, keeping
    /// them (and their handles) configured: e.g. a memif client whose server went
    /// away redials it (DPDK's memif client connects only when the port starts).
    /// `EBUSY` when other queue handles of the port exist; `EINVAL` when the
    /// handles are not this port's.
    pub fn restart(&self, rxq: &mut RxQueue, txq: &mut TxQueue) -> Result<()> {
        const OP: &str = "rte_eth_dev_stop";
        if rxq.port != self.id || txq.port != self.id {
            return Err(DpdkError::new(OP, libc::EINVAL));
        }
        if LIVE_QUEUES[self.id.0 as usize].load(Ordering::Acquire) != 2 {
            return Err(DpdkError::new(OP, libc::EBUSY));
        }
        // SAFETY: the port's only two queue handles are borrowed mutably here, and
        // handles are `!Sync`: no thread is inside a burst function on this port.
        unsafe { dpdk_sys::rte_eth_dev_stop(self.id.0) }.neg_errno(OP)?;
        // SAFETY: the same two handles are still borrowed mutably, so no burst can
        // start while the port restarts; its queues stay set up across stop/start.
        unsafe { dpdk_sys::rte_eth_dev_start(self.id.0) }.neg_errno("rte_eth_dev_start")?;
        Ok(())
    }

    /// Closes (releases) the port; stop it first. `EBUSY` while queue handles are alive.
    pub fn close(self) -> Result<()> {
        self.check_quiesced("rte_eth_dev_close")?;
        // SAFETY: no queue handle exists, so nothing uses the queues being freed.
        unsafe { dpdk_sys::rte_eth_dev_close(self.id.0) }.neg_errno("rte_eth_dev_close")?;
        Ok(())
    }
}

/// Marker making a type `Send` but `!Sync`.
type NotSync = PhantomData<std::cell::Cell<()>>;

/// Exclusive handle to one rx queue.
#[derive(Debug)]
pub struct RxQueue {
    port: PortId,
    queue: QueueId,
    /// Marks its bursts busy on a memif port ([`crate::memif_unmap`]).
    guard: Option<BurstGuard>,
    _not_sync: NotSync,
}

/// Exclusive handle to one tx queue.
#[derive(Debug)]
pub struct TxQueue {
    port: PortId,
    queue: QueueId,
    /// Marks its bursts busy on a memif port ([`crate::memif_unmap`]).
    guard: Option<BurstGuard>,
    _not_sync: NotSync,
}

/// The driver name of a port's `info` ("" when it has none).
fn driver_name(info: &dpdk_sys::rte_eth_dev_info) -> &str {
    if info.driver_name.is_null() {
        return "";
    }
    // A non-null driver_name points at the PMD's static name, alive for the process.
    // SAFETY: non-null, NUL-terminated, never freed.
    unsafe { CStr::from_ptr(info.driver_name) }
        .to_str()
        .unwrap_or("")
}

/// A busy mark for the bursts of a queue of `port` when its PMD is memif, whose
/// regions can be unmapped under a burst ([`crate::memif_unmap`]).
fn burst_guard(port: PortId) -> Option<BurstGuard> {
    let mut info = dpdk_sys::rte_eth_dev_info::default();
    // SAFETY: valid port id (its queues are being handed out), valid out-pointer.
    let ok = unsafe { dpdk_sys::rte_eth_dev_info_get(port.0, &mut info) } == 0;
    (ok && driver_name(&info) == "net_memif")
        .then(BurstGuard::new)
        .flatten()
}

impl RxQueue {
    fn new(port: PortId, queue: QueueId) -> Self {
        LIVE_QUEUES[port.0 as usize].fetch_add(1, Ordering::AcqRel);
        RxQueue {
            port,
            queue,
            guard: burst_guard(port),
            _not_sync: PhantomData,
        }
    }

    /// Port id.
    pub fn port(&self) -> PortId {
        self.port
    }

    /// Queue id.
    pub fn queue(&self) -> QueueId {
        self.queue
    }

    /// The busy mark of its bursts (memif ports only).
    pub(crate) fn burst_guard(&self) -> Option<BurstGuard> {
        self.guard
    }

    /// The queue's Rx interrupt descriptor, readable while packets wait, when the
    /// port was configured with [`PortConfig::rx_intr`] and its PMD is one of
    /// [`RX_INTR_DRIVERS`]; `None` otherwise. Poll it (`POLLIN`), never read it: the
    /// PMD reads the packets.
    pub fn intr_fd(&self) -> Option<std::os::fd::RawFd> {
        let mut info = dpdk_sys::rte_eth_dev_info::default();
        // The handle keeps the port configured.
        // SAFETY: valid port id, valid out-pointer.
        if unsafe { dpdk_sys::rte_eth_dev_info_get(self.port.0, &mut info) } != 0
            || !RX_INTR_DRIVERS.contains(&driver_name(&info))
        {
            return None;
        }
        // Negative when the queue has no interrupt vector (no intr_conf.rxq).
        // SAFETY: valid port and queue ids; no memory passed.
        let fd = unsafe { dpdk_sys::rte_eth_dev_rx_intr_ctl_q_get_fd(self.port.0, self.queue.0) };
        (fd >= 0).then_some(fd)
    }

    /// Receives up to `burst.remaining()` packets, appending them to `burst`; returns
    /// how many arrived.
    #[inline]
    pub fn rx_burst<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> usize {
        let room = burst.remaining() as u16;
        if room == 0 {
            return 0;
        }
        let begun = self.guard.as_ref().map(BurstGuard::enter);
        // SAFETY: this handle is the only user of (port, queue) (handles are unique,
        // !Sync, &mut self); the port is started and cannot be stopped/closed while the
        // handle lives. DPDK writes at most `room` owned mbuf pointers into the free
        // slots.
        let n = unsafe {
            dpdk_sys::dpdk_shim_rx_burst(self.port.0, self.queue.0, burst.tail_ptr(), room)
        } as usize;
        if let (Some(g), Some(b)) = (&self.guard, begun) {
            g.exit(b);
        }
        // SAFETY: DPDK filled exactly `n` slots with mbufs now owned by us.
        unsafe { burst.commit(n) };
        n
    }
}

impl TxQueue {
    fn new(port: PortId, queue: QueueId) -> Self {
        LIVE_QUEUES[port.0 as usize].fetch_add(1, Ordering::AcqRel);
        TxQueue {
            port,
            queue,
            guard: burst_guard(port),
            _not_sync: PhantomData,
        }
    }

    /// Port id.
    pub fn port(&self) -> PortId {
        self.port
    }

    /// Queue id.
    pub fn queue(&self) -> QueueId {
        self.queue
    }

    /// Offers all mbufs in `burst` to the PMD; the accepted prefix is sent (ownership
    /// passes to the driver), the rest stays in `burst` (moved to the front) for a
    /// retry — or is freed when the burst is cleared/dropped. Returns the number sent.
    #[inline]
    pub fn tx_burst<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> usize {
        let n = burst.len() as u16;
        if n == 0 {
            return 0;
        }
        let begun = self.guard.as_ref().map(BurstGuard::enter);
        // SAFETY: unique handle for (port, queue), port started (see rx_burst); the
        // first `n` slots are valid owned mbufs. The PMD takes ownership of the first
        // `sent` of them.
        let sent =
            unsafe { dpdk_sys::dpdk_shim_tx_burst(self.port.0, self.queue.0, burst.head_ptr(), n) }
                as usize;
        if let (Some(g), Some(b)) = (&self.guard, begun) {
            g.exit(b);
        }
        // SAFETY: the first `sent` mbufs now belong to the driver.
        unsafe { burst.consume_front(sent) };
        sent
    }

    /// [`TxQueue::tx_burst`], then frees whatever the PMD did not take. Returns
    /// `(sent, dropped)`; `burst` is empty afterwards.
    #[inline]
    pub fn tx_burst_or_free<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> (usize, usize) {
        let sent = self.tx_burst(burst);
        let dropped = burst.len();
        burst.clear();
        (sent, dropped)
    }
}

impl Drop for RxQueue {
    fn drop(&mut self) {
        LIVE_QUEUES[self.port.0 as usize].fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for TxQueue {
    fn drop(&mut self) {
        LIVE_QUEUES[self.port.0 as usize].fetch_sub(1, Ordering::AcqRel);
    }
}
