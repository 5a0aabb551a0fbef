//! Is raft-rs fit for the replication lcore? (issue 47: "measure it before deciding")
//! Three group members in one thread — as the three replication lcores of a group would
//! run them, minus the network — the leader proposing entries of post-image records
//! as fast as they commit; every message encoded and decoded as on the wire
//! (protobuf). Prints JSON: committed entries and bytes per second, and the ns of
//! this one core per entry and per replicated record (summed over the three members:
//! the cost the group pays).
//!
//! Usage: `lcore_bench [SECONDS] [ENTRY_BYTES...]`

use kvraft::{FsyncPolicy, Group, GroupConfig, MemDisk, Recovered};
use protobuf::Message as _;
use raft::eraftpb::Message;
use std::time::Instant;

/// A post-image record of an 8-byte key and 8-byte value (docs/REPLICATION.md §2).
const RECORD_BYTES: usize = 4 + 8 + 8;

struct Outbox(Vec<Vec<u8>>, Vec<u64>);

impl kvraft::Outbox for Outbox {
    fn send(&mut self, m: Message) {
        self.1.push(m.to);
        self.0.push(m.write_to_bytes().expect("encodes"));
    }
}

struct Null;
impl kvraft::Fsm for Null {
    fn apply(&mut self, _: u64, _: &[u8]) {}
    fn restore(&mut self, _: u64) {}
}

fn run(secs: f64, entry_bytes: usize) -> serde_json::Value {
    let ids = [1u64, 2, 3];
    let mut g: Vec<Group<MemDisk>> = ids
        .iter()
        .map(|&id| {
            let cfg = GroupConfig::new(id, FsyncPolicy::No, 100);
            Group::new(cfg, MemDisk::default(), Recovered::default(), &ids).expect("group")
        })
        .collect();
    let mut clock = 0u64;
    let pump = |g: &mut Vec<Group<MemDisk>>| {
        let mut moved = true;
        while moved {
            moved = false;
            for i in 0..g.len() {
                let mut out = Outbox(Vec::new(), Vec::new());
                g[i].handle_ready(&mut Null, &mut out);
                for (bytes, to) in out.0.into_iter().zip(out.1) {
                    let m = Message::parse_from_bytes(&bytes).expect("decodes");
                    g[(to - 1) as usize].step(m);
                    moved = true;
                }
            }
        }
    };
    // Elect node 1.
    while !g[0].writable() {
        clock += 10;
        for x in g.iter_mut() {
            x.tick(clock);
        }
        pump(&mut g);
    }
    let data = kvraft::entry::records(&vec![7u8; entry_bytes]);
    let t0 = Instant::now();
    let c0 = g[0].commit_index();
    let mut proposed = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        // A few entries in flight, as a replication lcore draining rings each poll.
        for _ in 0..4 {
            if g[0].propose(data.clone()).is_some() {
                proposed += 1;
            }
        }
        pump(&mut g);
        if proposed % 256 == 0 {
            clock += 10;
            for x in g.iter_mut() {
                x.tick(clock);
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let entries = g[0].commit_index() - c0;
    let records = entries as f64 * (entry_bytes / RECORD_BYTES) as f64;
    serde_json::json!({
        "entry_bytes": entry_bytes,
        "seconds": secs,
        "entries_per_s": entries as f64 / secs,
        "mb_per_s": entries as f64 * entry_bytes as f64 / secs / 1e6,
        "ns_per_entry_all_members": secs * 1e9 / entries as f64,
        "records_per_entry": entry_bytes / RECORD_BYTES,
        "ns_per_record_all_members": secs * 1e9 / records,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let sizes: Vec<usize> = if args.len() > 2 {
        args[2..].iter().filter_map(|s| s.parse().ok()).collect()
    } else {
        vec![1024, 4096, 16384, 65536]
    };
    let runs: Vec<serde_json::Value> = sizes.iter().map(|&b| run(secs, b)).collect();
    println!("{}", serde_json::to_string_pretty(&runs).unwrap());
}
