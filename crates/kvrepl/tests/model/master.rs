//! The master of the model: workers, the replication lcore, shippers.

use super::*;

pub(crate) struct ScanJob {
    pub(crate) session: u32,
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) idx: usize,
}

pub(crate) struct Worker {
    pub(crate) map: Map,
    pub(crate) prod: LogProducer,
    pub(crate) cons: LogConsumer,
    pub(crate) job: Option<ScanJob>,
    pub(crate) scanned: Option<u32>,
}

/// The master's per-replica state.
pub(crate) struct Rep {
    pub(crate) state: ReplicaState,
    pub(crate) shipper: Shipper,
    pub(crate) live: Liveness,
    pub(crate) nonce: u64,
    pub(crate) welcome: Option<Welcome>,
    pub(crate) first_psn: u32,
    pub(crate) full_pending: bool,
    pub(crate) member: bool,
    pub(crate) acked: u64,
    pub(crate) last_ack_ns: u64,
    pub(crate) partials: u32,
    pub(crate) fulls: u32,
}

pub(crate) struct Master {
    pub(crate) workers: Vec<Worker>,
    pub(crate) backlog: Backlog,
    pub(crate) fs: FullSync,
    pub(crate) ids: ReplIds,
    pub(crate) epoch: u64,
    pub(crate) reps: Vec<Rep>,
    /// Every live record in stream order with its offset.
    pub(crate) history: Vec<(u64, Rec)>,
    pub(crate) next_session: u32,
    pub(crate) gate: GateRules,
    pub(crate) probe: ProbeConfig,
    pub(crate) refused: u64,
    pub(crate) sessions: u32,
}

pub(crate) const KEYS: u32 = 400;

impl Master {
    pub(crate) fn new(workers: usize, replicas: usize, backlog: usize) -> Self {
        let ship = ShipperConfig {
            segment_payload: write_imm_payload_capacity(MTU),
            window: 16,
            rto_ns: 2 * MS,
            rto_max_ns: 20 * MS,
            max_retries: 8,
        };
        Master {
            workers: (0..workers)
                .map(|_| {
                    let (prod, cons) = log_ring(256 * 1024);
                    Worker {
                        map: Map::new(),
                        prod,
                        cons,
                        job: None,
                        scanned: None,
                    }
                })
                .collect(),
            backlog: Backlog::new(backlog, 0),
            fs: FullSync::new(0, workers),
            ids: ReplIds {
                current: random_repl_id(),
                previous: None,
            },
            epoch: 1,
            reps: (0..replicas)
                .map(|_| Rep {
                    state: ReplicaState::Connecting,
                    shipper: Shipper::new(ship),
                    live: Liveness::new(0),
                    nonce: 0,
                    welcome: None,
                    first_psn: 0,
                    full_pending: false,
                    member: false,
                    acked: 0,
                    last_ack_ns: 0,
                    partials: 0,
                    fulls: 0,
                })
                .collect(),
            history: Vec::new(),
            next_session: 1,
            gate: GateRules::new(
                GateConfig {
                    mode: Mode::Sync,
                    min_replicas: 2,
                    max_lag_ns: 50 * MS,
                },
                replicas,
            ),
            probe: ProbeConfig {
                probe_interval_ns: 10 * MS,
                waiting_time_ns: 30 * MS,
            },
            refused: 0,
            sessions: 0,
        }
    }

    pub(crate) fn data(&self) -> Map {
        let mut all = Map::new();
        for w in &self.workers {
            all.extend(w.map.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        all
    }

    pub(crate) fn write(&mut self, rng: &mut SmallRng) {
        let k = rng.gen_range(0..KEYS);
        let nw = self.workers.len();
        let w = &mut self.workers[k as usize % nw];
        let key = format!("key{k}").into_bytes();
        if w.map.contains_key(&key) && rng.gen_bool(0.25) {
            match w.prod.try_push(&Record::Delete { key: &key }) {
                Ok(()) => {
                    w.map.remove(&key);
                }
                Err(_) => self.refused += 1,
            }
        } else {
            let len = if rng.gen_bool(0.02) {
                rng.gen_range(1500..3000)
            } else {
                rng.gen_range(0..120)
            };
            let value: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            match w.prod.try_push(&Record::Put {
                key: &key,
                value: &value,
            }) {
                Ok(()) => {
                    w.map.insert(key, value);
                }
                Err(_) => self.refused += 1,
            }
        }
    }

    /// Each worker's part of a scan session, a few keys per step.
    pub(crate) fn scan(&mut self) {
        let (active, session) = (self.fs.is_active(), self.fs.session());
        for (i, w) in self.workers.iter_mut().enumerate() {
            if let Some(j) = &w.job {
                if !active || j.session != session {
                    if w.prod.try_push_scan_end(j.session).is_ok() {
                        w.job = None;
                    }
                    continue;
                }
            }
            if w.job.is_none()
                && active
                && w.scanned != Some(session)
                && w.prod.try_push_scan_begin(session).is_ok()
            {
                // Sorted: HashMap order is random, and the run must repeat
                // exactly for a seed.
                let mut keys: Vec<Vec<u8>> = w.map.keys().cloned().collect();
                keys.sort_unstable();
                w.job = Some(ScanJob {
                    session,
                    keys,
                    idx: 0,
                });
                w.scanned = Some(session);
            }
            let Some(j) = &mut w.job else { continue };
            for _ in 0..8 {
                if j.idx == j.keys.len() {
                    if w.prod.try_push_scan_end(j.session).is_ok() {
                        w.job = None;
                    }
                    break;
                }
                let key = &j.keys[j.idx];
                let Some(value) = w.map.get(key) else {
                    j.idx += 1;
                    continue;
                };
                let rec = Record::Put { key, value };
                if w.prod.try_push_scan(&rec, self.fs.grant(i)).is_err() {
                    break;
                }
                j.idx += 1;
            }
        }
    }

    /// The replication lcore: drain every ring.
    pub(crate) fn drain(&mut self) {
        let Master {
            workers,
            backlog,
            fs,
            history,
            ..
        } = self;
        for (i, w) in workers.iter_mut().enumerate() {
            w.cons
                .drain(usize::MAX, |item| {
                    match item {
                        LogItem::Live(b) => {
                            let at = backlog.append(b).unwrap();
                            let rec = match Record::decode(b).unwrap().0 {
                                Record::Put { key, value } => {
                                    Rec::Put(key.to_vec(), value.to_vec())
                                }
                                Record::Delete { key } => Rec::Del(key.to_vec()),
                                Record::QpState { .. } | Record::Group { .. } => {
                                    unreachable!()
                                }
                            };
                            history.push((at, rec));
                        }
                        LogItem::Scan(b) => fs.on_scan(i, b).unwrap(),
                        LogItem::ScanBegin(s) => fs.on_scan_begin(i, s).unwrap(),
                        LogItem::ScanEnd(s) => fs.on_scan_end(i, s).unwrap(),
                        LogItem::Wait { .. } | LogItem::Span { .. } => unreachable!(),
                    }
                    true
                })
                .unwrap();
        }
    }

    pub(crate) fn leave_session(&mut self, r: usize) {
        self.reps[r].member = false;
        self.reps[r].full_pending = false;
    }

    /// Starts, feeds and ends full-sync sessions.
    pub(crate) fn sessions(&mut self) {
        if self.fs.is_active() {
            let members: Vec<usize> = (0..self.reps.len())
                .filter(|&r| self.reps[r].member)
                .collect();
            if members.is_empty() {
                self.fs.end();
                return;
            }
            let pin = members
                .iter()
                .map(|&r| self.reps[r].shipper.acked_sync())
                .min()
                .unwrap();
            self.fs.refresh_grants(pin);
            if members.iter().all(|&r| self.reps[r].shipper.sync_done()) {
                self.fs.end();
            }
            return;
        }
        let waiting: Vec<usize> = (0..self.reps.len())
            .filter(|&r| self.reps[r].full_pending)
            .collect();
        if waiting.is_empty() {
            return;
        }
        let session = self.next_session;
        self.next_session += 1;
        self.sessions += 1;
        let live_from = self.backlog.end();
        self.fs.begin(session, live_from);
        for r in waiting {
            let rep = &mut self.reps[r];
            rep.full_pending = false;
            rep.member = true;
            rep.shipper
                .start_full(self.ids.current, self.epoch, rep.first_psn, live_from);
            rep.state = rep.state.on(ReplicaEvent::FullSyncStarted).unwrap();
        }
        self.fs.refresh_grants(0);
    }

    pub(crate) fn on_frame(
        &mut self,
        r: usize,
        frame: &[u8],
        now: u64,
        link: &mut Link,
        rng: &mut SmallRng,
        f: Faults,
    ) {
        let Ok(fr) = parse_repl_frame(frame) else {
            return;
        };
        match fr {
            ReplFrame::Ack(a) => {
                let rep = &mut self.reps[r];
                if !rep.shipper.is_active() {
                    return;
                }
                rep.live.on_heard(now);
                match a.syndrome {
                    Syndrome::Ack { .. } => rep.shipper.on_ack(a.psn, now),
                    Syndrome::Nak(NakCode::PsnSequenceError) => rep.shipper.on_nak(a.psn, now),
                    Syndrome::RnrNak { timer } => {
                        rep.shipper
                            .on_rnr(a.psn, u64::from(rnr_timer_micros(timer)) * US, now)
                    }
                    Syndrome::Nak(_) => {}
                }
                self.after_ack(r, now);
            }
            ReplFrame::Send(s) => match Control::decode(s.payload) {
                Ok(Control::Hello(h)) => self.on_hello(r, &h, now, link, rng, f),
                Ok(Control::Progress(p)) => self.on_progress(r, &p, now),
                Ok(Control::ProbeReply(p)) => self.on_progress(r, &p.progress, now),
                _ => {}
            },
            ReplFrame::WriteImm(_) => {}
        }
    }

    pub(crate) fn after_ack(&mut self, r: usize, now: u64) {
        let end = self.backlog.end();
        let rep = &mut self.reps[r];
        if rep.state == ReplicaState::FullSync && rep.shipper.sync_done() {
            rep.state = rep
                .state
                .on(ReplicaEvent::SnapshotAcked { stream_end: end })
                .unwrap();
        }
        if matches!(
            rep.state,
            ReplicaState::PartialSync { .. } | ReplicaState::Online
        ) {
            let off = rep.shipper.acked_live();
            if off > rep.acked {
                rep.acked = off;
                rep.last_ack_ns = now;
            }
            rep.state = rep
                .state
                .on(ReplicaEvent::Acked { offset: rep.acked })
                .unwrap();
        }
    }

    pub(crate) fn on_progress(&mut self, r: usize, p: &Progress, now: u64) {
        let rep = &mut self.reps[r];
        if p.nonce != rep.nonce || p.repl_id != self.ids.current {
            return;
        }
        rep.live.on_heard(now);
        if p.state == ReplicaReport::Streaming
            && matches!(
                rep.state,
                ReplicaState::PartialSync { .. } | ReplicaState::Online
            )
        {
            // A replica acknowledges what it applied; the transport may lag.
            assert!(p.applied <= self.backlog.end());
            rep.acked = rep.acked.max(p.applied);
            rep.last_ack_ns = now;
            rep.state = rep
                .state
                .on(ReplicaEvent::Acked { offset: rep.acked })
                .unwrap();
        }
    }

    pub(crate) fn on_hello(
        &mut self,
        r: usize,
        h: &Hello,
        now: u64,
        link: &mut Link,
        rng: &mut SmallRng,
        f: Faults,
    ) {
        if h.nonce < self.reps[r].nonce {
            return;
        }
        if h.nonce == self.reps[r].nonce {
            if let Some(w) = self.reps[r].welcome {
                send_ctl(link, now, &Control::Welcome(w), rng, f);
            }
            return;
        }
        self.leave_session(r);
        let decision = decide(h, &self.ids, self.epoch, &self.backlog);
        let end = self.backlog.end();
        let rep = &mut self.reps[r];
        rep.nonce = h.nonce;
        rep.first_psn = h.first_psn;
        rep.shipper.stop();
        rep.live = Liveness::new(now);
        rep.state = rep
            .state
            .on(ReplicaEvent::Hello {
                decision,
                stream_end: end,
            })
            .unwrap();
        let (mode, offset) = match decision {
            Decision::Partial { from } => {
                rep.shipper
                    .start_partial(self.ids.current, self.epoch, h.first_psn, from);
                rep.acked = from;
                rep.last_ack_ns = now;
                rep.partials += 1;
                (WelcomeMode::Partial, from)
            }
            Decision::Full => {
                rep.full_pending = true;
                rep.acked = 0;
                rep.fulls += 1;
                (WelcomeMode::Full, 0)
            }
            Decision::Refuse => (WelcomeMode::Refused, 0),
        };
        let w = Welcome {
            nonce: h.nonce,
            mode,
            repl_id: self.ids.current,
            epoch: self.epoch,
            offset,
            first_psn: h.first_psn,
            node_id: 0,
        };
        rep.welcome = Some(w);
        send_ctl(link, now, &Control::Welcome(w), rng, f);
    }

    /// Probes, failure detection and shipping toward replica `r`.
    pub(crate) fn tick(
        &mut self,
        r: usize,
        now: u64,
        link: &mut Link,
        rng: &mut SmallRng,
        f: Faults,
    ) {
        let probing = {
            let rep = &self.reps[r];
            rep.state.connected() || rep.full_pending
        };
        if probing {
            match self.reps[r].live.poll(now, &self.probe) {
                LivenessAction::Probe { seq } => {
                    let p = Probe {
                        seq,
                        sent_ns: now,
                        epoch: self.epoch,
                    };
                    send_ctl(link, now, &Control::Probe(p), rng, f);
                }
                LivenessAction::Invalid => {
                    self.leave_session(r);
                    let rep = &mut self.reps[r];
                    rep.shipper.stop();
                    rep.state = rep.state.on(ReplicaEvent::Timeout).unwrap();
                    return;
                }
                LivenessAction::Idle => {}
            }
        }
        let mut frame = vec![0u8; write_imm_frame_len(write_imm_payload_capacity(MTU))];
        let sync = self.fs.is_active().then(|| self.fs.stream());
        let complete = self.fs.complete();
        let rep = &mut self.reps[r];
        for _ in 0..64 {
            let out = &mut frame
                [WRITE_IMM_HEADER_LEN..WRITE_IMM_HEADER_LEN + write_imm_payload_capacity(MTU)];
            let sync_src = if rep.member { sync } else { None };
            match rep
                .shipper
                .poll(now, &self.backlog, sync_src, complete && rep.member, out)
            {
                Ok(Some(o)) => {
                    let fields = WriteImmFields {
                        dest_qp: 7,
                        psn: o.psn,
                        ack_req: o.ack_req,
                        va: 0,
                        rkey: 1,
                        imm: o.imm,
                    };
                    emit_write_imm_headers(&mut frame, &params(), &fields, o.len).unwrap();
                    let n = finalize(&mut frame).unwrap();
                    link.send(now, &frame[..n], rng, f);
                }
                Ok(None) => break,
                Err(e) => {
                    rep.shipper.stop();
                    rep.member = false;
                    let ev = match e {
                        ShipError::Unreachable => ReplicaEvent::Timeout,
                        ShipError::NeedFullSync | ShipError::SyncLost => ReplicaEvent::NeedFullSync,
                        other => panic!("{other:?}"),
                    };
                    rep.state = rep.state.on(ev).unwrap();
                    break;
                }
            }
        }
    }
}
