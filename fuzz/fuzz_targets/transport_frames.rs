#![no_main]
//! Protocol v2 classifiers (`parse_client_frame`, `parse_server_frame`) on
//! arbitrary bytes, as received and re-finalized; classified CONNECT, ACCEPT,
//! ACK/NAK and response frames are re-emitted and must parse back identically,
//! and frames emitted from fields read out of the input must parse back to them.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| kvwire::fuzzing::transport_frames(data));
