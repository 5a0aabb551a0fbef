#![no_main]
//! Frame parsers (request and response) on arbitrary bytes; valid requests
//! are re-emitted and must parse back identically.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| kvwire::fuzzing::parse_request(data));
