//! Single-core AES-XTS-256 rates of the implementations ADR 0029 compared, in dm-crypt's
//! `aes-xts-plain64` layout (512-byte sectors, tweak = sector number): ebof's
//! ([`ebof_backend::crypt::Xts`]: RustCrypto `aes` 0.9, VAES/AVX-512 when the CPU has it),
//! ebof's previous one (`aes` 0.8, 8 AES-NI blocks at a time, kept here to compare), the
//! `xts-mode` crate (block at a time) and OpenSSL's EVP `aes-256-xts` (one context, the IV set
//! per sector).
//!
//! `cargo run --release -p ebof-backend --example xts_rate [-- --ours-only] [SECONDS]`
//! prints one line per implementation and unit size (4 KiB, 128 KiB): MB/s encrypting (and,
//! for ebof's and OpenSSL's, decrypting).
//! `scripts/bench-crypt.sh` runs it with `--ours-only`.

use ebof_backend::crypt::{KEY_LEN, SECTOR, Xts};
use std::time::{Duration, Instant};

fn rate(secs: f64, unit: usize, mut f: impl FnMut(u64, &mut [u8])) -> f64 {
    let mut buf: Vec<u8> = (0..unit).map(|i| i as u8).collect();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut sector = 0u64;
    while Instant::now() < deadline {
        for _ in 0..16 {
            f(sector, &mut buf);
            sector += (unit / SECTOR) as u64;
            bytes += unit as u64;
        }
    }
    std::hint::black_box(&buf);
    bytes as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ours_only = args.iter().any(|a| a == "--ours-only");
    let secs: f64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(1.0);
    let key: [u8; KEY_LEN] = std::array::from_fn(|i| (i * 37 + 11) as u8);
    cpu_line();
    for unit in [4096usize, 128 << 10] {
        let ours = Xts::new(&key);
        let r = rate(secs, unit, |s, b| ours.encrypt(s, b));
        println!(
            "xts ebof (aes 0.9)            {:>4} KiB  {r:>8.0} MB/s",
            unit >> 10
        );
        // A read: the ciphertext decrypted in place, as the engine does after a completion.
        let r = rate(secs, unit, |s, b| {
            ebof_backend::crypt::open_read(&ours, s * SECTOR as u64, b).expect("whole sectors")
        });
        println!(
            "  the same, decrypting a read  {:>4} KiB  {r:>8.0} MB/s",
            unit >> 10
        );
        if ours_only {
            continue;
        }
        let r = rate(secs, unit, |s, b| old::encrypt(&key, s, b));
        println!(
            "xts ebof before (aes 0.8, x8) {:>4} KiB  {r:>8.0} MB/s",
            unit >> 10
        );
        let r = xts_mode_rate(secs, unit, &key);
        println!(
            "xts-mode 0.5 (block at a time) {:>2} KiB  {r:>8.0} MB/s",
            unit >> 10
        );
        let r = openssl_rate(secs, unit, &key, true);
        println!(
            "openssl EVP aes-256-xts      {:>4} KiB  {r:>8.0} MB/s",
            unit >> 10
        );
        let r = openssl_rate(secs, unit, &key, false);
        println!(
            "  the same, decrypting         {:>4} KiB  {r:>8.0} MB/s",
            unit >> 10
        );
    }
}

/// What the cipher can use on this CPU (the `aes` crate picks the widest at run time).
fn cpu_line() {
    #[cfg(target_arch = "x86_64")]
    println!(
        "cpu: aes-ni {}, vaes {}, avx512f {}",
        std::arch::is_x86_feature_detected!("aes"),
        std::arch::is_x86_feature_detected!("vaes"),
        std::arch::is_x86_feature_detected!("avx512f"),
    );
    #[cfg(not(target_arch = "x86_64"))]
    println!("cpu: aes hardware {}", aes::hardware_accelerated());
}

fn xts_mode_rate(secs: f64, unit: usize, key: &[u8; KEY_LEN]) -> f64 {
    use aes08::Aes256;
    use aes08::cipher::KeyInit;
    use aes08::cipher::generic_array::GenericArray;
    let xts = xts_mode::Xts128::new(
        Aes256::new(GenericArray::from_slice(&key[..32])),
        Aes256::new(GenericArray::from_slice(&key[32..])),
    );
    rate(secs, unit, |s, b| {
        xts.encrypt_area(b, SECTOR, u128::from(s), xts_mode::get_tweak_default)
    })
}

fn openssl_rate(secs: f64, unit: usize, key: &[u8; KEY_LEN], encrypt: bool) -> f64 {
    use openssl::cipher::Cipher;
    use openssl::cipher_ctx::CipherCtx;
    let mut ctx = CipherCtx::new().expect("EVP context");
    if encrypt {
        ctx.encrypt_init(Some(Cipher::aes_256_xts()), Some(key), None)
    } else {
        ctx.decrypt_init(Some(Cipher::aes_256_xts()), Some(key), None)
    }
    .expect("aes-256-xts");
    let mut out = vec![0u8; SECTOR];
    rate(secs, unit, |s, b| {
        for (i, sector) in b.chunks_exact_mut(SECTOR).enumerate() {
            let mut iv = [0u8; 16];
            iv[..8].copy_from_slice(&(s + i as u64).to_le_bytes());
            if encrypt {
                ctx.encrypt_init(None, None, Some(&iv)).expect("iv");
            } else {
                ctx.decrypt_init(None, None, Some(&iv)).expect("iv");
            }
            ctx.cipher_update(sector, Some(&mut out)).expect("update");
            sector.copy_from_slice(&out);
        }
    })
}

/// ebof's XTS before `aes` 0.9 (ADR 0029's first figures): `aes` 0.8, per sector one batch of
/// 32 blocks (AES-NI eight at a time), whitening in scalar code. A new key schedule per call
/// costs ~0.1 µs, noise against a 4 KiB unit; kept only to compare.
mod old {
    use aes08::Aes256;
    use aes08::cipher::generic_array::GenericArray;
    use aes08::cipher::{BlockEncrypt, KeyInit};

    type Block = GenericArray<u8, aes08::cipher::consts::U16>;

    pub fn encrypt(key: &[u8; 64], first: u64, buf: &mut [u8]) {
        let data = Aes256::new(GenericArray::from_slice(&key[..32]));
        let tweak = Aes256::new(GenericArray::from_slice(&key[32..]));
        let mut blocks = [Block::default(); 32];
        let mut tweaks = [0u128; 32];
        for (i, sector) in buf.chunks_exact_mut(512).enumerate() {
            let mut t = Block::default();
            t[..8].copy_from_slice(&first.wrapping_add(i as u64).to_le_bytes());
            tweak.encrypt_block(&mut t);
            let mut tw = u128::from_le_bytes(t.into());
            for ((block, chunk), v) in blocks
                .iter_mut()
                .zip(sector.chunks_exact(16))
                .zip(&mut tweaks)
            {
                *v = tw;
                let x = u128::from_le_bytes(chunk.try_into().expect("16 bytes")) ^ tw;
                block.copy_from_slice(&x.to_le_bytes());
                tw = (tw << 1) ^ ((tw >> 127).wrapping_neg() & 0x87);
            }
            data.encrypt_blocks(&mut blocks);
            for ((block, chunk), v) in blocks.iter().zip(sector.chunks_exact_mut(16)).zip(&tweaks) {
                let x = u128::from_le_bytes((*block).into()) ^ v;
                chunk.copy_from_slice(&x.to_le_bytes());
            }
        }
    }
}
