//! Key files, namespace data keys and the key header kept beside an encrypted namespace's file.
//!
//! * **Key file** ([`read_key_file`]): exactly 64 raw bytes (an XTS-256 key, Key1 ‖ Key2, as
//!   `cryptsetup --key-size 512 --key-file` reads it), or the same as 128 hex digits with an
//!   optional final newline. Refused unless it is a regular file, owned by root or the user
//!   ebof runs as, and neither group- nor other-accessible (mode `0600` or `0400`).
//! * **Namespace data key**: a namespace with its own key file uses that key as is. A
//!   namespace in an encrypted pool uses `HKDF-SHA256(salt = the namespace's 32-byte random
//!   salt, ikm = the pool key, info = "ebof namespace data key v1")`, 64 bytes
//!   ([`derive_ns_key`]).
//! * **Key header** ([`KeyHeader`], the file `NAME.key` beside the namespace file `NAME`):
//!   where the key comes from, the salt, and a check value (`HMAC-SHA256(data key,
//!   "ebof key check v1")`) that tells a wrong key from the right one before anything is
//!   read or written. Never inside the data file, so the data file stays plain dm-crypt.
//!   Deleting the namespace overwrites and removes it ([`KeyHeader::destroy`]): without the
//!   salt the data key cannot be derived again (crypto-erase).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use zeroize::{Zeroize, Zeroizing};

use super::xts::KEY_LEN;

/// A 64-byte key (a pool key or a namespace data key), zeroed when dropped.
pub type Key = Zeroizing<[u8; KEY_LEN]>;

/// A pool's key, read from its key file; zeroed when dropped, never printed.
#[derive(Clone)]
pub struct PoolKey(Key);

impl std::fmt::Debug for PoolKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PoolKey(hidden)")
    }
}

impl PoolKey {
    /// The key in `bytes`.
    pub fn new(bytes: Key) -> PoolKey {
        PoolKey(bytes)
    }

    /// The key's bytes.
    pub fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

/// Where a namespace's data key comes from.
#[derive(Clone, Debug)]
pub enum NsKeySource {
    /// Derived from its pool's key and the salt in the key header.
    Pool(PoolKey),
    /// Its own key file's key, used as is (held as a [`PoolKey`]: the same hidden 64 bytes).
    Own(PoolKey),
}

/// Everything that can be wrong with a key file or a key header. Each case names the path.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file does not exist.
    #[error("key file {} does not exist", path.display())]
    Missing {
        /// The key file.
        path: PathBuf,
    },
    /// The key file exists but cannot be read (permissions, I/O).
    #[error("cannot read key file {}: {source}", path.display())]
    Unreadable {
        /// The key file.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// The key file is group- or other-accessible, or owned by someone else.
    #[error("key file {} is {what}: {fix}", path.display())]
    Permissions {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        what: String,
        /// What to do about it.
        fix: &'static str,
    },
    /// Not 64 raw bytes nor 128 hex digits.
    #[error(
        "key file {} holds {len} bytes: it must hold exactly 64 raw bytes (a 512-bit \
         AES-XTS key) or 128 hex digits",
        path.display()
    )]
    Malformed {
        /// The key file.
        path: PathBuf,
        /// How many bytes it holds.
        len: u64,
    },
    /// The key does not match the namespace's key header: the namespace was written with
    /// another key.
    #[error(
        "wrong key for {}: the check value in {} does not match (the namespace was written \
         with another key)",
        data.display(),
        header.display()
    )]
    WrongKey {
        /// The namespace's file.
        data: PathBuf,
        /// Its key header.
        header: PathBuf,
    },
    /// The key header is missing although the namespace file holds data, is unreadable, or is
    /// not a key header.
    #[error("key header {}: {reason}", path.display())]
    Header {
        /// The key header.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl KeyError {
    /// A stable short code for configuration and API errors.
    pub fn code(&self) -> &'static str {
        match self {
            KeyError::Missing { .. } => "key-file-missing",
            KeyError::Unreadable { .. } => "key-file-unreadable",
            KeyError::Permissions { .. } => "key-file-permissions",
            KeyError::Malformed { .. } => "key-file-malformed",
            KeyError::WrongKey { .. } => "wrong-key",
            KeyError::Header { .. } => "key-header",
        }
    }
}

/// Reads and checks a key file ([the module docs](self)); nothing is written.
pub fn read_key_file(path: &Path) -> Result<Key, KeyError> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(KeyError::Missing { path: path.into() });
        }
        Err(source) => {
            return Err(KeyError::Unreadable {
                path: path.into(),
                source,
            });
        }
    };
    let perm = |what: String, fix| KeyError::Permissions {
        path: path.into(),
        what,
        fix,
    };
    if !meta.is_file() {
        return Err(perm(
            "not a regular file".into(),
            "point key_file at a regular file",
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(perm(
            format!(
                "accessible to group or others (mode {:04o})",
                meta.mode() & 0o7777
            ),
            "chmod 600 it",
        ));
    }
    // SAFETY: geteuid has no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != euid {
        return Err(perm(
            format!(
                "owned by uid {} (neither root nor this process's uid {euid})",
                meta.uid()
            ),
            "chown it to root or to the user ebof runs as",
        ));
    }
    let unreadable = |source| KeyError::Unreadable {
        path: path.into(),
        source,
    };
    let mut file = File::open(path).map_err(unreadable)?;
    let mut raw = Zeroizing::new(Vec::with_capacity(2 * KEY_LEN + 2));
    // At most one byte more than the longest valid form, so a huge file is not read whole.
    (&mut file)
        .take(2 * KEY_LEN as u64 + 2)
        .read_to_end(&mut raw)
        .map_err(unreadable)?;
    parse_key(&raw).ok_or(KeyError::Malformed {
        path: path.into(),
        len: meta.len(),
    })
}

/// Checks a key file as [`read_key_file`] does and forgets the key.
pub fn check_key_file(path: &Path) -> Result<(), KeyError> {
    read_key_file(path).map(drop)
}

/// A key file's content: 64 raw bytes, or 128 hex digits with an optional final newline.
pub fn parse_key(raw: &[u8]) -> Option<Key> {
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    if raw.len() == KEY_LEN {
        key.copy_from_slice(raw);
        return Some(key);
    }
    let hex = raw.strip_suffix(b"\n").unwrap_or(raw);
    if hex.len() != 2 * KEY_LEN {
        return None;
    }
    for (out, pair) in key.iter_mut().zip(hex.chunks_exact(2)) {
        *out = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(key)
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// HKDF `info` of a namespace data key.
const DERIVE_INFO: &[u8] = b"ebof namespace data key v1";
/// HMAC message of the check value.
const CHECK_MSG: &[u8] = b"ebof key check v1";

/// A namespace's data key: `HKDF-SHA256(salt, pool key, "ebof namespace data key v1")`.
pub fn derive_ns_key(pool: &PoolKey, salt: &[u8; SALT_LEN]) -> Key {
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    hkdf::Hkdf::<Sha256>::new(Some(salt), pool.bytes())
        .expand(DERIVE_INFO, key.as_mut())
        .unwrap_or_else(|_| unreachable!("64 bytes is within HKDF-SHA256's 8160"));
    key
}

/// The check value of a data key: `HMAC-SHA256(key, "ebof key check v1")`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CheckValue(pub [u8; 32]);

impl std::fmt::Debug for CheckValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckValue(..)")
    }
}

impl CheckValue {
    /// The check value of `key`.
    pub fn of(key: &[u8; KEY_LEN]) -> CheckValue {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(CHECK_MSG);
        CheckValue(mac.finalize().into_bytes().into())
    }

    /// Whether `key` has this check value (constant-time comparison).
    pub fn matches(&self, key: &[u8; KEY_LEN]) -> bool {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(CHECK_MSG);
        mac.verify_slice(&self.0).is_ok()
    }
}

/// Bytes of a namespace's salt.
pub const SALT_LEN: usize = 32;
/// First bytes of a key header.
const MAGIC: &[u8; 8] = b"EBOFKEY1";
/// Bytes of an encoded key header.
pub const HEADER_LEN: usize = 8 + 1 + 1 + 6 + SALT_LEN + 32;

/// The key header of an encrypted namespace ([the module docs](self)): 80 bytes,
/// `"EBOFKEY1"`, version 1, source (1: derived from the pool key, 2: the namespace's own key
/// file), 6 zero bytes, the 32-byte salt (zero for source 2), the 32-byte check value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyHeader {
    /// `true`: derived from the pool key with [`KeyHeader::salt`]; `false`: the namespace's own
    /// key file.
    pub derived: bool,
    /// The salt (the namespace's key id; all zero when not derived).
    pub salt: [u8; SALT_LEN],
    /// The data key's check value.
    pub check: CheckValue,
}

impl KeyHeader {
    /// Where the key header of the namespace file `data` lives: `data` + `.key`.
    pub fn path_for(data: &Path) -> PathBuf {
        let mut p = data.as_os_str().to_owned();
        p.push(".key");
        PathBuf::from(p)
    }

    /// The 80 bytes on disk.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8] = 1;
        out[9] = if self.derived { 1 } else { 2 };
        out[16..48].copy_from_slice(&self.salt);
        out[48..].copy_from_slice(&self.check.0);
        out
    }

    /// Decodes a key header read from disk; `None` unless it is exactly one, version 1.
    pub fn decode(bytes: &[u8]) -> Option<KeyHeader> {
        if bytes.len() != HEADER_LEN || &bytes[..8] != MAGIC || bytes[8] != 1 {
            return None;
        }
        let derived = match bytes[9] {
            1 => true,
            2 => false,
            _ => return None,
        };
        if bytes[10..16].iter().any(|&b| b != 0) {
            return None;
        }
        let salt: [u8; SALT_LEN] = bytes[16..48].try_into().ok()?;
        let check = CheckValue(bytes[48..].try_into().ok()?);
        Some(KeyHeader {
            derived,
            salt,
            check,
        })
    }

    /// A new header for `source`: a fresh random salt when derived. Returns the data key too.
    pub fn create(source: &NsKeySource) -> io::Result<(KeyHeader, Key)> {
        let (derived, salt, key) = match source {
            NsKeySource::Pool(pool) => {
                let mut salt = [0u8; SALT_LEN];
                random(&mut salt)?;
                (true, salt, derive_ns_key(pool, &salt))
            }
            NsKeySource::Own(own) => (false, [0u8; SALT_LEN], own.0.clone()),
        };
        let check = CheckValue::of(&key);
        Ok((
            KeyHeader {
                derived,
                salt,
                check,
            },
            key,
        ))
    }

    /// The data key this header and `source` give, if the source is of the header's kind and
    /// the key matches the check value.
    pub fn key(&self, source: &NsKeySource) -> Option<Key> {
        let key = match (source, self.derived) {
            (NsKeySource::Pool(pool), true) => derive_ns_key(pool, &self.salt),
            (NsKeySource::Own(own), false) => own.0.clone(),
            _ => return None,
        };
        self.check.matches(&key).then_some(key)
    }

    /// Reads the header at `path`: `Ok(None)` if there is none.
    pub fn read(path: &Path) -> Result<Option<KeyHeader>, KeyError> {
        let bad = |reason: String| KeyError::Header {
            path: path.into(),
            reason,
        };
        let mut bytes = Vec::with_capacity(HEADER_LEN + 1);
        match File::open(path) {
            Ok(f) => f
                .take(HEADER_LEN as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| bad(format!("cannot read it: {e}")))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(bad(format!("cannot open it: {e}"))),
        };
        KeyHeader::decode(&bytes)
            .map(Some)
            .ok_or_else(|| bad("not an ebof key header (EBOFKEY1, 80 bytes)".into()))
    }

    /// Writes the header to `path` (mode 0600, synced; a temporary file renamed over it).
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(&self.encode())?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        sync_dir(path)
    }

    /// Crypto-erase: overwrites the header at `path` with zeroes, syncs, removes it. A missing
    /// header is not an error. On file systems that write out of place (copy on write, flash
    /// translation) the old blocks may survive until reused: ADR 0029 says so.
    pub fn destroy(path: &Path) -> io::Result<()> {
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
        {
            Ok(mut f) => {
                let len = f.metadata()?.len().max(HEADER_LEN as u64);
                let zeros = vec![0u8; usize::try_from(len).unwrap_or(HEADER_LEN)];
                f.write_all(&zeros)?;
                f.sync_all()?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        fs::remove_file(path)?;
        sync_dir(path)
    }
}

fn sync_dir(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

/// Fills `buf` from the kernel's random source (`getrandom`).
fn random(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is valid for `rest.len()` bytes of writes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

impl Drop for KeyHeader {
    fn drop(&mut self) {
        self.salt.zeroize();
    }
}
