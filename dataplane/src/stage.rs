//! The glue between the wire, the reservation station and the storage engine:
//! [`EngineStage`] makes the engine the station's memory stage, and [`station_op`]
//! turns a decoded wire operation into a station operation.

use kvengine::Engine;
use kvops::{Delta, FuncId, MemoryStage, Op};
use kvwire::KvOp;

/// The storage engine as the reservation station's memory stage.
pub struct EngineStage<'e>(pub &'e mut Engine);

/// The station status of an engine status (`BufferTooSmall` only happens when a value is
/// larger than the station's value buffer, which is what `ValueTooLarge` means there).
#[inline]
pub fn station_status(s: kvengine::Status) -> kvops::Status {
    match s {
        kvengine::Status::Ok => kvops::Status::Ok,
        kvengine::Status::NotFound => kvops::Status::NotFound,
        kvengine::Status::OutOfMemory => kvops::Status::OutOfMemory,
        kvengine::Status::KeyTooLarge => kvops::Status::KeyTooLarge,
        kvengine::Status::ValueTooLarge | kvengine::Status::BufferTooSmall => {
            kvops::Status::ValueTooLarge
        }
    }
}

impl MemoryStage for EngineStage<'_> {
    #[inline]
    fn prefetch(&mut self, key: &[u8]) {
        self.0.prefetch_key(key);
    }

    #[inline]
    fn read(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, kvops::Status> {
        self.0.get(key, out).map_err(station_status)
    }

    #[inline]
    fn write(&mut self, key: &[u8], value: &[u8]) -> kvops::Status {
        station_status(self.0.put(key, value))
    }

    #[inline]
    fn delete(&mut self, key: &[u8]) -> kvops::Status {
        station_status(self.0.delete(key))
    }

    /// The merged write-back of a chain: the key exists with a value of this length, so
    /// the bytes are overwritten in place (no allocation, no index change).
    #[inline]
    fn write_back(&mut self, key: &[u8], value: &[u8]) -> kvops::Status {
        match self.0.lookup_mut(key) {
            Some(dst) if dst.len() == value.len() => {
                dst.copy_from_slice(value);
                kvops::Status::Ok
            }
            _ => self.write(key, value),
        }
    }
}

/// The station operation of a decoded wire operation. Widths come from the attr byte
/// (always 1, 2, 4 or 8); parameters the wire does not carry are 0.
#[inline]
pub fn station_op<'a>(op: &KvOp<'a>) -> Op<'a> {
    match *op {
        KvOp::Get { key } => Op::Get { key },
        KvOp::Put { key, value } => Op::Put { key, value },
        KvOp::Delete { key } => Op::Delete { key },
        KvOp::UpdateS2S {
            key,
            atomic,
            param,
            param2,
        } => Op::Atomic {
            key,
            func: FuncId(atomic.func),
            width: atomic.width.bytes() as u8,
            signed: atomic.signed,
            param,
            param2,
        },
        KvOp::UpdateS2V {
            key,
            atomic,
            param,
            param2,
        } => Op::VectorUpdate {
            key,
            func: FuncId(atomic.func),
            width: atomic.width.bytes() as u8,
            signed: atomic.signed,
            delta: Delta::Scalar { param, param2 },
        },
        KvOp::UpdateV2V { key, atomic, delta } => Op::VectorUpdate {
            key,
            func: FuncId(atomic.func),
            width: atomic.width.bytes() as u8,
            signed: atomic.signed,
            delta: Delta::Vector { delta, param2: 0 },
        },
        KvOp::Reduce { key, atomic, init } => Op::Reduce {
            key,
            func: FuncId(atomic.func),
            width: atomic.width.bytes() as u8,
            signed: atomic.signed,
            init,
            param2: 0,
        },
        KvOp::Filter { key, atomic, param } => Op::Filter {
            key,
            pred: atomic.func,
            width: atomic.width.bytes() as u8,
            signed: atomic.signed,
            param,
        },
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
        let mut st = EngineStage(&mut e);
        let mut buf = [0u8; 64];
        assert_eq!(st.read(b"k", &mut buf), Err(kvops::Status::NotFound));
        assert_eq!(st.write(b"k", &7u64.to_le_bytes()), kvops::Status::Ok);
        assert_eq!(st.read(b"k", &mut buf), Ok(8));
        assert_eq!(st.write_back(b"k", &9u64.to_le_bytes()), kvops::Status::Ok);
        assert_eq!(st.read(b"k", &mut buf), Ok(8));
        assert_eq!(&buf[..8], &9u64.to_le_bytes());
        // A value larger than the reader's buffer is ValueTooLarge, not a panic.
        assert_eq!(st.write(b"big", &[1u8; 100]), kvops::Status::Ok);
        assert_eq!(st.read(b"big", &mut buf), Err(kvops::Status::ValueTooLarge));
        assert_eq!(st.delete(b"k"), kvops::Status::Ok);
        assert_eq!(st.delete(b"k"), kvops::Status::NotFound);
    }
}
