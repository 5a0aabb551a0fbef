//! What a group member sends another over a replication link, inside the payload of
//! an RC SEND Only frame (docs/FAILOVER.md, "The wire"): its HELLO, and Raft messages,
//! each cut into fragments that fit a frame. Integers are little-endian.
//!
//! ```text
//! 0  magic   0x47 ('G')
//! 1  version 1
//! 2  kind    1 HELLO, 2 FRAGMENT
//! HELLO:    3 raft id (8) | 11 client MAC (6) | 17 client IPv4 (4) | 21 client QPN (4)
//!           | 25 name length (1) | 26 name (the config's node_id)
//! FRAGMENT: 3 message number (4) | 7 fragment index (2) | 9 fragment count (2)
//!           | 11 bytes of the Raft message (protobuf)
//! ```
//!
//! A Raft message is resent by Raft itself when lost (heartbeats, append probes), so
//! fragments are not: a message with a fragment missing is dropped whole when the
//! next message's fragments arrive.

use protobuf::Message as _;
use raft::eraftpb::Message;

/// First byte of every payload.
pub const MAGIC: u8 = 0x47;
/// Wire version.
pub const VERSION: u8 = 1;
const HELLO: u8 = 1;
const FRAGMENT: u8 = 2;
/// Bytes before a fragment's data.
pub const FRAGMENT_HEADER: usize = 11;

/// A member's HELLO: who is on the other end of a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Its Raft id.
    pub id: u64,
    /// Its client-facing MAC, IPv4 address and server QPN (for `NOT_MASTER` hints).
    pub client_mac: [u8; 6],
    /// Client-facing IPv4 address.
    pub client_ip: [u8; 4],
    /// Server QPN.
    pub client_qpn: u32,
    /// Its node name.
    pub name: String,
}

impl Hello {
    /// Encodes it.
    pub fn encode(&self) -> Vec<u8> {
        let name = &self.name.as_bytes()[..self.name.len().min(255)];
        let mut b = vec![MAGIC, VERSION, HELLO];
        b.extend_from_slice(&self.id.to_le_bytes());
        b.extend_from_slice(&self.client_mac);
        b.extend_from_slice(&self.client_ip);
        b.extend_from_slice(&self.client_qpn.to_le_bytes());
        b.push(name.len() as u8);
        b.extend_from_slice(name);
        b
    }
}

/// A decoded payload.
#[derive(Debug)]
pub enum Payload<'a> {
    /// A HELLO.
    Hello(Hello),
    /// A fragment: (message number, index, count, bytes).
    Fragment(u32, u16, u16, &'a [u8]),
}

/// Decodes a payload; `None` for anything else.
pub fn decode(p: &[u8]) -> Option<Payload<'_>> {
    if p.len() < 3 || p[0] != MAGIC || p[1] != VERSION {
        return None;
    }
    let le32 = |o: usize| Some(u32::from_le_bytes(p.get(o..o + 4)?.try_into().ok()?));
    let le16 = |o: usize| Some(u16::from_le_bytes(p.get(o..o + 2)?.try_into().ok()?));
    match p[2] {
        HELLO => {
            let id = u64::from_le_bytes(p.get(3..11)?.try_into().ok()?);
            let n = usize::from(*p.get(25)?);
            Some(Payload::Hello(Hello {
                id,
                client_mac: p.get(11..17)?.try_into().ok()?,
                client_ip: p.get(17..21)?.try_into().ok()?,
                client_qpn: le32(21)?,
                name: String::from_utf8_lossy(p.get(26..26 + n)?).into_owned(),
            }))
        }
        FRAGMENT => {
            let (num, idx, count) = (le32(3)?, le16(7)?, le16(9)?);
            (idx < count).then(|| Payload::Fragment(num, idx, count, &p[FRAGMENT_HEADER..]))
        }
        _ => None,
    }
}

/// Cuts message `m` (number `num`) into fragment payloads of at most `cap` bytes each;
/// `f` gets each one.
pub fn fragments(m: &Message, num: u32, cap: usize, mut f: impl FnMut(&[u8])) {
    let Ok(bytes) = m.write_to_bytes() else {
        return;
    };
    let room = cap.saturating_sub(FRAGMENT_HEADER).max(1);
    let count = bytes.len().div_ceil(room).max(1);
    let Ok(count16) = u16::try_from(count) else {
        return; // larger than 65535 frames: never sent (raft-rs limits appends)
    };
    let mut p = Vec::with_capacity(cap);
    for i in 0..count {
        p.clear();
        p.extend_from_slice(&[MAGIC, VERSION, FRAGMENT]);
        p.extend_from_slice(&num.to_le_bytes());
        p.extend_from_slice(&(i as u16).to_le_bytes());
        p.extend_from_slice(&count16.to_le_bytes());
        let end = ((i + 1) * room).min(bytes.len());
        p.extend_from_slice(&bytes[i * room..end]);
        f(&p);
    }
}

/// Reassembles one link's fragments into messages.
#[derive(Debug, Default)]
pub struct Reassembler {
    num: u32,
    next: u16,
    count: u16,
    buf: Vec<u8>,
    /// Messages dropped for a missing fragment.
    pub dropped: u64,
}

impl Reassembler {
    /// Takes fragment (`num`, `idx`, `count`, `bytes`); a whole message when it ends one.
    pub fn push(&mut self, num: u32, idx: u16, count: u16, bytes: &[u8]) -> Option<Message> {
        if idx == 0 {
            if self.next != 0 {
                self.dropped += 1;
            }
            self.num = num;
            self.count = count;
            self.next = 0;
            self.buf.clear();
        } else if num != self.num || idx != self.next || count != self.count {
            if self.next != 0 {
                self.dropped += 1;
            }
            self.next = 0;
            self.buf.clear();
            return None;
        }
        self.buf.extend_from_slice(bytes);
        self.next += 1;
        if self.next < self.count {
            return None;
        }
        self.next = 0;
        Message::parse_from_bytes(&self.buf).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_fragments_and_a_lost_one_is_dropped() {
        let mut m = Message {
            to: 2,
            from: 1,
            term: 9,
            ..Message::default()
        };
        m.mut_entries().push(raft::eraftpb::Entry {
            index: 5,
            data: vec![7u8; 5000].into(),
            ..Default::default()
        });
        let mut frags = Vec::new();
        fragments(&m, 41, 1400, |p| frags.push(p.to_vec()));
        assert!(frags.len() > 3);
        let mut r = Reassembler::default();
        let mut got = None;
        for f in &frags {
            if let Some(Payload::Fragment(n, i, c, b)) = decode(f) {
                got = r.push(n, i, c, b).or(got);
            }
        }
        assert_eq!(got.as_ref(), Some(&m));
        // The next message loses its second fragment: dropped, and the one after it
        // comes through.
        let mut frags2 = Vec::new();
        fragments(&m, 42, 1400, |p| frags2.push(p.to_vec()));
        for (k, f) in frags2.iter().enumerate() {
            if k == 1 {
                continue;
            }
            if let Some(Payload::Fragment(n, i, c, b)) = decode(f) {
                assert!(r.push(n, i, c, b).is_none());
            }
        }
        let mut got = None;
        for f in &frags {
            if let Some(Payload::Fragment(n, i, c, b)) = decode(f) {
                got = r.push(n, i, c, b).or(got);
            }
        }
        assert_eq!(got.as_ref(), Some(&m));
        let h = Hello {
            id: 77,
            client_mac: [2, 0, 0, 0, 0, 9],
            client_ip: [10, 0, 0, 9],
            client_qpn: 1,
            name: "node2".into(),
        };
        match decode(&h.encode()) {
            Some(Payload::Hello(x)) => assert_eq!(x, h),
            other => panic!("{other:?}"),
        }
    }
}
