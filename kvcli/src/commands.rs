//! Runs one command against a connected client and describes the outcome (text
//! for people, a JSON object for scripts, an exit code).

use crate::args::{Cmd, ElemArgs, OutArgs, EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, EXIT_UNREACHABLE};
use crate::value::{self as v, json_num};
use kvclient::{Client, Error, KernelIo, Op};
use kvwire::payload::{func, Atomic, Width};
use kvwire::Status;
use serde_json::{Map, Value as Json};
use std::io::Write;

/// The connected client kvcli uses.
pub type Kv = Client<KernelIo>;

/// What a command produced.
#[derive(Debug)]
pub struct Outcome {
    /// Exit code (`args::EXIT_*`).
    pub code: i32,
    /// Human output (stdout), without the final newline.
    pub text: String,
    /// The JSON object (`cmd`, `key`, results, and `error` on failure).
    pub json: Map<String, Json>,
    /// The error message (stderr), if the command failed.
    pub error: Option<String>,
}

impl Outcome {
    /// A command that failed before reaching the server, or a failure of it.
    pub fn fail(cmd: &str, key: Option<&str>, code: i32, msg: String) -> Outcome {
        let mut json = Map::new();
        json.insert("cmd".into(), cmd.into());
        if let Some(k) = key {
            json.insert("key".into(), k.into());
        }
        json.insert("error".into(), msg.clone().into());
        json.insert("exit".into(), code.into());
        Outcome {
            code,
            text: String::new(),
            json,
            error: Some(msg),
        }
    }

    /// Prints the outcome: the JSON object, or the text and the error (a closed
    /// stdout is ignored, never a panic).
    pub fn print(&self, out: OutArgs) {
        let mut so = std::io::stdout().lock();
        if out.json {
            let _ = writeln!(so, "{}", Json::Object(self.json.clone()));
        } else if self.error.is_none() {
            let _ = writeln!(so, "{}", self.text);
        }
        let _ = so.flush();
        if let Some(e) = &self.error {
            if !out.json || self.code != EXIT_NOT_FOUND {
                let _ = writeln!(std::io::stderr(), "kvcli: {e}");
            }
        }
    }
}

/// Exit code and message for a client error.
pub fn error_code(e: &Error) -> (i32, String) {
    match e {
        Error::Status(Status::NotFound) => (EXIT_NOT_FOUND, "key not found".into()),
        // Resent across a failover, begun by the old master: as a timeout, the outcome
        // is unknown (docs/PROTOCOL.md §6.6).
        Error::Status(Status::OutcomeUnknown) => (
            EXIT_UNREACHABLE,
            "server answered OUTCOME_UNKNOWN: the master failed while running it              (outcome unknown)"
                .into(),
        ),
        Error::Status(s) => {
            let hint = match s {
                Status::BadLength => {
                    " (the value is not a vector of --width elements, not exactly one \
                     element for a scalar op, or the Δ vector's length differs)"
                }
                Status::UnknownFunction => {
                    " (function not defined for this op, or not registered: see \
                     docs/PROTOCOL.md §3.2)"
                }
                Status::WrongPartition => " (--partitions does not match the dataplane's workers)",
                Status::ValueTooLarge | Status::KeyTooLarge => " (beyond the server's limit)",
                Status::Denied => " (not allowed to this tenant: its ACL or namespace)",
                _ => "",
            };
            let name = s.name().to_ascii_uppercase();
            (EXIT_ERROR, format!("server answered {name}{hint}"))
        }
        Error::Timeout | Error::ConnectionLost | Error::Deadline => (
            EXIT_UNREACHABLE,
            format!("request timed out ({e}): server unreachable? (outcome unknown)"),
        ),
        Error::NotExecuted => (EXIT_UNREACHABLE, format!("{e} (not executed)")),
        Error::ConnectTimeout => (
            EXIT_UNREACHABLE,
            "server unreachable: no ACCEPT within the connect timeout".into(),
        ),
        Error::TooLarge => (
            EXIT_ERROR,
            "the operation does not fit in one request".into(),
        ),
        Error::Invalid(p) => (EXIT_ERROR, format!("cannot encode the operation: {p}")),
        Error::BadResponse => (EXIT_ERROR, "malformed response from the server".into()),
        Error::NoQp => (
            EXIT_ERROR,
            "no client QP serves this key's partition (see --qpn, --partitions)".into(),
        ),
    }
}

/// Checks a command's input without a server (what [`run`] would reject).
pub fn check(cmd: &Cmd) -> Result<(), String> {
    let w = |e: &ElemArgs| v::parse_width(&e.width);
    if let Some(k) = cmd.key() {
        v::parse_key(k)?;
    }
    match cmd {
        Cmd::Get { .. } | Cmd::Del { .. } => {}
        Cmd::Cad { key, value } => {
            v::parse_value(value, v::parse_key(key)?.len())?;
        }
        Cmd::Put { key, value, stdin } => {
            put_value(v::parse_key(key)?.len(), value.as_deref(), stdin.as_deref())?;
        }
        Cmd::Incr { n, .. } => {
            v::parse_int(n.as_deref().unwrap_or("1"), Width::W8)?;
        }
        Cmd::Cas { expected, new, .. } => {
            v::parse_int(expected, Width::W8)?;
            v::parse_int(new, Width::W8)?;
        }
        Cmd::Update {
            func,
            param,
            param2,
            elem,
            ..
        }
        | Cmd::Vupdate {
            func,
            param,
            param2,
            elem,
            ..
        } => {
            let w = w(elem)?;
            v::parse_func(func)?;
            v::parse_int(param, w)?;
            v::parse_int(param2.as_deref().unwrap_or("0"), w)?;
        }
        Cmd::Vput { elems, elem, .. } => {
            v::parse_vector(elems, w(elem)?)?;
        }
        Cmd::Vget { elem, .. } => {
            w(elem)?;
        }
        Cmd::Vadd { delta, elem, .. } => {
            v::parse_int(delta, w(elem)?)?;
        }
        Cmd::Vapply {
            func, deltas, elem, ..
        } => {
            v::parse_func(func)?;
            v::parse_vector(deltas, w(elem)?)?;
        }
        Cmd::Reduce {
            func, init, elem, ..
        } => {
            v::parse_func(func)?;
            v::parse_int(init, w(elem)?)?;
        }
        Cmd::Filter {
            pred, param, elem, ..
        } => {
            v::parse_pred(pred)?;
            v::parse_int(param, w(elem)?)?;
        }
        Cmd::Stats { count } => {
            parse_count(count)?;
        }
        Cmd::Tx { script } => {
            crate::txn::parse(script)?;
        }
    }
    Ok(())
}

/// `stats --count`: 1..=100000.
pub(crate) fn parse_count(count: &str) -> Result<usize, String> {
    count
        .parse()
        .ok()
        .filter(|n| (1..=100_000).contains(n))
        .ok_or_else(|| format!("bad --count {count:?}: 1..=100000"))
}

/// Runs `cmd` on `kv`.
pub fn run(kv: &mut Kv, cmd: &Cmd, out: OutArgs) -> Outcome {
    let name = cmd.name();
    let key = cmd.key();
    let mut json = Map::new();
    json.insert("cmd".into(), name.into());
    if let Some(k) = key {
        json.insert("key".into(), k.into());
    }
    match exec(kv, cmd, out, &mut json) {
        Ok(Done { code, text }) => Outcome {
            code,
            text,
            json,
            error: None,
        },
        Err(Fail::Input(msg)) => Outcome::fail(name, key, EXIT_ERROR, msg),
        Err(Fail::Client(e)) => {
            let (code, msg) = error_code(&e);
            let mut o = Outcome::fail(name, key, code, msg);
            if code == EXIT_NOT_FOUND {
                o.json.remove("error");
                o.json.remove("exit");
                o.json.insert("found".into(), false.into());
            }
            o
        }
    }
}

/// A command that reached the server and got an answer.
pub(crate) struct Done {
    /// Exit code.
    pub(crate) code: i32,
    /// Human output.
    pub(crate) text: String,
}

/// Why a command failed.
pub(crate) enum Fail {
    /// Bad input (exit 2).
    Input(String),
    /// The client or the server said no.
    Client(Error),
}

impl From<String> for Fail {
    fn from(s: String) -> Self {
        Fail::Input(s)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Client(e)
    }
}

/// Success with `text`.
pub(crate) fn ok(text: String) -> Result<Done, Fail> {
    Ok(Done {
        code: EXIT_OK,
        text,
    })
}

fn elem(e: &ElemArgs) -> Result<(Width, bool), Fail> {
    Ok((v::parse_width(&e.width)?, e.signed))
}

fn atomic(func: u8, width: Width, signed: bool) -> Atomic {
    Atomic {
        func,
        width,
        signed,
    }
}

fn exec(kv: &mut Kv, cmd: &Cmd, out: OutArgs, j: &mut Map<String, Json>) -> Result<Done, Fail> {
    match cmd {
        Cmd::Get { key } => get(kv, j, key, out.hex),
        Cmd::Put { key, value, stdin } => {
            let k = v::parse_key(key)?;
            let val = put_value(k.len(), value.as_deref(), stdin.as_deref())?;
            kv.put(&k, &val)?;
            j.insert("ok".into(), true.into());
            j.insert("bytes".into(), val.len().into());
            ok("OK".into())
        }
        Cmd::Del { key } => {
            let k = v::parse_key(key)?;
            if !kv.delete(&k)? {
                return Err(Error::Status(Status::NotFound).into());
            }
            j.insert("deleted".into(), true.into());
            ok("deleted".into())
        }
        Cmd::Cad { key, value } => cad(kv, j, key, value, out.hex),
        Cmd::Incr { key, n } => {
            let k = v::parse_key(key)?;
            let d = v::parse_int(n.as_deref().unwrap_or("1"), Width::W8)?;
            // Counters are 8-byte two's complement integers, shown signed
            // (docs/CLIENTS.md): `incr n -7` on 5 is -2. A missing one is created.
            let old = kv.incr(&k, d)? as i64;
            let new = old.wrapping_add(d as i64);
            j.insert("old".into(), old.into());
            j.insert("value".into(), new.into());
            ok(new.to_string())
        }
        Cmd::Cas { key, expected, new } => cas(kv, j, key, expected, new),
        Cmd::Update {
            key,
            func,
            param,
            param2,
            elem: ea,
        } => update(kv, j, key, func, param, param2.as_deref(), ea),
        Cmd::Vput {
            key,
            elems,
            elem: ea,
        } => vput(kv, j, key, elems, ea),
        Cmd::Vget { key, elem: ea } => {
            let k = v::parse_key(key)?;
            let (w, signed) = elem(ea)?;
            let val = kv.get(&k)?.ok_or(Error::Status(Status::NotFound))?;
            let xs = v::decode_elems(&val, w)?;
            j.insert("found".into(), true.into());
            j.insert("elements".into(), v::json_elems(&xs, w, signed));
            ok(v::show_elems(&xs, w, signed))
        }
        Cmd::Vadd {
            key,
            delta,
            elem: ea,
        } => s2v(kv, j, key, func::FETCH_ADD, delta, None, ea),
        Cmd::Vupdate {
            key,
            func,
            param,
            param2,
            elem: ea,
        } => {
            let f = v::parse_func(func)?;
            s2v(kv, j, key, f, param, param2.as_deref(), ea)
        }
        Cmd::Vapply {
            key,
            func,
            deltas,
            elem: ea,
        } => vapply(kv, j, key, func, deltas, ea),
        Cmd::Reduce {
            key,
            func,
            init,
            elem: ea,
        } => {
            let (f, xs, w, signed) = elem_scalar_op(
                kv,
                key,
                ea,
                || v::parse_func(func),
                init,
                |key, atomic, init| Op::Reduce { key, atomic, init },
            )?;
            let sum = v::elem_value(xs.first().copied().unwrap_or(0), w, signed);
            j.insert("func".into(), v::func_name(f).into());
            j.insert("value".into(), json_num(sum));
            ok(sum.to_string())
        }
        Cmd::Filter {
            key,
            pred,
            param,
            elem: ea,
        } => {
            let (_, xs, w, signed) = elem_scalar_op(
                kv,
                key,
                ea,
                || v::parse_pred(pred),
                param,
                |key, atomic, param| Op::Filter { key, atomic, param },
            )?;
            j.insert("elements".into(), v::json_elems(&xs, w, signed));
            ok(v::show_elems(&xs, w, signed))
        }
        Cmd::Stats { count } => crate::stats::run(kv, j, count),
        Cmd::Tx { script } => crate::txn::run(kv, script, out.hex, j),
    }
}

/// The value of a `put`: the bytes read from stdin (-x), else the argument (text
/// or 0x hex).
fn put_value(key_len: usize, value: Option<&str>, stdin: Option<&[u8]>) -> Result<Vec<u8>, String> {
    match (stdin, value) {
        (Some(_), Some(_)) => Err("put -x reads the value from stdin: give no VALUE".into()),
        (Some(b), None) => {
            let max = v::max_value_len(key_len);
            if b.len() > max {
                return Err(format!(
                    "the value is {} bytes; with a {key_len}-byte key at most {max} fit in one \
                     request",
                    b.len()
                ));
            }
            Ok(b.to_vec())
        }
        (None, Some(s)) => v::parse_value(s, key_len),
        (None, None) => Err("put needs a VALUE (or -x to read it from stdin)".into()),
    }
}

/// `get KEY`.
fn get(kv: &mut Kv, j: &mut Map<String, Json>, key: &str, hex: bool) -> Result<Done, Fail> {
    let k = v::parse_key(key)?;
    let val = kv.get(&k)?.ok_or(Error::Status(Status::NotFound))?;
    let (s, enc) = v::show(&val, hex);
    j.insert("found".into(), true.into());
    j.insert("value".into(), s.clone().into());
    j.insert("encoding".into(), enc.into());
    // An empty value is shown as redis-cli shows it, not as a blank line.
    ok(if val.is_empty() { "\"\"".into() } else { s })
}

/// `cad KEY VALUE`: compare-and-delete; exit 1 unless it deleted.
fn cad(
    kv: &mut Kv,
    j: &mut Map<String, Json>,
    key: &str,
    value: &str,
    hex: bool,
) -> Result<Done, Fail> {
    let k = v::parse_key(key)?;
    let expected = v::parse_value(value, k.len())?;
    let r = kv.exec(Op::CompareDelete {
        key: k,
        expected: expected.clone(),
    })?;
    let held = r.ok()?;
    let deleted = held == expected;
    j.insert("deleted".into(), deleted.into());
    if deleted {
        return ok("deleted".into());
    }
    let (shown, enc) = v::show(&held, hex);
    j.insert("value".into(), shown.clone().into());
    j.insert("encoding".into(), enc.into());
    Ok(Done {
        code: EXIT_NOT_FOUND,
        text: format!("not deleted (it holds {shown})"),
    })
}

/// `cas KEY EXPECTED NEW` (8-byte counters).
fn cas(
    kv: &mut Kv,
    j: &mut Map<String, Json>,
    key: &str,
    expected: &str,
    new: &str,
) -> Result<Done, Fail> {
    let k = v::parse_key(key)?;
    let e = v::parse_int(expected, Width::W8)?;
    let n = v::parse_int(new, Width::W8)?;
    let old = kv.cas(&k, Width::W8, e, n)?;
    let swapped = old == e;
    // Shown signed, as every counter (docs/CLIENTS.md).
    let (old, e, n) = (old as i64, e as i64, n as i64);
    j.insert("swapped".into(), swapped.into());
    j.insert("old".into(), old.into());
    j.insert("value".into(), if swapped { n } else { old }.into());
    ok(if swapped {
        format!("swapped (was {old}, now {n})")
    } else {
        format!("not swapped (value is {old}, expected {e})")
    })
}

/// `update KEY FUNC PARAM [PARAM2]`: an atomic on a scalar element.
fn update(
    kv: &mut Kv,
    j: &mut Map<String, Json>,
    key: &str,
    func: &str,
    param: &str,
    param2: Option<&str>,
    ea: &ElemArgs,
) -> Result<Done, Fail> {
    let k = v::parse_key(key)?;
    let (w, signed) = elem(ea)?;
    let f = v::parse_func(func)?;
    let p = v::parse_int(param, w)?;
    let p2 = v::parse_int(param2.unwrap_or("0"), w)?;
    let op = Op::UpdateS2S {
        key: k,
        atomic: atomic(f, w, signed),
        param: p,
        param2: p2,
    };
    let r = kv.exec(op)?.ok()?;
    let xs = v::decode_elems(&r, w)?;
    let old = xs.first().copied().unwrap_or(0);
    let new = v::apply(f, old, p, p2, w, signed);
    j.insert("func".into(), v::func_name(f).into());
    j.insert("old".into(), json_num(v::elem_value(old, w, signed)));
    let mut text = format!("old {}", v::elem_value(old, w, signed));
    if let Some(n) = new {
        j.insert("value".into(), json_num(v::elem_value(n, w, signed)));
        text.push_str(&format!(" new {}", v::elem_value(n, w, signed)));
    }
    ok(text)
}

/// `vput KEY ELEMS`: a vector stored whole (one request).
fn vput(
    kv: &mut Kv,
    j: &mut Map<String, Json>,
    key: &str,
    elems: &str,
    ea: &ElemArgs,
) -> Result<Done, Fail> {
    let k = v::parse_key(key)?;
    let (w, _) = elem(ea)?;
    let val = v::parse_vector(elems, w)?;
    let max = v::max_value_len(k.len());
    if val.len() > max {
        return Err(Fail::Input(format!(
            "the vector is {} bytes; at most {max} fit in one request ({} elements \
             of {} bytes)",
            val.len(),
            max / w.bytes(),
            w.bytes()
        )));
    }
    kv.put(&k, &val)?;
    j.insert("ok".into(), true.into());
    j.insert("elements".into(), (val.len() / w.bytes()).into());
    ok("OK".into())
}

/// `vapply KEY FUNC DELTAS`: element-wise update by a vector.
fn vapply(
    kv: &mut Kv,
    j: &mut Map<String, Json>,
    key: &str,
    func: &str,
    deltas: &str,
    ea: &ElemArgs,
) -> Result<Done, Fail> {
    let k = v::parse_key(key)?;
    let (w, signed) = elem(ea)?;
    let f = v::parse_func(func)?;
    let delta = v::parse_vector(deltas, w)?;
    let ds = v::decode_elems(&delta, w)?;
    let op = Op::UpdateV2V {
        key: k,
        atomic: atomic(f, w, signed),
        delta,
    };
    let r = kv.exec(op)?.ok()?;
    let old = v::decode_elems(&r, w)?;
    let new: Option<Vec<u64>> = old
        .iter()
        .zip(&ds)
        .map(|(&x, &d)| v::apply(f, x, d, 0, w, signed))
        .collect();
    Ok(show_update(j, f, &old, new.as_deref(), w, signed))
}

/// REDUCE and FILTER: parses the key, the element width, the function or
/// predicate (`code`) and the scalar argument in that order, executes the op built
/// by `make`, and returns the code and the result's elements.
fn elem_scalar_op(
    kv: &mut Kv,
    key: &str,
    ea: &ElemArgs,
    code: impl FnOnce() -> Result<u8, String>,
    arg: &str,
    make: impl FnOnce(Vec<u8>, Atomic, u64) -> Op,
) -> Result<(u8, Vec<u64>, Width, bool), Fail> {
    let k = v::parse_key(key)?;
    let (w, signed) = elem(ea)?;
    let c = code()?;
    let x = v::parse_int(arg, w)?;
    let r = kv.exec(make(k, atomic(c, w, signed), x))?.ok()?;
    Ok((c, v::decode_elems(&r, w)?, w, signed))
}

fn s2v(
    kv: &mut Kv,
    j: &mut Map<String, Json>,
    key: &str,
    f: u8,
    param: &str,
    param2: Option<&str>,
    ea: &ElemArgs,
) -> Result<Done, Fail> {
    let k = v::parse_key(key)?;
    let (w, signed) = elem(ea)?;
    let p = v::parse_int(param, w)?;
    let p2 = v::parse_int(param2.unwrap_or("0"), w)?;
    let op = Op::UpdateS2V {
        key: k,
        atomic: atomic(f, w, signed),
        param: p,
        param2: p2,
    };
    let r = kv.exec(op)?.ok()?;
    let old = v::decode_elems(&r, w)?;
    let new: Option<Vec<u64>> = old
        .iter()
        .map(|&x| v::apply(f, x, p, p2, w, signed))
        .collect();
    Ok(show_update(j, f, &old, new.as_deref(), w, signed))
}

fn show_update(
    j: &mut Map<String, Json>,
    f: u8,
    old: &[u64],
    new: Option<&[u64]>,
    w: Width,
    signed: bool,
) -> Done {
    j.insert("func".into(), v::func_name(f).into());
    j.insert("width".into(), w.bytes().into());
    j.insert("old".into(), v::json_elems(old, w, signed));
    let mut text = format!("old: {}", v::show_elems(old, w, signed));
    if let Some(n) = new {
        j.insert("new".into(), v::json_elems(n, w, signed));
        text.push_str(&format!("\nnew: {}", v::show_elems(n, w, signed)));
    }
    Done {
        code: EXIT_OK,
        text,
    }
}
