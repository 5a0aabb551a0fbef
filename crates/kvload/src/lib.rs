//! Workload helpers shared by `pktgen` and the engine benchmarks
//! (`crates/kvengine/examples`): one copy of the random number generators, the key
//! and value generators, the YCSB Zipfian generator and the operation mix.
//!
//! Everything is deterministic: the same seed gives the same keys, ranks and
//! operations, and a value is a pure function of (key, version, length), so a client
//! in verify mode can predict every answer from the versions alone. The sequences are
//! pinned by golden tests (`pktgen --verify` and results recorded under `results/`
//! depend on them): change the maths only on purpose.
//!
//! * [`rng`]: [`Xorshift64Star`] (pktgen's generator, one per lcore), [`SplitMix64`]
//!   (the engine benchmarks' stream), the [`splitmix64`] mixer and the
//!   [`RandomSource`] trait both generators implement.
//! * [`zipf`]: [`Zipf`] and the [`KeyChooser`] over a [`Distribution`].
//! * [`keys`]: [`write_key`] (key bytes of any size from an index) and
//!   [`scattered_key`] (8-byte keys scattered over the key space).
//! * [`values`]: [`SizeDist`], [`write_value`] and the checks of a returned value.
//! * [`mix`]: [`OpType`] and the operation [`Mix`].
//! * [`faults`]: seeded packet loss, duplication and reordering ([`Faults`],
//!   [`Holdback`]).
//!
//! Pure Rust, no dependencies, no allocation in the per-operation paths.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod faults;
pub mod inject;
pub mod keys;
pub mod mix;
pub mod rng;
pub mod values;
pub mod zipf;

pub use faults::{Fate, FaultConfig, FaultConfigError, FaultCounts, Faults, Holdback};
pub use keys::{scattered_key, write_key, KeyPrefix};
pub use mix::{Mix, OpType};
pub use rng::{splitmix64, RandomSource, SplitMix64, Xorshift64Star};
pub use values::{reduce_sum, value_matches, value_matches_adds, write_value, SizeDist};
pub use zipf::{Distribution, KeyChooser, Zipf};
