//! Where random bytes come from: challenges, sequence numbers, DH private keys.
//!
//! The state machines take a [`RandomSource`] so tests can make an exchange deterministic;
//! production uses [`OsRandom`] (the OS CSPRNG through `getrandom`).

/// The OS random source failed (`getrandom` error); the exchange fails with
/// "authentication failed" rather than proceeding with weak randomness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the random number source failed")]
pub struct RandomError;

/// A source of cryptographically secure random bytes.
pub trait RandomSource {
    /// Fills `buf` entirely with random bytes.
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomError>;

    /// A random non-zero sequence number (S1 / S2): zero means "no bidirectional
    /// authentication" in the Reply, so it is never drawn.
    fn seqnum(&mut self) -> Result<u32, RandomError> {
        for _ in 0..16 {
            let mut b = [0u8; 4];
            self.fill(&mut b)?;
            let n = u32::from_le_bytes(b);
            if n != 0 {
                return Ok(n);
            }
        }
        Err(RandomError)
    }
}

/// The operating system's CSPRNG (`getrandom(2)` on Linux).
#[derive(Debug, Default, Clone, Copy)]
pub struct OsRandom;

impl RandomSource for OsRandom {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomError> {
        getrandom::fill(buf).map_err(|_| RandomError)
    }
}

impl<R: RandomSource + ?Sized> RandomSource for &mut R {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomError> {
        (**self).fill(buf)
    }
}
