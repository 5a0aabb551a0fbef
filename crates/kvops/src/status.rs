//! Per-operation status codes, as returned to clients with each result.
//!
//! Codes 0–4 are the storage engine's (`kvengine::Status`) so a memory stage adapter maps
//! them one to one; 16 and up are the operation errors of this crate.

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
    BadLength = 16,
    /// Unknown function or predicate ID. Nothing was changed.
    UnknownFunction = 17,
    /// Element width not 1, 2, 4 or 8. Nothing was changed.
    BadWidth = 18,
    /// Any other memory-stage failure.
    StoreError = 31,
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
            16 => Status::BadLength,
            17 => Status::UnknownFunction,
            18 => Status::BadWidth,
            31 => Status::StoreError,
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
        assert_eq!(Status::from_code(5), None);
    }
}
