//! Control messages of the replication link: payloads of RC SEND Only frames
//! (opcode 0x04, BTH PSN 0, outside the segment PSN sequence), framed by
//! `kvwire::repl::emit_send`.
//!
//! Every message starts with a 4-byte header — magic `0x70` ('p'), version
//! 1, kind, reserved 0 — followed by its fixed body; all integers are
//! little-endian. Receivers ignore bytes after the body (room for later
//! fields) and drop anything shorter.
//!
//! | kind | message | direction | body |
//! |---|---|---|---|
//! | 1 | [`Hello`] | replica → master | 64 B |
//! | 2 | [`Welcome`] | master → replica (mode 4: a chain node redirecting a replica) | 48 B |
//! | 3 | [`Progress`] | replica → master | 40 B |
//! | 4 | [`Probe`] | master → replica | 24 B |
//! | 5 | [`ProbeReply`] | replica → master | 56 B |
//!
//! Loss is handled by repetition, not by the transport: a replica resends
//! HELLO until a WELCOME with its nonce arrives, PROGRESS goes out every
//! `ack_interval_ms`, PROBE every `probe_interval_ms`.

use core::net::Ipv4Addr;

/// First byte of a control message.
pub const CONTROL_MAGIC: u8 = 0x70;
/// Control message version.
pub const CONTROL_VERSION: u8 = 1;
/// Length of the control header.
pub const CONTROL_HEADER_LEN: usize = 4;
/// Longest encoded control message.
pub const MAX_CONTROL_LEN: usize = CONTROL_HEADER_LEN + 64;

/// A replica's request to (re)join: who it is, where its data stands, and
/// its receive ring (it is the responder of the segment stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The replica's node id (config).
    pub node_id: u64,
    /// The replication id its data follows (0: none, full sync needed).
    pub repl_id: u64,
    /// The live offset its data reached (a record boundary).
    pub offset: u64,
    /// The highest epoch it has seen.
    pub epoch: u64,
    /// Names this connection attempt; larger than any earlier one's.
    pub nonce: u64,
    /// Start of its receive ring (RETH VA of slot 0).
    pub region_va: u64,
    /// Its R_Key.
    pub rkey: u32,
    /// Bytes per ring slot (the largest segment payload it takes).
    pub slot_size: u32,
    /// Slots in its ring (the window), a power of two.
    pub credits: u16,
    /// PSN it expects first (24 bits).
    pub first_psn: u32,
}

/// How the master answers a HELLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WelcomeMode {
    /// The live stream continues from the replica's offset.
    Partial = 1,
    /// The replica clears its data; a full sync follows.
    Full = 2,
    /// Refused: this node is not a master at the replica's epoch (or not a
    /// master at all). The replica looks for the master elsewhere.
    Refused = 3,
    /// A chain node that already streams to a live successor: the replica is
    /// to join the chain behind that successor, whose link address the
    /// WELCOME carries ([`Welcome::redirect`]). Followed hop by hop, it ends
    /// at the tail, so a returning node is appended there instead of forking
    /// the chain.
    Redirect = 4,
}

/// The master's answer to a HELLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The HELLO's nonce, echoed.
    pub nonce: u64,
    /// What follows.
    pub mode: WelcomeMode,
    /// The master's replication id.
    pub repl_id: u64,
    /// The master's epoch.
    pub epoch: u64,
    /// Partial: the live offset the stream continues from (the replica's).
    /// Full: the live offset the stream continues from after the sync when
    /// the scan session already started, else 0 (informational: the
    /// segments' `live_offset` is authoritative).
    pub offset: u64,
    /// The PSN of the first segment (the HELLO's `first_psn`).
    pub first_psn: u32,
    /// The master's node id.
    pub node_id: u64,
}

impl Welcome {
    /// A REDIRECT answering the HELLO `nonce`: join behind the node at `mac` /
    /// `ip`. The address travels in the fields a REDIRECT has no use for: the
    /// MAC in the low 48 bits of `repl_id` (big-endian byte order), the IPv4
    /// address in the low 32 bits of `offset`.
    pub fn redirect(nonce: u64, epoch: u64, node_id: u64, mac: [u8; 6], ip: Ipv4Addr) -> Self {
        let mut m = [0u8; 8];
        m[2..].copy_from_slice(&mac);
        Welcome {
            nonce,
            mode: WelcomeMode::Redirect,
            repl_id: u64::from_be_bytes(m),
            epoch,
            offset: u64::from(u32::from(ip)),
            first_psn: 0,
            node_id,
        }
    }

    /// The link address a REDIRECT names (`None` for other modes).
    pub fn redirect_to(&self) -> Option<([u8; 6], Ipv4Addr)> {
        if self.mode != WelcomeMode::Redirect {
            return None;
        }
        let b = self.repl_id.to_be_bytes();
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&b[2..]);
        Some((mac, Ipv4Addr::from(self.offset as u32)))
    }
}

/// A replica's state as it reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ReplicaReport {
    /// Waiting for a WELCOME.
    Connecting = 1,
    /// Receiving a full sync.
    FullSync = 2,
    /// Applying the live stream.
    Streaming = 3,
}

/// A replica's periodic report of what it applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The nonce of the HELLO its connection was set up with.
    pub nonce: u64,
    /// The replication id it follows.
    pub repl_id: u64,
    /// Its epoch.
    pub epoch: u64,
    /// Live offset applied (a record boundary; meaningful when streaming).
    pub applied: u64,
    /// Scan-stream offset applied (meaningful during a full sync).
    pub sync_applied: u64,
    /// Its state.
    pub state: ReplicaReport,
}

/// The master's liveness probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Probe sequence number.
    pub seq: u64,
    /// The master's clock when sent (echoed back, for round-trip times).
    pub sent_ns: u64,
    /// The master's epoch.
    pub epoch: u64,
}

/// A replica's answer to a probe; also counts as progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeReply {
    /// The probe's sequence number.
    pub seq: u64,
    /// The probe's `sent_ns`, echoed.
    pub sent_ns: u64,
    /// As in [`Progress`].
    pub progress: Progress,
}

/// A decoded control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Kind 1.
    Hello(Hello),
    /// Kind 2.
    Welcome(Welcome),
    /// Kind 3.
    Progress(Progress),
    /// Kind 4.
    Probe(Probe),
    /// Kind 5.
    ProbeReply(ProbeReply),
}

/// Why a control payload was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlError {
    /// Wrong magic, version or reserved byte.
    BadHeader,
    /// Unknown kind.
    BadKind(u8),
    /// Shorter than its kind's body.
    Truncated,
    /// A field out of range (mode, state, credits not a power of two, PSN
    /// beyond 24 bits).
    BadField,
    /// The output buffer is too short.
    BufferTooSmall,
}

impl core::fmt::Display for ControlError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for ControlError {}

/// Little-endian field writer over a fixed body.
struct W<'a> {
    b: &'a mut [u8],
    at: usize,
}

impl W<'_> {
    fn u64(&mut self, v: u64) -> &mut Self {
        self.put(&v.to_le_bytes())
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.put(&v.to_le_bytes())
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.put(&v.to_le_bytes())
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.put(&[v])
    }
    fn put(&mut self, s: &[u8]) -> &mut Self {
        self.b[self.at..self.at + s.len()].copy_from_slice(s);
        self.at += s.len();
        self
    }
}

/// Little-endian field reader over a body already checked for length.
struct R<'a> {
    b: &'a [u8],
    at: usize,
}

impl R<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut o = [0u8; N];
        o.copy_from_slice(&self.b[self.at..self.at + N]);
        self.at += N;
        o
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
}

impl Control {
    fn kind(&self) -> u8 {
        match self {
            Self::Hello(_) => 1,
            Self::Welcome(_) => 2,
            Self::Progress(_) => 3,
            Self::Probe(_) => 4,
            Self::ProbeReply(_) => 5,
        }
    }

    /// Body length of a kind.
    fn body_len(kind: u8) -> Option<usize> {
        match kind {
            1 => Some(64),
            2 => Some(48),
            3 => Some(40),
            4 => Some(24),
            5 => Some(56),
            _ => None,
        }
    }

    /// Encoded length.
    pub fn encoded_len(&self) -> usize {
        CONTROL_HEADER_LEN + Self::body_len(self.kind()).unwrap_or(0)
    }

    /// Encodes the message at the start of `out`; returns its length.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize, ControlError> {
        let n = self.encoded_len();
        let out = out.get_mut(..n).ok_or(ControlError::BufferTooSmall)?;
        out.fill(0);
        out[..4].copy_from_slice(&[CONTROL_MAGIC, CONTROL_VERSION, self.kind(), 0]);
        let mut w = W {
            b: &mut out[CONTROL_HEADER_LEN..],
            at: 0,
        };
        match *self {
            Self::Hello(h) => {
                w.u64(h.node_id).u64(h.repl_id).u64(h.offset).u64(h.epoch);
                w.u64(h.nonce).u64(h.region_va).u32(h.rkey).u32(h.slot_size);
                w.u16(h.credits).u16(0).u32(h.first_psn);
            }
            Self::Welcome(m) => {
                w.u64(m.nonce).u64(m.repl_id).u64(m.epoch).u64(m.offset);
                w.u64(m.node_id).u32(m.first_psn).u8(m.mode as u8);
            }
            Self::Progress(p) => put_progress(&mut w, &p),
            Self::Probe(p) => {
                w.u64(p.seq).u64(p.sent_ns).u64(p.epoch);
            }
            Self::ProbeReply(r) => {
                w.u64(r.seq).u64(r.sent_ns);
                put_progress(&mut w, &r.progress);
            }
        }
        Ok(n)
    }

    /// Decodes a control payload.
    pub fn decode(p: &[u8]) -> Result<Control, ControlError> {
        let h = p.get(..CONTROL_HEADER_LEN).ok_or(ControlError::Truncated)?;
        if h[0] != CONTROL_MAGIC || h[1] != CONTROL_VERSION || h[3] != 0 {
            return Err(ControlError::BadHeader);
        }
        let kind = h[2];
        let len = Self::body_len(kind).ok_or(ControlError::BadKind(kind))?;
        let body = p
            .get(CONTROL_HEADER_LEN..CONTROL_HEADER_LEN + len)
            .ok_or(ControlError::Truncated)?;
        let mut r = R { b: body, at: 0 };
        Ok(match kind {
            1 => {
                let h = Hello {
                    node_id: r.u64(),
                    repl_id: r.u64(),
                    offset: r.u64(),
                    epoch: r.u64(),
                    nonce: r.u64(),
                    region_va: r.u64(),
                    rkey: r.u32(),
                    slot_size: r.u32(),
                    credits: r.u16(),
                    first_psn: {
                        let _ = r.u16();
                        r.u32()
                    },
                };
                if !h.credits.is_power_of_two() || h.first_psn > 0xff_ffff {
                    return Err(ControlError::BadField);
                }
                Control::Hello(h)
            }
            2 => {
                let (nonce, repl_id, epoch, offset, node_id, first_psn) =
                    (r.u64(), r.u64(), r.u64(), r.u64(), r.u64(), r.u32());
                let mode = match r.u8() {
                    1 => WelcomeMode::Partial,
                    2 => WelcomeMode::Full,
                    3 => WelcomeMode::Refused,
                    4 => WelcomeMode::Redirect,
                    _ => return Err(ControlError::BadField),
                };
                if first_psn > 0xff_ffff {
                    return Err(ControlError::BadField);
                }
                Control::Welcome(Welcome {
                    nonce,
                    mode,
                    repl_id,
                    epoch,
                    offset,
                    first_psn,
                    node_id,
                })
            }
            3 => Control::Progress(get_progress(&mut r)?),
            4 => Control::Probe(Probe {
                seq: r.u64(),
                sent_ns: r.u64(),
                epoch: r.u64(),
            }),
            _ => {
                let (seq, sent_ns) = (r.u64(), r.u64());
                Control::ProbeReply(ProbeReply {
                    seq,
                    sent_ns,
                    progress: get_progress(&mut r)?,
                })
            }
        })
    }
}

fn put_progress(w: &mut W<'_>, p: &Progress) {
    w.u64(p.nonce).u64(p.repl_id).u64(p.epoch).u64(p.applied);
    // The state takes the top byte of the last word; sync_applied the rest
    // (56 bits: a scan stream of 64 PiB).
    let word = (p.sync_applied & ((1 << 56) - 1)) | (u64::from(p.state as u8) << 56);
    w.u64(word);
}

fn get_progress(r: &mut R<'_>) -> Result<Progress, ControlError> {
    let (nonce, repl_id, epoch, applied, word) = (r.u64(), r.u64(), r.u64(), r.u64(), r.u64());
    let state = match (word >> 56) as u8 {
        1 => ReplicaReport::Connecting,
        2 => ReplicaReport::FullSync,
        3 => ReplicaReport::Streaming,
        _ => return Err(ControlError::BadField),
    };
    Ok(Progress {
        nonce,
        repl_id,
        epoch,
        applied,
        sync_applied: word & ((1 << 56) - 1),
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Control> {
        let progress = Progress {
            nonce: 11,
            repl_id: 0xabcdef,
            epoch: 3,
            applied: 123_456,
            sync_applied: 789,
            state: ReplicaReport::Streaming,
        };
        vec![
            Control::Hello(Hello {
                node_id: 2,
                repl_id: 0xabcdef,
                offset: 4096,
                epoch: 3,
                nonce: 11,
                region_va: 0x1_0000,
                rkey: 0x1234,
                slot_size: 9000,
                credits: 64,
                first_psn: 0x80_0001,
            }),
            Control::Welcome(Welcome {
                nonce: 11,
                mode: WelcomeMode::Full,
                repl_id: 0xabcdef,
                epoch: 3,
                offset: 5000,
                first_psn: 0x80_0001,
                node_id: 1,
            }),
            Control::Welcome(Welcome::redirect(
                12,
                3,
                1,
                [2, 0, 0, 0, 0x10, 2],
                Ipv4Addr::new(10, 77, 0, 3),
            )),
            Control::Progress(progress),
            Control::Probe(Probe {
                seq: 9,
                sent_ns: 1_000_000,
                epoch: 3,
            }),
            Control::ProbeReply(ProbeReply {
                seq: 9,
                sent_ns: 1_000_000,
                progress,
            }),
        ]
    }

    #[test]
    fn round_trips_and_lengths() {
        let mut buf = [0u8; MAX_CONTROL_LEN + 8];
        for m in samples() {
            let n = m.encode_into(&mut buf).unwrap();
            assert_eq!(n, m.encoded_len());
            assert!(n <= MAX_CONTROL_LEN);
            assert_eq!(&buf[..4], &[0x70, 1, m.kind(), 0]);
            assert_eq!(Control::decode(&buf[..n]), Ok(m));
            // Extra bytes are ignored; a short body is refused.
            assert_eq!(Control::decode(&buf[..n + 8]), Ok(m));
            assert_eq!(Control::decode(&buf[..n - 1]), Err(ControlError::Truncated));
            assert_eq!(
                m.encode_into(&mut [0u8; 8]),
                Err(ControlError::BufferTooSmall)
            );
        }
    }

    #[test]
    fn a_redirect_carries_the_successor_address() {
        let mac = [2, 0, 0, 0, 0x10, 0xfe];
        let ip = Ipv4Addr::new(10, 77, 0, 255);
        let w = Welcome::redirect(7, 4, 9, mac, ip);
        let mut buf = [0u8; MAX_CONTROL_LEN];
        let n = Control::Welcome(w).encode_into(&mut buf).unwrap();
        let Ok(Control::Welcome(d)) = Control::decode(&buf[..n]) else {
            panic!("not a welcome")
        };
        assert_eq!(d.redirect_to(), Some((mac, ip)));
        assert_eq!((d.nonce, d.epoch, d.node_id), (7, 4, 9));
        let mut other = d;
        other.mode = WelcomeMode::Partial;
        assert_eq!(other.redirect_to(), None);
        // Mode 5 is not defined.
        buf[4 + 44] = 5;
        assert_eq!(Control::decode(&buf[..n]), Err(ControlError::BadField));
    }

    #[test]
    fn bad_fields_are_refused() {
        let mut buf = [0u8; MAX_CONTROL_LEN];
        let s = samples();
        let n = s[0].encode_into(&mut buf).unwrap();
        let mut b = buf;
        b[4 + 56] = 3; // credits 3: not a power of two
        assert_eq!(Control::decode(&b[..n]), Err(ControlError::BadField));
        let mut b = buf;
        b[0] = 0x43;
        assert_eq!(Control::decode(&b[..n]), Err(ControlError::BadHeader));
        let mut b = buf;
        b[2] = 9;
        assert_eq!(Control::decode(&b[..n]), Err(ControlError::BadKind(9)));
        let n = s[1].encode_into(&mut buf).unwrap();
        buf[4 + 44] = 0;
        assert_eq!(Control::decode(&buf[..n]), Err(ControlError::BadField));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(mut p in prop::collection::vec(any::<u8>(), 0..90), kind in 0u8..7) {
            if p.len() >= 4 {
                p[0] = CONTROL_MAGIC;
                p[1] = CONTROL_VERSION;
                p[2] = kind;
                p[3] = 0;
            }
            if let Ok(m) = Control::decode(&p) {
                let mut out = [0u8; MAX_CONTROL_LEN];
                let n = m.encode_into(&mut out).unwrap();
                prop_assert_eq!(Control::decode(&out[..n]), Ok(m));
            }
        }
    }
}
