//! Tenant isolation checked as a property (docs/SECURITY.md): a noninterference
//! fuzzer. Several tenants (with different ACLs) and clients without a tenant send
//! seeded random streams of every op kind, transactions, connection changes and
//! attacks on each other's QPs, while tenants are rotated, removed and added again;
//! each client checks every answer against a model of its own namespace alone
//! ([`model`]). If any other client's action showed through — a byte of another
//! namespace's value, the effect of a refused op, a QP taken over, a purge that left
//! keys — the run's [`Figures`] say so.
//!
//! The server is behind a [`Driver`]: in process (the dataplane's `Server`, its tests
//! and `examples/noninterference.rs`) or live (the dataplane over a tap,
//! `kvd-noninterference`).

#![warn(missing_docs)]

pub mod actor;
pub mod figures;
pub mod fuzz;
pub mod live;
pub mod model;
pub mod ops;

pub use figures::Figures;
pub use fuzz::{owner, Config, Driver, Fuzzer};
