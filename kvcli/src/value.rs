//! Input and output of keys, values, integers, vectors and function names.
//!
//! Keys and values are text, or hex with a `0x` prefix (`0x` alone is the empty
//! value). Integers are decimal, negative decimal (two's complement of the
//! element width) or `0x` hex. Vectors are comma-separated integers of one
//! width, stored little-endian as the protocol's vector ops expect.

use kvwire::payload::{elems, func, pred, Width};
use serde_json::Value as Json;

/// Largest request payload of the default MTU (1500).
fn payload_capacity() -> usize {
    kvwire::request_payload_capacity(kvwire::DEFAULT_MTU)
}

/// Batch header (8 B) + a PUT's op byte, key length and value length (4 B).
const PUT_OVERHEAD: usize = 8 + 1 + 1 + 2;

/// Parses text or `0x` hex into bytes; `\0x…` is the text `0x…` (the backslash
/// dropped), the way to store text that starts with `0x`.
pub fn parse_bytes(s: &str) -> Result<Vec<u8>, String> {
    if let Some(text) = s.strip_prefix('\\').filter(|t| is_hex_prefixed(t)) {
        return Ok(text.as_bytes().to_vec());
    }
    let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) else {
        return Ok(s.as_bytes().to_vec());
    };
    if hex.len() % 2 != 0 {
        return Err(format!(
            "bad hex {s:?}: odd number of hex digits ({}); write two per byte",
            hex.len()
        ));
    }
    let digit = |c: u8| {
        (c as char)
            .to_digit(16)
            .map(|d| d as u8)
            .ok_or_else(|| format!("bad hex {s:?}: {:?} is not a hex digit", c as char))
    };
    hex.as_bytes()
        .chunks_exact(2)
        .map(|pair| Ok(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// Whether `s` starts with `0x` or `0X` (hex input).
fn is_hex_prefixed(s: &str) -> bool {
    s.starts_with("0x") || s.starts_with("0X")
}

/// Parses a key and checks the protocol's length limits (1 to 255 bytes).
pub fn parse_key(s: &str) -> Result<Vec<u8>, String> {
    let k = parse_bytes(s)?;
    if k.is_empty() {
        return Err("the key must not be empty".into());
    }
    if k.len() > kvwire::MAX_KEY_LEN {
        return Err(format!(
            "the key is {} bytes; the protocol allows at most {}",
            k.len(),
            kvwire::MAX_KEY_LEN
        ));
    }
    Ok(k)
}

/// The largest value a PUT of `key_len` bytes can carry in one request packet.
pub fn max_value_len(key_len: usize) -> usize {
    payload_capacity()
        .saturating_sub(PUT_OVERHEAD + key_len)
        .min(kvwire::MAX_VALUE_LEN)
}

/// Parses a value for a key of `key_len` bytes and checks it fits in one request.
pub fn parse_value(s: &str, key_len: usize) -> Result<Vec<u8>, String> {
    let v = parse_bytes(s)?;
    let max = max_value_len(key_len);
    if v.len() > max {
        return Err(format!(
            "the value is {} bytes; with a {key_len}-byte key at most {max} fit in one \
             request ({} B of payload per packet at MTU {})",
            v.len(),
            payload_capacity(),
            kvwire::DEFAULT_MTU
        ));
    }
    Ok(v)
}

/// Printable text: valid UTF-8 without control characters.
fn printable(v: &[u8]) -> Option<&str> {
    std::str::from_utf8(v)
        .ok()
        .filter(|s| !s.chars().any(char::is_control))
}

/// Bytes as `0x…` hex.
pub fn hex(v: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * v.len());
    s.push_str("0x");
    for b in v {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Bytes for output: text when printable (and not forced to hex), else hex.
/// Returns the string and its encoding (`"text"` or `"hex"`).
pub fn show(v: &[u8], force_hex: bool) -> (String, &'static str) {
    match printable(v) {
        Some(s) if !force_hex && !s.starts_with("0x") => (s.to_string(), "text"),
        _ => (hex(v), "hex"),
    }
}

/// An element width from `1`, `2`, `4` or `8` bytes.
pub fn parse_width(s: &str) -> Result<Width, String> {
    s.parse::<usize>()
        .ok()
        .and_then(Width::from_bytes)
        .ok_or_else(|| format!("bad width {s:?}: use 1, 2, 4 or 8 (bytes)"))
}

/// Parses an integer of `width` bytes: decimal, negative decimal or `0x` hex.
pub fn parse_int(s: &str, width: Width) -> Result<u64, String> {
    let bytes = width.bytes();
    let t = s.trim();
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).map_err(|_| format!("bad hex integer {s:?}"))?
    } else if let Some(neg) = t.strip_prefix('-') {
        let n: u64 = neg
            .parse()
            .map_err(|_| format!("bad integer {s:?} (decimal, -decimal or 0x hex)"))?;
        let min = 1u64 << (bytes * 8 - 1);
        if n > min {
            return Err(format!(
                "{s} does not fit in {bytes} byte(s) (signed minimum -{min})"
            ));
        }
        n.wrapping_neg() & width.mask()
    } else {
        t.parse::<u64>()
            .map_err(|_| format!("bad integer {s:?} (decimal, -decimal or 0x hex)"))?
    };
    if v & !width.mask() != 0 {
        return Err(format!(
            "{s} does not fit in {bytes} byte(s) (at most {})",
            width.mask()
        ));
    }
    Ok(v)
}

/// A `width`-byte element as a JSON/printed number, signed or not.
pub fn elem_value(x: u64, width: Width, signed: bool) -> i128 {
    if signed {
        i128::from(elems::signed(x, width))
    } else {
        i128::from(x)
    }
}

/// A number as JSON (u64 and i64 range; exact).
pub fn json_num(v: i128) -> Json {
    if let Ok(u) = u64::try_from(v) {
        Json::from(u)
    } else if let Ok(i) = i64::try_from(v) {
        Json::from(i)
    } else {
        Json::from(v.to_string())
    }
}

/// Splits a little-endian vector into `width`-byte elements.
pub fn decode_elems(v: &[u8], width: Width) -> Result<Vec<u64>, String> {
    elems::decode(v, width).ok_or_else(|| {
        format!(
            "the value is {} bytes, not a vector of {}-byte elements",
            v.len(),
            width.bytes()
        )
    })
}

/// Comma-separated integers of `width` bytes, as a little-endian vector.
pub fn parse_vector(s: &str, width: Width) -> Result<Vec<u8>, String> {
    if s.trim().is_empty() {
        return Err("empty vector: give comma-separated integers, e.g. 1,2,3".into());
    }
    let mut out = Vec::new();
    for item in s.split(',') {
        let x = parse_int(item, width)?;
        out.extend_from_slice(&x.to_le_bytes()[..width.bytes()]);
    }
    Ok(out)
}

/// Elements for output: space-separated numbers.
pub fn show_elems(xs: &[u64], width: Width, signed: bool) -> String {
    let v: Vec<String> = xs
        .iter()
        .map(|&x| elem_value(x, width, signed).to_string())
        .collect();
    v.join(" ")
}

/// Elements as a JSON array.
pub fn json_elems(xs: &[u64], width: Width, signed: bool) -> Json {
    Json::Array(
        xs.iter()
            .map(|&x| json_num(elem_value(x, width, signed)))
            .collect(),
    )
}

/// `found` (a name or id looked up in `table`), or the error naming the choices.
fn named(s: &str, found: Option<u8>, table: &[(&str, u8)], what: &str) -> Result<u8, String> {
    found.ok_or_else(|| {
        let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
        format!(
            "unknown {what} {s:?}: use {} or an id 0-255",
            names.join(", ")
        )
    })
}

/// A function by name or id (`kvwire::payload::func::NAMES`).
pub fn parse_func(s: &str) -> Result<u8, String> {
    named(s, func::by_name(s), func::NAMES, "function")
}

/// A predicate by name or id (`kvwire::payload::pred::NAMES`).
pub fn parse_pred(s: &str) -> Result<u8, String> {
    named(s, pred::by_name(s), pred::NAMES, "predicate")
}

/// The name of function `id` (its number if it has none).
pub fn func_name(id: u8) -> String {
    func::NAMES
        .iter()
        .find(|(_, f)| *f == id)
        .map_or_else(|| id.to_string(), |(n, _)| n.to_string())
}

/// What a built-in function makes of element `x` (`None` for user functions,
/// whose effect only the server knows).
pub fn apply(f: u8, x: u64, p: u64, p2: u64, width: Width, signed: bool) -> Option<u64> {
    let m = width.mask();
    let (sx, sp) = (elem_value(x, width, signed), elem_value(p, width, signed));
    let r = match f {
        func::FETCH_ADD => x.wrapping_add(p),
        func::FETCH_SUB => x.wrapping_sub(p),
        func::SWAP => p,
        func::CAS => {
            if x == p {
                p2
            } else {
                x
            }
        }
        func::MIN => {
            if sx <= sp {
                x
            } else {
                p
            }
        }
        func::MAX => {
            if sx >= sp {
                x
            } else {
                p
            }
        }
        func::AND => x & p,
        func::OR => x | p,
        func::XOR => x ^ p,
        _ => return None,
    };
    Some(r & m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_in_and_out() {
        assert_eq!(parse_bytes("abc").unwrap(), b"abc");
        assert_eq!(parse_bytes("0x00ff").unwrap(), [0, 255]);
        assert_eq!(parse_bytes("0x").unwrap(), b"");
        assert!(parse_bytes("0xzz")
            .unwrap_err()
            .contains("'z' is not a hex digit"));
        assert!(parse_bytes("0xabc").unwrap_err().contains("odd number"));
        assert!(parse_bytes("0xé1").is_err());
        // Text that starts with 0x: a backslash in front, dropped.
        assert_eq!(parse_bytes("\\0xabc").unwrap(), b"0xabc");
        assert_eq!(parse_bytes("\\0X").unwrap(), b"0X");
        assert_eq!(parse_bytes("\\abc").unwrap(), b"\\abc", "only before 0x");
        assert_eq!(show(b"hi", false), ("hi".into(), "text"));
        assert_eq!(show(b"hi", true), ("0x6869".into(), "hex"));
        assert_eq!(show(&[0, 1], false), ("0x0001".into(), "hex"));
        assert_eq!(show(b"0x12", false).1, "hex", "text that looks like hex");
        assert_eq!(show(b"", false), ("".into(), "text"));
    }

    #[test]
    fn limits() {
        assert!(parse_key("").unwrap_err().contains("empty"));
        assert!(parse_key(&"k".repeat(256))
            .unwrap_err()
            .contains("at most 255"));
        assert!(parse_key(&"k".repeat(255)).is_ok());
        let max = max_value_len(1);
        assert_eq!(max, 1440 - 12 - 1);
        assert!(parse_value(&"v".repeat(max), 1).is_ok());
        let e = parse_value(&"v".repeat(max + 1), 1).unwrap_err();
        assert!(e.contains(&format!("at most {max}")), "{e}");
        assert!(parse_value(&"v".repeat(1 << 20), 1).is_err());
    }

    #[test]
    fn integers() {
        assert_eq!(parse_int("5", Width::W8), Ok(5));
        assert_eq!(parse_int("-1", Width::W8), Ok(u64::MAX));
        assert_eq!(parse_int("-1", Width::W1), Ok(255));
        assert_eq!(parse_int("-128", Width::W1), Ok(128));
        assert!(parse_int("-129", Width::W1).is_err());
        assert!(parse_int("256", Width::W1)
            .unwrap_err()
            .contains("at most 255"));
        assert_eq!(parse_int("0xff", Width::W1), Ok(255));
        assert!(parse_int("0x", Width::W8).is_err());
        assert!(parse_int("", Width::W8).is_err());
        assert!(parse_int("18446744073709551616", Width::W8).is_err());
        assert_eq!(elem_value(255, Width::W1, true), -1);
        assert_eq!(elem_value(255, Width::W1, false), 255);
    }

    #[test]
    fn vectors() {
        let v = parse_vector("1,2,-1", Width::W2).unwrap();
        assert_eq!(v, [1, 0, 2, 0, 255, 255]);
        let xs = decode_elems(&v, Width::W2).unwrap();
        assert_eq!(show_elems(&xs, Width::W2, true), "1 2 -1");
        assert_eq!(show_elems(&xs, Width::W2, false), "1 2 65535");
        assert!(decode_elems(&v, Width::W4).is_err());
        assert!(parse_vector("", Width::W1).is_err());
        assert!(parse_vector("1,,2", Width::W1).is_err());
        assert_eq!(parse_width("4"), Ok(Width::W4));
        assert!(parse_width("3").is_err());
    }

    #[test]
    fn functions() {
        assert_eq!(parse_func("ADD"), Ok(func::FETCH_ADD));
        assert_eq!(parse_func("200"), Ok(200));
        assert!(parse_func("mul").unwrap_err().contains("add, sub"));
        assert_eq!(parse_pred("gt"), Ok(pred::GT));
        assert_eq!(func_name(130), "130");
        assert_eq!(apply(func::FETCH_ADD, 255, 1, 0, Width::W1, false), Some(0));
        assert_eq!(apply(func::MIN, 255, 1, 0, Width::W1, true), Some(255));
        assert_eq!(apply(func::MIN, 255, 1, 0, Width::W1, false), Some(1));
        assert_eq!(apply(func::CAS, 3, 3, 9, Width::W8, false), Some(9));
        assert_eq!(apply(200, 3, 3, 9, Width::W8, false), None);
    }
}
