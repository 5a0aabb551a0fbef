//! The glue between the reservation station and the storage engine: [`EngineStage`]
//! makes the engine the station's memory stage. The station takes the decoded wire
//! operations (`kvwire::KvOp`) as they are and answers wire statuses.

use kvengine::Engine;
use kvops::MemoryStage;
use kvwire::Status;

/// The storage engine as the reservation station's memory stage.
pub struct EngineStage<'e>(pub &'e mut Engine);

impl MemoryStage for EngineStage<'_> {
    #[inline]
    fn prefetch(&mut self, key: &[u8]) {
        self.0.prefetch_key(key);
    }

    /// `out` is the station's value buffer: a value longer than it is too large for the
    /// station, which the engine's `From` answers `ValueTooLarge` (the
    /// `MemoryStage::read` contract).
    #[inline]
    fn read(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, Status> {
        self.0.get(key, out).map_err(Status::from)
    }

    #[inline]
    fn write(&mut self, key: &[u8], value: &[u8]) -> Status {
        Status::from(self.0.put(key, value))
    }

    #[inline]
    fn delete(&mut self, key: &[u8]) -> Status {
        Status::from(self.0.delete(key))
    }

    /// The merged write-back of a chain: the key exists with a value of this length, so
    /// the bytes are overwritten in place (no allocation, no index change).
    #[inline]
    fn write_back(&mut self, key: &[u8], value: &[u8]) -> Status {
        match self.0.lookup_mut(key) {
            Some(dst) if dst.len() == value.len() => {
                dst.copy_from_slice(value);
                Status::Ok
            }
            _ => self.write(key, value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvengine::{EngineConfig, Region};

    fn engine() -> Engine {
        let cfg = EngineConfig {
            mem_bytes: 4 << 20,
            ..EngineConfig::default()
        };
        Engine::new(Region::owned(cfg.mem_bytes), &cfg).unwrap()
    }

    #[test]
    fn stage_reads_writes_and_writes_back_in_place() {
        let mut e = engine();
        let long = vec![b'x'; e.max_key_len() + 1];
        let mut st = EngineStage(&mut e);
        let mut buf = [0u8; 64];
        assert_eq!(st.read(b"k", &mut buf), Err(Status::NotFound));
        assert_eq!(st.write(b"k", &7u64.to_le_bytes()), Status::Ok);
        assert_eq!(st.read(b"k", &mut buf), Ok(8));
        assert_eq!(st.write_back(b"k", &9u64.to_le_bytes()), Status::Ok);
        assert_eq!(st.read(b"k", &mut buf), Ok(8));
        assert_eq!(&buf[..8], &9u64.to_le_bytes());
        // A value larger than the reader's buffer is ValueTooLarge, not a panic.
        assert_eq!(st.write(b"big", &[1u8; 100]), Status::Ok);
        assert_eq!(st.read(b"big", &mut buf), Err(Status::ValueTooLarge));
        assert_eq!(st.delete(b"k"), Status::Ok);
        assert_eq!(st.delete(b"k"), Status::NotFound);
        assert_eq!(st.write(&long, b"v"), Status::KeyTooLarge);
        assert_eq!(st.read(&long, &mut buf), Err(Status::KeyTooLarge));
    }
}
