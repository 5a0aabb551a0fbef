//! The master's view of one replica, as a state machine.
//!
//! ```text
//!              HELLO partial                        acked ≥ target
//!   Connecting ─────────────► PartialSync{target} ─────────────────► Online
//!       │  HELLO full               ▲                                 │
//!       ▼                           │ SNAPSHOT_END acked              │ backlog evicted
//!   WaitFullSync ──session──► FullSync ─────────────────────┘         │ its bytes
//!       ▲                                                             │
//!       └─────────────────────────────────────────────────────────────┘
//!   any state but Connecting ──probe timeout──► Invalid ──HELLO──► (as above)
//! ```
//!
//! * `target` of a partial sync is the stream's end when it started: the
//!   replica is Online once it acknowledged that much.
//! * Only Online replicas count for `min_replicas` and the sync quorum
//!   ([`crate::progress::GateRules`]).
//! * A HELLO is taken in any state (a replica that restarted says so with a
//!   new HELLO); a refused one (stale master) leaves the replica Connecting.
//! * An event that makes no sense in a state is an error, never a panic; the
//!   state is unchanged.

use crate::resync::Decision;

/// Where a replica stands, seen from the master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaState {
    /// Known (configured) but no HELLO taken yet, or refused.
    Connecting,
    /// Needs a full sync; waits for a scan session to start.
    WaitFullSync,
    /// Receiving a full sync's scan stream.
    FullSync,
    /// Catching up on the live stream until it acknowledged `target`.
    PartialSync {
        /// The stream's end when the catch-up started.
        target: u64,
    },
    /// Caught up and acknowledging: counted for the write gate.
    Online,
    /// Probes went unanswered: not counted; waits for a HELLO.
    Invalid,
}

/// What happened to a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaEvent {
    /// A HELLO was answered with `decision`, while the stream ended at
    /// `stream_end`.
    Hello {
        /// The answer.
        decision: Decision,
        /// The live stream's end at that moment.
        stream_end: u64,
    },
    /// A scan session started with this replica as a member.
    FullSyncStarted,
    /// The replica acknowledged the SNAPSHOT_END; the stream then ended at
    /// `stream_end`.
    SnapshotAcked {
        /// The live stream's end at that moment.
        stream_end: u64,
    },
    /// The replica acknowledged live offset `offset`.
    Acked {
        /// The acknowledged offset.
        offset: u64,
    },
    /// Its probes went unanswered past `waiting_time_ms` (or the shipper gave
    /// up).
    Timeout,
    /// The backlog (or scan buffer) lost bytes the replica still needs.
    NeedFullSync,
}

/// An event that does not apply to the state it came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IllegalTransition {
    /// The state.
    pub state: ReplicaState,
    /// The event.
    pub event: ReplicaEvent,
}

impl ReplicaState {
    /// The state after `event`.
    pub fn on(self, event: ReplicaEvent) -> Result<ReplicaState, IllegalTransition> {
        use ReplicaEvent as E;
        use ReplicaState as S;
        let next = match (self, event) {
            (
                _,
                E::Hello {
                    decision,
                    stream_end,
                },
            ) => match decision {
                Decision::Partial { from } if from >= stream_end => S::Online,
                Decision::Partial { .. } => S::PartialSync { target: stream_end },
                Decision::Full => S::WaitFullSync,
                Decision::Refuse => S::Connecting,
            },
            (S::WaitFullSync, E::FullSyncStarted) => S::FullSync,
            (S::FullSync, E::SnapshotAcked { stream_end }) => S::PartialSync { target: stream_end },
            (S::PartialSync { target }, E::Acked { offset }) if offset >= target => S::Online,
            // Otherwise an acknowledgement changes no state (late ones of a
            // replica that is (re)syncing or gone included).
            (_, E::Acked { .. }) => self,
            (S::Connecting, E::Timeout) => S::Connecting,
            (_, E::Timeout) => S::Invalid,
            (S::PartialSync { .. } | S::Online | S::FullSync, E::NeedFullSync) => S::WaitFullSync,
            (S::WaitFullSync, E::NeedFullSync) => self,
            _ => return Err(IllegalTransition { state: self, event }),
        };
        Ok(next)
    }

    /// True when the replica counts for `min_replicas` and the quorum.
    pub fn counted(&self) -> bool {
        *self == ReplicaState::Online
    }

    /// True while the master ships to it (a connection is up).
    pub fn connected(&self) -> bool {
        matches!(
            self,
            ReplicaState::FullSync | ReplicaState::PartialSync { .. } | ReplicaState::Online
        )
    }

    /// Stable name for status output.
    pub fn name(&self) -> &'static str {
        match self {
            ReplicaState::Connecting => "connecting",
            ReplicaState::WaitFullSync => "wait_full_sync",
            ReplicaState::FullSync => "full_sync",
            ReplicaState::PartialSync { .. } => "partial_sync",
            ReplicaState::Online => "online",
            ReplicaState::Invalid => "invalid",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReplicaEvent as E;
    use ReplicaState as S;

    fn hello(decision: Decision, stream_end: u64) -> E {
        E::Hello {
            decision,
            stream_end,
        }
    }

    #[test]
    fn full_sync_path() {
        let s = S::Connecting.on(hello(Decision::Full, 100)).unwrap();
        assert_eq!(s, S::WaitFullSync);
        let s = s.on(E::FullSyncStarted).unwrap();
        assert_eq!(s, S::FullSync);
        assert!(!s.counted() && s.connected());
        let s = s.on(E::Acked { offset: 100 }).unwrap();
        assert_eq!(s, S::FullSync, "live acks do not finish a full sync");
        let s = s.on(E::SnapshotAcked { stream_end: 300 }).unwrap();
        assert_eq!(s, S::PartialSync { target: 300 });
        let s = s.on(E::Acked { offset: 299 }).unwrap();
        assert_eq!(s, S::PartialSync { target: 300 });
        let s = s.on(E::Acked { offset: 300 }).unwrap();
        assert!(s.counted());
        assert_eq!(s.on(E::NeedFullSync), Ok(S::WaitFullSync));
    }

    #[test]
    fn partial_timeout_and_return() {
        let s = S::Connecting
            .on(hello(Decision::Partial { from: 50 }, 80))
            .unwrap();
        assert_eq!(s, S::PartialSync { target: 80 });
        let s = s.on(E::Timeout).unwrap();
        assert_eq!(s, S::Invalid);
        assert_eq!(s.on(E::Acked { offset: 90 }), Ok(S::Invalid));
        assert!(s.on(E::FullSyncStarted).is_err());
        let s = s.on(hello(Decision::Partial { from: 80 }, 80)).unwrap();
        assert_eq!(s, S::Online, "caught up already");
        assert_eq!(s.on(hello(Decision::Refuse, 80)), Ok(S::Connecting));
        assert_eq!(S::Connecting.on(E::Timeout), Ok(S::Connecting));
    }

    #[test]
    fn illegal_events_are_errors() {
        for s in [
            S::Connecting,
            S::Online,
            S::PartialSync { target: 1 },
            S::Invalid,
        ] {
            let e = s.on(E::SnapshotAcked { stream_end: 1 }).unwrap_err();
            assert_eq!(e.state, s);
        }
        assert!(S::Online.on(E::FullSyncStarted).is_err());
        assert!(S::Connecting.on(E::NeedFullSync).is_err());
        assert_eq!(S::Online.name(), "online");
    }
}
