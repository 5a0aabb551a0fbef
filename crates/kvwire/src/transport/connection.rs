//! The payloads of connection management (docs/PROTOCOL.md §6.1): what a client sends
//! in an RC SEND (CONNECT, RESUME, OPEN, CLOSE) and what the server answers (ACCEPT).
//!
//! Two kinds of client QP exist:
//!
//! * **static** QPs, admitted by the operator (`clients[]` in the config, QPNs below
//!   [`OPENED_QPN_BASE`]): a client CONNECTs on its QPN with the admitted R_Key;
//! * **opened** QPs, allocated by the server: a client sends an OPEN to the connection
//!   manager's QP ([`CM_QPN`]) and the ACCEPT names a fresh QPN (at or above
//!   [`OPENED_QPN_BASE`]), its R_Key and a connection secret (sealed under a tenant's
//!   secret for a tenant's OPEN). Only the holder of the secret can RESUME or CLOSE
//!   that QP — they carry a proof of it, never the secret — and nothing can take it
//!   over.

use crate::frame::{EXT_OFF, RESPONSE_HEADER_LEN};
use crate::ib;
use crate::icrc::ICRC_LEN;

/// First byte of connection payloads (`'C'`; a response batch starts with `'R'`).
pub const CONNECT_MAGIC: u8 = 0x43;
/// Protocol version carried by connection payloads.
pub const PROTOCOL_VERSION: u8 = 2;
/// CONNECT payload length (OPEN has the same length).
pub const CONNECT_LEN: usize = 16;
/// ACCEPT payload length (the answer to CONNECT and RESUME).
pub const ACCEPT_LEN: usize = 40;
/// ACCEPT payload length of the answer to an OPEN: the ACCEPT and the opened QP.
pub const OPENED_ACCEPT_LEN: usize = ACCEPT_LEN + 16;
/// Kind byte of a CONNECT.
pub const KIND_CONNECT: u8 = 1;
/// Kind byte of an ACCEPT.
pub const KIND_ACCEPT: u8 = 2;
/// Kind byte of a RESUME (a CONNECT that continues an incarnation on another node).
pub const KIND_RESUME: u8 = 3;
/// Kind byte of an OPEN (a new connection on a QP the server allocates).
pub const KIND_OPEN: u8 = 4;
/// Kind byte of a CLOSE (the end of an opened QP's connection).
pub const KIND_CLOSE: u8 = 5;
/// RESUME payload length: a CONNECT's 16 bytes and the next request PSN.
pub const RESUME_LEN: usize = CONNECT_LEN + 4;
/// RESUME payload length on an opened QP: a RESUME and the proof of the connection
/// secret.
pub const SECRET_RESUME_LEN: usize = RESUME_LEN + 8;
/// CLOSE payload length: a CONNECT's 16 bytes and the proof of the connection secret.
pub const CLOSE_LEN: usize = CONNECT_LEN + 8;
/// OPEN payload length with a tenant credential: the OPEN's 16 bytes, the tenant id
/// (4), the client's time (8) and the proof (32).
pub const TENANT_OPEN_LEN: usize = CONNECT_LEN + 12 + crate::tenant::PROOF_LEN;
/// The longest connection payload a client sends.
pub const MAX_JOIN_LEN: usize = TENANT_OPEN_LEN;
/// ACCEPT flag (byte 3): the incarnation was resumed (answer to a RESUME).
pub const ACCEPT_RESUMED: u8 = 0x01;
/// ACCEPT flag (byte 3): a QP was opened (answer to an OPEN; 16 more bytes follow).
pub const ACCEPT_OPENED: u8 = 0x02;
/// ACCEPT flag (byte 3): the opened QP's connection secret is sealed under the
/// tenant's secret (answer to a tenant's OPEN; `crate::tenant::seal_pad`).
pub const ACCEPT_SEALED: u8 = 0x04;
/// The connection manager's QP: OPENs are sent to it (as RDMA CM's requests go to
/// the GSI, QP 1). No client QP has this number.
pub const CM_QPN: u32 = 1;
/// Opened QPs have QPNs from here up to 2^24 − 1; static QPs are below it.
pub const OPENED_QPN_BASE: u32 = 1 << 23;
/// Default request window (credits) per client QP.
pub const DEFAULT_CREDITS: u16 = 32;
/// Largest request window a server accepts in its configuration.
pub const MAX_CREDITS: u16 = 1024;
/// Length of a CONNECT frame (and of an OPEN frame).
pub const CONNECT_FRAME_LEN: usize = EXT_OFF + CONNECT_LEN + ICRC_LEN;
/// Length of a RESUME frame.
pub const RESUME_FRAME_LEN: usize = EXT_OFF + RESUME_LEN + ICRC_LEN;
/// Length of the longest frame a client sends to manage its connection.
pub const MAX_JOIN_FRAME_LEN: usize = EXT_OFF + MAX_JOIN_LEN + ICRC_LEN;
/// Length of an ACCEPT frame.
pub const ACCEPT_FRAME_LEN: usize = RESPONSE_HEADER_LEN + ACCEPT_LEN + ICRC_LEN;
/// Length of an ACCEPT frame answering an OPEN.
pub const OPENED_ACCEPT_FRAME_LEN: usize = RESPONSE_HEADER_LEN + OPENED_ACCEPT_LEN + ICRC_LEN;
/// Length of an RC Acknowledge frame.
pub const ACK_FRAME_LEN: usize = EXT_OFF + ib::AETH_LEN + ICRC_LEN;

/// Whether `qpn` is in the range of QPs the server opens.
#[inline]
pub const fn is_opened_qpn(qpn: u32) -> bool {
    qpn >= OPENED_QPN_BASE && qpn <= ib::MASK_24
}

/// The fields every connection payload starts with: the QP's R_Key and the
/// incarnation's nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// The QP's R_Key (an OPEN carries its partition here instead: [`Join::Open`]).
    pub rkey: u32,
    /// Incarnation nonce: for a CONNECT larger than any earlier incarnation's on the
    /// QP (clients use the wall clock in ns); for an OPEN a random number.
    pub nonce: u64,
}

/// What a connection payload asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// CONNECT: a new incarnation of a static QP (or the same ACCEPT again).
    Connect,
    /// RESUME: the incarnation goes on at request PSN `next_psn`; on an opened QP
    /// `proof` must prove its connection secret ([`Connect::resume_proof`]).
    Resume {
        /// The client's oldest unanswered request PSN (or its next one).
        next_psn: u32,
        /// The proof of the connection secret (28-byte RESUME), `None` in a 20-byte
        /// one. The secret itself never travels after the ACCEPT.
        proof: Option<u64>,
    },
    /// OPEN (sent to [`CM_QPN`]): a new connection on a QP the server allocates in
    /// key partition `partition`, for a tenant or for none.
    Open {
        /// The key partition whose worker serves the QP (`qpn % n == partition`).
        partition: u16,
        /// The tenant credential (60-byte OPEN), `None` in a 16-byte one.
        tenant: Option<TenantCredential>,
    },
    /// CLOSE: the opened QP's connection ends and its QPN is freed.
    Close {
        /// The proof of the connection secret ([`Connect::close_proof`]).
        proof: u64,
    },
}

/// A tenant's credential in an OPEN (docs/PROTOCOL.md §6.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantCredential {
    /// The tenant id (`1..2^24`).
    pub id: u32,
    /// The client's wall-clock time, ms since the Unix epoch.
    pub time_ms: u64,
    /// HMAC-SHA256 with the tenant's secret over the payload's bytes 0–27 and the
    /// sender's MAC and IPv4 address (`crate::tenant::open_proof`).
    pub proof: [u8; crate::tenant::PROOF_LEN],
}

/// The first 28 bytes of a tenant OPEN's payload: what its proof covers (with the
/// sender's addresses).
pub fn open_fields(partition: u16, nonce: u64, tenant: u32, time_ms: u64) -> [u8; 28] {
    let mut f = [0u8; 28];
    let c = Connect { rkey: 0, nonce };
    let head: &mut [u8; CONNECT_LEN] = (&mut f[..CONNECT_LEN]).try_into().expect("16 bytes");
    c.encode_head(KIND_OPEN, u32::from(partition) << 16, head);
    f[16..20].copy_from_slice(&tenant.to_be_bytes());
    f[20..28].copy_from_slice(&time_ms.to_be_bytes());
    f
}

/// A tenant's OPEN, proved with `secret` for the sender `mac`/`ip`.
pub fn signed_open(
    partition: u16,
    nonce: u64,
    tenant: u32,
    time_ms: u64,
    secret: &[u8],
    mac: &crate::MacAddr,
    ip: core::net::Ipv4Addr,
) -> Join {
    let fields = open_fields(partition, nonce, tenant, time_ms);
    let proof = crate::tenant::open_proof(secret, &fields, mac, ip);
    Join::Open {
        partition,
        tenant: Some(TenantCredential {
            id: tenant,
            time_ms,
            proof,
        }),
    }
}

impl Connect {
    /// Writes the 16-byte CONNECT payload.
    pub fn encode(&self, out: &mut [u8; CONNECT_LEN]) {
        self.encode_head(KIND_CONNECT, self.rkey, out);
    }

    fn encode_head(&self, kind: u8, word: u32, out: &mut [u8; CONNECT_LEN]) {
        out[0] = CONNECT_MAGIC;
        out[1] = PROTOCOL_VERSION;
        out[2] = kind;
        out[3] = 0;
        out[4..8].copy_from_slice(&word.to_be_bytes());
        out[8..16].copy_from_slice(&self.nonce.to_be_bytes());
    }

    /// The proof of connection secret `secret` a RESUME of this incarnation at
    /// `next_psn` carries (its bytes 20–27): the first 8 bytes, big-endian, of
    /// HMAC-SHA256 keyed with the secret (8 bytes, BE) over the RESUME's bytes 0–19.
    pub fn resume_proof(&self, next_psn: u32, secret: u64) -> u64 {
        let mut buf = [0u8; MAX_JOIN_LEN];
        let n = self.encode_join(
            &Join::Resume {
                next_psn,
                proof: None,
            },
            &mut buf,
        );
        secret_proof(secret, &buf[..n])
    }

    /// The proof of connection secret `secret` a CLOSE of this incarnation carries
    /// (its bytes 16–23): as [`Connect::resume_proof`], over the CLOSE's bytes 0–15.
    pub fn close_proof(&self, secret: u64) -> u64 {
        let mut head = [0u8; CONNECT_LEN];
        self.encode_head(KIND_CLOSE, self.rkey, &mut head);
        secret_proof(secret, &head)
    }

    /// Reads a CONNECT payload (exactly [`CONNECT_LEN`] bytes).
    pub fn decode(p: &[u8]) -> Option<Connect> {
        let p: &[u8; CONNECT_LEN] = p.try_into().ok()?;
        Self::decode_kind(p, KIND_CONNECT)
    }

    /// Writes the 20-byte RESUME payload: this incarnation (`rkey`, `nonce`) goes on
    /// at request PSN `next_psn` (the client's oldest unanswered request, or its next
    /// one when none is unanswered).
    pub fn encode_resume(&self, next_psn: u32, out: &mut [u8; RESUME_LEN]) {
        let mut buf = [0u8; MAX_JOIN_LEN];
        let proof = None;
        let n = self.encode_join(&Join::Resume { next_psn, proof }, &mut buf);
        out.copy_from_slice(&buf[..n]);
    }

    /// Writes the payload of `join` with these fields into `out`; returns its length.
    pub fn encode_join(&self, join: &Join, out: &mut [u8; MAX_JOIN_LEN]) -> usize {
        let (head, tail) = out.split_at_mut(CONNECT_LEN);
        let head: &mut [u8; CONNECT_LEN] = head.try_into().expect("16 bytes");
        match *join {
            Join::Connect => {
                self.encode_head(KIND_CONNECT, self.rkey, head);
                CONNECT_LEN
            }
            Join::Resume { next_psn, proof } => {
                self.encode_head(KIND_RESUME, self.rkey, head);
                tail[..4].copy_from_slice(&(next_psn & ib::MASK_24).to_be_bytes());
                match proof {
                    Some(s) => {
                        tail[4..12].copy_from_slice(&s.to_be_bytes());
                        SECRET_RESUME_LEN
                    }
                    None => RESUME_LEN,
                }
            }
            Join::Open { partition, tenant } => {
                self.encode_head(KIND_OPEN, u32::from(partition) << 16, head);
                match tenant {
                    Some(t) => {
                        tail[..4].copy_from_slice(&t.id.to_be_bytes());
                        tail[4..12].copy_from_slice(&t.time_ms.to_be_bytes());
                        tail[12..44].copy_from_slice(&t.proof);
                        TENANT_OPEN_LEN
                    }
                    None => CONNECT_LEN,
                }
            }
            Join::Close { proof } => {
                self.encode_head(KIND_CLOSE, self.rkey, head);
                tail[..8].copy_from_slice(&proof.to_be_bytes());
                CLOSE_LEN
            }
        }
    }

    /// Reads any connection payload a client sends: CONNECT or OPEN (16 bytes; an
    /// OPEN 60 with a tenant credential), RESUME (20, or 28 with the secret), CLOSE
    /// (24). `None` for anything else, including a reserved byte that is not 0, a
    /// next PSN beyond 24 bits and a tenant id of 0 or beyond 24 bits.
    pub fn decode_any(p: &[u8]) -> Option<(Connect, Join)> {
        let head: &[u8; CONNECT_LEN] = p.get(..CONNECT_LEN)?.try_into().ok()?;
        let tail = &p[CONNECT_LEN..];
        let be32 = |o: usize| u32::from_be_bytes([tail[o], tail[o + 1], tail[o + 2], tail[o + 3]]);
        let be64 = |o: usize| (u64::from(be32(o)) << 32) | u64::from(be32(o + 4));
        let kind = head[2];
        let c = Self::decode_kind(head, kind)?;
        let join = match (kind, p.len()) {
            (KIND_CONNECT, CONNECT_LEN) => Join::Connect,
            (KIND_RESUME, RESUME_LEN | SECRET_RESUME_LEN) => {
                let next_psn = be32(0);
                if next_psn > ib::MASK_24 {
                    return None;
                }
                let proof = (p.len() == SECRET_RESUME_LEN).then(|| be64(4));
                Join::Resume { next_psn, proof }
            }
            (KIND_OPEN, CONNECT_LEN | TENANT_OPEN_LEN) => {
                // Bytes 4–5 the partition, 6–7 reserved.
                if c.rkey & 0xffff != 0 {
                    return None;
                }
                let partition = (c.rkey >> 16) as u16;
                let tenant = if p.len() == TENANT_OPEN_LEN {
                    let id = be32(0);
                    if id == 0 || id > crate::tenant::MAX_TENANT_ID {
                        return None;
                    }
                    let mut proof = [0u8; crate::tenant::PROOF_LEN];
                    proof.copy_from_slice(&tail[12..44]);
                    Some(TenantCredential {
                        id,
                        time_ms: be64(4),
                        proof,
                    })
                } else {
                    None
                };
                return Some((Connect { rkey: 0, ..c }, Join::Open { partition, tenant }));
            }
            (KIND_CLOSE, CLOSE_LEN) => Join::Close { proof: be64(0) },
            _ => return None,
        };
        Some((c, join))
    }

    fn decode_kind(p: &[u8; CONNECT_LEN], kind: u8) -> Option<Connect> {
        if p[0] != CONNECT_MAGIC || p[1] != PROTOCOL_VERSION || p[2] != kind || p[3] != 0 {
            return None;
        }
        Some(Connect {
            rkey: u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
            nonce: u64::from_be_bytes([p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15]]),
        })
    }
}

/// The first 8 bytes (BE) of HMAC-SHA256 keyed with `secret` (its 8 BE bytes) over
/// `message`: what a RESUME or CLOSE carries instead of the secret.
fn secret_proof(secret: u64, message: &[u8]) -> u64 {
    let mac = crate::tenant::hmac_sha256(&secret.to_be_bytes(), &[message]);
    u64::from_be_bytes([
        mac[0], mac[1], mac[2], mac[3], mac[4], mac[5], mac[6], mac[7],
    ])
}

/// The QP an OPEN created, as its ACCEPT names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// The QPN the server allocated (at or above [`OPENED_QPN_BASE`]).
    pub qpn: u32,
    /// The R_Key its requests carry.
    pub rkey: u32,
    /// The connection secret (what a RESUME's or CLOSE's proof is keyed with); sealed
    /// under the tenant's secret when `sealed` ([`Opened::unsealed`]).
    pub secret: u64,
    /// The secret is sealed ([`ACCEPT_SEALED`]: a tenant's OPEN): only the tenant's
    /// secret opens it.
    pub sealed: bool,
}

impl Opened {
    /// The connection secret: `secret` itself, or unsealed with the tenant secret
    /// `tenant_secret` the OPEN `nonce` was proved with.
    pub fn unsealed(&self, nonce: u64, tenant_secret: &[u8]) -> u64 {
        if self.sealed {
            self.secret ^ crate::tenant::seal_pad(tenant_secret, nonce, self.qpn)
        } else {
            self.secret
        }
    }
}

/// The server's answer to a CONNECT, RESUME or OPEN: the agreed starting PSNs and
/// the window (and for an OPEN, the QP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accept {
    /// The CONNECT's nonce, echoed.
    pub nonce: u64,
    /// Request window `W` (a power of two).
    pub credits: u16,
    /// PSN of the client's first request.
    pub request_psn: u32,
    /// PSN of the server's first response.
    pub response_psn: u32,
    /// Bytes per request slot.
    pub slot_size: u32,
    /// Start of the request ring (slot 0).
    pub region_va: u64,
    /// The answer to a RESUME that continued the incarnation ([`ACCEPT_RESUMED`]):
    /// `request_psn` is the RESUME's next PSN and unanswered requests are resent.
    /// `false` for a CONNECT, and for a RESUME the node could not continue (a new
    /// incarnation began: unanswered requests have an unknown outcome).
    pub resumed: bool,
    /// The answer to an OPEN ([`ACCEPT_OPENED`]): the QP the server allocated.
    pub opened: Option<Opened>,
}

impl Accept {
    /// The payload length: [`ACCEPT_LEN`], or [`OPENED_ACCEPT_LEN`] for an OPEN's.
    pub const fn payload_len(&self) -> usize {
        if self.opened.is_some() {
            OPENED_ACCEPT_LEN
        } else {
            ACCEPT_LEN
        }
    }

    /// Writes the payload ([`Accept::payload_len`] bytes) into `out`; returns its length.
    pub fn encode_into(&self, out: &mut [u8; OPENED_ACCEPT_LEN]) -> usize {
        out.fill(0);
        out[0] = CONNECT_MAGIC;
        out[1] = PROTOCOL_VERSION;
        out[2] = KIND_ACCEPT;
        out[3] = if self.resumed { ACCEPT_RESUMED } else { 0 };
        out[4..6].copy_from_slice(&self.credits.to_be_bytes());
        out[8..16].copy_from_slice(&self.nonce.to_be_bytes());
        out[16..20].copy_from_slice(&(self.request_psn & ib::MASK_24).to_be_bytes());
        out[20..24].copy_from_slice(&(self.response_psn & ib::MASK_24).to_be_bytes());
        out[24..28].copy_from_slice(&self.slot_size.to_be_bytes());
        out[32..40].copy_from_slice(&self.region_va.to_be_bytes());
        if let Some(o) = self.opened {
            out[3] |= ACCEPT_OPENED;
            if o.sealed {
                out[3] |= ACCEPT_SEALED;
            }
            out[40..44].copy_from_slice(&(o.qpn & ib::MASK_24).to_be_bytes());
            out[44..48].copy_from_slice(&o.rkey.to_be_bytes());
            out[48..56].copy_from_slice(&o.secret.to_be_bytes());
        }
        self.payload_len()
    }

    /// Writes the 40-byte payload of an ACCEPT that opened no QP.
    pub fn encode(&self, out: &mut [u8; ACCEPT_LEN]) {
        let mut buf = [0u8; OPENED_ACCEPT_LEN];
        self.encode_into(&mut buf);
        out.copy_from_slice(&buf[..ACCEPT_LEN]);
    }

    /// Reads an ACCEPT payload (at least [`ACCEPT_LEN`] bytes, [`OPENED_ACCEPT_LEN`]
    /// with the opened flag; more are ignored).
    pub fn decode(p: &[u8]) -> Option<Accept> {
        let head = p.get(..ACCEPT_LEN)?;
        if head[0] != CONNECT_MAGIC || head[1] != PROTOCOL_VERSION || head[2] != KIND_ACCEPT {
            return None;
        }
        let be32 = |o: usize| u32::from_be_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]]);
        let be64 = |o: usize| (u64::from(be32(o)) << 32) | u64::from(be32(o + 4));
        let opened = if head[3] & ACCEPT_OPENED != 0 {
            p.get(..OPENED_ACCEPT_LEN)?;
            Some(Opened {
                qpn: be32(40) & ib::MASK_24,
                rkey: be32(44),
                secret: be64(48),
                sealed: head[3] & ACCEPT_SEALED != 0,
            })
        } else {
            None
        };
        Some(Accept {
            nonce: be64(8),
            credits: u16::from_be_bytes([p[4], p[5]]),
            request_psn: be32(16) & ib::MASK_24,
            response_psn: be32(20) & ib::MASK_24,
            slot_size: be32(24),
            region_va: be64(32),
            resumed: head[3] & ACCEPT_RESUMED != 0,
            opened,
        })
    }
}
