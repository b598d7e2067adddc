//! AES-XTS-256 over 512-byte sectors, in dm-crypt's `aes-xts-plain64` layout (IEEE 1619).
//!
//! The 64-byte key is two AES-256 keys: the first encrypts the data, the second the tweak. The
//! tweak of a sector is its number (512-byte sectors from the start of the namespace) as a
//! little-endian `u64` zero-padded to 16 bytes, which is dm-crypt's `plain64` IV. Every sector
//! is one XTS data unit of 32 AES blocks, so there is no ciphertext stealing.
//!
//! The block cipher is RustCrypto's `aes` 0.9 (constant time; run-time detection of VAES with
//! AVX-512 (64 blocks at a time), VAES with AVX2 (30), AES-NI (8), a bitsliced software
//! fallback). XTS itself is the few lines below. The sector tweaks of up to 64 sectors are
//! encrypted as one batch; then, inside the cipher's backend closure (so that the compiler
//! sees the whitening in the same function as the vector AES and the backend's batch size as a
//! constant), 8 sectors at a time: each block's tweak value is computed straight from its
//! sector's (t·αʲ in GF(2¹²⁸), no chain from block to block), the blocks are whitened in place,
//! encrypted in batches of the backend's width (a batch may span sectors) and whitened again. ADR 0029 has the measurements that chose this over `aes` 0.8 (8
//! blocks at a time), the `xts-mode` crate (block at a time) and OpenSSL 3.0's EVP.

use aes::Aes256;
use aes::cipher::array::{Array, ArraySize};
use aes::cipher::consts::U16;
use aes::cipher::{
    BlockCipherDecBackend, BlockCipherDecClosure, BlockCipherDecrypt, BlockCipherEncBackend,
    BlockCipherEncClosure, BlockCipherEncrypt, BlockSizeUser, KeyInit, ParBlocks,
};
use zeroize::Zeroize;

/// Bytes per XTS data unit (dm-crypt's default sector size; the smallest LBA ebof serves).
pub const SECTOR: usize = 512;
/// Bytes of an XTS-256 key: two AES-256 keys.
pub const KEY_LEN: usize = 64;
/// AES blocks per sector.
const BLOCKS: usize = SECTOR / 16;
/// Sectors whose tweaks are encrypted as one batch (32 KiB of data).
const CHUNK: usize = 64;
/// Sectors whose tweak values are computed at once (4 KiB of data, 4 KiB of values).
const SUB: usize = 8;

type Block = Array<u8, U16>;

/// An AES-XTS-256 key, ready to use (both key schedules expanded). The schedules are zeroed
/// when it is dropped (the `aes` crate's `zeroize` feature); it has no `Debug` that shows them.
pub struct Xts {
    data: Aes256,
    tweak: Aes256,
}

impl std::fmt::Debug for Xts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Xts(AES-256-XTS, key hidden)")
    }
}

impl Xts {
    /// The cipher for `key` (Key1 ‖ Key2, as dm-crypt's `--key-size 512` key file holds it).
    pub fn new(key: &[u8; KEY_LEN]) -> Xts {
        let half = |h: &[u8]| {
            let mut k = Array::<u8, aes::cipher::consts::U32>::default();
            k.copy_from_slice(h);
            let cipher = Aes256::new(&k);
            k.as_mut_slice().zeroize();
            cipher
        };
        Xts {
            data: half(&key[..32]),
            tweak: half(&key[32..]),
        }
    }

    /// Encrypts `buf` (whole sectors) in place; its first sector is number `sector`.
    ///
    /// # Panics
    /// If `buf.len()` is not a multiple of [`SECTOR`] (callers check alignment first).
    pub fn encrypt(&self, sector: u64, buf: &mut [u8]) {
        self.run(sector, buf, true);
    }

    /// Decrypts `buf` (whole sectors) in place; its first sector is number `sector`.
    ///
    /// # Panics
    /// If `buf.len()` is not a multiple of [`SECTOR`].
    pub fn decrypt(&self, sector: u64, buf: &mut [u8]) {
        self.run(sector, buf, false);
    }

    fn run(&self, first: u64, buf: &mut [u8], encrypt: bool) {
        assert!(buf.len().is_multiple_of(SECTOR), "XTS on a partial sector");
        let (blocks, _) = Block::slice_as_chunks_mut(buf);
        let mut tweaks = [Block::default(); CHUNK];
        let mut used = 0;
        for (c, chunk) in blocks.chunks_mut(CHUNK * BLOCKS).enumerate() {
            let n = chunk.len() / BLOCKS;
            used = used.max(n);
            for (i, t) in tweaks[..n].iter_mut().enumerate() {
                let number = first.wrapping_add((c * CHUNK + i) as u64);
                *t = Block::default();
                t[..8].copy_from_slice(&number.to_le_bytes());
            }
            self.tweak.encrypt_with_backend(Padded(&mut tweaks[..n]));
            let job = Whiten {
                blocks: chunk,
                tweaks: &tweaks[..n],
            };
            if encrypt {
                self.data.encrypt_with_backend(job);
            } else {
                self.data.decrypt_with_backend(job);
            }
        }
        for t in &mut tweaks[..used] {
            t.as_mut_slice().zeroize();
        }
    }
}

/// Blocks to encrypt in batches of the backend's width, the last one padded: the sector
/// tweaks of a 4 KiB transfer (8 blocks) take one wide batch rather than 8 single blocks.
struct Padded<'a>(&'a mut [Block]);

impl BlockSizeUser for Padded<'_> {
    type BlockSize = U16;
}

impl BlockCipherEncClosure for Padded<'_> {
    #[inline(always)]
    fn call<B: BlockCipherEncBackend<BlockSize = U16>>(self, backend: &B) {
        batches(self.0, &mut |p: &mut ParBlocks<B>| {
            backend.encrypt_par_blocks_inplace(p)
        });
    }
}

/// One run of XTS over whole sectors with their encrypted tweaks: the closure the cipher calls
/// with its (vector) backend, so that the whitening is compiled with the backend's target
/// features and its batch width is a constant.
struct Whiten<'a> {
    blocks: &'a mut [Block],
    /// The encrypted tweak of each sector of `blocks`.
    tweaks: &'a [Block],
}

impl BlockSizeUser for Whiten<'_> {
    type BlockSize = U16;
}

impl BlockCipherEncClosure for Whiten<'_> {
    #[inline(always)]
    fn call<B: BlockCipherEncBackend<BlockSize = U16>>(self, backend: &B) {
        xts_blocks(self.blocks, self.tweaks, &mut |p: &mut ParBlocks<B>| {
            backend.encrypt_par_blocks_inplace(p)
        });
    }
}

impl BlockCipherDecClosure for Whiten<'_> {
    #[inline(always)]
    fn call<B: BlockCipherDecBackend<BlockSize = U16>>(self, backend: &B) {
        xts_blocks(self.blocks, self.tweaks, &mut |p: &mut ParBlocks<B>| {
            backend.decrypt_par_blocks_inplace(p)
        });
    }
}

/// XTS over `blocks` (whole sectors; `tweaks` the encrypted tweak of each) with `cipher`
/// encrypting or decrypting `P` blocks in place at a time. [`SUB`] sectors at a time: their
/// tweak values are computed, the blocks whitened in place, enciphered, whitened again. Each
/// step is a loop without a chain from block to block, which the compiler vectorises.
#[inline(always)]
fn xts_blocks<P: ArraySize>(
    blocks: &mut [Block],
    tweaks: &[Block],
    cipher: &mut impl FnMut(&mut Array<Block, P>),
) {
    let mut values = [0u128; SUB * BLOCKS];
    let mut used = 0;
    for (sub, tw) in blocks.chunks_mut(SUB * BLOCKS).zip(tweaks.chunks(SUB)) {
        used = used.max(sub.len());
        let values = &mut values[..sub.len()];
        for (v, t) in values.chunks_exact_mut(BLOCKS).zip(tw) {
            sector_values(t, v);
        }
        whiten(sub, values);
        batches(sub, cipher);
        whiten(sub, values);
    }
    // Key-dependent tweak values: leave none on the stack. A plain (vector) fill that
    // `black_box` keeps, not `zeroize`'s 8-byte volatile stores: 4 KiB of them cost as much
    // as a tenth of a 4 KiB sector's cipher.
    values[..used].fill(0);
    std::hint::black_box(&mut values);
}

/// `blocks` through `cipher` `P` at a time; a last, partial batch is padded (the padding is
/// enciphered and dropped), so that every block takes the wide path.
#[inline(always)]
fn batches<P: ArraySize>(blocks: &mut [Block], cipher: &mut impl FnMut(&mut Array<Block, P>)) {
    let (full, tail) = Array::<Block, P>::slice_as_chunks_mut(blocks);
    for batch in full {
        cipher(batch);
    }
    if !tail.is_empty() {
        let mut scratch: Array<Block, P> = Array::default();
        scratch[..tail.len()].copy_from_slice(tail);
        cipher(&mut scratch);
        tail.copy_from_slice(&scratch[..tail.len()]);
        for s in scratch.iter_mut() {
            s.as_mut_slice().zeroize();
        }
    }
}

/// XORs each block with its tweak value.
#[inline(always)]
fn whiten(blocks: &mut [Block], values: &[u128]) {
    for (b, v) in blocks.iter_mut().zip(values) {
        b.0 = (u128::from_le_bytes(b.0) ^ v).to_le_bytes();
    }
}

/// The 32 tweak values of a sector whose encrypted tweak is `t`: `t`·αʲ in GF(2¹²⁸) for block
/// `j` (IEEE 1619's little-endian byte order). Each straight from `t`, with no chain: shift
/// left by `j`, and fold the `j` bits shifted out back in, multiplied (carry-less) by x⁷ + x² +
/// x + 1 (0x87); with `j` < 32 the fold stays below x¹²⁸, so one fold is exact. `(x >> 1) >>
/// (63 - j)` is `x >> (64 - j)`, and 0 for `j` = 0. Constant time (no branch on the value).
#[inline(always)]
fn sector_values(t: &Block, out: &mut [u128]) {
    let t = u128::from_le_bytes(t.0);
    let (lo, hi) = (t as u64, (t >> 64) as u64);
    for (j, v) in (0u32..).zip(out.iter_mut()) {
        let h = (hi >> 1) >> (63 - j);
        let l = (lo >> 1) >> (63 - j);
        let new_lo = (lo << j) ^ h ^ (h << 1) ^ (h << 2) ^ (h << 7);
        let new_hi = (hi << j) | l;
        *v = u128::from(new_lo) | (u128::from(new_hi) << 64);
    }
}

/// Multiplication by α (x) in GF(2¹²⁸) with IEEE 1619's little-endian byte order: shift left
/// by one, and fold the carry back in with 0x87. Constant time (no branch on the value). The
/// reference [`sector_values`] is tested against.
#[cfg(test)]
fn mul_alpha(t: u128) -> u128 {
    let carry = t >> 127;
    (t << 1) ^ (carry.wrapping_neg() & 0x87)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mul_alpha_folds_the_carry() {
        assert_eq!(mul_alpha(1), 2);
        assert_eq!(mul_alpha(1 << 127), 0x87);
        assert_eq!(mul_alpha((1 << 127) | 1), 0x87 ^ 2);
    }

    #[test]
    fn sector_values_are_repeated_mul_alpha() {
        for t in [
            1u128,
            u128::MAX,
            1 << 127,
            0x8000_0001 << 96,
            0x0123_4567_89ab_cdef << 61,
        ] {
            let mut values = [0u128; BLOCKS];
            sector_values(&Block::from(t.to_le_bytes()), &mut values);
            let mut r = t;
            for (j, v) in values.iter().enumerate() {
                assert_eq!(*v, r, "t {t:#x} j {j}");
                r = mul_alpha(r);
            }
        }
    }

    /// [`xts_blocks`] with batches of `P` blocks, whatever the CPU: the paths of the `aes`
    /// backends this machine does not take.
    fn encrypt_with_width<P: ArraySize>(xts: &Xts, first: u64, buf: &mut [u8]) {
        let (blocks, _) = Block::slice_as_chunks_mut(buf);
        let mut tweaks: Vec<Block> = (0..blocks.len() / BLOCKS)
            .map(|i| {
                let mut t = Block::default();
                t[..8].copy_from_slice(&(first + i as u64).to_le_bytes());
                t
            })
            .collect();
        xts.tweak.encrypt_blocks(&mut tweaks);
        xts_blocks(blocks, &tweaks, &mut |p: &mut Array<Block, P>| {
            xts.data.encrypt_blocks(p.as_mut_slice())
        });
    }

    #[test]
    fn matches_xts_mode_at_every_length_and_batch_width() {
        use aes::cipher::consts::{U1, U8, U30, U64};
        use aes08::cipher::KeyInit as _;
        use aes08::cipher::generic_array::GenericArray;
        let key: [u8; KEY_LEN] = std::array::from_fn(|i| (i * 7 + 3) as u8);
        let xts = Xts::new(&key);
        let reference = xts_mode::Xts128::new(
            aes08::Aes256::new(GenericArray::from_slice(&key[..32])),
            aes08::Aes256::new(GenericArray::from_slice(&key[32..])),
        );
        let first = 0xffff_fffe_u64;
        for sectors in [1, 2, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 129, 256] {
            let plain: Vec<u8> = (0..sectors * SECTOR)
                .map(|i| (i * 131 % 251) as u8)
                .collect();
            let mut want = plain.clone();
            reference.encrypt_area(&mut want, SECTOR, u128::from(first), |n| n.to_le_bytes());
            let mut got = plain.clone();
            xts.encrypt(first, &mut got);
            assert_eq!(got, want, "{sectors} sectors");
            xts.decrypt(first, &mut got);
            assert_eq!(got, plain, "{sectors} sectors");
            for (width, run) in [
                (1, encrypt_with_width::<U1> as fn(&Xts, u64, &mut [u8])),
                (8, encrypt_with_width::<U8>),
                (30, encrypt_with_width::<U30>),
                (64, encrypt_with_width::<U64>),
            ] {
                let mut got = plain.clone();
                run(&xts, first, &mut got);
                assert_eq!(got, want, "{sectors} sectors, {width} blocks a batch");
            }
        }
    }

    #[test]
    fn round_trip_and_sector_numbers_matter() {
        let key = [7u8; KEY_LEN];
        let xts = Xts::new(&key);
        let plain: Vec<u8> = (0..4096u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut a = plain.clone();
        xts.encrypt(10, &mut a);
        assert_ne!(a, plain);
        // Sector-wise equals whole-buffer: sector 11 of the batch is sector 11 alone.
        let mut b = plain[512..1024].to_vec();
        xts.encrypt(11, &mut b);
        assert_eq!(&a[512..1024], &b[..]);
        xts.decrypt(10, &mut a);
        assert_eq!(a, plain);
        assert_eq!(format!("{xts:?}"), "Xts(AES-256-XTS, key hidden)");
    }
}
