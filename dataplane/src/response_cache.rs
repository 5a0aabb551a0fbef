//! The response cache behind exactly-once execution (protocol v2, docs/PROTOCOL.md §6).
//!
//! Every response frame the server emits for a served request is built in place in a
//! per-worker byte ring ([`Arena`]) — headers, payload, pad and ICRC — and then copied
//! into the tx frame. A retransmitted request (a duplicate PSN within the window) is
//! answered by re-sending those bytes, never by executing it again; a frame that could
//! not be transmitted (no mbuf, tx buffer too small) is still in the ring, so the
//! client's retransmission gets it.
//!
//! The ring is addressed by absolute `u64` positions (never wrapping in practice: 2^64
//! bytes). A record is `[len u16 BE][frame]` and never wraps around the ring's end:
//! when the largest frame would not fit before the end, the writer leaves a zero
//! length (if two bytes are left) and continues at offset 0. A record at absolute
//! position `p` is intact while nothing was written or reserved at `p + capacity`, so
//! an [`Entry`] is valid iff `dirty − start ≤ capacity`, `dirty` being the end of the
//! written (or reserved, for the frame being built) bytes.
//!
//! Per client QP the server keeps `W` (the window, `server.credits`) [`Entry`]s, the
//! entry of PSN `p` at index `p mod W`: 24 bytes each (see [`ENTRY_BYTES`]).

/// Bytes of a record's length prefix.
pub(crate) const REC_HDR: usize = 2;

/// What an [`Entry`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum EntryState {
    /// Nothing (never served, cleared by a reconnect, or a request without a batch).
    Empty,
    /// Served in the current burst, its responses not complete yet.
    Pending,
    /// Its responses are in the ring (if still valid there).
    Ready,
}

/// The cached response of one request: `frames` records from absolute ring position
/// `start`, `bytes` long (skip markers included).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// Ring position of the first record.
    pub start: u64,
    /// Request PSN it answers.
    pub psn: u32,
    /// Ring bytes from `start` to the end of the last record.
    pub bytes: u32,
    /// Response frames.
    pub frames: u16,
    /// State.
    pub state: EntryState,
}

/// Size of one [`Entry`]: the per-QP replay state is `W ×` this.
pub const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();

impl Entry {
    /// An empty entry.
    pub const EMPTY: Entry = Entry {
        start: 0,
        psn: 0,
        bytes: 0,
        frames: 0,
        state: EntryState::Empty,
    };

    /// A served request's entry before its first response frame.
    pub const fn pending(psn: u32) -> Entry {
        Entry {
            start: 0,
            psn,
            bytes: 0,
            frames: 0,
            state: EntryState::Pending,
        }
    }
}

/// The write cursor of the ring (the bytes are borrowed separately, so the responder
/// can hold the byte slice and the cursor at once).
#[derive(Debug, Default)]
pub(crate) struct Cursor {
    /// Absolute position of the next record.
    head: u64,
    /// `head mod cap`.
    off: usize,
    /// End of the bytes written or reserved (≥ `head`).
    dirty: u64,
    /// Ring size in bytes.
    cap: usize,
    /// Largest record (length prefix + largest frame).
    max_record: usize,
}

/// The per-worker response ring (`Default`: an empty placeholder).
#[derive(Default)]
pub(crate) struct Arena {
    /// The ring's bytes.
    pub bytes: Box<[u8]>,
    /// Its write cursor.
    pub cur: Cursor,
}

impl Arena {
    /// A ring of `capacity` bytes (raised to one largest record, `REC_HDR +
    /// max_frame`, so a frame can always be built) whose frames are at most
    /// `max_frame` bytes. Allocates (zeroed: the pages are touched on first use).
    pub fn new(capacity: usize, max_frame: usize) -> Arena {
        let max_record = REC_HDR + max_frame;
        let cap = capacity.max(max_record);
        Arena {
            bytes: vec![0u8; cap].into_boxed_slice(),
            cur: Cursor {
                head: 0,
                off: 0,
                dirty: 0,
                cap,
                max_record,
            },
        }
    }
}

impl Cursor {
    /// Reserves room for one largest record (skipping to the ring's start if it would
    /// not fit before the end); returns its offset. The frame goes at `off + REC_HDR`
    /// and is committed with [`Cursor::commit`].
    #[inline]
    pub fn reserve(&mut self, bytes: &mut [u8]) -> usize {
        if self.off + self.max_record > self.cap {
            if let Some(m) = bytes.get_mut(self.off..self.off + REC_HDR) {
                m.fill(0); // skip marker
            }
            self.head += (self.cap - self.off) as u64;
            self.off = 0;
        }
        self.dirty = self.head + self.max_record as u64;
        self.off
    }

    /// Commits the frame of `len` bytes built at the offset [`Cursor::reserve`]
    /// returned; returns the record's absolute position.
    #[inline]
    pub fn commit(&mut self, bytes: &mut [u8], len: usize) -> u64 {
        let at = self.head;
        bytes[self.off..self.off + REC_HDR].copy_from_slice(&(len as u16).to_be_bytes());
        self.off += REC_HDR + len;
        self.head += (REC_HDR + len) as u64;
        self.dirty = self.head;
        at
    }

    /// Absolute position of the next record.
    #[inline]
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Largest record.
    #[inline]
    pub fn max_record(&self) -> usize {
        self.max_record
    }

    /// Whether the records from absolute position `start` (up to `head`) are intact.
    #[inline]
    pub fn valid(&self, start: u64) -> bool {
        start <= self.head && self.dirty - start <= self.cap as u64
    }

    /// The frame of the record at absolute position `pos` (following a skip marker)
    /// as (offset, length) in the ring, and the position after it. `None` for a
    /// position that holds no record (cannot happen for a valid entry).
    pub fn record(&self, bytes: &[u8], mut pos: u64) -> Option<(usize, usize, u64)> {
        for _ in 0..2 {
            let off = (pos % self.cap as u64) as usize;
            let len = match bytes.get(off..off + REC_HDR) {
                Some(&[a, b]) => usize::from(u16::from_be_bytes([a, b])),
                _ => 0,
            };
            if len == 0 {
                pos += (self.cap - off) as u64;
                continue;
            }
            if off + REC_HDR + len > self.cap || pos + (REC_HDR + len) as u64 > self.head {
                return None;
            }
            return Some((off + REC_HDR, len, pos + (REC_HDR + len) as u64));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(a: &mut Arena, fill: u8, len: usize) -> u64 {
        let off = a.cur.reserve(&mut a.bytes);
        a.bytes[off + REC_HDR..off + REC_HDR + len].fill(fill);
        a.cur.commit(&mut a.bytes, len)
    }

    #[test]
    fn records_skip_the_end_and_expire() {
        // 100 B ring, frames up to 30 B: records of 32 B at most.
        let mut a = Arena::new(100, 30);
        let p0 = put(&mut a, 1, 30); // [0, 32)
        let p1 = put(&mut a, 2, 30); // [32, 64)
        assert_eq!((p0, p1), (0, 32));
        // A third at 64 would end at 96 ≤ 100: fits.
        let p2 = put(&mut a, 3, 10); // [64, 76)
        assert_eq!(p2, 64);
        assert!(a.cur.valid(p0));
        // The next largest record (32 B) does not fit in [76, 100): skip to 100.
        let p3 = put(&mut a, 4, 20);
        assert_eq!(p3, 100);
        assert!(!a.cur.valid(p0), "overwritten");
        assert!(a.cur.valid(p2));
        let (off, len, next) = a.cur.record(&a.bytes, p2).unwrap();
        assert_eq!((len, next), (10, 76));
        assert!(a.bytes[off..off + len].iter().all(|&b| b == 3));
        // Reading on from p2's end follows the skip marker to p3.
        let (off, len, next) = a.cur.record(&a.bytes, 76).unwrap();
        assert_eq!((off, len, next), (REC_HDR, 20, 122));
        assert!(
            a.cur.record(&a.bytes, 122).is_none(),
            "nothing written there"
        );
        // A reservation makes the records it may overwrite invalid at once.
        assert!(a.cur.valid(p1));
        let _ = a.cur.reserve(&mut a.bytes);
        assert!(!a.cur.valid(p1));
        assert_eq!(ENTRY_BYTES, 24);
    }

    #[test]
    fn tiny_capacity_holds_one_record() {
        let a = Arena::new(1, 64);
        assert_eq!(a.bytes.len(), 66);
    }
}
