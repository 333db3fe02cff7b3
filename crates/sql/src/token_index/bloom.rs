//! The index of one column of one data file: a Bloom filter over the hashes of its tokens, and
//! its bytes (the Puffin blob's data).
//!
//! A Bloom filter answers "certainly absent" or "perhaps present", in about 9.6 bits per
//! distinct token for 1% false positives (seven probes). A sorted token set would answer
//! exactly, but a log file's tokens include an id per record (request ids, session keys), so
//! the set grows nearly as large as the column; a filter stays a few percent of it, and a
//! needle search — the case the index is for — pays for a false positive with one file read.
//!
//! Bytes (little-endian):
//!
//! ```text
//! "FTB1" | version u8 = 1 | probes u8 (1..=16) | 0u16 | bits u64 | tokens u64 | words: bits/64 × u64 | CRC-32 u32
//! ```
//!
//! `bits` is a multiple of 64 from 64 to [`MAX_BITS`], and the blob is exactly as long as
//! `bits` says; the CRC-32 covers what the filter was built for (column, data file, row
//! count: [`super::file`]) and then every byte before it. Anything else is not an index
//! ([`TokenBloom::decode`] answers `None`): index bytes are read from the table's location,
//! which anyone who may write the table may write too.

use twox_hash::XxHash64;

/// The largest filter written or read: 256 Mi bits (32 MiB), about 28 M distinct tokens.
pub(crate) const MAX_BITS: u64 = 1 << 28;
/// Distinct tokens past which a column of a file goes without an index (its filter would pass
/// [`MAX_BITS`]); the writer's memory holds 8 bytes per distinct token until then.
pub(crate) const MAX_TOKENS: usize = 24 << 20;

const MAGIC: [u8; 4] = *b"FTB1";
const VERSION: u8 = 1;
const HEADER: usize = 24;
/// Bits per distinct token and probes, for a false-positive rate of 1%.
const BITS_PER_TOKEN: f64 = 9.585;
const PROBES: u8 = 7;
/// The two hashes of a token, combined to place its probes (Kirsch and Mitzenmacher).
const SEEDS: (u64, u64) = (0x666c_6f65_746f_6b31, 0x9e37_79b9_7f4a_7c15);

/// A token's hash: what the writer keeps of it.
fn hash(token: &str) -> u64 {
    XxHash64::oneshot(SEEDS.0, token.as_bytes())
}

/// The second hash placing a token's probes, made from the first (odd, so that the probes
/// of one token never fall on one bit).
fn step(hash: u64) -> u64 {
    XxHash64::oneshot(SEEDS.1, &hash.to_le_bytes()) | 1
}

/// The distinct tokens of one column of a file being written, as hashes.
#[derive(Debug, Default)]
pub(crate) struct TokenHashes {
    hashes: Vec<u64>,
    /// Length of `hashes` when it was last made distinct.
    distinct: usize,
    /// Too many tokens: the column gets no index.
    overflowed: bool,
}

impl TokenHashes {
    pub(crate) fn add(&mut self, token: &str) {
        if self.overflowed {
            return;
        }
        self.hashes.push(hash(token));
        // Made distinct when it has doubled, so memory stays within twice the distinct ones.
        if self.hashes.len() >= (2 * self.distinct).max(1 << 16) {
            self.dedup();
            if self.distinct > MAX_TOKENS {
                self.overflowed = true;
                self.hashes = Vec::new();
            }
        }
    }

    fn dedup(&mut self) {
        self.hashes.sort_unstable();
        self.hashes.dedup();
        self.distinct = self.hashes.len();
    }

    /// The filter of the tokens added, `None` when there were too many.
    pub(crate) fn finish(mut self) -> Option<TokenBloom> {
        if self.overflowed {
            return None;
        }
        self.dedup();
        if self.distinct > MAX_TOKENS {
            return None;
        }
        let mut bloom = TokenBloom::with_capacity(self.distinct as u64);
        for &h in &self.hashes {
            bloom.insert(h);
        }
        bloom.tokens = self.distinct as u64;
        Some(bloom)
    }
}

/// A Bloom filter of tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenBloom {
    probes: u8,
    /// The bits, 64 to a word.
    words: Vec<u64>,
    /// Distinct tokens inserted (as the writer counted them).
    tokens: u64,
}

impl TokenBloom {
    /// An empty filter sized for `tokens` distinct tokens.
    pub(crate) fn with_capacity(tokens: u64) -> Self {
        let bits = ((tokens as f64 * BITS_PER_TOKEN).ceil() as u64).clamp(64, MAX_BITS);
        Self {
            probes: PROBES,
            words: vec![0; bits.div_ceil(64) as usize],
            tokens: 0,
        }
    }

    fn bits(&self) -> u64 {
        self.words.len() as u64 * 64
    }

    /// The bits a token of hash `hash` sets.
    fn positions(&self, hash: u64) -> impl Iterator<Item = u64> + use<> {
        let (bits, step) = (self.bits(), step(hash));
        (0..u64::from(self.probes)).map(move |i| hash.wrapping_add(i.wrapping_mul(step)) % bits)
    }

    fn insert(&mut self, hash: u64) {
        for bit in self.positions(hash) {
            self.words[(bit / 64) as usize] |= 1 << (bit % 64);
        }
    }

    /// Whether `token` (lowercased, as [`super::tokens`] makes it) may have been inserted.
    pub(crate) fn may_contain(&self, token: &str) -> bool {
        self.positions(hash(token))
            .all(|bit| self.words[(bit / 64) as usize] & (1 << (bit % 64)) != 0)
    }

    /// Bytes this filter takes in memory (for the cache's weight).
    pub(crate) fn size(&self) -> usize {
        self.words.len() * 8 + HEADER
    }

    /// The filter's bytes, its checksum covering `binding` (what it was built for) too.
    pub(crate) fn encode(&self, binding: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(HEADER + self.words.len() * 8 + 4);
        bytes.extend_from_slice(&MAGIC);
        bytes.push(VERSION);
        bytes.push(self.probes);
        bytes.extend_from_slice(&0u16.to_le_bytes());
        bytes.extend_from_slice(&self.bits().to_le_bytes());
        bytes.extend_from_slice(&self.tokens.to_le_bytes());
        for word in &self.words {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        let crc = checksum(binding, &bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// The filter `bytes` hold, `None` unless they are exactly one well-formed filter built
    /// for `binding`.
    pub(crate) fn decode(bytes: &[u8], binding: &[u8]) -> Option<Self> {
        let (body, crc) = bytes.split_last_chunk::<4>()?;
        if body.len() < HEADER || checksum(binding, body) != u32::from_le_bytes(*crc) {
            return None;
        }
        let (header, words) = body.split_at(HEADER);
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(header.get(at..at + 8)?.try_into().ok()?))
        };
        let probes = header[5];
        let bits = u64_at(8)?;
        let tokens = u64_at(16)?;
        let well_formed = header[..4] == MAGIC
            && header[4] == VERSION
            && (1..=16).contains(&probes)
            && header[6..8] == [0, 0]
            && bits % 64 == 0
            && (64..=MAX_BITS).contains(&bits)
            && words.len() as u64 == bits / 8;
        if !well_formed {
            return None;
        }
        let words = words
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
            .collect();
        Some(Self {
            probes,
            words,
            tokens,
        })
    }
}

/// CRC-32 of `binding` followed by `body`.
fn checksum(binding: &[u8], body: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(binding);
    crc.update(body);
    crc.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bloom_of(tokens: impl IntoIterator<Item = String>) -> TokenBloom {
        let mut hashes = TokenHashes::default();
        for t in tokens {
            hashes.add(&t);
        }
        hashes.finish().unwrap()
    }

    #[test]
    fn every_inserted_token_is_found_and_few_others_are() {
        let bloom = bloom_of((0..20_000).map(|i| format!("token{i}")));
        assert!((0..20_000).all(|i| bloom.may_contain(&format!("token{i}"))));
        let false_positives = (0..100_000)
            .filter(|i| bloom.may_contain(&format!("absent{i}")))
            .count();
        // 1% by design; well under 2% for any fair hash.
        assert!(false_positives < 2_000, "{false_positives} false positives");
        assert_eq!(bloom.tokens, 20_000);
    }

    #[test]
    fn an_empty_column_has_an_empty_filter() {
        let bloom = TokenHashes::default().finish().unwrap();
        assert!(!bloom.may_contain("anything"));
        assert_eq!(TokenBloom::decode(&bloom.encode(b"f"), b"f"), Some(bloom));
    }

    #[test]
    fn the_bytes_round_trip() {
        let bloom = bloom_of((0..1_000).map(|i| format!("t{i}")));
        let bytes = bloom.encode(b"column 6 of a.parquet");
        assert_eq!(bytes.len(), HEADER + bloom.words.len() * 8 + 4);
        assert_eq!(TokenBloom::decode(&bytes, b"column 7 of a.parquet"), None);
        assert_eq!(
            TokenBloom::decode(&bytes, b"column 6 of a.parquet"),
            Some(bloom)
        );
    }

    /// Every truncation, every extension and every changed byte of an index is "not an index":
    /// never a panic, never a filter that could answer for another.
    #[test]
    fn damaged_bytes_are_not_an_index() {
        let bloom = bloom_of((0..200).map(|i| format!("t{i}")));
        let bytes = bloom.encode(b"f");
        for cut in 0..bytes.len() {
            assert_eq!(
                TokenBloom::decode(&bytes[..cut], b"f"),
                None,
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(TokenBloom::decode(&longer, b"f"), None);
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] ^= flip;
                assert_eq!(
                    TokenBloom::decode(&damaged, b"f"),
                    None,
                    "byte {at} ^ {flip:#x}"
                );
            }
        }
    }

    /// Bytes a hostile writer makes well-formed (a right CRC-32) but out of bounds.
    #[test]
    fn out_of_bounds_headers_are_refused() {
        let forged = |probes: u8, bits: u64, words: usize| {
            let mut bytes = MAGIC.to_vec();
            bytes.extend_from_slice(&[VERSION, probes, 0, 0]);
            bytes.extend_from_slice(&bits.to_le_bytes());
            bytes.extend_from_slice(&0u64.to_le_bytes());
            bytes.extend(std::iter::repeat_n(0u8, words * 8));
            let crc = checksum(b"f", &bytes);
            bytes.extend_from_slice(&crc.to_le_bytes());
            TokenBloom::decode(&bytes, b"f")
        };
        assert!(forged(7, 64, 1).is_some());
        assert!(forged(0, 64, 1).is_none());
        assert!(forged(17, 64, 1).is_none());
        assert!(forged(7, 0, 0).is_none());
        assert!(forged(7, 65, 1).is_none());
        assert!(forged(7, 128, 1).is_none());
        assert!(forged(7, MAX_BITS * 2, 1).is_none());
        assert!(forged(7, u64::MAX - 63, 1).is_none());
    }
}
