//! Per-QP transport state: the client QPs a run sends from, their PSNs, which QP
//! carries a partition's next packet, and the request frame around a payload.
//!
//! This is the seam between the workload and measurement (`gen.rs`, which fills a
//! payload for one partition) and the RoCEv2 transport (here: QP choice, PSN,
//! request region address, headers and ICRC), meant to become a client library's.

use kvload::splitmix64;
use kvwire::frame::FrameParams;
use kvwire::{emit_request_headers, finalize};

/// The client QPs of a run and their per-QP protocol state.
#[derive(Debug)]
pub struct QpSet {
    /// (QPN, R_Key) of each QP.
    qps: Vec<(u32, u32)>,
    /// The next PSN of each QP (24 bits).
    psn: Vec<u32>,
    /// Indices into `qps` of each partition's QPs.
    by_partition: Vec<Vec<usize>>,
    /// The next of a partition's QPs to use (round robin).
    cursor: Vec<usize>,
    /// Partition of the next empty (calibration) batch: they rotate over all.
    ping_next: usize,
    /// Addresses and ports of the request frames.
    params: FrameParams,
    /// The server's request region (each QP writes at its own offset).
    region_va: u64,
    region_len: u64,
}

impl QpSet {
    /// QPs `qps` (QPN, R_Key), grouped by partition in `by_partition` (indices into
    /// `qps`, none empty), sending to the region `region_va..+region_len`. The
    /// first PSN of QP `i` is drawn from `psn_seed ^ i`.
    pub fn new(
        qps: Vec<(u32, u32)>,
        by_partition: Vec<Vec<usize>>,
        params: FrameParams,
        region_va: u64,
        region_len: u64,
        psn_seed: u64,
    ) -> QpSet {
        assert!(
            !by_partition.is_empty() && by_partition.iter().all(|q| !q.is_empty()),
            "every partition needs a QP"
        );
        let n = by_partition.len();
        QpSet {
            psn: (0..qps.len())
                .map(|i| (splitmix64(psn_seed ^ i as u64) & 0xff_ffff) as u32)
                .collect(),
            qps,
            by_partition,
            cursor: vec![0; n],
            ping_next: 0,
            params,
            region_va,
            region_len,
        }
    }

    /// The partition of the next empty batch (calibration): they rotate over all, so
    /// every queue pair is used.
    #[inline]
    pub fn next_ping_partition(&mut self) -> usize {
        let part = self.ping_next;
        self.ping_next = (part + 1) % self.by_partition.len();
        part
    }

    /// Frames a request whose `plen`-byte payload is already in place at
    /// `REQUEST_HEADER_LEN` in `buf`: takes partition `part`'s next QP (round robin
    /// over its QPs) and that QP's next PSN, writes the headers, the pad and the
    /// ICRC. Returns the frame length; `None` when the frame does not fit `buf` (the
    /// QP and PSN are used up all the same) or the QP is not a static one.
    #[inline]
    pub fn frame(&mut self, buf: &mut [u8], part: usize, plen: usize) -> Option<usize> {
        let qps_of = &self.by_partition[part];
        let cursor = &mut self.cursor[part];
        let qi = qps_of[*cursor];
        *cursor = (*cursor + 1) % qps_of.len();
        // No static QP (a run on opened QPs sends through the transport only).
        let &(qpn, rkey) = self.qps.get(qi)?;
        let psn = self.psn[qi];
        self.psn[qi] = (psn + 1) & 0xff_ffff;
        let va = self.region_va + (qi as u64 * 4096) % self.region_len.max(4096);
        let va = if va + plen as u64 > self.region_va + self.region_len {
            self.region_va
        } else {
            va
        };
        emit_request_headers(buf, &self.params, qpn, psn, va, rkey, plen).ok()?;
        finalize(buf).ok()
    }

    /// The next PSN of QP `qi` (an index into the QPs of [`QpSet::new`]).
    #[cfg(test)]
    pub fn psn(&self, qi: usize) -> u32 {
        self.psn[qi]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kvwire::{parse_request, REQUEST_HEADER_LEN};
    use std::net::Ipv4Addr;

    pub(crate) fn params() -> FrameParams {
        FrameParams::new(
            [2, 0, 0, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(10, 0, 0, 1),
            0xC000,
        )
    }

    #[test]
    fn round_robin_per_partition_with_consecutive_psns() {
        let qps = vec![(10, 100), (11, 101), (12, 102)];
        let mut s = QpSet::new(
            qps,
            vec![vec![0, 2], vec![1]],
            params(),
            1 << 32,
            1 << 20,
            7,
        );
        let psn0: Vec<u32> = (0..3).map(|i| s.psn(i)).collect();
        assert!(psn0.iter().all(|&p| p < 1 << 24));
        let mut buf = [0u8; 256];
        buf[REQUEST_HEADER_LEN..REQUEST_HEADER_LEN + 4].copy_from_slice(b"abcd");
        let mut seen = Vec::new();
        for _ in 0..4 {
            let len = s.frame(&mut buf, 0, 4).unwrap();
            let r = parse_request(&buf[..len]).expect("valid frame, ICRC included");
            assert_eq!(r.payload, b"abcd");
            seen.push((r.dest_qp, r.psn, r.rkey));
        }
        assert_eq!(
            seen,
            [
                (10, psn0[0], 100),
                (12, psn0[2], 102),
                (10, (psn0[0] + 1) & 0xff_ffff, 100),
                (12, (psn0[2] + 1) & 0xff_ffff, 102)
            ]
        );
        let len = s.frame(&mut buf, 1, 4).unwrap();
        let r = parse_request(&buf[..len]).unwrap();
        assert_eq!((r.dest_qp, r.psn), (11, psn0[1]));
        // QP 1 writes at its own offset of the region.
        assert_eq!(r.va, (1 << 32) + 4096);
    }

    #[test]
    fn psn_wraps_at_24_bits_and_pings_rotate() {
        let mut s = QpSet::new(
            vec![(1, 0), (2, 0)],
            vec![vec![1], vec![0]],
            params(),
            0,
            0,
            0,
        );
        s.psn[0] = 0xff_ffff;
        let mut buf = [0u8; 256];
        let len = s.frame(&mut buf, 1, 0).unwrap();
        assert_eq!(parse_request(&buf[..len]).unwrap().psn, 0xff_ffff);
        assert_eq!(s.psn(0), 0);
        // A region smaller than the payload: the write goes to its start.
        assert_eq!(parse_request(&buf[..len]).unwrap().va, 0);
        let parts: Vec<usize> = (0..5).map(|_| s.next_ping_partition()).collect();
        assert_eq!(parts, [0, 1, 0, 1, 0]);
        assert_eq!(s.frame(&mut buf[..40], 0, 4), None, "does not fit");
    }
}
