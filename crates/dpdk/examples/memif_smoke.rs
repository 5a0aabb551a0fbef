//! Two-process memif echo smoke test (the product's default topology).
//!
//! ```text
//! # terminal 1 (server echoes)
//! memif_smoke --role server [--no-huge]
//! # terminal 2 (client sends N frames, counts echoes, reports pps)
//! memif_smoke --role client [--no-huge] --frames 5000000
//! ```
//!
//! Default EAL args (override everything after `--`):
//! server `-l 0 --file-prefix=smoke-s --vdev=net_memif0,role=server,socket=/tmp/kvd-smoke.sock,socket-abstract=no`,
//! client `-l 1 --file-prefix=smoke-c --vdev=net_memif0,role=client,...`;
//! `--no-huge` adds `--no-huge -m 512 --iova-mode=va`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use dpdk::{
    pdump, telemetry, tsc, Eal, Mbuf, MbufBurst, Mempool, Port, PortConfig, RxQueue, TxQueue,
    SOCKET_ID_ANY,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Role {
    Server,
    Client,
}

#[derive(Parser, Debug)]
struct Args {
    /// server (echo) or client (send + count).
    #[arg(long, value_enum)]
    role: Role,
    /// Frames the client sends.
    #[arg(long, default_value_t = 2_000_000)]
    frames: u64,
    /// Frame size in bytes.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Max frames in flight (client).
    #[arg(long, default_value_t = 512)]
    window: u64,
    /// Run without hugepages.
    #[arg(long)]
    no_huge: bool,
    /// memif socket path.
    #[arg(long, default_value = "/tmp/kvd-smoke.sock")]
    sock: String,
    /// Server: exit after this many idle seconds once traffic was seen.
    #[arg(long, default_value_t = 2)]
    idle_exit: u64,
    /// Server: exit after this many seconds in any case.
    #[arg(long, default_value_t = 120)]
    max_secs: u64,
    /// Server: enable `dpdk-dumpcap` capture (rte_pdump_init).
    #[arg(long)]
    pdump: bool,
    /// Explicit EAL arguments (replace the defaults).
    #[arg(last = true)]
    eal: Vec<String>,
}

const BURST: usize = 32;

/// Server counters, exported through telemetry (`/smoke/stats`).
static ECHOED: AtomicU64 = AtomicU64::new(0);

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("memif_smoke: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let eal_args = if args.eal.is_empty() {
        let (core, prefix, role) = match args.role {
            Role::Server => ("0", "smoke-s", "server"),
            Role::Client => ("1", "smoke-c", "client"),
        };
        let mut v = vec![
            "-l".to_string(),
            core.to_string(),
            format!("--file-prefix={prefix}"),
            format!(
                "--vdev=net_memif0,role={role},socket={},socket-abstract=no",
                args.sock
            ),
        ];
        if args.no_huge {
            v.extend(["--no-huge", "-m", "512", "--iova-mode=va"].map(String::from));
        }
        v
    } else {
        args.eal.clone()
    };
    eprintln!("EAL args: {}", eal_args.join(" "));
    // Declared first: dropped last (rte_eal_cleanup after everything else).
    let _eal = Eal::init(&eal_args)?;

    if args.pdump {
        pdump::init()?;
    }
    telemetry::register_cmd("/smoke/stats", "memif_smoke counters", |_, d| {
        let _ = d.add_u64("echoed", ECHOED.load(Ordering::Relaxed));
    })?;
    let pool = Mempool::create_pktmbuf("smoke_pool", 8191, 256, 2048 + 128, SOCKET_ID_ANY)?;
    let port = Port::by_name("net_memif0").or_else(|_| Port::from_id(dpdk::PortId(0)))?;
    let mut q = port.configure(&PortConfig::default(), &pool)?;
    let (mut rxq, mut txq) = (q.rx.remove(0), q.tx.remove(0));
    eprintln!(
        "port {} ({}) mac {:02x?} up; waiting for link",
        port.id().0,
        port.name()?,
        port.mac_addr()?
    );
    let t0 = Instant::now();
    while !port.link()?.up {
        if t0.elapsed() > Duration::from_secs(30) {
            return Err("memif link did not come up in 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("link up after {:?}", t0.elapsed());

    match args.role {
        Role::Server => serve(&args, &port, &pool, &mut rxq, &mut txq)?,
        Role::Client => drive(&args, &port, &pool, &mut rxq, &mut txq)?,
    }
    drop(rxq);
    drop(txq);
    drop(q);
    port.stop()?;
    port.close()?;
    Ok(())
}

/// The server: echoes every frame until the client stopped for `idle_exit` seconds
/// (or `max_secs` passed).
fn serve(
    args: &Args,
    port: &Port,
    pool: &Mempool,
    rxq: &mut RxQueue,
    txq: &mut TxQueue,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut burst = MbufBurst::<BURST>::new();
    let (mut echoed, mut dropped) = (0u64, 0u64);
    let start = Instant::now();
    let mut last_rx = Instant::now();
    let mut seen = false;
    loop {
        let n = rxq.rx_burst(&mut burst);
        if n == 0 {
            if (seen && last_rx.elapsed() > Duration::from_secs(args.idle_exit))
                || start.elapsed() > Duration::from_secs(args.max_secs)
            {
                break;
            }
            continue;
        }
        if !seen {
            seen = true;
        }
        last_rx = Instant::now();
        let (s, d) = txq.tx_burst_or_free(&mut burst);
        echoed += s as u64;
        ECHOED.store(echoed, Ordering::Relaxed);
        dropped += d as u64;
    }
    println!(
        "server: echoed {echoed} dropped {dropped} stats {:?} pool in use {}",
        port.stats()?,
        pool.in_use_count()
    );
    Ok(())
}

/// The client: `frames` frames, at most `window` unanswered, then the echo rate.
fn drive(
    args: &Args,
    port: &Port,
    pool: &Mempool,
    rxq: &mut RxQueue,
    txq: &mut TxQueue,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut tx = MbufBurst::<BURST>::new();
    let mut rx = MbufBurst::<BURST>::new();
    let (mut sent, mut recvd, mut bad) = (0u64, 0u64, 0u64);
    let mut template = vec![0u8; args.size.max(60)];
    template[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    template[6..12].copy_from_slice(&port.mac_addr()?);
    template[12..14].copy_from_slice(&0x88b5u16.to_be_bytes()); // local experimental
    let start = Instant::now();
    let t_start = tsc::now();
    let mut last_progress = Instant::now();
    while recvd < args.frames {
        // Send while the window allows.
        if sent < args.frames && sent - recvd < args.window {
            let want = (args.frames - sent)
                .min(args.window - (sent - recvd))
                .min(BURST as u64) as usize;
            let want = want.min(tx.remaining());
            for _ in 0..want {
                let Some(mut m) = Mbuf::alloc(pool) else {
                    break;
                };
                let d = m.append(template.len()).expect("tailroom");
                d.copy_from_slice(&template);
                d[14..22].copy_from_slice(&(sent + tx.len() as u64).to_le_bytes());
                let _ = tx.push(m);
            }
            sent += txq.tx_burst(&mut tx) as u64; // unsent stay for retry
        }
        let n = rxq.rx_burst(&mut rx);
        if n > 0 {
            last_progress = Instant::now();
            for m in rx.drain() {
                if m.len() != template.len() {
                    bad += 1;
                }
                recvd += 1;
            }
        } else if last_progress.elapsed() > Duration::from_secs(2) {
            eprintln!("client: no echo for 2 s, giving up");
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let ticks = tsc::now() - t_start;
    drop(tx);
    println!(
        "client: sent {sent} received {recvd} lost {} bad {bad} in {secs:.3} s ({} ns by TSC) => {:.3} Mpps echo, size {} B",
        sent - recvd,
        tsc::ticks_to_ns(ticks),
        recvd as f64 / secs / 1e6,
        template.len()
    );
    println!(
        "client: port stats {:?} pool in use {}",
        port.stats()?,
        pool.in_use_count()
    );
    Ok(())
}
