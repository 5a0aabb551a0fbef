//! The election rule as a pure function (docs/FAILOVER.md, "Election" and "Election
//! safety").
//!
//! When the leader key is gone, every live node decides on its own, from the same etcd
//! state, whether to campaign. The etcd transaction (leader absent and epoch unchanged)
//! decides between concurrent campaigners; this rule only decides who tries:
//!
//! 1. An operator's forced election names the one node that campaigns; so does a
//!    planned switchover.
//! 2. Otherwise a node campaigns only once it reported its final position (`ready`),
//!    every live member reported or `election_wait_ms` passed, and **`quorum` members
//!    whose data is [`DataState::Live`] reported**. An acknowledged write is on the
//!    master and `min_replicas` replicas; with `quorum = size − min_replicas` every such
//!    set meets every quorum, so some counted reporter holds the write. Members that
//!    lost data (restarted empty, loaded from a file, mid full sync) are not counted.
//!    Without a quorum nobody campaigns, however long it takes: unavailable, not
//!    guessing.
//! 3. The winner is the reporter holding data with the greatest `(hist, offset)` —
//!    the epoch its data follows, then the offset in that epoch's stream (Raft's last
//!    term and index) — ties to the lowest rank, then the lowest id. Its data contains
//!    that of the counted reporter above, so every acknowledged write.
//! 4. The cluster's first election (no epoch ever, no member with data or a seen
//!    epoch) waits for all `size` nodes instead.

use crate::records::{DataState, ForceRecord, HandoverRecord, MemberRecord};

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
    /// An operator forced the election of another node.
    ForcedToOther,
    /// This node has not yet published its final offset.
    NotReady,
    /// Some live members have not yet reported their final offsets.
    WaitingForReports,
    /// Fewer members holding everything they acknowledged ([`DataState::Live`]) have
    /// reported than the quorum: an acknowledged write may be on none of the
    /// reporters. The cluster is unavailable until enough of them are back.
    NoQuorum {
        /// Live reporters.
        have: u32,
        /// The quorum.
        need: u32,
    },
    /// The cluster's first election waits for every configured node.
    Bootstrap {
        /// Reporters.
        have: u32,
        /// The cluster's size.
        need: u32,
    },
    /// This node holds no data of the cluster's history: it never campaigns.
    NoData,
    /// Another reported member is preferred.
    OtherPreferred,
}

/// The inputs of one decision.
#[derive(Debug)]
pub struct ElectionInput<'a> {
    /// This node.
    pub me: u32,
    /// The cluster's epoch (the epoch whose master was lost; 0: never elected).
    pub epoch: u64,
    /// The live members (their keys exist in etcd), this node included once published.
    pub members: &'a [MemberRecord],
    /// The handover key, if any.
    pub handover: Option<&'a HandoverRecord>,
    /// The operator's forced election, if any.
    pub force: Option<&'a ForceRecord>,
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
    /// `ClusterConfig::cluster_size`: the nodes of the cluster.
    pub cluster_size: u32,
    /// `ClusterConfig::election_quorum`: Live reporters needed.
    pub quorum: u32,
}

/// The election quorum of a cluster of `size` nodes: `size − k`, where an
/// acknowledged write is on at least `k + 1` nodes (`k` = `min_replicas` in sync
/// mode), so that every quorum meets every set of nodes holding an acknowledged write.
/// Async mode (`sync_min_replicas` `None`), and sync mode with `min_replicas` 0,
/// acknowledge writes the replicas may not have: `k` is taken as 1 there, so that one
/// slow or dead node cannot make a stale node win over a fresher one that is merely
/// slow to report. Never below 1.
pub fn quorum_for(size: u32, sync_min_replicas: Option<u32>) -> u32 {
    let k = sync_min_replicas.unwrap_or(1).max(1);
    size.saturating_sub(k).max(1)
}

/// The member preferred as master among `members`: greatest `(hist, offset)`, then
/// lowest rank, then lowest id.
pub fn preferred<'a>(members: impl IntoIterator<Item = &'a MemberRecord>) -> Option<u32> {
    members
        .into_iter()
        .max_by(|a, b| {
            (a.hist, a.offset)
                .cmp(&(b.hist, b.offset))
                .then(b.rank.cmp(&a.rank))
                .then(b.id.cmp(&a.id))
        })
        .map(|m| m.id)
}

/// The one node named by a valid forced election or planned switchover, if any.
fn named_target(input: &ElectionInput<'_>) -> Option<(u32, WaitReason)> {
    let live = |id: u32| input.members.iter().any(|m| m.id == id);
    if let Some(f) = input.force {
        if f.epoch == input.epoch && live(f.target) {
            return Some((f.target, WaitReason::ForcedToOther));
        }
    }
    let h = input.handover?;
    (h.epoch == input.epoch && live(h.target) && input.leaderless_ms < input.handover_timeout_ms)
        .then_some((h.target, WaitReason::HandoverToOther))
}

/// Applies the election rule for `input.me`.
pub fn decide(input: &ElectionInput<'_>) -> Decision {
    if let Some((target, other)) = named_target(input) {
        return if target == input.me {
            Decision::Campaign
        } else {
            Decision::Wait(other)
        };
    }
    let is_ready = |m: &&MemberRecord| m.ready == Some(input.epoch);
    let Some(me) = input
        .members
        .iter()
        .find(|m| m.id == input.me && m.ready == Some(input.epoch))
    else {
        return Decision::Wait(WaitReason::NotReady);
    };
    let all_ready = input.members.iter().all(|m| is_ready(&m));
    if (!all_ready || !input.witnessed) && input.leaderless_ms < input.election_wait_ms {
        return Decision::Wait(WaitReason::WaitingForReports);
    }
    let reported = || input.members.iter().filter(is_ready);
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let first = input.epoch == 0 && reported().all(|m| m.epoch == 0 && m.data == DataState::None);
    if first {
        let have = count(reported().count());
        if have < input.cluster_size {
            return Decision::Wait(WaitReason::Bootstrap {
                have,
                need: input.cluster_size,
            });
        }
        return if preferred(reported()) == Some(input.me) {
            Decision::Campaign
        } else {
            Decision::Wait(WaitReason::OtherPreferred)
        };
    }
    let have = count(reported().filter(|m| m.data == DataState::Live).count());
    if have < input.quorum {
        return Decision::Wait(WaitReason::NoQuorum {
            have,
            need: input.quorum,
        });
    }
    if me.data == DataState::None {
        return Decision::Wait(WaitReason::NoData);
    }
    if preferred(reported().filter(|m| m.data != DataState::None)) == Some(input.me) {
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
            hist: 1,
            data: DataState::Live,
        }
    }

    fn empty(id: u32, ready: Option<u64>) -> MemberRecord {
        MemberRecord {
            hist: 0,
            data: DataState::None,
            ..member(id, 0, ready)
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
            force: None,
            leaderless_ms,
            witnessed: true,
            election_wait_ms: 500,
            handover_timeout_ms: 5000,
            cluster_size: 3,
            quorum: 1,
        }
    }

    #[test]
    fn quorum_meets_every_set_holding_an_acknowledged_write() {
        assert_eq!(quorum_for(3, Some(1)), 2);
        assert_eq!(quorum_for(3, Some(2)), 1);
        assert_eq!(quorum_for(5, Some(2)), 3);
        assert_eq!(quorum_for(3, Some(0)), 2);
        assert_eq!(quorum_for(3, None), 2);
        assert_eq!(quorum_for(2, None), 1);
        assert_eq!(quorum_for(1, Some(0)), 1);
        assert_eq!(quorum_for(2, Some(5)), 1);
        for n in 1..8u32 {
            for k in 0..n {
                let q = quorum_for(n, Some(k));
                // A set of k+1 holders and a quorum always share a node.
                assert!(k.max(1) + 1 + q > n || k == 0, "n {n} k {k} q {q}");
            }
        }
    }

    #[test]
    fn an_empty_node_never_wins_and_a_quorum_is_waited_for() {
        // Issue 29, hole 1: node 3 restarted empty while the data holders 1 and 2
        // are frozen. It is the only reporter: nobody campaigns, however long.
        let ms = [empty(3, Some(1))];
        let mut i = input(3, &ms, None, 60_000);
        i.quorum = 2;
        assert_eq!(
            decide(&i),
            Decision::Wait(WaitReason::NoQuorum { have: 0, need: 2 })
        );
        // With a quorum of Live reporters, the empty one still never campaigns.
        let ms = [
            empty(3, Some(1)),
            member(1, 10, Some(1)),
            member(2, 7, Some(1)),
        ];
        let mut i = input(3, &ms, None, 600);
        i.quorum = 2;
        assert_eq!(decide(&i), Decision::Wait(WaitReason::NoData));
        i.me = 1;
        assert_eq!(decide(&i), Decision::Campaign);
        // One Live reporter of a needed two: wait, even for the best of them.
        let ms = [empty(3, Some(1)), member(1, 10, Some(1))];
        let mut i = input(1, &ms, None, 600_000);
        i.quorum = 2;
        assert_eq!(
            decide(&i),
            Decision::Wait(WaitReason::NoQuorum { have: 1, need: 2 })
        );
    }

    #[test]
    fn a_later_history_beats_a_longer_older_one_and_loaded_data_is_not_counted() {
        let mut old = member(1, 1000, Some(3));
        old.hist = 2;
        let mut new = member(2, 900, Some(3));
        new.hist = 3;
        let ms = [old, new.clone()];
        let mut i = input(2, &ms, None, 600);
        i.epoch = 3;
        assert_eq!(decide(&i), Decision::Campaign);
        // A node loaded from its log file may win (its data is a genuine prefix) but
        // does not make a quorum on its own.
        let mut loaded = member(1, 2000, Some(3));
        loaded.hist = 3;
        loaded.data = DataState::Loaded;
        let ms = [loaded, new];
        let mut i = input(1, &ms, None, 600);
        i.epoch = 3;
        i.quorum = 2;
        assert_eq!(
            decide(&i),
            Decision::Wait(WaitReason::NoQuorum { have: 1, need: 2 })
        );
        i.quorum = 1;
        assert_eq!(decide(&i), Decision::Campaign);
    }

    #[test]
    fn the_first_election_waits_for_every_node() {
        let fresh = |id| MemberRecord {
            epoch: 0,
            ..empty(id, Some(0))
        };
        let ms = [fresh(1), fresh(2)];
        let mut i = input(1, &ms, None, 600);
        i.epoch = 0;
        assert_eq!(
            decide(&i),
            Decision::Wait(WaitReason::Bootstrap { have: 2, need: 3 })
        );
        let ms = [fresh(1), fresh(2), fresh(3)];
        let mut i = input(1, &ms, None, 600);
        i.epoch = 0;
        assert_eq!(decide(&i), Decision::Campaign);
        i.me = 2;
        assert_eq!(decide(&i), Decision::Wait(WaitReason::OtherPreferred));
        // After etcd lost its keys (epoch 0 again), a member that has seen an epoch
        // makes it no first election: empty nodes cannot start a new history.
        let mut seen = fresh(3);
        seen.epoch = 4;
        let ms = [fresh(1), fresh(2), seen];
        let mut i = input(1, &ms, None, 600);
        i.epoch = 0;
        assert_eq!(
            decide(&i),
            Decision::Wait(WaitReason::NoQuorum { have: 0, need: 1 })
        );
    }

    #[test]
    fn a_forced_election_names_its_target_alone() {
        let ms = [empty(3, Some(1)), member(1, 10, Some(1))];
        let f = ForceRecord {
            target: 3,
            epoch: 1,
        };
        let mut i = input(3, &ms, None, 0);
        i.force = Some(&f);
        i.quorum = 2;
        assert_eq!(decide(&i), Decision::Campaign);
        i.me = 1;
        assert_eq!(decide(&i), Decision::Wait(WaitReason::ForcedToOther));
        // For another epoch, or a target not live: ignored.
        let stale = ForceRecord {
            target: 3,
            epoch: 0,
        };
        i.force = Some(&stale);
        assert_eq!(
            decide(&i),
            Decision::Wait(WaitReason::NoQuorum { have: 1, need: 2 })
        );
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
