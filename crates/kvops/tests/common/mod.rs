//! Reference implementations written with native integer types (`u8`…`i64`), independent
//! of the crate's mask-and-sign-extend arithmetic.

#![allow(dead_code)]

macro_rules! reference {
    ($apply:ident, $pred:ident, $u:ty, $i:ty) => {
        fn $apply(f: u8, signed: bool, old: u64, p: u64, p2: u64) -> u64 {
            let (o, a, b) = (old as $u, p as $u, p2 as $u);
            let r: $u = match f {
                0 => o.wrapping_add(a),
                1 => o.wrapping_sub(a),
                2 => a,
                3 => {
                    if o == a {
                        b
                    } else {
                        o
                    }
                }
                4 if signed => (o as $i).min(a as $i) as $u,
                4 => o.min(a),
                5 if signed => (o as $i).max(a as $i) as $u,
                5 => o.max(a),
                6 => o & a,
                7 => o | a,
                8 => o ^ a,
                _ => panic!("not a builtin"),
            };
            r as u64
        }

        fn $pred(pred: u8, signed: bool, e: u64, p: u64) -> bool {
            let (eu, pu) = (e as $u, p as $u);
            let ord = if signed {
                (eu as $i).cmp(&(pu as $i))
            } else {
                eu.cmp(&pu)
            };
            match pred {
                0 => eu == pu,
                1 => eu != pu,
                2 => ord.is_lt(),
                3 => ord.is_le(),
                4 => ord.is_gt(),
                5 => ord.is_ge(),
                6 => eu & pu != 0,
                _ => panic!("not a predicate"),
            }
        }
    };
}

reference!(apply8, pred8, u8, i8);
reference!(apply16, pred16, u16, i16);
reference!(apply32, pred32, u32, i32);
reference!(apply64, pred64, u64, i64);

/// Reference built-in function `f` at `width` bytes; result zero-extended.
pub fn ref_apply(f: u8, width: usize, signed: bool, old: u64, p: u64, p2: u64) -> u64 {
    match width {
        1 => apply8(f, signed, old, p, p2),
        2 => apply16(f, signed, old, p, p2),
        4 => apply32(f, signed, old, p, p2),
        8 => apply64(f, signed, old, p, p2),
        _ => panic!("bad width"),
    }
}

/// Reference predicate `pred` at `width` bytes.
pub fn ref_pred(pred: u8, width: usize, signed: bool, e: u64, p: u64) -> bool {
    match width {
        1 => pred8(pred, signed, e, p),
        2 => pred16(pred, signed, e, p),
        4 => pred32(pred, signed, e, p),
        8 => pred64(pred, signed, e, p),
        _ => panic!("bad width"),
    }
}

/// Little-endian element at `width` bytes.
pub fn get(e: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..e.len()].copy_from_slice(e);
    u64::from_le_bytes(b)
}

/// The low `width` bytes of `v`, little-endian.
pub fn bytes(v: u64, width: usize) -> Vec<u8> {
    v.to_le_bytes()[..width].to_vec()
}

/// A `HashMap` memory stage that refuses like a storage engine, with knobs for every
/// refusal: keys longer than `max_key` are `KeyTooLarge` (read, write, delete), values
/// longer than `max_value` are `ValueTooLarge` (write), with `full` a new key is
/// `OutOfMemory`, and with `overlong_read` a read claims a length beyond the caller's
/// buffer (a broken memory stage). Counts reads and writes.
pub struct MapStore {
    pub map: std::collections::HashMap<Vec<u8>, Vec<u8>>,
    pub max_key: usize,
    pub max_value: usize,
    pub full: bool,
    pub overlong_read: bool,
    pub reads: u64,
    pub writes: u64,
}

impl Default for MapStore {
    fn default() -> Self {
        MapStore {
            map: Default::default(),
            max_key: 64,
            max_value: 64,
            full: false,
            overlong_read: false,
            reads: 0,
            writes: 0,
        }
    }
}

impl MapStore {
    /// A store holding `key = value`.
    pub fn with(key: &[u8], value: &[u8]) -> Self {
        let mut s = MapStore::default();
        s.map.insert(key.to_vec(), value.to_vec());
        s
    }
}

impl kvops::MemoryStage for MapStore {
    fn read(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, kvwire::Status> {
        use kvwire::Status;
        self.reads += 1;
        if key.len() > self.max_key {
            return Err(Status::KeyTooLarge);
        }
        let v = self.map.get(key).ok_or(Status::NotFound)?;
        if self.overlong_read {
            return Ok(out.len() + 1);
        }
        out.get_mut(..v.len())
            .ok_or(Status::ValueTooLarge)?
            .copy_from_slice(v);
        Ok(v.len())
    }

    fn write(&mut self, key: &[u8], value: &[u8]) -> kvwire::Status {
        use kvwire::Status;
        self.writes += 1;
        if key.len() > self.max_key {
            Status::KeyTooLarge
        } else if value.len() > self.max_value {
            Status::ValueTooLarge
        } else if self.full && !self.map.contains_key(key) {
            Status::OutOfMemory
        } else {
            self.map.insert(key.to_vec(), value.to_vec());
            Status::Ok
        }
    }

    fn delete(&mut self, key: &[u8]) -> kvwire::Status {
        use kvwire::Status;
        self.writes += 1;
        if key.len() > self.max_key {
            Status::KeyTooLarge
        } else if self.map.remove(key).is_some() {
            Status::Ok
        } else {
            Status::NotFound
        }
    }
}
