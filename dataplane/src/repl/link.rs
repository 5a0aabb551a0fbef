//! How the replication logic meets the network, without DPDK: frames in per link,
//! frames out through a [`LinkTx`], and a periodic [`ReplLogic::poll`]. The
//! replication lcore (`replicator.rs` in the binary) moves mbufs; tests connect two
//! logics with in-memory links.

/// Sends control message `msg` (RC SEND Only, PSN 0, to the replication QPN) on
/// `link` with `params`; nothing when it does not encode.
pub fn send_control(
    tx: &mut dyn LinkTx,
    link: usize,
    params: &kvwire::FrameParams,
    msg: &kvrepl::messages::Control,
) {
    let mut body = [0u8; kvrepl::messages::MAX_CONTROL_LEN];
    let Ok(n) = msg.encode_into(&mut body) else {
        return;
    };
    tx.send(link, &mut |buf| {
        kvwire::repl::emit_send(buf, params, super::replica::REPL_QPN, 0, &body[..n]).unwrap_or(0)
    });
}

/// Where the replication logic sends frames.
pub trait LinkTx {
    /// Builds one frame for link `link`: `build` writes it into the buffer it is given
    /// and returns its length (0: nothing to send). Returns false when no buffer could
    /// be had (the frame is lost; the reliable transport resends it).
    fn send(&mut self, link: usize, build: &mut dyn FnMut(&mut [u8]) -> usize) -> bool;
}

/// The replication side of a node (master or replica), driven by the replication
/// lcore.
pub trait ReplLogic {
    /// Frames that arrived on link `link`.
    fn on_frames(&mut self, link: usize, frames: &[&[u8]], now_ns: u64, tx: &mut dyn LinkTx);
    /// Periodic work: drain the workers' logs, ship, acknowledge, probe, time out.
    /// Returns whether there was work (the lcore idles only when there was none).
    fn poll(&mut self, now_ns: u64, tx: &mut dyn LinkTx) -> bool;
    /// True while a write is held for the replicas' acknowledgement (sync mode): an
    /// idle lcore then yields instead of sleeping, so the acknowledgement is seen at
    /// once, as a worker holding responses does.
    fn waiting(&self) -> bool {
        false
    }
}

/// A [`LinkTx`] that collects frames per link in `Vec`s (tests, examples).
#[derive(Default, Debug)]
pub struct VecLinks {
    /// Frames sent, as (link, bytes).
    pub frames: Vec<(usize, Vec<u8>)>,
    /// Buffer size offered to a frame.
    pub frame_cap: usize,
}

impl VecLinks {
    /// Collects frames of at most `frame_cap` bytes.
    pub fn new(frame_cap: usize) -> VecLinks {
        VecLinks {
            frames: Vec::new(),
            frame_cap,
        }
    }
}

impl LinkTx for VecLinks {
    fn send(&mut self, link: usize, build: &mut dyn FnMut(&mut [u8]) -> usize) -> bool {
        let mut buf = vec![0u8; self.frame_cap];
        let n = build(&mut buf);
        if n > 0 {
            buf.truncate(n);
            self.frames.push((link, buf));
        }
        true
    }
}
