//! Single-core AES-XTS-256 rates of the implementations ADR 0029 compared, in dm-crypt's
//! `aes-xts-plain64` layout (512-byte sectors, tweak = sector number): ebof's
//! ([`ebof_backend::crypt::Xts`]: RustCrypto `aes` with batched blocks), the `xts-mode` crate
//! (block at a time) and OpenSSL's EVP `aes-256-xts` (one context, the IV set per sector).
//!
//! `cargo run --release -p ebof-backend --example xts_rate [-- --ours-only] [SECONDS]`
//! prints one line per implementation and unit size (4 KiB, 128 KiB): MB/s encrypting.
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
    let aesni = std::arch::is_x86_feature_detected!("aes");
    println!("cpu: aes-ni {aesni}");
    for unit in [4096usize, 128 << 10] {
        let ours = Xts::new(&key);
        let r = rate(secs, unit, |s, b| ours.encrypt(s, b));
        println!(
            "xts ebof (aes 0.8, batched)  {:>4} KiB  {r:>8.0} MB/s",
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
        let r = xts_mode_rate(secs, unit, &key);
        println!(
            "xts-mode 0.5 (block at a time) {:>2} KiB  {r:>8.0} MB/s",
            unit >> 10
        );
        let r = openssl_rate(secs, unit, &key);
        println!(
            "openssl EVP aes-256-xts      {:>4} KiB  {r:>8.0} MB/s",
            unit >> 10
        );
    }
}

fn xts_mode_rate(secs: f64, unit: usize, key: &[u8; KEY_LEN]) -> f64 {
    use aes::Aes256;
    use aes::cipher::KeyInit;
    use aes::cipher::generic_array::GenericArray;
    let xts = xts_mode::Xts128::new(
        Aes256::new(GenericArray::from_slice(&key[..32])),
        Aes256::new(GenericArray::from_slice(&key[32..])),
    );
    rate(secs, unit, |s, b| {
        xts.encrypt_area(b, SECTOR, u128::from(s), xts_mode::get_tweak_default)
    })
}

fn openssl_rate(secs: f64, unit: usize, key: &[u8; KEY_LEN]) -> f64 {
    use openssl::cipher::Cipher;
    use openssl::cipher_ctx::CipherCtx;
    let mut ctx = CipherCtx::new().expect("EVP context");
    ctx.encrypt_init(Some(Cipher::aes_256_xts()), Some(key), None)
        .expect("aes-256-xts");
    let mut out = vec![0u8; SECTOR];
    rate(secs, unit, |s, b| {
        for (i, sector) in b.chunks_exact_mut(SECTOR).enumerate() {
            let mut iv = [0u8; 16];
            iv[..8].copy_from_slice(&(s + i as u64).to_le_bytes());
            ctx.encrypt_init(None, None, Some(&iv)).expect("iv");
            ctx.cipher_update(sector, Some(&mut out)).expect("update");
            sector.copy_from_slice(&out);
        }
    })
}
