//! Tenants in the config (docs/PROTOCOL.md §6.8, docs/OPERATIONS.md "Tenants"): the
//! operator's `tenants` list and the credentials file a tenant's clients read.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// One tenant (docs/PROTOCOL.md §6.8): its clients OPEN with its id and a proof made
/// with its secret; their keys live in its namespace; its ACL says which op
/// categories they may run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// A name for operators (unique).
    pub name: String,
    /// The tenant id: 1..=16777215 (unique).
    pub id: u32,
    /// The secret, hex (16 to 64 bytes).
    pub secret: String,
    /// Op categories allowed, joined by `,`: `read`, `write`, `atomic`, `txn`, `all`
    /// (default `all`).
    #[serde(default = "default_acl")]
    pub acl: String,
    /// Opened QPs the tenant may hold per worker (0: no limit beyond the server's).
    #[serde(default)]
    pub max_connections: u32,
    /// Requests per second the tenant may send per worker (0: no limit); over it a
    /// request gets an RNR NAK.
    #[serde(default)]
    pub requests_per_s: u32,
    /// Requests in flight per opened QP of the tenant: the window its ACCEPTs grant, a
    /// power of two (0: the server's `server.credits`; above it, the server's).
    #[serde(default)]
    pub max_credits: u16,
    /// Opened QPs per worker held for the tenant while it has fewer: anonymous
    /// clients and other tenants beyond their own reserves cannot take them (default
    /// 16; 0: none). The held QPs of all tenants are at most half of
    /// `server.max_connections`.
    #[serde(default = "default_reserved_connections")]
    pub reserved_connections: u32,
}

/// The default `reserved_connections`.
pub const DEFAULT_RESERVED_CONNECTIONS: u32 = 16;

fn default_reserved_connections() -> u32 {
    DEFAULT_RESERVED_CONNECTIONS
}

fn default_acl() -> String {
    "all".into()
}

/// A tenant client's credentials file (JSON `{"tenant": ID, "secret": "HEX"}`): what
/// the operator hands a tenant's clients (`ctlplane tenants add` writes one). Kept
/// out of command lines: kvcli reads it from `--tenant-file` or `KVD_TENANT_FILE`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TenantCredentials {
    /// The tenant id.
    pub tenant: u32,
    /// The tenant's secret, hex.
    pub secret: String,
}

impl TenantCredentials {
    /// Reads and checks a credentials file; the tenant id and the secret's bytes.
    pub fn load(path: &Path) -> Result<(u32, Vec<u8>), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("tenant credentials {}: {e}", path.display()))?;
        let c: TenantCredentials = serde_json::from_str(&text)
            .map_err(|e| format!("tenant credentials {}: {e}", path.display()))?;
        let secret = parse_hex(&c.secret)
            .map_err(|e| format!("tenant credentials {}: secret: {e}", path.display()))?;
        if c.tenant == 0 || c.tenant >= 1 << 24 || secret.is_empty() {
            return Err(format!(
                "tenant credentials {}: tenant must be in 1..=16777215 and the secret non-empty",
                path.display()
            ));
        }
        Ok((c.tenant, secret))
    }
}

/// Decodes a hex string (even length, `0-9a-fA-F`).
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return Err("hex of odd length".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("bad hex {s:?}")))
        .collect()
}

impl TenantConfig {
    /// The ACL as category bits (`kvwire::tenant::parse_acl`, the one parser).
    pub fn acl_bits(&self) -> Result<u8, String> {
        kvwire::tenant::parse_acl(&self.acl)
            .map_err(|e| format!("tenant {:?}: acl: {e}", self.name))
    }

    /// The secret's bytes.
    pub fn secret_bytes(&self) -> Result<Vec<u8>, String> {
        parse_hex(&self.secret).map_err(|e| format!("tenant {:?}: secret: {e}", self.name))
    }

    /// Checks the id, the secret, the ACL, the window and the reserve: what the
    /// dataplane checks before it applies a tenant (`ctlplane config show` runs the
    /// same checks).
    pub fn validate(&self) -> Result<(), String> {
        if self.id == 0 || self.id >= 1 << 24 {
            return Err(format!(
                "tenant {:?}: id must be in 1..=16777215",
                self.name
            ));
        }
        if self.name.is_empty() {
            return Err(format!("tenant {}: empty name", self.id));
        }
        self.acl_bits()?;
        let secret = self.secret_bytes()?;
        if !(16..=64).contains(&secret.len()) {
            return Err(format!(
                "tenant {:?}: the secret must be 16 to 64 bytes (32 to 128 hex digits)",
                self.name
            ));
        }
        if self.max_credits != 0 && !self.max_credits.is_power_of_two() {
            return Err(format!(
                "tenant {:?}: max_credits must be a power of two (or 0: the server's credits), \
                 not {}",
                self.name, self.max_credits
            ));
        }
        if self.max_connections != 0 && self.reserved_connections > self.max_connections {
            return Err(format!(
                "tenant {:?}: reserved_connections ({}) above its max_connections ({})",
                self.name, self.reserved_connections, self.max_connections
            ));
        }
        Ok(())
    }
}

/// Checks a tenant list: each tenant ([`TenantConfig::validate`]), and ids and names
/// unique.
pub fn validate_tenants(tenants: &[TenantConfig]) -> Result<(), String> {
    for (i, t) in tenants.iter().enumerate() {
        t.validate()?;
        if let Some(o) = tenants[..i]
            .iter()
            .find(|o| o.id == t.id || o.name == t.name)
        {
            return Err(format!(
                "tenants {:?} and {:?}: ids and names must be unique",
                o.name, t.name
            ));
        }
    }
    Ok(())
}
