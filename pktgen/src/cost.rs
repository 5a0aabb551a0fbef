//! The generator's own cost: the TSC cycles its loop spends in the measurement window
//! sending (building requests, framing, ICRC, transmit burst) and receiving (receive
//! burst, transport, result checks), counted only on loop iterations that did such
//! work, so waiting for the server is not counted. Per op and per packet it says how
//! much of a core the generator needs for a given rate; its busy share says whether
//! the generator or the server set the pace.

use serde_json::{json, Value};

/// Cycles of one measurement window.
#[derive(Clone, Copy, Debug, Default)]
pub struct GenCost {
    /// Cycles of send work.
    pub send_cycles: u64,
    /// Cycles of receive work.
    pub recv_cycles: u64,
    /// Cycles the window lasted.
    pub window_cycles: u64,
    /// Packets sent in the window.
    pub packets: u64,
    /// TSC ticks per second.
    pub hz: u64,
    /// Whether requests were copied from pre-built templates.
    pub templates: bool,
}

impl GenCost {
    /// `cycles` in ns per `per` (0 when `per` is 0).
    fn ns_per(&self, cycles: u64, per: u64) -> f64 {
        if per == 0 || self.hz == 0 {
            return 0.0;
        }
        cycles as f64 * 1e9 / self.hz as f64 / per as f64
    }

    /// Share of the window the generator was busy.
    pub fn busy_share(&self) -> f64 {
        if self.window_cycles == 0 {
            return 0.0;
        }
        (self.send_cycles + self.recv_cycles) as f64 / self.window_cycles as f64
    }

    /// The cost as JSON, per op of `ops` completed in the window.
    pub fn to_json(self, ops: u64) -> Value {
        let busy = self.send_cycles + self.recv_cycles;
        json!({
            "ns_per_op": self.ns_per(busy, ops),
            "send_ns_per_op": self.ns_per(self.send_cycles, ops),
            "recv_ns_per_op": self.ns_per(self.recv_cycles, ops),
            "ns_per_packet": self.ns_per(busy, self.packets),
            "busy_share": self.busy_share(),
            "templates": self.templates,
        })
    }

    /// One line for the summary.
    pub fn summary(&self, ops: u64) -> String {
        let busy = self.send_cycles + self.recv_cycles;
        format!(
            "generator: {:.1} ns/op (send {:.1}, receive {:.1}), {:.0} ns/packet, busy {:.0}% of the window{}",
            self.ns_per(busy, ops),
            self.ns_per(self.send_cycles, ops),
            self.ns_per(self.recv_cycles, ops),
            self.ns_per(busy, self.packets),
            100.0 * self.busy_share(),
            if self.templates { ", templates" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_op_and_share() {
        let c = GenCost {
            send_cycles: 3_000,
            recv_cycles: 1_000,
            window_cycles: 8_000,
            packets: 2,
            hz: 1_000_000_000,
            templates: true,
        };
        let j = c.to_json(100);
        assert_eq!(j["ns_per_op"], 40.0);
        assert_eq!(j["send_ns_per_op"], 30.0);
        assert_eq!(j["ns_per_packet"], 2000.0);
        assert_eq!(j["busy_share"], 0.5);
        assert_eq!(GenCost::default().to_json(0)["ns_per_op"], 0.0);
    }
}
