//! Result status codes and the errors of the payload readers and writers.

use core::fmt;

/// Result status codes (first byte of each result).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// Success; the value (if any) follows.
    Ok = 0,
    /// Key not present (GET, DELETE, updates).
    NotFound = 1,
    /// No memory for the key/value (PUT).
    OutOfMemory = 2,
    /// Key longer than the server accepts.
    KeyTooLarge = 3,
    /// Value longer than the server accepts.
    ValueTooLarge = 4,
    /// The op could not be decoded; later ops of the batch are not executed.
    Malformed = 5,
    /// Unknown opcode; later ops of the batch are not executed.
    UnknownOpcode = 6,
    /// Function/predicate id not built in nor registered, or not defined for the
    /// opcode (docs/PROTOCOL.md §3.2); nothing was changed.
    UnknownFunction = 7,
    /// Value length is not a multiple of the width, Δ vector length differs
    /// from the stored vector, or S2S on a value that is not one element.
    BadLength = 8,
    /// Known but not supported by this server build.
    Unsupported = 9,
    /// Transient: the server could not take the op now (retry later).
    TryAgain = 10,
    /// The result does not fit in a response packet.
    ResponseTooLarge = 11,
    /// The key belongs to another partition than the request's client QP (see
    /// [`crate::partition`]); nothing was done.
    WrongPartition = 12,
    /// This node does not take writes: it is a replica, or a master that lost its
    /// lease. The value names the master when known ([`crate::MasterHint`]); nothing
    /// was changed.
    NotMaster = 13,
    /// Fewer than `min_replicas` replicas acknowledged within `max_lag_ms`: writes are
    /// refused (reads go on); nothing was changed.
    NotEnoughReplicas = 14,
    /// A transaction (docs/PROTOCOL.md §3.4) did not commit: nothing of it was
    /// changed. Its outcome result names why; its write ops are answered with this.
    Aborted = 15,
    /// A request resent across a failover (docs/PROTOCOL.md §6.6) that the failed
    /// master had begun to execute, and whose outcome the new master does not know:
    /// its ops may or may not have taken effect (some may have). Never executed again.
    OutcomeUnknown = 16,
    /// The client's tenant may not run this op (its ACL), or the key is outside the
    /// tenant's namespace (docs/PROTOCOL.md §6.8); nothing was changed.
    Denied = 17,
    /// Internal server error.
    Internal = 255,
}

impl Status {
    /// All status codes.
    pub const ALL: [Status; 19] = [
        Status::Ok,
        Status::NotFound,
        Status::OutOfMemory,
        Status::KeyTooLarge,
        Status::ValueTooLarge,
        Status::Malformed,
        Status::UnknownOpcode,
        Status::UnknownFunction,
        Status::BadLength,
        Status::Unsupported,
        Status::TryAgain,
        Status::ResponseTooLarge,
        Status::WrongPartition,
        Status::NotMaster,
        Status::NotEnoughReplicas,
        Status::Aborted,
        Status::OutcomeUnknown,
        Status::Denied,
        Status::Internal,
    ];
    /// Decodes a status byte.
    pub const fn from_u8(v: u8) -> Option<Status> {
        Some(match v {
            0 => Status::Ok,
            1 => Status::NotFound,
            2 => Status::OutOfMemory,
            3 => Status::KeyTooLarge,
            4 => Status::ValueTooLarge,
            5 => Status::Malformed,
            6 => Status::UnknownOpcode,
            7 => Status::UnknownFunction,
            8 => Status::BadLength,
            9 => Status::Unsupported,
            10 => Status::TryAgain,
            11 => Status::ResponseTooLarge,
            12 => Status::WrongPartition,
            13 => Status::NotMaster,
            14 => Status::NotEnoughReplicas,
            15 => Status::Aborted,
            16 => Status::OutcomeUnknown,
            17 => Status::Denied,
            255 => Status::Internal,
            _ => return None,
        })
    }
    /// Stable snake_case name.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::NotFound => "not_found",
            Status::OutOfMemory => "out_of_memory",
            Status::KeyTooLarge => "key_too_large",
            Status::ValueTooLarge => "value_too_large",
            Status::Malformed => "malformed",
            Status::UnknownOpcode => "unknown_opcode",
            Status::UnknownFunction => "unknown_function",
            Status::BadLength => "bad_length",
            Status::Unsupported => "unsupported",
            Status::TryAgain => "try_again",
            Status::ResponseTooLarge => "response_too_large",
            Status::WrongPartition => "wrong_partition",
            Status::NotMaster => "not_master",
            Status::NotEnoughReplicas => "not_enough_replicas",
            Status::Aborted => "aborted",
            Status::OutcomeUnknown => "outcome_unknown",
            Status::Denied => "denied",
            Status::Internal => "internal",
        }
    }
}

/// Errors of the payload readers and writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadError {
    /// The payload ends inside a header, op or result (includes an op
    /// count larger than what the payload contains).
    Truncated,
    /// Wrong magic byte.
    BadMagic,
    /// Unsupported version.
    BadVersion,
    /// Op count above [`MAX_OPS_PER_BATCH`](super::MAX_OPS_PER_BATCH) (reader or writer).
    TooManyOps,
    /// Unknown opcode.
    UnknownOpcode(u8),
    /// Reserved flag set, COPY_VALUE on an op without value, or a copy flag
    /// with no previous op to copy from.
    BadFlags,
    /// Key length 0.
    EmptyKey,
    /// Reserved attr bits set.
    BadAttr,
    /// Writer: key longer than [`MAX_KEY_LEN`](super::MAX_KEY_LEN).
    KeyTooLarge,
    /// Writer: value longer than [`MAX_VALUE_LEN`](super::MAX_VALUE_LEN).
    ValueTooLarge,
    /// Writer: the op/result does not fit in the buffer.
    NoSpace,
    /// Reader: unknown status code.
    UnknownStatus(u8),
}

impl PayloadError {
    /// The status a server reports for an op that failed to decode this way.
    pub const fn status(self) -> Status {
        match self {
            PayloadError::UnknownOpcode(_) => Status::UnknownOpcode,
            PayloadError::KeyTooLarge => Status::KeyTooLarge,
            PayloadError::ValueTooLarge => Status::ValueTooLarge,
            _ => Status::Malformed,
        }
    }
}

impl fmt::Display for PayloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PayloadError::Truncated => {
                f.write_str("the payload ends inside a header, op or result")
            }
            PayloadError::BadMagic => f.write_str("wrong magic byte"),
            PayloadError::BadVersion => f.write_str("unsupported payload version"),
            PayloadError::TooManyOps => {
                write!(f, "more than {} ops in one batch", super::MAX_OPS_PER_BATCH)
            }
            PayloadError::UnknownOpcode(op) => write!(f, "unknown opcode {op}"),
            PayloadError::BadFlags => f.write_str("reserved or misplaced op flags"),
            PayloadError::EmptyKey => f.write_str("empty key (keys are 1 to 255 bytes)"),
            PayloadError::BadAttr => f.write_str("reserved attribute bits set"),
            PayloadError::KeyTooLarge => write!(f, "key longer than {} bytes", super::MAX_KEY_LEN),
            PayloadError::ValueTooLarge => {
                write!(f, "value longer than {} bytes", super::MAX_VALUE_LEN)
            }
            PayloadError::NoSpace => f.write_str("the op does not fit in the buffer"),
            PayloadError::UnknownStatus(s) => write!(f, "unknown status code {s}"),
        }
    }
}

impl std::error::Error for PayloadError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_bytes_roundtrip() {
        for s in Status::ALL {
            assert_eq!(Status::from_u8(s as u8), Some(s));
        }
    }

    #[test]
    fn decode_errors_map_to_statuses() {
        assert_eq!(
            PayloadError::UnknownOpcode(9).status(),
            Status::UnknownOpcode
        );
        assert_eq!(PayloadError::Truncated.status(), Status::Malformed);
    }
}
