//! The chunk: up to [`CHUNK`] decoded operations of one burst that execute together,
//! with, in order, where each result goes ([`Tag`]s), and the dependency check that
//! decides whether the chunk may run straight through the engine's pipelined batch or
//! must go through the reservation station ([`ChunkDeps`]).

use crate::packet::Tag;
use arrayvec::ArrayVec;
use kvengine::{BatchOp, OpKind};
use kvops::station::{slot_of, SLOTS};
use kvwire::KvOp;

/// Operations handed to the engine at once (its prefetch window spans them).
pub const CHUNK: usize = 256;

/// The chunk being built: what the engine (or the station) runs and, in order, where
/// each result goes. Lives on the stack of one `handle_burst`; `ArrayVec` leaves the
/// unused entries uninitialized, so a small burst does not pay for clearing 256 slots.
pub(crate) struct Chunk<'f> {
    /// Every executed op in engine form (GET/PUT/DELETE); a read-modify-write op is
    /// here as a GET of its key, and in `rich` with the same index.
    pub bops: ArrayVec<BatchOp<'f>, CHUNK>,
    /// Read-modify-write ops (atomics, vector ops, reduce, filter) by index in `bops`.
    pub rich: ArrayVec<(u16, KvOp<'f>), CHUNK>,
    /// One per result in chunk order: executed ops (`Source::Engine`, in `bops` order),
    /// immediate statuses and empty requests.
    pub tags: ArrayVec<Tag, CHUNK>,
}

impl<'f> Chunk<'f> {
    pub fn new() -> Self {
        Chunk {
            bops: ArrayVec::new(),
            rich: ArrayVec::new(),
            tags: ArrayVec::new(),
        }
    }

    pub fn clear(&mut self) {
        self.bops.clear();
        self.rich.clear();
        self.tags.clear();
    }

    /// The chunk's ops in station form (the station path only).
    pub fn station_ops(&self) -> ArrayVec<KvOp<'f>, CHUNK> {
        let mut rich = self.rich.iter().peekable();
        self.bops
            .iter()
            .enumerate()
            .map(|(i, b)| match rich.peek() {
                Some(&&(j, op)) if usize::from(j) == i => {
                    rich.next();
                    op
                }
                _ => match b.kind {
                    OpKind::Get => KvOp::Get { key: b.key },
                    OpKind::Put => KvOp::Put {
                        key: b.key,
                        value: b.value,
                    },
                    OpKind::Delete => KvOp::Delete { key: b.key },
                },
            })
            .collect()
    }
}

/// Which ops of the chunk being built depend on each other: an open-addressing table
/// over the station's slots keyed by the full key hash, so two different keys that
/// share a slot (near certain for 256 ops in 1024 slots) do not count, and only a key
/// seen twice — or a read-modify-write op — sends the chunk to the station. Kept in the
/// server (not rebuilt per burst) and cleared entry by entry after each chunk.
pub(crate) struct ChunkDeps {
    /// Op index + 1 of the first op of each key (0: empty).
    table: [u16; SLOTS],
    /// Table entries in use, to clear them.
    used: [u16; CHUNK],
    n_used: usize,
    /// Key hash of each op noted.
    hashes: [u64; CHUNK],
    /// The chunk needs the station.
    pub dependent: bool,
}

impl ChunkDeps {
    pub fn new() -> Self {
        ChunkDeps {
            table: [0; SLOTS],
            used: [0; CHUNK],
            n_used: 0,
            hashes: [0; CHUNK],
            dependent: false,
        }
    }

    /// Notes a GET/PUT/DELETE of `key` (hash `hash`) as op number `earlier.len()` of
    /// the chunk: a key seen before in the chunk makes it dependent.
    #[inline]
    pub fn note_repeat(&mut self, key: &[u8], hash: u64, earlier: &[BatchOp<'_>]) {
        if self.dependent {
            return;
        }
        let i = earlier.len();
        let Some(h) = self.hashes.get_mut(i) else {
            self.dependent = true;
            return;
        };
        *h = hash;
        let mut s = slot_of(hash);
        // Terminates: at most CHUNK (256) of the SLOTS (1024) entries are ever used.
        loop {
            let e = self.table[s];
            if e == 0 {
                self.table[s] = i as u16 + 1;
                self.used[self.n_used] = s as u16;
                self.n_used += 1;
                return;
            }
            let j = usize::from(e - 1);
            if self.hashes[j] == hash && earlier.get(j).is_some_and(|o| o.key == key) {
                self.dependent = true;
                return;
            }
            s = (s + 1) % SLOTS;
        }
    }

    #[inline]
    pub fn reset(&mut self) {
        for &s in &self.used[..self.n_used] {
            self.table[usize::from(s)] = 0;
        }
        self.n_used = 0;
        self.dependent = false;
    }
}
