//! Function registry: function ID → built-in or user function (KV-Direct's λ by ID).
//!
//! IDs are the wire's `func` byte (`kvwire::func`). IDs 0–8 are the built-ins
//! ([`Builtin`]) and always present. IDs 128–255 (`kvwire::func::USER_MIN..`) hold user
//! functions, registered once at start-up (from the config, see
//! [`FunctionRegistry::load`]) before the worker lcores start; the registry is then only
//! read. IDs 9–127 are reserved for future built-ins.
//!
//! Steps for adding a user function are in `docs/OPERATIONS.md`.

use crate::functions::{Builtin, ElemFn, OpError};
use kvwire::func::USER_MIN;
use kvwire::op;

pub use crate::functions::UserFn;

const USER_SLOTS: usize = 256 - USER_MIN as usize;

/// Why a registration was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistryError {
    /// The ID is below 128 (built-in or reserved range).
    ReservedId(u8),
    /// The ID is already registered.
    DuplicateId(u8),
    /// The name is already registered under another ID.
    DuplicateName(String),
    /// The name is empty.
    EmptyName,
    /// The config names a function that the catalog does not contain.
    UnknownName(String),
}

impl core::fmt::Display for RegistryError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RegistryError::ReservedId(id) => {
                write!(f, "function id {id} is below 128 (built-in/reserved)")
            }
            RegistryError::DuplicateId(id) => write!(f, "function id {id} already registered"),
            RegistryError::DuplicateName(n) => write!(f, "function name {n:?} already registered"),
            RegistryError::EmptyName => f.write_str("function name is empty"),
            RegistryError::UnknownName(n) => write!(f, "no user function named {n:?} in catalog"),
        }
    }
}

impl std::error::Error for RegistryError {}

#[derive(Clone, Debug)]
struct UserEntry {
    name: Box<str>,
    f: UserFn,
}

/// Maps function IDs to functions. Cheap to read from many lcores (`Sync`), cloneable.
#[derive(Clone, Debug)]
pub struct FunctionRegistry {
    /// Index `id - 128`.
    user: Vec<Option<UserEntry>>,
}

impl Default for FunctionRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl FunctionRegistry {
    /// A registry holding only the built-in functions.
    pub fn new() -> Self {
        FunctionRegistry {
            user: vec![None; USER_SLOTS],
        }
    }

    fn user_slot(id: u8) -> Option<usize> {
        (id as usize).checked_sub(USER_MIN as usize)
    }

    /// Registers user function `f` under `id` (128–255) and `name`.
    ///
    /// Refuses IDs below 128, an ID already taken, an empty name and a name already used.
    pub fn register(&mut self, id: u8, name: &str, f: UserFn) -> Result<(), RegistryError> {
        let slot = Self::user_slot(id).ok_or(RegistryError::ReservedId(id))?;
        if name.is_empty() {
            return Err(RegistryError::EmptyName);
        }
        if self.user.get(slot).is_some_and(Option::is_some) {
            return Err(RegistryError::DuplicateId(id));
        }
        if self.id_of(name).is_some() {
            return Err(RegistryError::DuplicateName(name.to_owned()));
        }
        if let Some(e) = self.user.get_mut(slot) {
            *e = Some(UserEntry {
                name: name.into(),
                f,
            });
        }
        Ok(())
    }

    /// Registers the user functions a config lists as `(id, name)` pairs, taking each
    /// function from `catalog` (the `(name, fn)` pairs compiled into the binary, e.g.
    /// [`samples::CATALOG`]). Stops at the first error; returns how many were added.
    pub fn load<'n>(
        &mut self,
        entries: impl IntoIterator<Item = (u8, &'n str)>,
        catalog: &[(&str, UserFn)],
    ) -> Result<usize, RegistryError> {
        let mut n = 0;
        for (id, name) in entries {
            let f = catalog
                .iter()
                .find(|(c, _)| *c == name)
                .map(|(_, f)| *f)
                .ok_or_else(|| RegistryError::UnknownName(name.to_owned()))?;
            self.register(id, name, f)?;
            n += 1;
        }
        Ok(n)
    }

    /// The function for `id`: a built-in, a registered user function, or
    /// [`OpError::UnknownFunction`].
    pub fn resolve(&self, id: u8) -> Result<ElemFn, OpError> {
        if let Some(b) = Builtin::from_id(id) {
            return Ok(ElemFn::Builtin(b));
        }
        Self::user_slot(id)
            .and_then(|s| self.user.get(s))
            .and_then(Option::as_ref)
            .map(|e| ElemFn::User(e.f))
            .ok_or(OpError::UnknownFunction)
    }

    /// The function `id` names for `opcode` (`kvwire::op`), per the function × opcode
    /// matrix of docs/PROTOCOL.md §3.2: as [`resolve`](Self::resolve), but a built-in
    /// that is not defined for the opcode ([`Builtin::defined_for`], e.g. CAS for REDUCE)
    /// is [`OpError::UnknownFunction`] too. User functions are defined for every opcode
    /// that takes a function (UPDATE_S2S/S2V/V2V, REDUCE; FILTER takes predicates).
    #[inline]
    pub fn resolve_for(&self, opcode: u8, id: u8) -> Result<ElemFn, OpError> {
        let f = self.resolve(id)?;
        let defined = match f {
            ElemFn::Builtin(b) => b.defined_for(opcode),
            ElemFn::User(_) => matches!(
                opcode,
                op::UPDATE_S2S | op::UPDATE_S2V | op::UPDATE_V2V | op::REDUCE
            ),
        };
        if defined {
            Ok(f)
        } else {
            Err(OpError::UnknownFunction)
        }
    }

    /// The name of function `id`, built-in or user.
    pub fn name(&self, id: u8) -> Option<&str> {
        if let Some(b) = Builtin::from_id(id) {
            return Some(b.name());
        }
        Self::user_slot(id)
            .and_then(|s| self.user.get(s))
            .and_then(Option::as_ref)
            .map(|e| &*e.name)
    }

    /// The ID a name is registered under (built-in names included).
    pub fn id_of(&self, name: &str) -> Option<u8> {
        self.iter().find(|(_, n)| *n == name).map(|(id, _)| id)
    }

    /// Every known function, built-ins first, in ID order.
    pub fn iter(&self) -> impl Iterator<Item = (u8, &str)> + '_ {
        let builtins = Builtin::ALL.iter().map(|b| (b.id(), b.name()));
        let users = self
            .user
            .iter()
            .zip(USER_MIN..=u8::MAX)
            .filter_map(|(e, id)| e.as_ref().map(|e| (id, &*e.name)));
        builtins.chain(users)
    }

    /// Number of registered user functions.
    pub fn user_count(&self) -> usize {
        self.user.iter().filter(|e| e.is_some()).count()
    }
}

/// Example user functions, compiled in, to show the shape and to test the registry.
pub mod samples {
    use super::UserFn;
    use crate::functions::{load_le, store_le};

    fn mask(elem: &[u8]) -> u64 {
        match elem.len() {
            n @ 1..=7 => (1u64 << (8 * n)) - 1,
            _ => u64::MAX,
        }
    }

    /// Unsigned saturating add: `min(e + param, MAX)` at the element's width.
    pub fn saturating_add(elem: &mut [u8], param: u64, _param2: u64) {
        let m = mask(elem);
        let sum = load_le(elem).saturating_add(param & m).min(m);
        store_le(elem, sum);
    }

    /// Multiply-add: `e * param + param2` (wrapping).
    pub fn mul_add(elem: &mut [u8], param: u64, param2: u64) {
        let v = load_le(elem).wrapping_mul(param).wrapping_add(param2);
        store_le(elem, v);
    }

    /// Clamp into `[param, param2]` (unsigned).
    pub fn clamp(elem: &mut [u8], param: u64, param2: u64) {
        let v = load_le(elem);
        let v = if v < param {
            param
        } else if v > param2 {
            param2
        } else {
            v
        };
        store_le(elem, v);
    }

    /// The samples by name, as a catalog for [`FunctionRegistry::load`](super::FunctionRegistry::load).
    pub const CATALOG: &[(&str, UserFn)] = &[
        ("saturating_add", saturating_add),
        ("mul_add", mul_add),
        ("clamp", clamp),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvwire::{func, Width};

    #[test]
    fn builtins_resolve_and_reserved_ids_do_not() {
        let r = FunctionRegistry::new();
        for id in 0..=255u8 {
            let known = (0..=8).contains(&id);
            assert_eq!(r.resolve(id).is_ok(), known, "{id}");
            assert_eq!(r.name(id).is_some(), known, "{id}");
        }
        assert_eq!(r.id_of("cas"), Some(func::CAS));
        assert_eq!(r.iter().count(), 9);
    }

    #[test]
    fn resolve_for_follows_the_matrix() {
        let mut r = FunctionRegistry::new();
        r.register(200, "sat", samples::saturating_add).unwrap();
        let ok = |opcode, id| r.resolve_for(opcode, id).is_ok();
        for opcode in [op::UPDATE_S2S, op::UPDATE_S2V, op::UPDATE_V2V, op::REDUCE] {
            for id in 0..=255u8 {
                let cas_needs_p2 = id == func::CAS && matches!(opcode, op::UPDATE_V2V | op::REDUCE);
                let want = ((0..=8).contains(&id) && !cas_needs_p2) || id == 200;
                assert_eq!(ok(opcode, id), want, "{opcode} {id}");
            }
        }
        for id in 0..=255u8 {
            assert!(!ok(op::FILTER, id) && !ok(op::GET, id), "{id}");
        }
    }

    #[test]
    fn register_rules() {
        let mut r = FunctionRegistry::new();
        let f: UserFn = samples::saturating_add;
        assert_eq!(r.register(0, "x", f), Err(RegistryError::ReservedId(0)));
        assert_eq!(r.register(127, "x", f), Err(RegistryError::ReservedId(127)));
        assert_eq!(r.register(128, "", f), Err(RegistryError::EmptyName));
        r.register(128, "sat", f).unwrap();
        assert_eq!(
            r.register(128, "other", f),
            Err(RegistryError::DuplicateId(128))
        );
        assert_eq!(
            r.register(129, "sat", f),
            Err(RegistryError::DuplicateName("sat".into()))
        );
        assert_eq!(
            r.register(130, "swap", f),
            Err(RegistryError::DuplicateName("swap".into()))
        );
        r.register(255, "last", samples::mul_add).unwrap();
        assert_eq!(r.user_count(), 2);
        assert_eq!(r.name(255), Some("last"));
        let mut e = [250u8];
        r.resolve(128)
            .unwrap()
            .apply(Width::W1, false, &mut e, 10, 0)
            .unwrap();
        assert_eq!(e, [255]);
    }

    #[test]
    fn load_from_config() {
        let mut r = FunctionRegistry::new();
        let n = r
            .load([(200, "mul_add"), (201, "clamp")], samples::CATALOG)
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(r.id_of("clamp"), Some(201));
        assert_eq!(
            r.load([(202, "nope")], samples::CATALOG),
            Err(RegistryError::UnknownName("nope".into()))
        );
    }
}
