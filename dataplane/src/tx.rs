//! Where response frames go: the transmit side the server writes into.
//!
//! The server does not know about mbufs. It asks a [`TxSink`] for an empty
//! [`TxFrame`], writes one response frame into it and hands it back. In the dataplane
//! the sink allocates mbufs from the port's pool and queues them for the NIC
//! (`worker.rs`); in tests and benchmarks it is a `Vec` ([`FnSink`] turns two
//! closures into a sink).

/// A buffer a response frame is written into (an mbuf in the dataplane, a `Vec` in
/// tests).
pub trait TxFrame {
    /// The writable bytes, from the start of the frame to the end of the buffer.
    fn room(&mut self) -> &mut [u8];
    /// Sets the frame length (at most `room().len()`).
    fn set_len(&mut self, len: usize);
}

/// The transmit side of one worker: gives empty frames and takes finished ones.
pub trait TxSink {
    /// The frame type.
    type Frame: TxFrame;
    /// An empty frame, or `None` when none can be had (the response is dropped and
    /// counted as `no_mbuf`).
    fn alloc(&mut self) -> Option<Self::Frame>;
    /// Takes a finished frame (responses arrive in the order they must be sent).
    fn send(&mut self, frame: Self::Frame);
}

/// A [`TxSink`] made of two closures: `alloc` and `send`.
pub struct FnSink<A, S>(pub A, pub S);

impl<B, A, S> TxSink for FnSink<A, S>
where
    B: TxFrame,
    A: FnMut() -> Option<B>,
    S: FnMut(B),
{
    type Frame = B;

    #[inline]
    fn alloc(&mut self) -> Option<B> {
        (self.0)()
    }

    #[inline]
    fn send(&mut self, frame: B) {
        (self.1)(frame)
    }
}
