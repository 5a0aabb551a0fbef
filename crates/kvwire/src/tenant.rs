//! Tenants (docs/PROTOCOL.md §6.8): who a client is, what it may do and which keys
//! are its own — the rules both sides of the wire must agree on, written once.
//!
//! * **Credential.** A tenant has an id (`1..2^24`) and a secret the operator hands
//!   its clients. The secret never travels: an OPEN carries the tenant id, the
//!   client's wall-clock time and an HMAC-SHA256 with the secret over the OPEN's
//!   fields and the sender's MAC and IPv4 address ([`open_proof`]). A captured OPEN
//!   proves nothing from another address, and nothing after [`PROOF_WINDOW_MS`].
//! * **Namespace.** Tenant `t`'s keys begin with the 4 bytes [`namespace`]`(t)`
//!   (`0xFE` and the 24-bit id): prefix-free, so no two tenants' keys collide. The
//!   server refuses (`DENIED`) any key of a tenant's client outside its namespace, and
//!   any key in the `0xFE` space from a client without a tenant. Clients add the
//!   prefix to every key they send ([`prefixed`]), so applications never see it.
//! * **ACL.** Ops fall into categories ([`category`]); a tenant's ACL is the set of
//!   categories it may run.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::ethernet::MacAddr;
use core::net::Ipv4Addr;

/// First byte of every tenant namespace (a key of a client without a tenant may not
/// start with it).
pub const NAMESPACE_BYTE: u8 = 0xFE;
/// Bytes of a tenant namespace prefix.
pub const NAMESPACE_LEN: usize = 4;
/// Largest tenant id (24 bits); 0 is "no tenant".
pub const MAX_TENANT_ID: u32 = (1 << 24) - 1;
/// Bytes of an OPEN proof (HMAC-SHA256).
pub const PROOF_LEN: usize = 32;
/// How far an OPEN's time may be from the server's clock (either way).
pub const PROOF_WINDOW_MS: u64 = 60_000;

/// ACL category: GET, REDUCE, FILTER (read the store).
pub const READ: u8 = 1 << 0;
/// ACL category: PUT, DELETE, COMPARE_DELETE.
pub const WRITE: u8 = 1 << 1;
/// ACL category: the atomic and vector updates (UPDATE_S2S, UPDATE_S2V, UPDATE_V2V).
pub const ATOMIC: u8 = 1 << 2;
/// ACL category: transactions (§3.4; their ops need their own categories too).
pub const TXN: u8 = 1 << 3;
/// Every category.
pub const ALL: u8 = READ | WRITE | ATOMIC | TXN;
/// The categories by name, as the config and `ctlplane tenants` spell them.
pub const CATEGORY_NAMES: [(&str, u8); 4] = [
    ("read", READ),
    ("write", WRITE),
    ("atomic", ATOMIC),
    ("txn", TXN),
];

/// The ACL category of a KV opcode (0 for an undefined one).
pub const fn category(opcode: u8) -> u8 {
    match crate::payload::ops::spec(opcode) {
        Some(s) => s.category,
        None => 0,
    }
}

/// Whether a client whose ACL is `acl` gets the result of an op with `opcode`
/// redacted: the op's result carries bytes of the stored value
/// ([`OpSpec::reads_value`](crate::payload::ops::OpSpec)) and the ACL has no `read`.
/// Such a result says only what the op's outcome was (`kvops::semantics::redact`): a
/// `write`-only tenant cannot read values through COMPARE_DELETE, nor an
/// `atomic`-only one through an update's original.
#[inline]
pub const fn redacts(acl: u8, opcode: u8) -> bool {
    acl & READ == 0
        && match crate::payload::ops::spec(opcode) {
            Some(s) => s.reads_value,
            None => false,
        }
}

/// Tenant `id`'s namespace prefix.
pub const fn namespace(id: u32) -> [u8; NAMESPACE_LEN] {
    [NAMESPACE_BYTE, (id >> 16) as u8, (id >> 8) as u8, id as u8]
}

/// Whether a client of tenant `id` (0: no tenant) may use `key`: inside its
/// namespace, or for no tenant outside every namespace.
#[inline]
pub fn key_allowed(id: u32, key: &[u8]) -> bool {
    if id == 0 {
        key.first() != Some(&NAMESPACE_BYTE)
    } else {
        key.len() > NAMESPACE_LEN && key[..NAMESPACE_LEN] == namespace(id)
    }
}

/// `key` in tenant `id`'s namespace (as a client sends it); `key` itself for no
/// tenant.
pub fn prefixed(id: u32, key: &[u8]) -> Vec<u8> {
    if id == 0 {
        return key.to_vec();
    }
    let mut k = Vec::with_capacity(NAMESPACE_LEN + key.len());
    k.extend_from_slice(&namespace(id));
    k.extend_from_slice(key);
    k
}

/// The message an OPEN proof covers: the OPEN's first 28 payload bytes (its fields
/// through the time), then the sender's MAC and IPv4 address.
fn proof_message(fields: &[u8; 28], mac: &MacAddr, ip: Ipv4Addr) -> [u8; 38] {
    let mut m = [0u8; 38];
    m[..28].copy_from_slice(fields);
    m[28..34].copy_from_slice(mac);
    m[34..38].copy_from_slice(&ip.octets());
    m
}

/// HMAC-SHA256 (RFC 2104) keyed with `key` over the concatenation of `parts`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // An HMAC takes a key of any length: `new_from_slice` cannot fail.
    let mut h = <Hmac<Sha256>>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        h.update(p);
    }
    h.finalize().into_bytes().into()
}

/// The proof of an OPEN with payload fields `fields` (bytes 0–27) sent from `mac`/`ip`
/// by a holder of `secret`.
pub fn open_proof(secret: &[u8], fields: &[u8; 28], mac: &MacAddr, ip: Ipv4Addr) -> [u8; 32] {
    hmac_sha256(secret, &[&proof_message(fields, mac, ip)])
}

/// What a tenant's ACCEPT XORs its connection secret with (docs/PROTOCOL.md §6.8):
/// the first 8 bytes (BE) of HMAC-SHA256 keyed with the tenant's secret over
/// `"KVD-SEAL"`, the OPEN's nonce (8 bytes, BE) and the opened QPN (4 bytes, BE). Only
/// the tenant's clients (and the server) can compute it, so an observer of the ACCEPT
/// does not learn the connection secret.
pub fn seal_pad(tenant_secret: &[u8], nonce: u64, qpn: u32) -> u64 {
    let mac = hmac_sha256(
        tenant_secret,
        &[b"KVD-SEAL", &nonce.to_be_bytes(), &qpn.to_be_bytes()],
    );
    u64::from_be_bytes([
        mac[0], mac[1], mac[2], mac[3], mac[4], mac[5], mac[6], mac[7],
    ])
}

/// Whether `proof` is the proof of `fields` from `mac`/`ip` with `secret` (compared
/// in constant time).
pub fn verify_open(
    secret: &[u8],
    fields: &[u8; 28],
    mac: &MacAddr,
    ip: Ipv4Addr,
    proof: &[u8; PROOF_LEN],
) -> bool {
    let mut h = <Hmac<Sha256>>::new_from_slice(secret).expect("HMAC takes any key length");
    h.update(&proof_message(fields, mac, ip));
    h.verify_slice(proof).is_ok()
}

/// Whether an OPEN timed `open_ms` is fresh at `now_ms` (both wall-clock ms).
pub const fn fresh(open_ms: u64, now_ms: u64) -> bool {
    open_ms.abs_diff(now_ms) <= PROOF_WINDOW_MS
}

/// Parses an ACL written as category names joined by `,` with nothing else between
/// them (`"read,write"`, `"all"`): exactly the names of [`CATEGORY_NAMES`] and `all`,
/// lower case, each once. An empty ACL, a space, an unknown or repeated name is an
/// error that says which — the one parser of the config, `ctlplane config show`,
/// `ctlplane tenants add` and the dataplane.
pub fn parse_acl(s: &str) -> Result<u8, String> {
    if s.is_empty() {
        return Err("empty ACL: name at least one of read, write, atomic, txn, all".into());
    }
    let mut acl = 0;
    let mut seen: Vec<&str> = Vec::new();
    for part in s.split(',') {
        if part.is_empty() || part.chars().any(char::is_whitespace) {
            return Err(format!(
                "ACL {s:?}: category names joined by ',' with no spaces or empty names \
                 (e.g. \"read,write\")"
            ));
        }
        if seen.contains(&part) {
            return Err(format!("ACL {s:?}: {part:?} named twice"));
        }
        seen.push(part);
        let bit = if part == "all" {
            ALL
        } else {
            CATEGORY_NAMES
                .iter()
                .find(|(n, _)| *n == part)
                .map(|&(_, b)| b)
                .ok_or_else(|| {
                    format!("ACL {s:?}: unknown category {part:?} (read, write, atomic, txn, all)")
                })?
        };
        acl |= bit;
    }
    Ok(acl)
}

/// An ACL's category names, joined by `,`.
pub fn acl_names(acl: u8) -> String {
    let names: Vec<&str> = CATEGORY_NAMES
        .iter()
        .filter(|(_, b)| acl & b != 0)
        .map(|&(n, _)| n)
        .collect();
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_prefix_free_and_enforced() {
        assert_eq!(namespace(0x01_0203), [0xFE, 1, 2, 3]);
        let k = prefixed(7, b"user:1");
        assert!(key_allowed(7, &k));
        assert!(!key_allowed(8, &k), "another tenant's key");
        assert!(!key_allowed(0, &k), "no tenant: no namespace key");
        assert!(key_allowed(0, b"user:1"));
        assert!(
            !key_allowed(7, b"user:1"),
            "a tenant's key outside its namespace"
        );
        assert!(!key_allowed(7, &namespace(7)), "the bare prefix is no key");
        assert_eq!(prefixed(0, b"k"), b"k");
    }

    #[test]
    fn proofs_bind_the_fields_the_secret_and_the_sender() {
        let fields = [7u8; 28];
        let (mac, ip) = ([2, 0, 0, 0, 0, 9], Ipv4Addr::new(10, 0, 0, 9));
        let p = open_proof(b"s3cret", &fields, &mac, ip);
        assert!(verify_open(b"s3cret", &fields, &mac, ip, &p));
        assert!(
            !verify_open(b"s3cret!", &fields, &mac, ip, &p),
            "another secret"
        );
        let mut f2 = fields;
        f2[27] ^= 1;
        assert!(!verify_open(b"s3cret", &f2, &mac, ip, &p), "another time");
        assert!(!verify_open(
            b"s3cret",
            &fields,
            &[2, 0, 0, 0, 0, 8],
            ip,
            &p
        ));
        assert!(!verify_open(
            b"s3cret",
            &fields,
            &mac,
            Ipv4Addr::new(10, 0, 0, 8),
            &p
        ));
        assert!(fresh(100_000, 160_000) && !fresh(100_000, 160_001) && fresh(5, 0));
    }

    #[test]
    fn categories_and_acl_names() {
        use crate::payload::op;
        assert_eq!(category(op::GET), READ);
        assert_eq!(category(op::FILTER), READ);
        assert_eq!(category(op::DELETE), WRITE);
        assert_eq!(category(op::UPDATE_V2V), ATOMIC);
        assert_eq!(category(99), 0);
        assert_eq!(parse_acl("read,write"), Ok(READ | WRITE));
        assert_eq!(parse_acl("all"), Ok(ALL));
        assert_eq!(parse_acl("txn,read"), Ok(READ | TXN));
        // What the dataplane refuses, every parser refuses, with a reason.
        for bad in [
            "admin",
            "bogus",
            "read,bogus",
            "READ",
            "",
            "read, write",
            "read,read",
            ",read",
            "read,",
        ] {
            assert!(parse_acl(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(acl_names(READ | TXN), "read,txn");
    }
}
