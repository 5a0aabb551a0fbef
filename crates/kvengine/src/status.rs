//! The outcome of an engine operation, and its wire status.

/// Outcome of an engine operation.
///
/// The engine's own vocabulary, not a wire type: it has no byte encoding.
/// Servers answer clients with `kvwire::Status`, converted by the one
/// [`From`] impl below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Success.
    Ok,
    /// GET/DELETE of a key that is not stored.
    NotFound,
    /// PUT could not get memory; the store is unchanged.
    OutOfMemory,
    /// Key longer than [`crate::Engine::max_key_len`].
    KeyTooLarge,
    /// Key + value too large for the largest slab class.
    ValueTooLarge,
    /// The caller's output buffer is shorter than the value
    /// ([`crate::Engine::get`] only; a batched GET never answers it).
    BufferTooSmall,
}

impl Status {
    /// Every variant (for exhaustive tests of conversions).
    pub const ALL: [Status; 6] = [
        Status::Ok,
        Status::NotFound,
        Status::OutOfMemory,
        Status::KeyTooLarge,
        Status::ValueTooLarge,
        Status::BufferTooSmall,
    ];
}

/// The wire status a server answers for an engine status.
///
/// `Ok`, `NotFound`, `OutOfMemory`, `KeyTooLarge` and `ValueTooLarge` map to
/// the wire status of the same name.
///
/// `BufferTooSmall` maps to `ValueTooLarge`, not to `Internal`: only
/// [`crate::Engine::get`] answers it, when the stored value is longer than
/// the caller's output buffer (batched GETs hand out the stored bytes by
/// reference and never answer it). On a server's wire path that buffer is
/// the value buffer of the reservation station (the dataplane's memory
/// stage, `EngineStage::read`), sized to the largest value the server
/// serves through it; so the answer means "this value is longer than the
/// server accepts here", which is the wire's `VALUE_TOO_LARGE`. It is the
/// same mapping `kvops` gives its own `OpError::BufferTooSmall`, and it
/// must not become wire code 5, which is `MALFORMED`.
impl From<Status> for kvwire::Status {
    #[inline]
    fn from(s: Status) -> kvwire::Status {
        match s {
            Status::Ok => kvwire::Status::Ok,
            Status::NotFound => kvwire::Status::NotFound,
            Status::OutOfMemory => kvwire::Status::OutOfMemory,
            Status::KeyTooLarge => kvwire::Status::KeyTooLarge,
            Status::ValueTooLarge | Status::BufferTooSmall => kvwire::Status::ValueTooLarge,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_status_of_every_variant() {
        for s in Status::ALL {
            let want = match s {
                Status::Ok => kvwire::Status::Ok,
                Status::NotFound => kvwire::Status::NotFound,
                Status::OutOfMemory => kvwire::Status::OutOfMemory,
                Status::KeyTooLarge => kvwire::Status::KeyTooLarge,
                Status::ValueTooLarge => kvwire::Status::ValueTooLarge,
                Status::BufferTooSmall => kvwire::Status::ValueTooLarge,
            };
            assert_eq!(kvwire::Status::from(s), want, "{s:?}");
        }
        // The wire codes themselves (docs/PROTOCOL.md): never MALFORMED (5)
        // or INTERNAL (255) for an engine answer.
        let codes: Vec<u8> = Status::ALL
            .iter()
            .map(|&s| kvwire::Status::from(s) as u8)
            .collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 4]);
    }
}
