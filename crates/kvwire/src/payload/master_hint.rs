//! The value of a `NOT_MASTER` result: where the master is (docs/PROTOCOL.md §4.2).
//!
//! A replica, or a master that lost its lease, refuses writes with
//! [`Status::NotMaster`](super::Status::NotMaster). When it knows the current master
//! the result's value is a 12-byte hint so a client can follow it without asking
//! etcd; when it does not, the value is empty.

use crate::MacAddr;
use std::net::Ipv4Addr;

/// Length of an encoded hint.
pub const MASTER_HINT_LEN: usize = 20;

/// The master a `NOT_MASTER` result names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MasterHint {
    /// The master's epoch (a client ignores a hint older than one it has seen).
    pub epoch: u64,
    /// The master's client-facing IPv4 address.
    pub ip: Ipv4Addr,
    /// The master's client-facing MAC address.
    pub mac: MacAddr,
    /// The master's server QPN.
    pub qpn: u16,
}

impl MasterHint {
    /// Encodes the hint: epoch (8 B BE) | IPv4 (4 B) | MAC (6 B) | QPN (2 B BE).
    pub fn encode(&self) -> [u8; MASTER_HINT_LEN] {
        let mut b = [0u8; MASTER_HINT_LEN];
        b[..8].copy_from_slice(&self.epoch.to_be_bytes());
        b[8..12].copy_from_slice(&self.ip.octets());
        b[12..18].copy_from_slice(&self.mac);
        b[18..20].copy_from_slice(&self.qpn.to_be_bytes());
        b
    }

    /// Decodes a hint; `None` for an empty value (master unknown) or a value of
    /// another length.
    pub fn decode(v: &[u8]) -> Option<MasterHint> {
        let b: &[u8; MASTER_HINT_LEN] = v.try_into().ok()?;
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&b[12..18]);
        Some(MasterHint {
            epoch: u64::from_be_bytes(b[..8].try_into().ok()?),
            ip: Ipv4Addr::new(b[8], b[9], b[10], b[11]),
            mac,
            qpn: u16::from_be_bytes([b[18], b[19]]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_rejects() {
        let h = MasterHint {
            epoch: 7,
            ip: Ipv4Addr::new(10, 0, 0, 2),
            mac: [2, 0, 0, 0, 0, 1],
            qpn: 1,
        };
        let b = h.encode();
        assert_eq!(MasterHint::decode(&b), Some(h));
        assert_eq!(MasterHint::decode(&[]), None);
        assert_eq!(MasterHint::decode(&b[..19]), None);
    }
}
