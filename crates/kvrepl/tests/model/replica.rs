//! A replica of the model: an applier into a HashMap.

use super::*;

pub(crate) struct Replica {
    pub(crate) sink: MapSink,
    pub(crate) applier: Applier,
    pub(crate) saved: (u64, u64),
    pub(crate) nonce: u64,
    pub(crate) welcomed: bool,
    pub(crate) first_psn: u32,
    pub(crate) hello_next: u64,
    pub(crate) heard: u64,
    pub(crate) progress_next: u64,
    pub(crate) down_until: u64,
    pub(crate) exact_from: Option<u64>,
}

impl Replica {
    pub(crate) fn new() -> Self {
        Replica {
            sink: MapSink::default(),
            applier: Applier::new(8),
            saved: (0, 0),
            nonce: 0,
            welcomed: false,
            first_psn: 0,
            hello_next: 0,
            heard: 0,
            progress_next: 0,
            down_until: 0,
            exact_from: Some(0),
        }
    }

    pub(crate) fn reconnect(&mut self, now: u64, rng: &mut SmallRng) {
        if self.applier.applied_live().is_some() {
            self.saved = self.applier.position();
        }
        let next_psn = self.applier.next_first_psn();
        self.applier = Applier::new(8);
        self.welcomed = false;
        self.nonce += 1;
        self.first_psn = if self.nonce == 1 {
            rng.gen_range(0..1 << 24)
        } else {
            next_psn
        };
        self.hello_next = now;
    }

    pub(crate) fn hello(&self) -> Hello {
        Hello {
            node_id: 2,
            repl_id: self.saved.0,
            offset: self.saved.1,
            epoch: 1,
            nonce: self.nonce,
            region_va: 0,
            rkey: 1,
            slot_size: 2048,
            credits: 16,
            first_psn: self.first_psn,
        }
    }

    pub(crate) fn progress(&self) -> Progress {
        let (repl_id, epoch) = self.applier.master();
        Progress {
            nonce: self.nonce,
            repl_id,
            epoch,
            applied: self.applier.applied_live().unwrap_or(0),
            sync_applied: self.applier.applied_sync().unwrap_or(0),
            state: self.applier.report(),
        }
    }

    pub(crate) fn on_frame(
        &mut self,
        frame: &[u8],
        now: u64,
        link: &mut Link,
        rng: &mut SmallRng,
        f: Faults,
    ) {
        let Ok(fr) = parse_repl_frame(frame) else {
            return;
        };
        self.heard = now;
        match fr {
            ReplFrame::WriteImm(w) => {
                let (outcome, reply) = self.applier.on_segment(
                    w.link.psn,
                    w.link.ack_req,
                    w.imm,
                    w.payload,
                    &mut self.sink,
                );
                if outcome == Outcome::Broken {
                    self.saved = (0, 0);
                    self.exact_from = None;
                    self.reconnect(now, rng);
                    return;
                }
                let (psn, syn) = match reply {
                    Reply::Ack(p) => (p, Syndrome::Ack { credits: 31 }),
                    Reply::Nak(p) => (p, Syndrome::Nak(NakCode::PsnSequenceError)),
                    Reply::None => return,
                };
                let mut buf = [0u8; 128];
                let n = emit_ack(&mut buf, &params(), 7, psn, syn, 0).unwrap();
                link.send(now, &buf[..n], rng, f);
            }
            ReplFrame::Send(s) => match Control::decode(s.payload) {
                Ok(Control::Welcome(w)) if w.nonce == self.nonce && !self.welcomed => {
                    self.welcomed = true;
                    if w.mode == WelcomeMode::Full {
                        self.saved = (0, 0);
                        self.exact_from = None;
                    }
                    self.applier.on_welcome(&w, &mut self.sink);
                    if w.mode == WelcomeMode::Refused {
                        self.reconnect(now + 5 * MS, rng);
                    }
                }
                Ok(Control::Probe(p)) if self.welcomed => {
                    let r = ProbeReply {
                        seq: p.seq,
                        sent_ns: p.sent_ns,
                        progress: self.progress(),
                    };
                    send_ctl(link, now, &Control::ProbeReply(r), rng, f);
                }
                _ => {}
            },
            ReplFrame::Ack(_) => {}
        }
    }

    pub(crate) fn tick(&mut self, now: u64, link: &mut Link, rng: &mut SmallRng, f: Faults) {
        if self.welcomed && now.saturating_sub(self.heard) > 60 * MS {
            self.reconnect(now, rng);
        }
        if !self.welcomed && now >= self.hello_next {
            send_ctl(link, now, &Control::Hello(self.hello()), rng, f);
            self.hello_next = now + 10 * MS;
            self.heard = now;
        }
        if self.welcomed && now >= self.progress_next {
            send_ctl(link, now, &Control::Progress(self.progress()), rng, f);
            self.progress_next = now + 5 * MS;
        }
        if let Some(p) = self.applier.pending_ack() {
            let mut buf = [0u8; 128];
            let n = emit_ack(&mut buf, &params(), 7, p, Syndrome::Ack { credits: 31 }, 0).unwrap();
            link.send(now, &buf[..n], rng, f);
        }
    }
}
