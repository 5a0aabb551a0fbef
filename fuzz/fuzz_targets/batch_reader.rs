#![no_main]
//! Request/response payload readers on arbitrary bytes; decoded batches are
//! re-encoded (with and without copy flags) and must decode identically.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| kvwire::fuzzing::batch_reader(data));
