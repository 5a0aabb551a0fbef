//! Where response frames go: the transmit side the server writes into.
//!
//! The server does not know about mbufs. It asks a [`TxSink`] for an empty
//! [`TxFrame`], writes one response frame into it and hands it back. In the dataplane
//! the sink allocates mbufs from the port's pool and queues them for the NIC
//! (`worker.rs`); in the tests and the `server_scale` benchmark it collects frames in
//! a `Vec` (`tests/common`).

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
    /// Whether the transmit side is overloaded (its queue towards the NIC is nearly
    /// full): the server then refuses new requests with an RNR NAK instead of
    /// executing them and dropping their responses.
    fn backlogged(&self) -> bool {
        false
    }
}
