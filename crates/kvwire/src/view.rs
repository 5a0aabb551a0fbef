//! Shared plumbing for the zero-copy header views.

/// Byte range of a field inside a header.
pub type Field = core::ops::Range<usize>;

/// Error from a checked view constructor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the header (or than a length field claims).
    Truncated,
    /// A length or version field is inconsistent.
    Malformed,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated header"),
            Error::Malformed => f.write_str("malformed header"),
        }
    }
}

impl std::error::Error for Error {}

#[inline]
pub(crate) fn be16(b: &[u8], f: Field) -> u16 {
    let s = &b[f];
    u16::from_be_bytes([s[0], s[1]])
}

#[inline]
pub(crate) fn be24(b: &[u8], f: Field) -> u32 {
    let s = &b[f];
    u32::from_be_bytes([0, s[0], s[1], s[2]])
}

#[inline]
pub(crate) fn be32(b: &[u8], f: Field) -> u32 {
    let s = &b[f];
    u32::from_be_bytes([s[0], s[1], s[2], s[3]])
}

#[inline]
pub(crate) fn be64(b: &[u8], f: Field) -> u64 {
    let s = &b[f];
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    u64::from_be_bytes(a)
}

#[inline]
pub(crate) fn put_be24(b: &mut [u8], f: Field, v: u32) {
    b[f].copy_from_slice(&v.to_be_bytes()[1..]);
}

/// Defines a view struct `$name<T>` with the usual constructors.
macro_rules! view {
    ($(#[$m:meta])* $name:ident, $min:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking it; accessors may panic
            /// unless [`Self::check_len`] succeeds.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer after [`Self::check_len`]; no accessor panics afterwards.
            #[inline]
            pub fn new_checked(buffer: T) -> Result<Self, $crate::view::Error> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Returns the wrapped buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// Minimum length of this header in bytes.
            pub const MIN_LEN: usize = $min;
        }
    };
}
pub(crate) use view;
