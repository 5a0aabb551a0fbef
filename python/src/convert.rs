//! Python → Rust conversions of the arguments: keys, values, integers, MAC and
//! IPv4 addresses, QP lists, batch operations. Every failure is a `TypeError` or a
//! `ValueError` naming the argument; nothing here panics.

use kvclient::Op;
use kvwire::payload::{func, Atomic, Width};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyInt, PyString, PyTuple};
use std::net::Ipv4Addr;

/// The Python type name of `obj`, for error messages.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// Bytes of a `bytes`, `bytearray` or `str` (UTF-8) object; `None` for other types.
fn bytes_like(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Some(b.as_bytes().to_vec()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Some(b.to_vec()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Some(s.to_cow()?.as_bytes().to_vec()));
    }
    Ok(None)
}

/// A key: `bytes`, `bytearray` or `str` (encoded UTF-8), not empty.
pub fn key(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    match bytes_like(obj)? {
        Some(k) if k.is_empty() => Err(PyValueError::new_err(format!(
            "{what}: key must not be empty"
        ))),
        Some(k) => Ok(k),
        None => Err(PyTypeError::new_err(format!(
            "{what}: key must be bytes, bytearray or str, not {}",
            type_name(obj)
        ))),
    }
}

/// A value: `bytes`, `bytearray`, `str` (UTF-8) or `int` (stored as 8 bytes
/// little-endian, the form `incr`/`cas` work on).
pub fn value(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Some(v) = bytes_like(obj)? {
        return Ok(v);
    }
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        return Ok(word(obj, what)?.to_le_bytes().to_vec());
    }
    Err(PyTypeError::new_err(format!(
        "{what}: value must be bytes, bytearray, str or int, not {}",
        type_name(obj)
    )))
}

/// A 64-bit word: an `int` in `-2**63 .. 2**64-1` (negative numbers as two's
/// complement).
pub fn word(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if !obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected an int, not {}",
            type_name(obj)
        )));
    }
    if let Ok(v) = obj.extract::<u64>() {
        return Ok(v);
    }
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(v as u64);
    }
    Err(PyValueError::new_err(format!(
        "{what}: {} is outside the 64-bit range (-2**63 .. 2**64-1)",
        obj.repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| "the int".to_string())
    )))
}

/// An `int` in `min..=max`.
pub fn int_in(obj: &Bound<'_, PyAny>, what: &str, min: u64, max: u64) -> PyResult<u64> {
    if !obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected an int, not {}",
            type_name(obj)
        )));
    }
    match obj.extract::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(PyValueError::new_err(format!(
            "{what}: expected an int in {min}..={max}"
        ))),
    }
}

/// A MAC address: `"02:00:00:00:00:01"` (or with `-`), or 6 bytes.
pub fn mac(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<[u8; 6]> {
    if let Ok(s) = obj.cast::<PyString>() {
        let s = s.to_cow()?;
        return parse_mac(&s).ok_or_else(|| {
            PyValueError::new_err(format!(
                "{what}: {s:?} is not a MAC address (expected e.g. \"02:00:00:00:00:01\")"
            ))
        });
    }
    if let Some(b) = bytes_like(obj)? {
        return <[u8; 6]>::try_from(b.as_slice()).map_err(|_| {
            PyValueError::new_err(format!(
                "{what}: a MAC address has 6 bytes, not {}",
                b.len()
            ))
        });
    }
    Err(PyTypeError::new_err(format!(
        "{what}: expected a MAC address as str or 6 bytes, not {}",
        type_name(obj)
    )))
}

use kvwire::ethernet::parse_mac;

/// An IPv4 address: a `str` such as `"127.0.0.2"` or an `ipaddress.IPv4Address`.
pub fn ipv4(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Ipv4Addr> {
    if obj.cast::<PyString>().is_err() && !obj.hasattr("packed")? {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected an IPv4 address as str, not {}",
            type_name(obj)
        )));
    }
    let s = obj.str()?;
    let s = s.to_cow()?;
    s.parse::<Ipv4Addr>()
        .map_err(|_| PyValueError::new_err(format!("{what}: {s:?} is not an IPv4 address")))
}

/// A list of `(qpn, rkey)` pairs, not empty.
pub fn qps(obj: &Bound<'_, PyAny>) -> PyResult<Vec<(u32, u32)>> {
    if obj.cast::<PyString>().is_ok() || obj.cast::<PyBytes>().is_ok() {
        return Err(PyTypeError::new_err(
            "qps: expected a list of (qpn, rkey) pairs, not a string",
        ));
    }
    let mut out = Vec::new();
    for (i, item) in obj.try_iter()?.enumerate() {
        let item = item?;
        let pair: (u32, u32) = item.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "qps[{i}]: expected a (qpn, rkey) pair of ints in 0..2**32, got {}",
                item.repr()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| type_name(&item))
            ))
        })?;
        if pair.0 >= 1 << 24 {
            return Err(PyValueError::new_err(format!(
                "qps[{i}]: QPN {} does not fit in 24 bits",
                pair.0
            )));
        }
        out.push(pair);
    }
    if out.is_empty() {
        return Err(PyValueError::new_err("qps: at least one (qpn, rkey) pair"));
    }
    Ok(out)
}

/// A timeout in seconds (`int` or `float`, > 0, at most one hour) as nanoseconds.
pub fn seconds(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    let s: f64 = obj.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what}: expected seconds as int or float, not {}",
            type_name(obj)
        ))
    })?;
    if !(s.is_finite() && s > 0.0 && s <= 3600.0) {
        return Err(PyValueError::new_err(format!(
            "{what}: {s} s is not in (0, 3600]"
        )));
    }
    Ok((s * 1e9) as u64)
}

/// What a batch entry asked for: how its reply becomes a Python value.
#[derive(Debug, Clone)]
pub enum Kind {
    /// `bytes` or `None`.
    Get,
    /// `None`.
    Put,
    /// `bool`: whether the key was present.
    Delete,
    /// `int`: the new value (the original plus this delta, mod 2**64).
    Incr(u64),
    /// `int`: the original value.
    Cas,
    /// `bool`: whether the key held this value (and so was deleted).
    CompareDelete(Vec<u8>),
    /// `list[int]` or `None` for an absent key (`vget`).
    VGet(crate::vector::Shape),
    /// `list[int]`: the value's elements.
    Elems(crate::vector::Shape),
    /// `int`: one element (REDUCE's Σ).
    Elem(crate::vector::Shape),
}

/// The fetch-and-add of `incr`.
pub fn incr_op(key: Vec<u8>, delta: u64) -> Op {
    Op::UpdateS2S {
        key,
        atomic: word_atomic(func::FETCH_ADD),
        param: delta,
        param2: 0,
    }
}

/// The compare-and-swap of `cas`.
pub fn cas_op(key: Vec<u8>, expected: u64, new: u64) -> Op {
    Op::UpdateS2S {
        key,
        atomic: word_atomic(func::CAS),
        param: expected,
        param2: new,
    }
}

fn word_atomic(func: u8) -> Atomic {
    Atomic {
        func,
        width: Width::W8,
        signed: false,
    }
}

/// One entry of `Client.batch`: a tuple (or list) `("get", key)`, `("put", key,
/// value)`, `("delete", key)`, `("compare_delete", key, value)`, `("incr", key[,
/// delta=1])` or `("cas", key, expected, new)`.
pub fn batch_op(obj: &Bound<'_, PyAny>, i: usize) -> PyResult<(Kind, Op)> {
    let what = format!("batch op {i}");
    let items: Vec<Bound<'_, PyAny>> = if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter().collect()
    } else if obj.cast::<PyString>().is_err() && obj.cast::<PyBytes>().is_err() {
        match obj.try_iter() {
            Ok(it) => it.collect::<PyResult<_>>()?,
            Err(_) => Vec::new(),
        }
    } else {
        Vec::new()
    };
    let Some(name) = items.first() else {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected a tuple such as (\"get\", key), not {}",
            type_name(obj)
        )));
    };
    let name = name
        .cast::<PyString>()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{what}: the operation name must be a str, not {}",
                type_name(name)
            ))
        })?
        .to_cow()?
        .into_owned();
    let arity = |n: &[usize], usage: &str| -> PyResult<()> {
        if n.contains(&(items.len() - 1)) {
            Ok(())
        } else {
            Err(PyTypeError::new_err(format!(
                "{what}: expected {usage}, got {} argument(s)",
                items.len() - 1
            )))
        }
    };
    match name.as_str() {
        "get" => {
            arity(&[1], "(\"get\", key)")?;
            let key = key(&items[1], &what)?;
            Ok((Kind::Get, Op::Get { key }))
        }
        "put" => {
            arity(&[2], "(\"put\", key, value)")?;
            let key = key(&items[1], &what)?;
            let value = value(&items[2], &what)?;
            Ok((Kind::Put, Op::Put { key, value }))
        }
        "delete" => {
            arity(&[1], "(\"delete\", key)")?;
            let key = key(&items[1], &what)?;
            Ok((Kind::Delete, Op::Delete { key }))
        }
        "compare_delete" => {
            arity(&[2], "(\"compare_delete\", key, value)")?;
            let key = key(&items[1], &what)?;
            let expected = value(&items[2], &what)?;
            let kind = Kind::CompareDelete(expected.clone());
            Ok((kind, Op::CompareDelete { key, expected }))
        }
        "incr" => {
            arity(&[1, 2], "(\"incr\", key[, delta])")?;
            let key = key(&items[1], &what)?;
            let delta = match items.get(2) {
                Some(d) => word(d, &what)?,
                None => 1,
            };
            Ok((Kind::Incr(delta), incr_op(key, delta)))
        }
        "cas" => {
            arity(&[3], "(\"cas\", key, expected, new)")?;
            let key = key(&items[1], &what)?;
            let expected = word(&items[2], &what)?;
            let new = word(&items[3], &what)?;
            Ok((Kind::Cas, cas_op(key, expected, new)))
        }
        other => Err(PyValueError::new_err(format!(
            "{what}: unknown operation {other:?} (expected get, put, delete, compare_delete, incr or cas)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_mac;

    #[test]
    fn macs() {
        assert_eq!(parse_mac("02:00:00:00:00:0a"), Some([2, 0, 0, 0, 0, 0x0a]));
        assert_eq!(parse_mac("2-0-0-0-0-1"), Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(parse_mac("02:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:01:02"), None);
        assert_eq!(parse_mac("02:00:00:00:00:100"), None);
        assert_eq!(parse_mac("02::00:00:00:01"), None);
        assert_eq!(parse_mac("zz:00:00:00:00:01"), None);
        assert_eq!(parse_mac(""), None);
        assert_eq!(parse_mac("+2:00:00:00:00:01"), None);
    }
}
