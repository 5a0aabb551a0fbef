//! The frame buffer pool: `count` buffers of one MTU frame each, allocated once.
//!
//! A request's frame stays in its buffer from the first transmission until the
//! request completes or fails, so that a retransmission resends the same bytes.

/// Fixed pool of equally sized frame buffers with a free list.
#[derive(Debug)]
pub(crate) struct FramePool {
    bytes: Vec<u8>,
    frame_cap: usize,
    free: Vec<u32>,
}

impl FramePool {
    /// `count` buffers of `frame_cap` bytes.
    pub(crate) fn new(count: usize, frame_cap: usize) -> FramePool {
        FramePool {
            bytes: vec![0; count * frame_cap],
            frame_cap,
            // Popped from the end: buffer 0 is handed out first.
            free: (0..count as u32).rev().collect(),
        }
    }

    /// Free buffers.
    pub(crate) fn available(&self) -> usize {
        self.free.len()
    }

    /// Takes a buffer.
    pub(crate) fn alloc(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Returns a buffer taken by [`FramePool::alloc`] (never twice: the free list has
    /// room for every buffer, so this does not allocate).
    pub(crate) fn release(&mut self, i: u32) {
        debug_assert!(!self.free.contains(&i), "buffer {i} released twice");
        self.free.push(i);
    }

    /// Buffer `i`, whole.
    pub(crate) fn buf_mut(&mut self, i: u32) -> &mut [u8] {
        let o = i as usize * self.frame_cap;
        &mut self.bytes[o..o + self.frame_cap]
    }

    /// The first `len` bytes of buffer `i`.
    pub(crate) fn frame(&self, i: u32, len: usize) -> &[u8] {
        let o = i as usize * self.frame_cap;
        &self.bytes[o..o + len.min(self.frame_cap)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_release() {
        let mut p = FramePool::new(2, 16);
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        assert_ne!(a, b);
        assert_eq!(p.alloc(), None);
        p.buf_mut(b)[..3].copy_from_slice(&[1, 2, 3]);
        assert_eq!(p.frame(b, 3), &[1, 2, 3]);
        assert_eq!(p.frame(a, 3), &[0, 0, 0]);
        p.release(a);
        assert_eq!(p.available(), 1);
        assert_eq!(p.alloc(), Some(a));
    }
}
