//! The election rule as a pure function (docs/FAILOVER.md, "Election").
//!
//! When the leader key is gone, every live node decides on its own, from the same etcd
//! state, whether to campaign. The rule: a planned switchover's target campaigns alone;
//! otherwise the live member with the highest final offset campaigns (ties: lowest
//! rank — a chain node's position — then lowest id),
//! where "final" means written after the loss of the master (the member's `ready` field
//! names the lost epoch). Members that do not report within `election_wait_ms` are left
//! out, so a stalled node cannot block the election. The etcd transaction (leader absent
//! and epoch unchanged) decides between concurrent campaigners; this rule only decides
//! who tries.

use crate::records::{HandoverRecord, MemberRecord};

/// What a node does about an election.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Try the campaign transaction now.
    Campaign,
    /// Not (yet) this node's turn.
    Wait(WaitReason),
}

/// Why a node does not campaign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitReason {
    /// A planned switchover names another node.
    HandoverToOther,
    /// This node has not yet published its final offset.
    NotReady,
    /// Some live members have not yet reported their final offsets.
    WaitingForReports,
    /// Another reported member is preferred.
    OtherPreferred,
}

/// The inputs of one decision.
#[derive(Debug)]
pub struct ElectionInput<'a> {
    /// This node.
    pub me: u32,
    /// The cluster's epoch (the epoch whose master was lost).
    pub epoch: u64,
    /// The live members (their keys exist in etcd), this node included once published.
    pub members: &'a [MemberRecord],
    /// The handover key, if any.
    pub handover: Option<&'a HandoverRecord>,
    /// How long this node has seen the cluster without a leader.
    pub leaderless_ms: u64,
    /// Whether this node saw the leader key go (a watch event) rather than finding it
    /// absent when it (re)connected. Only a witnessed loss may skip the full
    /// `election_wait_ms`: a node that just (re)joined cannot know which members are
    /// still to come back (after an etcd outage every lease may have lapsed at once).
    pub witnessed: bool,
    /// `ClusterConfig::election_wait_ms`.
    pub election_wait_ms: u64,
    /// `ClusterConfig::handover_timeout_ms`.
    pub handover_timeout_ms: u64,
}

/// The member preferred as master among `members`: highest offset, then lowest rank,
/// then lowest id.
pub fn preferred<'a>(members: impl IntoIterator<Item = &'a MemberRecord>) -> Option<u32> {
    members
        .into_iter()
        .max_by(|a, b| {
            a.offset
                .cmp(&b.offset)
                .then(b.rank.cmp(&a.rank))
                .then(b.id.cmp(&a.id))
        })
        .map(|m| m.id)
}

/// Applies the election rule for `input.me`.
pub fn decide(input: &ElectionInput<'_>) -> Decision {
    let live = |id: u32| input.members.iter().any(|m| m.id == id);
    if let Some(h) = input.handover {
        if h.epoch == input.epoch
            && live(h.target)
            && input.leaderless_ms < input.handover_timeout_ms
        {
            return if h.target == input.me {
                Decision::Campaign
            } else {
                Decision::Wait(WaitReason::HandoverToOther)
            };
        }
    }
    let is_ready = |m: &MemberRecord| m.ready == Some(input.epoch);
    if !input
        .members
        .iter()
        .any(|m| m.id == input.me && is_ready(m))
    {
        return Decision::Wait(WaitReason::NotReady);
    }
    let all_ready = input.members.iter().all(is_ready);
    if (!all_ready || !input.witnessed) && input.leaderless_ms < input.election_wait_ms {
        return Decision::Wait(WaitReason::WaitingForReports);
    }
    if preferred(input.members.iter().filter(|m| is_ready(m))) == Some(input.me) {
        Decision::Campaign
    } else {
        Decision::Wait(WaitReason::OtherPreferred)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::RoleName;
    use crate::NodeAddr;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    fn member(id: u32, offset: u64, ready: Option<u64>) -> MemberRecord {
        MemberRecord {
            id,
            addr: NodeAddr {
                mac: [2, 0, 0, 0, 0, 1],
                ip: Ipv4Addr::LOCALHOST,
                qpn: 1,
            },
            role: RoleName::Replica,
            offset,
            epoch: 1,
            ready,
            rank: 0,
        }
    }

    fn input<'a>(
        me: u32,
        members: &'a [MemberRecord],
        handover: Option<&'a HandoverRecord>,
        leaderless_ms: u64,
    ) -> ElectionInput<'a> {
        ElectionInput {
            me,
            epoch: 1,
            members,
            handover,
            leaderless_ms,
            witnessed: true,
            election_wait_ms: 500,
            handover_timeout_ms: 5000,
        }
    }

    #[test]
    fn equal_offsets_go_to_the_lower_rank_before_the_lower_id() {
        let mut ms = [member(1, 100, Some(1)), member(2, 100, Some(1))];
        ms[0].rank = 2; // a chain's tail
        ms[1].rank = 1; // the dead head's successor
        assert_eq!(decide(&input(2, &ms, None, 0)), Decision::Campaign);
        assert_eq!(
            decide(&input(1, &ms, None, 0)),
            Decision::Wait(WaitReason::OtherPreferred)
        );
        // A higher offset still wins whatever the rank.
        ms[0].offset = 101;
        assert_eq!(decide(&input(1, &ms, None, 0)), Decision::Campaign);
    }

    #[test]
    fn highest_offset_wins_ties_lowest_id() {
        let ms = [
            member(1, 50, Some(1)),
            member(2, 100, Some(1)),
            member(3, 100, Some(1)),
        ];
        assert_eq!(decide(&input(2, &ms, None, 0)), Decision::Campaign);
        assert_eq!(
            decide(&input(1, &ms, None, 0)),
            Decision::Wait(WaitReason::OtherPreferred)
        );
        assert_eq!(
            decide(&input(3, &ms, None, 0)),
            Decision::Wait(WaitReason::OtherPreferred)
        );
    }

    #[test]
    fn waits_for_reports_then_goes_on_without_silent_members() {
        let ms = [member(1, 50, Some(1)), member(2, 100, None)];
        assert_eq!(
            decide(&input(1, &ms, None, 100)),
            Decision::Wait(WaitReason::WaitingForReports)
        );
        assert_eq!(decide(&input(1, &ms, None, 500)), Decision::Campaign);
        assert_eq!(
            decide(&input(2, &ms, None, 500)),
            Decision::Wait(WaitReason::NotReady)
        );
        // A report for an older epoch is not a report.
        let ms = [member(1, 50, Some(1)), member(2, 100, Some(0))];
        assert_eq!(
            decide(&input(1, &ms, None, 100)),
            Decision::Wait(WaitReason::WaitingForReports)
        );
    }

    #[test]
    fn an_unwitnessed_loss_waits_the_full_time() {
        let ms = [member(1, 50, Some(1))];
        let mut i = input(1, &ms, None, 499);
        i.witnessed = false;
        assert_eq!(decide(&i), Decision::Wait(WaitReason::WaitingForReports));
        i.leaderless_ms = 500;
        assert_eq!(decide(&i), Decision::Campaign);
    }

    #[test]
    fn handover_target_campaigns_alone_while_valid() {
        let ms = [member(1, 50, Some(1)), member(2, 100, Some(1))];
        let h = HandoverRecord {
            from: 9,
            target: 1,
            epoch: 1,
        };
        assert_eq!(decide(&input(1, &ms, Some(&h), 0)), Decision::Campaign);
        assert_eq!(
            decide(&input(2, &ms, Some(&h), 0)),
            Decision::Wait(WaitReason::HandoverToOther)
        );
        // Expired, stale epoch, or a dead target: the normal rule applies.
        assert_eq!(decide(&input(2, &ms, Some(&h), 5000)), Decision::Campaign);
        let stale = HandoverRecord { epoch: 0, ..h };
        assert_eq!(decide(&input(2, &ms, Some(&stale), 0)), Decision::Campaign);
        let dead = HandoverRecord { target: 7, ..h };
        assert_eq!(decide(&input(2, &ms, Some(&dead), 0)), Decision::Campaign);
    }

    proptest! {
        /// With every member reported, exactly one member campaigns, and no member with a
        /// lower offset than another ever does.
        #[test]
        fn exactly_one_campaigner_with_the_highest_offset(
            offsets in proptest::collection::btree_map(1u32..50, 0u64..5, 1..8)
        ) {
            let ms: Vec<_> = offsets.iter().map(|(&id, &o)| member(id, o, Some(1))).collect();
            let campaigners: Vec<u32> = ms
                .iter()
                .filter(|m| decide(&input(m.id, &ms, None, 0)) == Decision::Campaign)
                .map(|m| m.id)
                .collect();
            prop_assert_eq!(campaigners.len(), 1);
            let c = ms.iter().find(|m| m.id == campaigners[0]).unwrap();
            let max = ms.iter().map(|m| m.offset).max().unwrap();
            prop_assert_eq!(c.offset, max);
            prop_assert!(ms.iter().filter(|m| m.offset == max).all(|m| m.id >= c.id));
        }

        /// Before the wait is over, a member that has not reported never loses to a
        /// lower reported offset: nobody campaigns.
        #[test]
        fn nobody_campaigns_over_an_unreported_member_before_the_wait(
            offsets in proptest::collection::btree_map(1u32..50, 0u64..5, 2..8),
            silent_pick in any::<proptest::sample::Index>(),
            waited in 0u64..500,
        ) {
            let silent = *silent_pick.get(&offsets.keys().copied().collect::<Vec<_>>());
            let ms: Vec<_> = offsets
                .iter()
                .map(|(&id, &o)| member(id, o, if id == silent { None } else { Some(1) }))
                .collect();
            for m in &ms {
                prop_assert_ne!(decide(&input(m.id, &ms, None, waited)), Decision::Campaign);
            }
        }
    }
}
