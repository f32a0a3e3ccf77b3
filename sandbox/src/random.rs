//! Two kinds of randomness. A tiny xorshift generator for what only needs to look random and
//! may be reproducible: uids, generated names, pod IPs and the seeded "kill random pods" fault.
//! And the operating system's CSPRNG (through `ring`, already compiled for rustls) for what
//! must not be guessed: service-account tokens, their key ids and `jti`s, the admin token.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Why two: xorshift64*'s output gives away its state, so
//! from one token a neighbour on the same machine could compute the next and previous ones.
//! No `rand` crate: the project keeps its dependencies hand-picked.

use std::hash::{BuildHasher, Hasher};

use ring::rand::SecureRandom;

/// The operating system's random number generator failed (on Linux, `getrandom(2)` did).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoRandomness;

impl std::fmt::Display for NoRandomness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the operating system's random number generator failed")
    }
}

impl std::error::Error for NoRandomness {}

/// `N` bytes from the operating system's CSPRNG: for secrets, never for names.
pub(crate) fn secret_bytes<const N: usize>() -> Result<[u8; N], NoRandomness> {
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| NoRandomness)?;
    Ok(bytes)
}

/// `N` secret bytes as lower-case hex (32 bytes are 64 hex digits, 256 bits).
pub(crate) fn secret_hex<const N: usize>() -> Result<String, NoRandomness> {
    Ok(to_hex(&secret_bytes::<N>()?))
}

/// A version-4 UUID from the CSPRNG, as RFC 9562 asks for one (122 random bits).
pub(crate) fn secret_uuid() -> Result<String, NoRandomness> {
    let mut b = secret_bytes::<16>()?;
    b[6] = b[6] & 0x0f | 0x40;
    b[8] = b[8] & 0x3f | 0x80;
    let hex = to_hex(&b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// xorshift64* (Marsaglia / Vigna): good enough spread for names and test fault injection.
/// Never for secrets: one output reveals the state (see `secret_bytes`).
#[derive(Clone, Debug)]
pub(crate) struct Xorshift {
    state: u64,
}

impl Xorshift {
    /// The same seed gives the same sequence: tests that kill "random" pods stay reproducible.
    pub(crate) fn from_seed(seed: u64) -> Xorshift {
        // A zero state would stay zero forever.
        Xorshift {
            state: seed ^ 0x9E37_79B9_7F4A_7C15 | 1,
        }
    }

    /// Seeded from std's per-process random hash keys and the clock.
    pub(crate) fn from_entropy() -> Xorshift {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        hasher.write_u128(nanos);
        Xorshift::from_seed(hasher.finish())
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..bound` (bound > 0).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    /// `bytes` random bytes as lower-case hex (a token of 32 bytes is 64 hex digits).
    pub(crate) fn hex(&mut self, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes * 2);
        for _ in 0..bytes {
            out.push_str(&format!("{:02x}", self.next_u64() as u8));
        }
        out
    }

    /// A version-4 style UUID, the shape of `metadata.uid`.
    pub(crate) fn uuid(&mut self) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0x0fff,
            (b >> 48) & 0x3fff | 0x8000,
            b & 0xffff_ffff_ffff
        )
    }

    /// The 5-character suffix `generateName` gets: Kubernetes leaves out vowels and look-alike
    /// digits so a suffix never spells a word.
    pub(crate) fn name_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..5)
            .map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize] as char)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded faults must pick the same pods every run.
    #[test]
    fn same_seed_same_sequence() {
        let mut a = Xorshift::from_seed(7);
        let mut b = Xorshift::from_seed(7);
        assert_eq!(a.next_u64(), b.next_u64());
        assert_ne!(
            Xorshift::from_seed(8).next_u64(),
            Xorshift::from_seed(7).next_u64()
        );
    }

    /// uids look like UUIDs and generateName suffixes avoid vowels and look-alikes.
    #[test]
    fn uuid_and_suffix_have_kubernetes_shapes() {
        let mut r = Xorshift::from_seed(1);
        let uid = r.uuid();
        assert_eq!(uid.len(), 36, "{uid}");
        assert_eq!(uid.as_bytes()[14], b'4');
        let suffix = r.name_suffix();
        assert_eq!(suffix.len(), 5);
        assert!(suffix.chars().all(|c| !"aeiou013".contains(c)));
        assert_eq!(r.hex(32).len(), 64);
    }

    /// Secret uuids have the v4 shape and secret hex the asked length; two draws differ.
    #[test]
    fn secrets_have_their_shapes() {
        let uid = secret_uuid().expect("OS randomness");
        assert_eq!(uid.len(), 36, "{uid}");
        assert_eq!(uid.as_bytes()[14], b'4', "{uid}");
        assert!(
            matches!(uid.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
            "{uid}"
        );
        let a = secret_hex::<32>().expect("OS randomness");
        assert_eq!(a.len(), 64);
        assert_ne!(a, secret_hex::<32>().expect("OS randomness"));
    }
}
