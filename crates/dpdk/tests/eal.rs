//! EAL-backed tests. One EAL per process, so this is a `harness = false` binary whose
//! `main` initialises EAL once (`--no-huge`, works on machines without hugepages) on the
//! main lcore and runs every case in order. Run: `cargo test -p dpdk --test eal`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dpdk::{
    lcore, malloc, pdump, telemetry, tsc, Eal, LaunchError, Mbuf, MbufBurst, Mempool, Port,
    PortConfig, Ring, RingMode, SOCKET_ID_ANY,
};

fn eal_args() -> Vec<String> {
    vec![
        "-l".into(),
        "0-1".into(),
        "--no-huge".into(),
        "--iova-mode=va".into(),
        "-m".into(),
        "256".into(),
        format!("--file-prefix=dpdk-test-{}", std::process::id()),
        "--vdev=net_ring0".into(),
        "--vdev=net_null0".into(),
        // A memif pair in this one process (server and client on one socket).
        format!(
            "--vdev=net_memif0,role=server,id=0,socket={},socket-abstract=no",
            memif_sock()
        ),
        format!(
            "--vdev=net_memif1,role=client,id=0,socket={},socket-abstract=no",
            memif_sock()
        ),
        "--no-pci".into(),
        "--log-level=lib.eal:warning".into(),
    ]
}

fn memif_sock() -> String {
    format!("/tmp/dpdk-test-{}-memif.sock", std::process::id())
}

fn frame(seq: u64, len: usize) -> Vec<u8> {
    let mut f = vec![0xa5u8; len];
    f[0..6].copy_from_slice(&[0xff; 6]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..22].copy_from_slice(&seq.to_le_bytes());
    f
}

fn eal_basics(_pool: &Mempool) {
    assert!(Eal::is_initialized());
    let again = Eal::init(&eal_args()).unwrap_err();
    assert_eq!(again.errno, libc::EALREADY);
    assert!(again.to_string().contains("rte_eal_init"));
    assert_eq!(lcore::id(), Some(lcore::main_id()));
    assert_eq!(lcore::count(), 2);
    assert_eq!(lcore::workers().collect::<Vec<_>>(), vec![dpdk::LcoreId(1)]);
    assert!(tsc::hz() > 0);
    let a = tsc::now();
    let b = tsc::now();
    assert!(b >= a);
    // Off-lcore threads see no lcore id.
    assert_eq!(std::thread::spawn(lcore::id).join().unwrap(), None);
}

fn mbuf_api(pool: &Mempool) {
    let base = pool.in_use_count();
    let mut m = Mbuf::alloc(pool).expect("alloc");
    assert_eq!(pool.in_use_count(), base + 1);
    assert_eq!(m.len(), 0);
    assert!(m.is_empty());
    assert_eq!(m.headroom(), 128);
    let room = m.tailroom();
    assert_eq!(room, 2048);
    m.append(10).unwrap().copy_from_slice(b"0123456789");
    assert_eq!(m.data(), b"0123456789");
    assert_eq!(m.len(), 10);
    m.data_mut()[0] = b'X';
    assert_eq!(&m.data()[..2], b"X1");
    m.prepend(2).unwrap().copy_from_slice(b"ab");
    assert_eq!(m.data(), b"abX123456789");
    assert!(m.adj(2));
    assert!(m.trim(4));
    assert_eq!(m.data(), b"X12345");
    assert!(!m.trim(100));
    assert!(m.append(room * 2).is_none());
    assert_eq!(m.len(), 6, "failed append leaves the mbuf unchanged");
    assert!(m.set_len(3));
    assert_eq!(m.data(), b"X12");
    assert!(!m.set_len(5000));
    m.reset();
    assert_eq!(m.len(), 0);
    assert_eq!(m.headroom(), 128);
    // Raw round trip.
    let raw = m.into_raw();
    assert_eq!(pool.in_use_count(), base + 1);
    // SAFETY: `raw` came from into_raw and is reclaimed once.
    let m = unsafe { Mbuf::from_raw(raw) };
    drop(m);
    assert_eq!(pool.in_use_count(), base);

    // Bursts.
    let mut b = MbufBurst::<32>::new();
    assert_eq!(std::mem::size_of::<Mbuf>(), 8);
    b.alloc_bulk(pool, 20).unwrap();
    assert_eq!(b.len(), 20);
    assert_eq!(pool.in_use_count(), base + 20);
    assert!(b.alloc_bulk(pool, 13).is_err(), "over capacity");
    for (i, m) in b.iter_mut().enumerate() {
        m.append(1).unwrap()[0] = i as u8;
    }
    assert_eq!(b[5].data(), &[5]);
    b.retain(|m| m.data()[0] % 2 == 0);
    assert_eq!(b.len(), 10);
    assert_eq!(pool.in_use_count(), base + 10);
    assert_eq!(
        b.iter().map(|m| m.data()[0]).collect::<Vec<_>>(),
        (0..20).step_by(2).collect::<Vec<u8>>()
    );
    let last = b.pop().unwrap();
    assert_eq!(last.data(), &[18]);
    let first = b.swap_remove(0);
    assert_eq!(first.data(), &[0]);
    b.push(first).unwrap();
    b.push(last).unwrap();
    let mut it = b.drain();
    let one = it.next().unwrap();
    drop(it); // frees the rest
    assert!(b.is_empty());
    assert_eq!(pool.in_use_count(), base + 1);
    drop(one);
    // Fill, overflow, drop.
    let mut full = MbufBurst::<4>::new();
    for _ in 0..4 {
        full.push(Mbuf::alloc(pool).unwrap()).unwrap();
    }
    assert!(full.is_full());
    let extra = full.push(Mbuf::alloc(pool).unwrap()).unwrap_err();
    drop(extra);
    drop(full);
    assert_eq!(pool.in_use_count(), base);
}

/// Polls `rxq` (at most 100 times) until `want` frames are in `rx`; how many came.
fn receive(rxq: &mut dpdk::RxQueue, rx: &mut MbufBurst<32>, want: usize) -> usize {
    let mut got = 0;
    for _ in 0..100 {
        got += rxq.rx_burst(rx);
        if got == want {
            break;
        }
    }
    got
}

fn ring_port_roundtrip(pool: &Mempool) {
    let base = pool.in_use_count();
    assert!(Port::count() >= 1);
    let port = Port::by_name("net_ring0").expect("net_ring0");
    assert_eq!(port.name().unwrap(), "net_ring0");
    assert!(Port::by_name("nope0").is_err());
    let mut q = port
        .configure(&PortConfig::default(), pool)
        .expect("configure");
    assert!(port.link().unwrap().up);
    let _ = port.mac_addr().unwrap();
    port.reset_stats().unwrap();
    // Reconfigure/stop/close are refused while queue handles are alive.
    assert_eq!(
        port.configure(&PortConfig::default(), pool)
            .unwrap_err()
            .errno,
        libc::EBUSY
    );
    assert_eq!(port.stop().unwrap_err().errno, libc::EBUSY);
    let (rxq, txq) = (&mut q.rx[0], &mut q.tx[0]);

    let mut tx = MbufBurst::<32>::new();
    for i in 0..32u64 {
        let mut m = Mbuf::alloc(pool).unwrap();
        m.append(64).unwrap().copy_from_slice(&frame(i, 64));
        tx.push(m).unwrap();
    }
    assert_eq!(txq.tx_burst(&mut tx), 32);
    assert!(tx.is_empty());
    let mut rx = MbufBurst::<32>::new();
    assert_eq!(receive(rxq, &mut rx, 32), 32);
    for (i, m) in rx.iter().enumerate() {
        assert_eq!(m.data(), &frame(i as u64, 64)[..]);
    }
    drop(rx);
    let st = port.stats().unwrap();
    assert_eq!((st.ipackets, st.opackets), (32, 32));
    assert_eq!(pool.in_use_count(), base);
    // A restart (stop + start) keeps the queues: frames flow again after it.
    port.restart(rxq, txq)
        .expect("restart with the port's only queues");
    assert!(port.link().unwrap().up);
    let mut tx = MbufBurst::<32>::new();
    let mut m = Mbuf::alloc(pool).unwrap();
    m.append(64).unwrap().copy_from_slice(&frame(99, 64));
    tx.push(m).unwrap();
    assert_eq!(txq.tx_burst(&mut tx), 1);
    let mut rx = MbufBurst::<32>::new();
    assert_eq!(receive(rxq, &mut rx, 1), 1);
    assert_eq!(rx.iter().next().unwrap().data(), &frame(99, 64)[..]);
    drop(rx);
    drop(q);
    assert_eq!(pool.in_use_count(), base);
    // Port stays configured for the backpressure test (queues re-created there).
}

/// Whether `fd` becomes readable within `ms` milliseconds.
fn readable(fd: std::os::fd::RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, alive across the call.
    unsafe { libc::poll(&mut p, 1, ms) == 1 && p.revents & libc::POLLIN != 0 }
}

/// Sends one frame on `txq`.
fn send_one(pool: &Mempool, txq: &mut dpdk::TxQueue, seq: u64) {
    let mut tx = MbufBurst::<32>::new();
    let mut m = Mbuf::alloc(pool).unwrap();
    m.append(64).unwrap().copy_from_slice(&frame(seq, 64));
    tx.push(m).unwrap();
    assert_eq!(txq.tx_burst(&mut tx), 1);
}

/// `dpdk::MemifRxIntr` on a live memif pair: the PMD's private structures are where
/// it expects them, an armed queue's descriptor turns readable when the peer sends,
/// a frame already waiting is reported instead, and a disarmed queue is not signalled.
fn memif_ring_signals(pool: &Mempool) {
    use dpdk::MemifRxIntr;
    let null = Port::by_name("net_null0").unwrap();
    let nq = null.configure(&PortConfig::default(), pool).unwrap();
    let why = MemifRxIntr::new(&nq.rx[0]).unwrap_err();
    assert!(why.contains("not memif"), "{why}");
    drop(nq);
    let (server, client) = (
        Port::by_name("net_memif0").unwrap(),
        Port::by_name("net_memif1").unwrap(),
    );
    let mut s = server.configure(&PortConfig::default(), pool).unwrap();
    let mut c = client.configure(&PortConfig::default(), pool).unwrap();
    for _ in 0..500 {
        if server.link().unwrap().up && client.link().unwrap().up {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        server.link().unwrap().up && client.link().unwrap().up,
        "memif pair connected"
    );
    // Both directions: the server receives on a client-to-server ring, the client on
    // a server-to-client one (the producer moves a different index).
    memif_direction(pool, &mut s, &mut c);
    memif_direction(pool, &mut c, &mut s);
    drop((s, c));
    for p in [server, client, null] {
        p.stop().unwrap();
    }
}

/// One direction of [`memif_ring_signals`]: `rx` receives what `tx` sends.
fn memif_direction(pool: &Mempool, rx: &mut dpdk::PortQueues, tx: &mut dpdk::PortQueues) {
    use dpdk::{ArmRx, Armed, MemifRxIntr};
    // A memif client's rx burst posts its empty buffers, which its server fills.
    let mut none = MbufBurst::<32>::new();
    assert_eq!(receive(&mut rx.rx[0], &mut none, 0), 0);
    let mut intr = MemifRxIntr::new(&rx.rx[0]).expect("memif layout as expected");
    let Armed::Wait(fd) = intr.arm() else {
        panic!("an empty queue arms");
    };
    send_one(pool, &mut tx.tx[0], 1);
    assert!(readable(fd, 5000), "the peer's send signals an armed queue");
    intr.disarm();
    assert_eq!(
        intr.arm(),
        Armed::Pending,
        "the frame not taken yet stops a sleep"
    );
    let mut got = MbufBurst::<32>::new();
    assert_eq!(receive(&mut rx.rx[0], &mut got, 1), 1);
    assert_eq!(got.iter().next().unwrap().data(), &frame(1, 64)[..]);
    drop(got);
    let Armed::Wait(fd) = intr.arm() else {
        panic!("empty again: arms");
    };
    assert!(!readable(fd, 0), "armed afresh: the old signal was drained");
    intr.disarm();
    send_one(pool, &mut tx.tx[0], 2);
    assert!(!readable(fd, 50), "a disarmed queue is not signalled");
    let mut got = MbufBurst::<32>::new();
    assert_eq!(receive(&mut rx.rx[0], &mut got, 1), 1);
}

fn backpressure(pool: &Mempool) {
    let port = Port::by_name("net_ring0").unwrap();
    port.stop().unwrap();
    let mut q = port.configure(&PortConfig::default(), pool).unwrap();
    let (rxq, txq) = (&mut q.rx[0], &mut q.tx[0]);
    let base = pool.in_use_count();

    // 1) tx_burst keeps the refused suffix for a retry.
    let mut queued = 0usize;
    let mut tx = MbufBurst::<32>::new();
    loop {
        let need = tx.remaining();
        tx.alloc_bulk(pool, need).unwrap();
        let n = tx.len();
        let sent = txq.tx_burst(&mut tx);
        queued += sent;
        assert_eq!(tx.len(), n - sent, "unsent mbufs stay in the burst");
        if sent < n {
            break;
        }
    }
    // net_ring's ring holds 1023 (size 1024, not exact).
    assert_eq!(queued, 1023);
    assert!(!tx.is_empty());
    assert_eq!(
        pool.in_use_count() as usize,
        base as usize + queued + tx.len()
    );
    // A retry on a full ring sends nothing and still keeps them.
    let left = tx.len();
    assert_eq!(txq.tx_burst(&mut tx), 0);
    assert_eq!(tx.len(), left);

    // 2) tx_burst_or_free frees what the PMD refuses.
    let mut more = MbufBurst::<32>::new();
    more.alloc_bulk(pool, 32).unwrap();
    let (sent, dropped) = txq.tx_burst_or_free(&mut more);
    assert_eq!((sent, dropped), (0, 32));
    assert!(more.is_empty());

    // 3) Dropping the burst frees the rest.
    drop(tx);
    assert_eq!(pool.in_use_count() as usize, base as usize + queued);

    // Drain the ring: everything comes back.
    let mut rx = MbufBurst::<32>::new();
    let mut drained = 0;
    loop {
        let n = rxq.rx_burst(&mut rx);
        if n == 0 {
            break;
        }
        drained += n;
        rx.clear();
    }
    assert_eq!(drained, queued);
    assert_eq!(
        pool.in_use_count(),
        base,
        "in-use count back to baseline after backpressure"
    );
    drop(q);
    port.stop().unwrap();
    port.close().unwrap();
    assert!(
        Port::by_name("net_ring0").is_err(),
        "closed port is released"
    );
}

fn launch(_pool: &Mempool) {
    let w = lcore::workers().next().expect("one worker (-l 0-1)");
    let counter = Arc::new(AtomicU64::new(0));
    let c2 = counter.clone();
    let h = lcore::launch_on(w, move || {
        c2.fetch_add(1, Ordering::Relaxed);
        (lcore::id(), 42u32)
    })
    .unwrap();
    assert_eq!(h.lcore(), w);
    let (id, v) = h.wait().unwrap();
    assert_eq!((id, v), (Some(w), 42));
    assert_eq!(counter.load(Ordering::Relaxed), 1);

    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // the next panic is expected
    let h = lcore::launch_on(w, || -> u32 { panic!("boom on lcore") }).unwrap();
    let r = h.wait();
    std::panic::set_hook(quiet);
    match r {
        Err(LaunchError::Panicked(msg)) => assert!(msg.contains("boom")),
        other => panic!("expected panic, got {other:?}"),
    }
    // The lcore is reusable after a panic.
    let h = lcore::launch_on(w, || 7).unwrap();
    assert_eq!(h.wait().unwrap(), 7);
    // Busy lcore: second launch fails, wait_all joins.
    let h = lcore::launch_on(w, || {
        std::thread::sleep(std::time::Duration::from_millis(50))
    })
    .unwrap();
    assert_eq!(lcore::launch_on(w, || ()).unwrap_err().errno, libc::EBUSY);
    lcore::wait_all();
    h.wait().unwrap();
    // Main lcore cannot be a launch target.
    assert!(lcore::launch_on(lcore::main_id(), || ()).is_err());
}

fn rings(pool: &Mempool) {
    let base = pool.in_use_count();
    let r: Ring<Mbuf> = Ring::create("test_ring", 64, SOCKET_ID_ANY, RingMode::SpSc).unwrap();
    let mut p = r.producer().unwrap();
    assert_eq!(
        r.producer().unwrap_err().errno,
        libc::EBUSY,
        "single producer"
    );
    let mut c = r.consumer().unwrap();
    let mut b = MbufBurst::<32>::new();
    b.alloc_bulk(pool, 32).unwrap();
    assert_eq!(p.enqueue_burst(&mut b), 32);
    assert_eq!(r.count(), 32);
    let mut out = MbufBurst::<16>::new();
    assert_eq!(c.dequeue_burst(&mut out), 16);
    assert_eq!(r.count(), 16);
    p.enqueue(Mbuf::alloc(pool).unwrap()).unwrap();
    assert!(c.dequeue().is_some());
    drop(out);
    // Dropping the ring (last handle) frees the 16 mbufs still inside.
    drop((p, c, r));
    assert_eq!(pool.in_use_count(), base);

    let r: Ring<Box<u64>> =
        Ring::create("test_ring_box", 8, SOCKET_ID_ANY, RingMode::MpMc).unwrap();
    let mut p1 = r.producer().unwrap();
    let mut p2 = r.producer().unwrap();
    p1.enqueue(Box::new(1)).unwrap();
    p2.enqueue(Box::new(2)).unwrap();
    let mut c = r.consumer().unwrap();
    assert_eq!(*c.dequeue().unwrap(), 1);
    for i in 0..7 {
        let _ = p1.enqueue(Box::new(i));
    }
    assert_eq!(r.free_count(), 0);
    assert_eq!(
        *p1.enqueue(Box::new(99)).unwrap_err(),
        99,
        "full ring gives the item back"
    );
}

fn memory(_pool: &Mempool) {
    let mut r = malloc::zmalloc_socket("test_region", 1 << 20, 64, SOCKET_ID_ANY).unwrap();
    assert_eq!(r.len(), 1 << 20);
    assert_eq!(r.as_ptr() as usize % 64, 0);
    assert!(r.as_slice().iter().all(|&b| b == 0));
    r.as_mut_slice()[12345] = 7;
    assert_eq!(r.as_slice()[12345], 7);
    drop(r);
    assert!(malloc::zmalloc_socket("bad_align", 64, 3, SOCKET_ID_ANY).is_none());
    let mz = dpdk::Memzone::reserve("test_mz", 4096, SOCKET_ID_ANY, 64).unwrap();
    assert_eq!(mz.len(), 4096);
    let same = dpdk::Memzone::lookup("test_mz").unwrap();
    assert_eq!(same.as_ptr(), mz.as_ptr());
    drop(same);
    drop(mz);
    assert!(dpdk::Memzone::lookup("test_mz").is_err());
}

fn telemetry_and_pdump(_pool: &Mempool) {
    static HITS: AtomicU64 = AtomicU64::new(5);
    telemetry::register_cmd("/kvdtest/stats", "test counters", |_params, d| {
        let _ = d.add_u64("hits", HITS.load(Ordering::Relaxed));
        let _ = d.add_u64("misses", 3);
    })
    .unwrap();
    let dup = telemetry::register_cmd("/kvdtest/stats", "dup", |_, _| {}).unwrap_err();
    assert_eq!(dup.errno, libc::EEXIST);
    let reply = query_telemetry("/kvdtest/stats");
    assert!(
        reply.contains("\"hits\":5") && reply.contains("\"misses\":3"),
        "telemetry reply: {reply}"
    );
    telemetry::register_cmd("/kvdtest/nested", "nested containers", |params, d| {
        let _ = d.add_str("params", params);
        let _ = d.add_dict("inner", |i| {
            let _ = i.add_u64("x", 1);
            let _ = i.add_dict("deeper", |j| {
                let _ = j.add_u64("y", 2);
            });
            let _ = i.add_u64_array("list", &[4, 5]);
        });
        let _ = d.add_str_array("names", &["a", "b"]);
    })
    .unwrap();
    let reply = query_telemetry("/kvdtest/nested,p1");
    assert!(
        reply.contains(r#""params":"p1""#)
            && reply.contains(r#""inner":{"x":1,"deeper":{"y":2},"list":[4,5]}"#)
            && reply.contains(r#""names":["a","b"]"#),
        "telemetry reply: {reply}"
    );
    pdump::init().unwrap();
    pdump::uninit().unwrap();
}

/// Talks to our own telemetry socket (SOCK_SEQPACKET, JSON replies).
fn query_telemetry(cmd: &str) -> String {
    let path = format!(
        "/var/run/dpdk/dpdk-test-{}/dpdk_telemetry.v2",
        std::process::id()
    );
    // SAFETY: plain libc socket calls on a local fd with correctly sized buffers.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as u16;
        for (d, s) in addr.sun_path.iter_mut().zip(path.as_bytes()) {
            *d = *s as libc::c_char;
        }
        let rc = libc::connect(
            fd,
            &addr as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_un>() as u32,
        );
        assert_eq!(rc, 0, "connect {path}");
        let mut buf = vec![0u8; 16384];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len()); // greeting
        assert!(n > 0);
        libc::write(fd, cmd.as_ptr().cast(), cmd.len());
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        assert!(n > 0);
        String::from_utf8_lossy(&buf[..n as usize]).into_owned()
    }
}

/// A named test case.
type Case = (&'static str, fn(&Mempool));

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let eal = Eal::init(&eal_args()).expect("EAL init (no hugepages needed)");
    let pool = Mempool::create_pktmbuf("test_pool", 4095, 0, 2048 + 128, SOCKET_ID_ANY).unwrap();
    let cases: &[Case] = &[
        ("eal_basics", eal_basics),
        ("mbuf_api", mbuf_api),
        ("ring_port_roundtrip", ring_port_roundtrip),
        ("backpressure", backpressure),
        ("launch", launch),
        ("rings", rings),
        ("memory", memory),
        ("telemetry_and_pdump", telemetry_and_pdump),
        ("memif_ring_signals", memif_ring_signals),
    ];
    let mut ran = 0;
    for (name, f) in cases {
        if let Some(flt) = &filter {
            if !name.contains(flt.as_str()) {
                continue;
            }
        }
        print!("test {name} ... ");
        f(&pool);
        println!("ok");
        ran += 1;
    }
    println!("\ntest result: ok. {ran} passed");
    drop(eal);
    let _ = std::fs::remove_file(memif_sock());
    // DPDK 22.11 leaves its runtime dir (sockets, config) behind; remove ours.
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/dpdk-test-{}", std::process::id()));
}
