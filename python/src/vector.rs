//! Arguments of the vector operations (`vput`, `vget`, `vupdate`, `vapply`, `reduce`,
//! `filter`; docs/PROTOCOL.md §3.2): element widths, function and predicate names,
//! element lists. A vector is `width`-byte little-endian elements back to back
//! (`kvwire::payload::elems`, the encoding kvcli uses too).

use crate::convert::type_name;
use kvwire::payload::{elems, func, pred, Atomic, Width};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};

/// Element width and signedness of one call.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Element width.
    pub width: Width,
    /// Elements (and parameters) are two's complement.
    pub signed: bool,
}

impl Shape {
    /// From the `width=` (bytes: 1, 2, 4, 8) and `signed=` arguments.
    pub fn new(width: usize, signed: bool, what: &str) -> PyResult<Shape> {
        let width = Width::from_bytes(width).ok_or_else(|| {
            PyValueError::new_err(format!("{what}: width is 1, 2, 4 or 8 bytes, not {width}"))
        })?;
        Ok(Shape { width, signed })
    }

    /// The atomic descriptor of function or predicate `id`.
    pub fn atomic(self, id: u8) -> Atomic {
        Atomic {
            func: id,
            width: self.width,
            signed: self.signed,
        }
    }

    /// One element: an `int` within the width (signed or unsigned range; negative
    /// numbers as two's complement).
    pub fn elem(self, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
        if !obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyBool>() {
            return Err(PyTypeError::new_err(format!(
                "{what}: expected an int, not {}",
                type_name(obj)
            )));
        }
        let bits = 8 * self.width.bytes() as u32;
        let fits = match (obj.extract::<u64>(), obj.extract::<i64>()) {
            (Ok(u), _) => (bits == 64 || u >> bits == 0).then_some(u),
            (_, Ok(i)) => (bits == 64 || i >= -(1i64 << (bits - 1))).then_some(i as u64),
            _ => None,
        };
        fits.map(|x| x & self.width.mask()).ok_or_else(|| {
            PyValueError::new_err(format!(
                "{what}: {} does not fit in {} byte(s)",
                obj.repr()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| "the int".into()),
                self.width.bytes()
            ))
        })
    }

    /// A vector: an iterable of ints, as vector bytes.
    pub fn vector(self, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
        if obj.cast::<PyString>().is_ok() || obj.cast::<PyBytes>().is_ok() {
            return Err(PyTypeError::new_err(format!(
                "{what}: expected a sequence of ints, not {}",
                type_name(obj)
            )));
        }
        let mut xs = Vec::new();
        for (i, x) in obj.try_iter()?.enumerate() {
            xs.push(self.elem(&x?, &format!("{what}[{i}]"))?);
        }
        Ok(elems::encode(&xs, self.width))
    }

    /// Elements of a vector value as Python ints (signed per the shape).
    pub fn to_list<'py>(self, py: Python<'py>, v: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let xs = elems::decode(v, self.width).ok_or_else(|| {
            PyValueError::new_err(format!(
                "the value is {} bytes, not a vector of {}-byte elements",
                v.len(),
                self.width.bytes()
            ))
        })?;
        if self.signed {
            let s: Vec<i64> = xs.iter().map(|&x| elems::signed(x, self.width)).collect();
            Ok(s.into_pyobject(py)?.into_any())
        } else {
            Ok(xs.into_pyobject(py)?.into_any())
        }
    }

    /// One element value (REDUCE's Σ) as a Python int.
    pub fn to_int<'py>(self, py: Python<'py>, v: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        match elems::decode(v, self.width).as_deref() {
            Some(&[x]) if self.signed => {
                Ok(elems::signed(x, self.width).into_pyobject(py)?.into_any())
            }
            Some(&[x]) => Ok(x.into_pyobject(py)?.into_any()),
            _ => Err(PyValueError::new_err(format!(
                "expected one {}-byte element, got {} bytes",
                self.width.bytes(),
                v.len()
            ))),
        }
    }
}

/// A function: a name (`add sub swap cas min max and or xor`, any case) or an id
/// 0–255.
pub fn func_id(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u8> {
    named(obj, what, "function", func::by_name, func::NAMES)
}

/// A predicate: a name (`eq ne lt le gt ge any`, any case) or an id 0–255.
pub fn pred_id(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u8> {
    named(obj, what, "predicate", pred::by_name, pred::NAMES)
}

fn named(
    obj: &Bound<'_, PyAny>,
    what: &str,
    kind: &str,
    by_name: fn(&str) -> Option<u8>,
    names: &[(&str, u8)],
) -> PyResult<u8> {
    let found = if let Ok(s) = obj.cast::<PyString>() {
        by_name(&s.to_cow()?)
    } else if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        obj.extract::<u8>().ok()
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what}: the {kind} is a name or an int id, not {}",
            type_name(obj)
        )));
    };
    found.ok_or_else(|| {
        let list: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
        PyValueError::new_err(format!(
            "{what}: unknown {kind} {}: use {} or an id 0-255",
            obj.repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| "?".into()),
            list.join(", ")
        ))
    })
}
