//! The fuzzer's clients: tenants (an id, a secret, an ACL) and clients without a
//! tenant, each at its own source address, each holding opened QPs it OPENs, uses,
//! RESUMEs and CLOSEs with frames built here from kvwire alone (what a client written
//! from docs/PROTOCOL.md sends).

use kvwire::frame::FrameParams;
use kvwire::payload::write_tx;
use kvwire::payload::Condition;
use kvwire::tenant;
use kvwire::transport::{
    emit_join, signed_open, slot_va, Accept, Connect, Join, CM_QPN, MAX_JOIN_FRAME_LEN,
};
use kvwire::{
    emit_request_headers, finalize, request_frame_len, BatchWriter, KvOp, MacAddr,
    REQUEST_HEADER_LEN,
};
use std::net::Ipv4Addr;

/// Who a client is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// A tenant's client.
    Tenant {
        /// The tenant id.
        id: u32,
        /// Its secret (changes when rotated).
        secret: Vec<u8>,
        /// Its ACL (`kvwire::tenant` bits).
        acl: u8,
    },
    /// A client without a tenant (keys outside the tenant range, every op).
    Anonymous,
}

impl Identity {
    /// The tenant id (0: none).
    pub fn tenant(&self) -> u32 {
        match self {
            Identity::Tenant { id, .. } => *id,
            Identity::Anonymous => 0,
        }
    }

    /// The ACL the server applies.
    pub fn acl(&self) -> u8 {
        match self {
            Identity::Tenant { acl, .. } => *acl,
            Identity::Anonymous => tenant::ALL,
        }
    }
}

/// One opened QP of a client, as its ACCEPT named it.
#[derive(Clone, Copy, Debug)]
pub struct Qp {
    /// The QPN.
    pub qpn: u32,
    /// Its R_Key.
    pub rkey: u32,
    /// The connection secret (unsealed).
    pub secret: u64,
    /// The OPEN's nonce: the incarnation's.
    pub nonce: u64,
    /// The ACCEPT.
    pub accept: Accept,
    /// Requests sent so far (the next one's PSN is the ACCEPT's plus this).
    pub sent: u32,
}

impl Qp {
    /// The PSN of request `n`.
    pub fn psn(&self, n: u32) -> u32 {
        kvwire::psn::add(self.accept.request_psn, n)
    }

    /// The slot VA of request `n`.
    pub fn va(&self, n: u32) -> u64 {
        let a = &self.accept;
        slot_va(a.region_va, u64::from(a.slot_size), a.credits, self.psn(n))
    }
}

/// A client of the fuzzer.
#[derive(Clone, Debug)]
pub struct Actor {
    /// Who it is.
    pub who: Identity,
    /// Its source MAC.
    pub mac: MacAddr,
    /// Its source IPv4 address.
    pub ip: Ipv4Addr,
    /// Its opened QPs.
    pub qps: Vec<Qp>,
    /// The last OPEN frame it sent (to replay it).
    pub last_open: Option<(u64, Vec<u8>)>,
}

/// Builds a request frame: `payload` as request `n` of QP (`qpn`, `rkey`, its slot
/// at `va`, PSN `psn`), from `params`.
pub fn request_frame(
    params: &FrameParams,
    qpn: u32,
    rkey: u32,
    psn: u32,
    va: u64,
    payload: &[u8],
) -> Vec<u8> {
    let mut buf = vec![0u8; request_frame_len(payload.len())];
    // The buffer is the frame's exact length: the emitters cannot fail.
    if emit_request_headers(&mut buf, params, qpn, psn, va, rkey, payload.len()).is_err() {
        return Vec::new();
    }
    buf[REQUEST_HEADER_LEN..REQUEST_HEADER_LEN + payload.len()].copy_from_slice(payload);
    match finalize(&mut buf) {
        Ok(n) => {
            buf.truncate(n);
            buf
        }
        Err(_) => Vec::new(),
    }
}

/// A KV batch payload of `ops` (batch id `id`); `None` when it does not fit a frame.
pub fn batch_payload(id: u32, ops: &[KvOp<'_>]) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 1400];
    let mut w = BatchWriter::new(&mut buf, id).ok()?;
    for op in ops {
        w.push(op).ok()?;
    }
    let n = w.finish();
    buf.truncate(n);
    Some(buf)
}

/// A transaction payload.
pub fn tx_payload(id: u32, conds: &[Condition<'_>], ops: &[KvOp<'_>]) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 1400];
    let n = write_tx(&mut buf, id, conds, ops).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// A connection frame (`join` with `connect`'s fields) to `qpn` from `params`.
pub fn join_frame(params: &FrameParams, qpn: u32, connect: &Connect, join: &Join) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_JOIN_FRAME_LEN];
    match emit_join(&mut buf, params, qpn, connect, join) {
        Ok(n) => {
            buf.truncate(n);
            buf
        }
        Err(_) => Vec::new(),
    }
}

impl Actor {
    /// A client `who` at `mac`/`ip`.
    pub fn new(who: Identity, mac: MacAddr, ip: Ipv4Addr) -> Actor {
        Actor {
            who,
            mac,
            ip,
            qps: Vec::new(),
            last_open: None,
        }
    }

    /// Its frames' addresses, to a server at `server`.
    pub fn params(&self, server: (MacAddr, Ipv4Addr)) -> FrameParams {
        FrameParams::new(self.mac, server.0, self.ip, server.1, 0xC000)
    }

    /// Its key `k` (as sent on the wire: a tenant's in its namespace; a client
    /// without a tenant's with a zero byte first, outside every namespace).
    pub fn key(&self, k: u8) -> Vec<u8> {
        match self.who.tenant() {
            0 => vec![0, b'a', k],
            t => tenant::prefixed(t, &[b'k', k]),
        }
    }

    /// An OPEN (with its credential for a tenant) at wall-clock time `ms`.
    pub fn open_frame(&self, server: (MacAddr, Ipv4Addr), nonce: u64, ms: u64) -> Vec<u8> {
        let join = match &self.who {
            Identity::Tenant { id, secret, .. } => {
                signed_open(0, nonce, *id, ms, secret, &self.mac, self.ip)
            }
            Identity::Anonymous => Join::Open {
                partition: 0,
                tenant: None,
            },
        };
        join_frame(
            &self.params(server),
            CM_QPN,
            &Connect { rkey: 0, nonce },
            &join,
        )
    }

    /// Takes the QP an ACCEPT for OPEN `nonce` names.
    pub fn take_accept(&mut self, nonce: u64, a: &Accept) -> Option<Qp> {
        let o = a.opened?;
        let secret = match &self.who {
            Identity::Tenant { secret, .. } => o.unsealed(nonce, secret),
            Identity::Anonymous => o.secret,
        };
        let q = Qp {
            qpn: o.qpn,
            rkey: o.rkey,
            secret,
            nonce,
            accept: *a,
            sent: 0,
        };
        self.qps.push(q);
        Some(q)
    }

    /// A CLOSE of `q` with the proof of its secret.
    pub fn close_frame(&self, server: (MacAddr, Ipv4Addr), q: &Qp) -> Vec<u8> {
        let c = Connect {
            rkey: q.rkey,
            nonce: q.nonce,
        };
        let proof = c.close_proof(q.secret);
        join_frame(&self.params(server), q.qpn, &c, &Join::Close { proof })
    }

    /// A RESUME of `q` at its next request, with the proof of its secret.
    pub fn resume_frame(&self, server: (MacAddr, Ipv4Addr), q: &Qp) -> Vec<u8> {
        let c = Connect {
            rkey: q.rkey,
            nonce: q.nonce,
        };
        let next_psn = q.psn(q.sent);
        let proof = Some(c.resume_proof(next_psn, q.secret));
        join_frame(
            &self.params(server),
            q.qpn,
            &c,
            &Join::Resume { next_psn, proof },
        )
    }
}
