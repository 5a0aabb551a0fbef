//! Engine configuration and its validation.

use crate::bucket::{BUCKET_BYTES, INLINE_MAX};
use crate::slab::{MAX_CLASSES, MIN_CLASS};

/// Largest region the 31-bit, 32 B-granular pointers can address (64 GiB).
pub const MAX_MEM_BYTES: usize = (1usize << 31) * 32;
/// Smallest region accepted (a few buckets plus some slab memory).
pub const MIN_MEM_BYTES: usize = 4096;

/// Engine parameters, fixed at [`crate::Engine::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// Bytes of the region the engine uses (the region may be larger).
    pub mem_bytes: usize,
    /// Fraction of `mem_bytes` given to the primary hash buckets; the rest is
    /// slab memory (KV records and chained buckets). In `(0, 1]`.
    pub hash_index_ratio: f64,
    /// KVs with `key.len() + value.len() <= inline_threshold` are stored
    /// inline in bucket slots; larger ones in slab records. At most 50.
    pub inline_threshold: usize,
    /// Largest slab class in bytes: a power of two in `64..=4096`.
    pub max_slab_class: usize,
}

impl Default for EngineConfig {
    /// 64 MiB, hash index ratio 0.75, inline up to 20 B, slab classes up
    /// to 4 KiB.
    fn default() -> Self {
        EngineConfig {
            mem_bytes: 64 << 20,
            hash_index_ratio: 0.75,
            inline_threshold: 20,
            max_slab_class: 4096,
        }
    }
}

/// Why a configuration or region was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `mem_bytes` below [`MIN_MEM_BYTES`].
    MemTooSmall,
    /// `mem_bytes` above [`MAX_MEM_BYTES`] (31-bit pointers).
    MemTooLarge,
    /// `hash_index_ratio` not in `(0, 1]` or leaving no bucket.
    BadHashIndexRatio,
    /// `inline_threshold` above 50 bytes.
    BadInlineThreshold,
    /// `max_slab_class` not a power of two in `64..=4096`.
    BadMaxSlabClass,
    /// The region is shorter than `mem_bytes`.
    RegionTooSmall,
    /// The region does not start on a 64-byte boundary.
    RegionMisaligned,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            ConfigError::MemTooSmall => "mem_bytes below 4096",
            ConfigError::MemTooLarge => {
                "mem_bytes above 64 GiB (31-bit pointers at 32 B granularity)"
            }
            ConfigError::BadHashIndexRatio => {
                "hash_index_ratio must be in (0, 1] and leave at least one bucket"
            }
            ConfigError::BadInlineThreshold => "inline_threshold must be at most 50 bytes",
            ConfigError::BadMaxSlabClass => "max_slab_class must be a power of two in 64..=4096",
            ConfigError::RegionTooSmall => "region shorter than mem_bytes",
            ConfigError::RegionMisaligned => "region not 64-byte aligned",
        };
        f.write_str(s)
    }
}

impl std::error::Error for ConfigError {}

impl EngineConfig {
    /// Checks every parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.mem_bytes < MIN_MEM_BYTES {
            return Err(ConfigError::MemTooSmall);
        }
        if self.mem_bytes > MAX_MEM_BYTES {
            return Err(ConfigError::MemTooLarge);
        }
        let r = self.hash_index_ratio;
        if !(r > 0.0 && r <= 1.0) {
            return Err(ConfigError::BadHashIndexRatio);
        }
        if self.inline_threshold > INLINE_MAX {
            return Err(ConfigError::BadInlineThreshold);
        }
        let m = self.max_slab_class;
        if !m.is_power_of_two() || !(2 * MIN_CLASS..=MIN_CLASS << (MAX_CLASSES - 1)).contains(&m) {
            return Err(ConfigError::BadMaxSlabClass);
        }
        Ok(())
    }

    /// Number of primary buckets this configuration yields (at least one
    /// for any positive ratio).
    pub fn num_buckets(&self) -> usize {
        let b = (self.mem_bytes as f64 * self.hash_index_ratio) as usize / BUCKET_BYTES;
        b.max(1).min(self.mem_bytes / BUCKET_BYTES)
    }

    /// Pointer bits actually needed for this region (the slot format always
    /// reserves 31).
    pub fn pointer_bits(&self) -> u32 {
        let units = self.mem_bytes.div_ceil(32).max(2);
        usize::BITS - (units - 1).leading_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_bad_values_refused() {
        assert_eq!(EngineConfig::default().validate(), Ok(()));
        let d = EngineConfig::default();
        let bad = |c: EngineConfig| c.validate().unwrap_err();
        assert_eq!(
            bad(EngineConfig {
                mem_bytes: 100,
                ..d.clone()
            }),
            ConfigError::MemTooSmall
        );
        assert_eq!(
            bad(EngineConfig {
                hash_index_ratio: 0.0,
                ..d.clone()
            }),
            ConfigError::BadHashIndexRatio
        );
        assert_eq!(
            bad(EngineConfig {
                hash_index_ratio: f64::NAN,
                ..d.clone()
            }),
            ConfigError::BadHashIndexRatio
        );
        assert_eq!(
            bad(EngineConfig {
                inline_threshold: 51,
                ..d.clone()
            }),
            ConfigError::BadInlineThreshold
        );
        assert_eq!(
            bad(EngineConfig {
                max_slab_class: 100,
                ..d.clone()
            }),
            ConfigError::BadMaxSlabClass
        );
        assert_eq!(
            bad(EngineConfig {
                max_slab_class: 8192,
                ..d.clone()
            }),
            ConfigError::BadMaxSlabClass
        );
        assert_eq!(
            EngineConfig {
                mem_bytes: 64 << 30,
                ..d
            }
            .pointer_bits(),
            31
        );
    }
}
