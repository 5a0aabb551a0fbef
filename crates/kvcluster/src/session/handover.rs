//! Planned switchover, the master's side (docs/FAILOVER.md, "Planned switchover"):
//! write the handover key, fence, wait until the target has caught up and the fence has
//! aged past the margin, then revoke the lease so the target campaigns alone.

use etcd_client::Client;

use super::{op, Node, MS};
use crate::election;
use crate::records::{encode, HandoverRecord};
use crate::{mono_now_ns, ClusterError, ClusterEvent, FenceReason};

/// A switchover this node (the master) has started.
pub(super) struct OutgoingHandover {
    pub target: u32,
    pub started_ns: u64,
}

impl Node {
    /// Starts a switchover to `req` (`None`: the live replica with the highest offset):
    /// writes the handover key and fences this master. Refusals are reported as
    /// [`ClusterEvent::SwitchoverAborted`].
    pub(super) async fn start_handover(
        &mut self,
        client: &mut Client,
        req: Option<u32>,
        now: u64,
    ) -> Result<(), ClusterError> {
        let me = self.cfg.node_id;
        let abort = |node: &Self, target: Option<u32>, reason: &str| {
            node.emit(ClusterEvent::SwitchoverAborted {
                target,
                reason: reason.to_string(),
            });
        };
        let Some(epoch) = self.mastership else {
            abort(self, req, "not master");
            return Ok(());
        };
        if self.handover_out.is_some() {
            abort(self, req, "a switchover is already under way");
            return Ok(());
        }
        let target = match req {
            Some(t) => Some(t).filter(|t| *t != me && self.members.contains_key(t)),
            None => election::preferred(self.members.values().filter(|m| m.id != me)),
        };
        let Some(target) = target else {
            abort(self, req, "no such live replica");
            return Ok(());
        };
        let rec = HandoverRecord {
            from: me,
            target,
            epoch,
        };
        op(
            self.cfg.op_timeout_ms,
            "put handover",
            client.put(self.keys.handover.clone(), encode(&rec), None),
        )
        .await?;
        self.handover_out = Some(OutgoingHandover {
            target,
            started_ns: now,
        });
        self.fence_reason = FenceReason::Handover;
        self.sync_view(mono_now_ns());
        Ok(())
    }

    /// Completes or calls off an outgoing switchover; `true` once the lease is revoked.
    pub(super) async fn progress_handover(
        &mut self,
        client: &mut Client,
        now: u64,
    ) -> Result<bool, ClusterError> {
        let Some(h) = &self.handover_out else {
            return Ok(false);
        };
        let target = h.target;
        let t = self.cfg.op_timeout_ms;
        let failure = if !self.members.contains_key(&target) {
            Some("target left the cluster")
        } else if now > h.started_ns + self.cfg.handover_timeout_ms * MS {
            Some("target did not catch up in time")
        } else {
            None
        };
        if let Some(reason) = failure {
            self.handover_out = None;
            let _ = op(
                t,
                "delete handover",
                client.delete(self.keys.handover.clone(), None),
            )
            .await;
            self.emit(ClusterEvent::SwitchoverAborted {
                target: Some(target),
                reason: reason.to_string(),
            });
            self.sync_view(mono_now_ns());
            return Ok(false);
        }
        let caught_up = self
            .members
            .get(&target)
            .is_some_and(|m| m.offset >= self.sh.view.offset());
        // Any lcore check made before the fence must be older than the margin before the
        // leader key can go (the same bound as for a lapsing lease).
        let fence_aged = now >= h.started_ns + self.cfg.fence_margin_ms * MS;
        if !caught_up || !fence_aged {
            return Ok(false);
        }
        // Give the leader key up: revoking the lease deletes it (and our member key) in
        // one revision; the target campaigns alone while the handover key names it.
        if let Some(l) = self.lease.take() {
            op(t, "lease revoke", client.lease_revoke(l.id)).await?;
        }
        self.lease_lost();
        Ok(true)
    }
}
