//! Memory-access accounting: distinct 64 B lines touched per operation,
//! split into hash-index lines (primary and chained buckets) and slab lines
//! (KV records). Compiled to nothing unless the `accounting` feature is on.

/// Which operation a line count belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpClass {
    /// GET.
    Get = 0,
    /// PUT.
    Put = 1,
    /// DELETE.
    Delete = 2,
}

/// Accumulated line counts per operation class (only filled with the
/// `accounting` feature).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LineStats {
    /// Operations counted, per [`OpClass`].
    pub ops: [u64; 3],
    /// Distinct hash-index lines (buckets), per [`OpClass`].
    pub index_lines: [u64; 3],
    /// Distinct slab lines (records), per [`OpClass`].
    pub slab_lines: [u64; 3],
}

impl LineStats {
    /// Mean total lines per operation of `class`.
    pub fn lines_per_op(&self, class: OpClass) -> f64 {
        let i = class as usize;
        if self.ops[i] == 0 {
            0.0
        } else {
            (self.index_lines[i] + self.slab_lines[i]) as f64 / self.ops[i] as f64
        }
    }
}

#[cfg(feature = "accounting")]
mod imp {
    use super::*;

    const MAX_TRACK: usize = 64;

    /// Per-op set of touched lines plus running totals.
    #[derive(Debug)]
    pub struct Accounting {
        lines: [usize; MAX_TRACK],
        slab: [bool; MAX_TRACK],
        n: usize,
        pub(crate) totals: LineStats,
    }

    impl Default for Accounting {
        fn default() -> Self {
            Accounting {
                lines: [0; MAX_TRACK],
                slab: [false; MAX_TRACK],
                n: 0,
                totals: LineStats::default(),
            }
        }
    }

    impl Accounting {
        /// Empty counters.
        pub fn new() -> Self {
            Self::default()
        }

        #[inline]
        fn add(&mut self, line: usize, slab: bool) {
            if self.lines[..self.n].contains(&line) {
                return;
            }
            if self.n < MAX_TRACK {
                self.lines[self.n] = line;
                self.slab[self.n] = slab;
                self.n += 1;
            }
        }

        /// A bucket at byte offset `off` was read or written.
        #[inline]
        pub fn index(&mut self, off: usize) {
            self.add(off / 64, false);
        }

        /// Slab bytes `off..off + len` were read or written.
        #[inline]
        pub fn slab(&mut self, off: usize, len: usize) {
            let first = off / 64;
            let last = (off + len.max(1) - 1) / 64;
            for l in first..=last {
                self.add(l, true);
            }
        }

        /// Ends the current operation.
        #[inline]
        pub fn finish(&mut self, class: OpClass) {
            let i = class as usize;
            let slab = self.slab[..self.n].iter().filter(|&&s| s).count() as u64;
            self.totals.ops[i] += 1;
            self.totals.slab_lines[i] += slab;
            self.totals.index_lines[i] += self.n as u64 - slab;
            self.n = 0;
        }

        /// Drops the lines of an operation that is not counted (rejected).
        #[inline]
        pub fn discard(&mut self) {
            self.n = 0;
        }

        /// Totals so far.
        pub fn totals(&self) -> Option<LineStats> {
            Some(self.totals)
        }

        /// Clears the totals.
        pub fn reset(&mut self) {
            self.totals = LineStats::default();
            self.n = 0;
        }
    }
}

#[cfg(not(feature = "accounting"))]
mod imp {
    use super::*;

    /// Zero-sized stand-in: every method is an empty inline function.
    #[derive(Debug, Default)]
    pub struct Accounting;

    impl Accounting {
        /// The zero-sized stand-in.
        pub fn new() -> Self {
            Accounting
        }

        /// No-op.
        #[inline(always)]
        pub fn index(&mut self, _off: usize) {}
        /// No-op.
        #[inline(always)]
        pub fn slab(&mut self, _off: usize, _len: usize) {}
        /// No-op.
        #[inline(always)]
        pub fn finish(&mut self, _class: OpClass) {}
        /// No-op.
        #[inline(always)]
        pub fn discard(&mut self) {}
        /// Always `None` without the feature.
        pub fn totals(&self) -> Option<LineStats> {
            None
        }
        /// No-op.
        pub fn reset(&mut self) {}
    }
}

pub use imp::Accounting;
