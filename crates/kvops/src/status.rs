//! Per-operation status codes, as returned to clients with each result.
//!
//! Every code is the wire code of `kvwire::Status` (docs/PROTOCOL.md): codes 0–4 are also
//! the storage engine's (`kvengine::Status`), so a memory stage adapter maps them one to
//! one. [`Status::BadWidth`] cannot come from the wire (the attr byte only encodes valid
//! widths) and travels as `MALFORMED`; [`Status::StoreError`] travels as `INTERNAL`.

use crate::functions::OpError;

/// The status of one completed operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// The key does not exist (GET, DELETE, and every read-modify-write operation).
    NotFound = 1,
    /// The memory stage could not allocate room for the value.
    OutOfMemory = 2,
    /// The key is longer than the memory stage accepts.
    KeyTooLarge = 3,
    /// The value is longer than the memory stage (or the station's value buffer) accepts.
    ValueTooLarge = 4,
    /// Value length not a multiple of the width, scalar value not one element, or a
    /// Δ-vector of the wrong length. Nothing was changed.
    BadLength = 8,
    /// Unknown function or predicate ID. Nothing was changed.
    UnknownFunction = 7,
    /// Element width not 1, 2, 4 or 8. Nothing was changed. (Wire: `MALFORMED`.)
    BadWidth = 5,
    /// Any other memory-stage failure. (Wire: `INTERNAL`.)
    StoreError = 255,
}

impl Status {
    /// The wire code.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Parses a wire code.
    pub const fn from_code(code: u8) -> Option<Status> {
        Some(match code {
            0 => Status::Ok,
            1 => Status::NotFound,
            2 => Status::OutOfMemory,
            3 => Status::KeyTooLarge,
            4 => Status::ValueTooLarge,
            8 => Status::BadLength,
            7 => Status::UnknownFunction,
            5 => Status::BadWidth,
            255 => Status::StoreError,
            _ => return None,
        })
    }

    /// Whether this is [`Status::Ok`].
    pub const fn is_ok(self) -> bool {
        matches!(self, Status::Ok)
    }
}

impl From<OpError> for Status {
    fn from(e: OpError) -> Self {
        match e {
            OpError::BadLength => Status::BadLength,
            OpError::UnknownFunction => Status::UnknownFunction,
            OpError::BadWidth => Status::BadWidth,
            // The station sizes its buffers to the largest value it caches, so this
            // only means a value larger than that buffer.
            OpError::BufferTooSmall => Status::ValueTooLarge,
        }
    }
}

impl From<Status> for kvwire::Status {
    /// The wire status (same code; see the module doc for `BadWidth` and `StoreError`).
    fn from(s: Status) -> kvwire::Status {
        match s {
            Status::Ok => kvwire::Status::Ok,
            Status::NotFound => kvwire::Status::NotFound,
            Status::OutOfMemory => kvwire::Status::OutOfMemory,
            Status::KeyTooLarge => kvwire::Status::KeyTooLarge,
            Status::ValueTooLarge => kvwire::Status::ValueTooLarge,
            Status::BadLength => kvwire::Status::BadLength,
            Status::UnknownFunction => kvwire::Status::UnknownFunction,
            Status::BadWidth => kvwire::Status::Malformed,
            Status::StoreError => kvwire::Status::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for c in 0..=255u8 {
            if let Some(s) = Status::from_code(c) {
                assert_eq!(s.code(), c);
            }
        }
        assert_eq!(Status::from_code(6), None);
        for c in 0..=255u8 {
            if let Some(s) = Status::from_code(c) {
                assert_eq!(kvwire::Status::from(s) as u8, c, "{s:?}");
            }
        }
    }
}
