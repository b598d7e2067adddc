//! AES-XTS-256 in dm-crypt's `aes-xts-plain64` layout: IEEE 1619 known answers, round trips at
//! every sector alignment and size a namespace serves, and the encrypting backend's semantics
//! (zeroes, deallocate, resize, wrong key) over a file.

use ebof_backend::crypt::{
    CryptBackend, KEY_LEN, KeyError, KeyHeader, NsKeySource, PoolKey, SECTOR, Xts, open_read,
    read_key_file, seal_write,
};
use ebof_backend::{Backend, BackendSpec};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// (key, data unit sequence number, ciphertext) of each vector in `data/xts_ieee1619.txt`.
fn vectors() -> Vec<([u8; KEY_LEN], u64, Vec<u8>)> {
    let text = include_str!("data/xts_ieee1619.txt");
    let mut out = Vec::new();
    let (mut key, mut dusn) = (None, None);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        match line.split_once(' ') {
            Some(("key", k)) => key = Some(<[u8; KEY_LEN]>::try_from(unhex(k)).unwrap()),
            Some(("dusn", d)) => dusn = Some(u64::from_str_radix(d, 16).unwrap()),
            Some(("ct", c)) => out.push((key.take().unwrap(), dusn.take().unwrap(), unhex(c))),
            _ => {}
        }
    }
    out
}

fn plain512() -> Vec<u8> {
    (0..512).map(|i| i as u8).collect()
}

#[test]
fn ieee_1619_xts_aes_256_vectors_10_and_11() {
    let vs = vectors();
    assert_eq!(vs.len(), 2);
    for (key, dusn, ct) in vs {
        assert_eq!(ct.len(), 512);
        let xts = Xts::new(&key);
        let mut buf = plain512();
        xts.encrypt(dusn, &mut buf);
        assert_eq!(buf, ct, "vector with DUSN {dusn:#x}");
        xts.decrypt(dusn, &mut buf);
        assert_eq!(buf, plain512());
        // Through the byte-offset helpers: sector `dusn` is byte dusn * 512.
        let mut buf = plain512();
        seal_write(&xts, dusn * 512, &mut buf).unwrap();
        assert_eq!(buf, ct);
        open_read(&xts, dusn * 512, &mut buf).unwrap();
        assert_eq!(buf, plain512());
    }
}

#[test]
fn round_trips_at_every_alignment_and_size() {
    let key: [u8; KEY_LEN] = std::array::from_fn(|i| (i * 7 + 3) as u8);
    let xts = Xts::new(&key);
    // Whole-buffer encryption equals sector-by-sector encryption at each sector's number, for
    // every start sector and length (512-byte and 4096-byte LBA formats, up to 128 KiB).
    let data: Vec<u8> = (0..512 * SECTOR).map(|i| (i * 131 % 253) as u8).collect();
    let mut whole = data.clone();
    xts.encrypt(0, &mut whole);
    for start in [0usize, 1, 2, 7, 8, 9, 63, 64, 255] {
        for sectors in [1usize, 2, 7, 8, 16, 255, 256] {
            let range = start * SECTOR..(start + sectors) * SECTOR;
            let mut buf = data[range.clone()].to_vec();
            seal_write(&xts, range.start as u64, &mut buf).unwrap();
            assert_eq!(buf, whole[range.clone()], "start {start} sectors {sectors}");
            open_read(&xts, range.start as u64, &mut buf).unwrap();
            assert_eq!(buf, data[range], "start {start} sectors {sectors}");
        }
    }
    // Partial sectors are refused, not half-encrypted.
    let mut odd = vec![0u8; 512];
    assert!(seal_write(&xts, 256, &mut odd).is_err());
    assert!(open_read(&xts, 0, &mut odd[..100]).is_err());
    // Far sector numbers (the whole u64 of plain64).
    let mut far = data[..1024].to_vec();
    seal_write(&xts, (u64::MAX / 512 - 1) * 512, &mut far).unwrap();
    open_read(&xts, (u64::MAX / 512 - 1) * 512, &mut far).unwrap();
    assert_eq!(far, data[..1024]);
}

fn key_file(dir: &std::path::Path, name: &str, byte: u8) -> std::path::PathBuf {
    let p = dir.join(name);
    let bytes: Vec<u8> = (0..KEY_LEN as u8)
        .map(|i| i.wrapping_mul(byte) ^ byte)
        .collect();
    std::fs::write(&p, bytes).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn encrypted_file(path: &std::path::Path, key: &[u8; KEY_LEN]) -> CryptBackend {
    let inner = ebof_backend::open(&BackendSpec::File {
        path: path.into(),
        size: Some(1 << 20),
    })
    .unwrap();
    CryptBackend::new(inner, Xts::new(key))
}

#[test]
fn backend_keeps_ciphertext_and_zero_promises() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns");
    let key: [u8; KEY_LEN] = std::array::from_fn(|i| i as u8 ^ 0xa5);
    let b = encrypted_file(&path, &key);
    assert!(b.encrypted() && b.crypt_io().is_some() && b.raw_io().is_none());
    // A new (sparse) namespace reads zeroes.
    let mut buf = vec![1u8; 8192];
    b.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&x| x == 0));
    let data: Vec<u8> = (0..8192).map(|i| (i % 199) as u8 + 1).collect();
    b.write(4096, &data).unwrap();
    b.read(4096, &mut buf).unwrap();
    assert_eq!(buf, data);
    // On disk: the XTS ciphertext at sector 8, not the plaintext.
    let raw = std::fs::read(&path).unwrap();
    let mut expect = data.clone();
    Xts::new(&key).encrypt(8, &mut expect);
    assert_eq!(&raw[4096..4096 + 8192], &expect[..]);
    // Write zeroes and deallocate read back as zeroes through the cipher.
    b.write_zeroes(4096, 512).unwrap();
    b.deallocate(8192, 4096).unwrap();
    b.read(4096, &mut buf).unwrap();
    assert!(buf[..512].iter().all(|&x| x == 0));
    assert_eq!(buf[512..4096], data[512..4096]);
    assert!(buf[4096..].iter().all(|&x| x == 0));
    // Resize forwards; the data stays.
    b.resize(2 << 20).unwrap();
    assert_eq!(b.size(), 2 << 20);
    b.read(4096 + 512, &mut buf[..512]).unwrap();
    assert_eq!(buf[..512], data[512..1024]);
    // Misaligned transfers are refused.
    assert!(b.write(100, &data[..512]).is_err());
    assert!(b.read(0, &mut buf[..100]).is_err());
    assert!(!format!("{b:?}").contains("a5"), "{b:?}");
}

#[test]
fn key_headers_tell_the_right_key_from_a_wrong_one() {
    let dir = tempfile::tempdir().unwrap();
    let ka = read_key_file(&key_file(dir.path(), "a", 1)).unwrap();
    let kb = read_key_file(&key_file(dir.path(), "b", 2)).unwrap();
    let (pa, pb) = (PoolKey::new(ka.clone()), PoolKey::new(kb));
    let (header, key) = KeyHeader::create(&NsKeySource::Pool(pa.clone())).unwrap();
    assert!(header.derived);
    assert_eq!(
        header.key(&NsKeySource::Pool(pa.clone())).as_deref(),
        Some(&*key)
    );
    assert!(header.key(&NsKeySource::Pool(pb.clone())).is_none());
    assert!(header.key(&NsKeySource::Own(pa.clone())).is_none());
    // Two namespaces of one pool get different keys; neither is the pool key.
    let (h2, key2) = KeyHeader::create(&NsKeySource::Pool(pa.clone())).unwrap();
    assert_ne!(h2.salt, header.salt);
    assert_ne!(*key2, *key);
    assert_ne!(*key, *ka);
    // Encode, write, read, decode; then crypto-erase.
    let hp = KeyHeader::path_for(&dir.path().join("ns"));
    assert!(hp.ends_with("ns.key"));
    header.write(&hp).unwrap();
    let mode = std::fs::metadata(&hp).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(KeyHeader::read(&hp).unwrap(), Some(header.clone()));
    KeyHeader::destroy(&hp).unwrap();
    assert!(!hp.exists());
    assert_eq!(KeyHeader::read(&hp).unwrap(), None);
    // Own key: the key file's key as is.
    let (own, k) = KeyHeader::create(&NsKeySource::Own(pb.clone())).unwrap();
    assert!(!own.derived && own.salt == [0; 32]);
    assert_eq!(&*k, pb.bytes());
    // Garbage is not a header.
    std::fs::write(&hp, b"EBOFKEY1 but short").unwrap();
    assert!(matches!(KeyHeader::read(&hp), Err(KeyError::Header { .. })));
}

#[test]
fn key_files_are_checked_each_failure_its_own_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let e = read_key_file(&missing).unwrap_err();
    assert_eq!(e.code(), "key-file-missing");
    assert!(e.to_string().contains(&*missing.to_string_lossy()), "{e}");

    let loose = key_file(dir.path(), "loose", 3);
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = read_key_file(&loose).unwrap_err();
    assert_eq!(e.code(), "key-file-permissions");
    assert!(
        e.to_string().contains("0640") && e.to_string().contains("chmod 600"),
        "{e}"
    );

    let short = dir.path().join("short");
    std::fs::write(&short, [1u8; 32]).unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        read_key_file(&short).unwrap_err().code(),
        "key-file-malformed"
    );

    let hex = dir.path().join("hex");
    let raw: Vec<u8> = (0..64u8).collect();
    let text: String = raw.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n";
    std::fs::write(&hex, text).unwrap();
    std::fs::set_permissions(&hex, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert_eq!(&*read_key_file(&hex).unwrap(), &raw[..]);

    // Unreadable: as root every mode is readable, so a path through a regular file (ENOTDIR)
    // stands in for a file that cannot be read.
    let through = short.join("key");
    let e = read_key_file(&through).unwrap_err();
    assert_eq!(e.code(), "key-file-unreadable", "{e}");
    assert!(e.to_string().contains(&*through.to_string_lossy()), "{e}");

    // A directory is not a key file.
    let d = dir.path().join("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(
        read_key_file(&d).unwrap_err().code(),
        "key-file-permissions"
    );
}

#[test]
fn a_file_written_under_one_key_does_not_read_under_another() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns");
    let (ka, kb) = ([1u8; KEY_LEN], [2u8; KEY_LEN]);
    let data = vec![0x42u8; 4096];
    encrypted_file(&path, &ka).write(0, &data).unwrap();
    let wrong = encrypted_file(&path, &kb);
    let mut buf = vec![0u8; 4096];
    wrong.read(0, &mut buf).unwrap();
    assert_ne!(buf, data);
    let _: Arc<dyn Backend> = Arc::new(wrong);
}
