//! Byte-level mutations in the style of libFuzzer's and AFL's "havoc" stage, for the stable
//! driver: a few stacked edits (bit flips, interesting integers, arithmetic, erase, insert,
//! duplicate, splice with another input of the pool).
//!
//! Wire formats here are little-endian with lengths and offsets in fixed places, so the
//! integer edits use values that sit on the limits the decoders check (PDU lengths, 4 KiB,
//! MAXH2CDATA, 0, -1...).

/// xorshift64*: small, fast, reproducible from its seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator started from `seed` (its lowest bit is forced to 1: the state must not
    /// be 0).
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True with probability `1 / one_in`.
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

const INTERESTING_8: [u8; 9] = [0, 1, 0x7f, 0x80, 0xff, 4, 8, 24, 72];
const INTERESTING_16: [u16; 10] = [0, 1, 0x7fff, 0x8000, 0xffff, 31, 32, 127, 128, 0xfff0];
const INTERESTING_32: [u32; 14] = [
    0,
    1,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    24,
    72,
    512,
    4096,
    8192,
    8193,
    131072,
    1 << 20,
    0xffff_fffc,
];

/// Apply 1 to 16 stacked mutations to `data`, keeping it at most `max_len` bytes. `other` is
/// another input of the pool, for splicing.
pub fn havoc(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8], max_len: usize) {
    let rounds = 1 << rng.below(5);
    for _ in 0..rounds {
        mutate_once(rng, data, other, max_len);
    }
    data.truncate(max_len);
}

fn mutate_once(rng: &mut Rng, d: &mut Vec<u8>, other: &[u8], max_len: usize) {
    if d.is_empty() {
        d.push(rng.next_u64() as u8);
        return;
    }
    let len = d.len();
    let at = rng.below(len);
    match rng.below(14) {
        0 => d[at] ^= 1 << rng.below(8),
        1 => d[at] = rng.next_u64() as u8,
        2 => d[at] = INTERESTING_8[rng.below(INTERESTING_8.len())],
        3 if len >= 2 => {
            let at = rng.below(len - 1);
            let v = INTERESTING_16[rng.below(INTERESTING_16.len())];
            d[at..at + 2].copy_from_slice(&v.to_le_bytes());
        }
        4 if len >= 4 => {
            let at = rng.below(len - 3);
            let v = INTERESTING_32[rng.below(INTERESTING_32.len())];
            d[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        5 => {
            let delta = rng.below(35) as u8;
            d[at] = if rng.chance(2) {
                d[at].wrapping_add(delta)
            } else {
                d[at].wrapping_sub(delta)
            };
        }
        6 if len >= 4 => {
            // Arithmetic on a little-endian u32 (a length or an offset).
            let at = rng.below(len - 3);
            let mut b = [0u8; 4];
            b.copy_from_slice(&d[at..at + 4]);
            let v = u32::from_le_bytes(b);
            let delta = rng.below(64) as u32;
            let v = if rng.chance(2) {
                v.wrapping_add(delta)
            } else {
                v.wrapping_sub(delta)
            };
            d[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        7 => {
            // Erase a range.
            let n = 1 + rng.below((len - at).min(256));
            d.drain(at..at + n);
        }
        8 if len < max_len => {
            // Insert random or repeated bytes.
            let n = 1 + rng.below(64.min(max_len - len));
            let b = rng.next_u64() as u8;
            let repeated = rng.chance(2);
            let ins: Vec<u8> = (0..n)
                .map(|_| if repeated { b } else { rng.next_u64() as u8 })
                .collect();
            d.splice(at..at, ins);
        }
        9 if len < max_len => {
            // Duplicate a piece of itself elsewhere (a PDU repeated, a field copied).
            let from = rng.below(len);
            let n = 1 + rng.below((len - from).min(max_len - len).min(1024));
            let piece = d[from..from + n].to_vec();
            d.splice(at..at, piece);
        }
        10 => {
            // Overwrite with a piece of itself.
            let from = rng.below(len);
            let n = 1 + rng.below((len - from).min(len - at).min(256));
            let piece = d[from..from + n].to_vec();
            d[at..at + n].copy_from_slice(&piece);
        }
        11 if !other.is_empty() => {
            // Splice: our head, the other's tail.
            let cut = rng.below(other.len());
            d.truncate(at);
            d.extend_from_slice(&other[cut..]);
        }
        12 if !other.is_empty() && len < max_len => {
            // Insert a piece of the other input (a whole PDU of another seed, often).
            let from = rng.below(other.len());
            let n = 1 + rng.below((other.len() - from).min(max_len - len).min(4096));
            d.splice(at..at, other[from..from + n].iter().copied());
        }
        13 => d.truncate(at.max(1)),
        _ => d[at] = d[at].wrapping_add(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn havoc_respects_max_len_and_is_reproducible() {
        let seed: Vec<u8> = (0..200).collect();
        let run = |s| {
            let mut rng = Rng::new(s);
            let mut outs = Vec::new();
            for _ in 0..2000 {
                let mut d = seed.clone();
                havoc(&mut rng, &mut d, &seed[..50], 300);
                assert!(d.len() <= 300);
                outs.push(d);
            }
            outs
        };
        let a = run(7);
        assert_eq!(a, run(7), "same seed, same mutations");
        assert_ne!(a, run(8));
        assert!(
            a.iter().filter(|d| **d != seed).count() > 1900,
            "mutations change the input"
        );
        assert!(a.iter().any(|d| d.len() > seed.len()) && a.iter().any(|d| d.len() < seed.len()));
    }
}
