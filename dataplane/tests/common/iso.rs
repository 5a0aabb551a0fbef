//! The noninterference fuzzer's in-process driver (`kviso::Driver`): the dataplane's
//! own `Server` state machine, one burst per exchange, tenants applied as the workers
//! apply them, purges run to the end, the clock skewed at will.

use super::{engine, identity, VecSink, SERVER_IP, SERVER_MAC};
use dataplane::server::{Server, TenantRule, Transport};
use dataplane::stats::WorkerStats;
use kviso::Driver;
use kvops::FunctionRegistry;
use kvwire::MacAddr;
use std::net::Ipv4Addr;
use std::time::{SystemTime, UNIX_EPOCH};

/// Exchanges between the server's maintenance ticks (each a "second" of its coarse
/// clock: the refusal answers' budget comes back).
const EXCHANGES_PER_TICK: u64 = 512;

/// The in-process server.
pub struct InProcess {
    /// The server.
    pub server: Server,
    /// Its counters.
    pub stats: WorkerStats,
    tx: VecSink,
    skew_ms: u64,
    exchanges: u64,
    purge_seq: u64,
    rules: Vec<TenantRule>,
    /// Draws tenants' secrets (xorshift64, seeded: runs repeat).
    seed: u64,
}

impl InProcess {
    /// A server with a `mem`-byte engine, room for many opened QPs that are never
    /// reclaimed for idling (the fuzzer's clients idle as long as they like).
    pub fn new(mem: usize) -> InProcess {
        let t = Transport {
            max_opened: 16_384,
            idle_close_s: 0,
            ..Transport::default()
        };
        let server = Server::with_transport(
            identity(),
            &[],
            engine(mem),
            true,
            FunctionRegistry::new(),
            t,
        )
        .expect("transport");
        InProcess {
            server,
            stats: WorkerStats::default(),
            tx: VecSink::default(),
            skew_ms: 0,
            exchanges: 0,
            purge_seq: 0,
            rules: Vec::new(),
            seed: 0x9E37_79B9_7F4A_7C15,
        }
    }

    /// A fresh 24-byte secret.
    fn secret(&mut self) -> Vec<u8> {
        (0..24)
            .map(|_| {
                self.seed ^= self.seed << 13;
                self.seed ^= self.seed >> 7;
                self.seed ^= self.seed << 17;
                self.seed as u8
            })
            .collect()
    }

    /// Applies the rules as a worker does between bursts.
    fn apply(&mut self) {
        self.server
            .set_tenants(self.rules.clone(), true, &self.stats);
    }
}

impl Driver for InProcess {
    fn server(&self) -> (MacAddr, Ipv4Addr) {
        (SERVER_MAC, SERVER_IP)
    }

    fn exchange(&mut self, frames: &[Vec<u8>], _expect: usize) -> Vec<Vec<u8>> {
        self.exchanges += 1;
        if self.exchanges.is_multiple_of(EXCHANGES_PER_TICK) {
            let now_s = (self.exchanges / EXCHANGES_PER_TICK) as u32;
            self.server.maintain(now_s, &self.stats);
        }
        let views: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        self.tx.recycle();
        self.server.handle_burst(&views, &self.stats, &mut self.tx);
        self.tx.sent.clone()
    }

    fn add_tenant(&mut self, id: u32, acl: u8) -> Result<Vec<u8>, String> {
        let secret = self.secret();
        self.rules.retain(|r| r.id != id);
        self.rules.push(TenantRule {
            id,
            name: format!("t{id}"),
            secret: secret.clone(),
            acl,
            max_connections: 0,
            requests_per_s: 0,
            max_credits: 0,
            reserved_connections: 0,
        });
        self.apply();
        Ok(secret)
    }

    fn rotate_tenant(&mut self, id: u32) -> Result<Vec<u8>, String> {
        let secret = self.secret();
        let r = self
            .rules
            .iter_mut()
            .find(|r| r.id == id)
            .ok_or_else(|| format!("no tenant {id}"))?;
        r.secret = secret.clone();
        self.apply();
        Ok(secret)
    }

    fn remove_tenant(&mut self, id: u32) -> Result<u64, String> {
        self.rules.retain(|r| r.id != id);
        self.apply();
        self.purge_seq += 1;
        self.server.request_purges(&[(self.purge_seq, id)]);
        loop {
            if let Some(d) = self.server.purge_step(&self.stats) {
                return Ok(d.deleted);
            }
        }
    }

    fn skew_clock(&mut self, ms: u64) -> bool {
        self.server.skew_clock_ms(ms);
        self.skew_ms += ms;
        true
    }

    fn now_ms(&self) -> u64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        wall + self.skew_ms
    }
}
