//! The reservation station's read-modify-write path on its own: batches of 32
//! fetch-adds, vector updates and reductions over 4096 keys of a flat in-memory store
//! (no engine, no network), so instruction counts compare builds exactly.
//!
//! `cargo run --release -p kvops --example station_rmw -- [BATCHES]` prints JSON:
//! `ops`, `mops` (wall clock, noisy) and a checksum of the results. Under callgrind,
//! instructions per op = Ir / ops.

use kvops::{FunctionRegistry, MemoryStage, Station, StationConfig};
use kvwire::{func, Atomic, KvOp, Status, Width};
use std::time::Instant;

const KEYS: usize = 4096;
const VALUE: usize = 32;

/// Values by key index (keys are 8-byte little-endian indices).
struct Flat(Vec<[u8; VALUE]>);

impl Flat {
    fn slot(&mut self, key: &[u8]) -> Option<&mut [u8; VALUE]> {
        let i = u64::from_le_bytes(key.try_into().ok()?) as usize;
        self.0.get_mut(i)
    }
}

impl MemoryStage for Flat {
    fn read(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, Status> {
        let v = self.slot(key).ok_or(Status::NotFound)?;
        out.get_mut(..VALUE)
            .ok_or(Status::ValueTooLarge)?
            .copy_from_slice(v);
        Ok(VALUE)
    }
    fn write(&mut self, key: &[u8], value: &[u8]) -> Status {
        match (self.slot(key), <&[u8; VALUE]>::try_from(value)) {
            (Some(v), Ok(x)) => {
                *v = *x;
                Status::Ok
            }
            _ => Status::BadLength,
        }
    }
    fn delete(&mut self, _key: &[u8]) -> Status {
        Status::NotFound
    }
}

fn main() {
    let batches: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let keys: Vec<[u8; 8]> = (0..KEYS as u64).map(|i| i.to_le_bytes()).collect();
    let mut store = Flat(vec![[0u8; VALUE]; KEYS]);
    let mut st = Station::new(
        StationConfig::default(),
        |k: &[u8]| k[0] as u64,
        FunctionRegistry::new(),
    )
    .unwrap();
    let (w8, w4) = (Width::W8, Width::W4);
    let at = |width| Atomic {
        func: func::FETCH_ADD,
        width,
        signed: false,
    };
    let mut sum = 0u64;
    let mut ops = 0usize;
    let t0 = Instant::now();
    for b in 0..batches {
        let batch: Vec<KvOp<'_>> = (0..32)
            .map(|j| {
                let key = &keys[(b * 32 + j * 7) % KEYS][..];
                match j % 4 {
                    0 => KvOp::UpdateS2V {
                        key,
                        atomic: at(w8),
                        param: 1,
                        param2: 0,
                    },
                    1 => KvOp::Reduce {
                        key,
                        atomic: at(w4),
                        init: 0,
                    },
                    2 => KvOp::UpdateS2V {
                        key,
                        atomic: at(w4),
                        param: 3,
                        param2: 0,
                    },
                    _ => KvOp::Reduce {
                        key,
                        atomic: at(w8),
                        init: 1,
                    },
                }
            })
            .collect();
        st.process_batch(&batch, &mut store, &mut |_: usize, s: Status, v: &[u8]| {
            sum = sum.wrapping_add(s as u64).wrapping_add(v.len() as u64);
            if let Some(&x) = v.first() {
                sum = sum.wrapping_add(u64::from(x));
            }
        });
        ops += batch.len();
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{{\"ops\": {ops}, \"mops\": {:.3}, \"checksum\": {sum}}}",
        ops as f64 / secs / 1e6
    );
}
