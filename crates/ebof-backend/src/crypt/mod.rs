//! Encryption at rest (ADR 0029): [`CryptBackend`] wraps a file or block backend and keeps
//! only ciphertext on it, in dm-crypt's `aes-xts-plain64` layout ([`Xts`]), so that
//! `cryptsetup open --type plain --cipher aes-xts-plain64 --key-size 512 --key-file KEY FILE`
//! on the file gives the namespace's plaintext.
//!
//! **Zeroes.** ebof promises that written-zeroes and deallocated ranges read as zeroes
//! (Identify DLFEAT) and keeps files thin. Both pass straight to the inner backend (hole
//! punching, `ZERO_RANGE`, `BLKZEROOUT`), so such sectors hold all-zero *ciphertext*; a
//! 512-byte sector whose ciphertext is all zero reads as plaintext zeroes ([`open_read`]).
//! A real ciphertext sector is all zero with probability 2⁻⁴⁰⁹⁶. Through `cryptsetup` those
//! sectors decrypt to noise, as discarded sectors do under dm-crypt; what an observer of the
//! file learns is which sectors hold data (as with dm-crypt and discards).
//!
//! **The io_uring path.** [`CryptBackend`] has no [`Backend::raw_io`] (an engine that does not
//! know about encryption must not write plaintext to its descriptor); it offers
//! [`Backend::crypt_io`] instead: the descriptor and the cipher. The engine encrypts the slot
//! buffer in place before it submits a write ([`seal_write`]) and decrypts after a read
//! completes ([`open_read`]), on the reactor.

mod keys;
mod xts;

pub use keys::{
    CheckValue, HEADER_LEN, KeyError, KeyHeader, NsKeySource, PoolKey, check_key_file,
    derive_ns_key, parse_key, read_key_file,
};
pub use xts::{KEY_LEN, SECTOR, Xts};

use crate::{Backend, BackendError, BackendKind, FsSpace, RawIo};
use std::io;
use std::sync::Arc;

/// What an I/O engine needs to run an encrypted backend's reads and writes itself
/// ([`Backend::crypt_io`]): the descriptor, as [`Backend::raw_io`] would give it, and the
/// cipher. Writes are encrypted with [`seal_write`] before they are submitted, reads decrypted
/// with [`open_read`] after they complete.
#[derive(Clone, Copy, Debug)]
pub struct CryptIo<'a> {
    /// The inner backend's descriptor.
    pub raw: RawIo,
    /// The namespace's cipher.
    pub cipher: &'a Xts,
}

/// Encrypts `buf` in place for a write at byte `offset` (whole 512-byte sectors).
pub fn seal_write(cipher: &Xts, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
    let sector = sector_of(offset, buf.len())?;
    cipher.encrypt(sector, buf);
    Ok(())
}

/// Decrypts `buf`, read at byte `offset`, in place (whole 512-byte sectors); a sector whose
/// ciphertext is all zero (a hole, zeroed or deallocated) stays zero.
pub fn open_read(cipher: &Xts, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
    let first = sector_of(offset, buf.len())?;
    let sectors = buf.len() / SECTOR;
    // Runs of non-zero sectors are decrypted as one batch; a nonzero first byte (nearly every
    // ciphertext sector) ends the zero check at once.
    let mut run_start = None;
    for i in 0..=sectors {
        let zero = i == sectors || buf[i * SECTOR..(i + 1) * SECTOR].iter().all(|&b| b == 0);
        match (zero, run_start) {
            (false, None) => run_start = Some(i),
            (true, Some(start)) => {
                cipher.decrypt(first + start as u64, &mut buf[start * SECTOR..i * SECTOR]);
                run_start = None;
            }
            _ => {}
        }
    }
    Ok(())
}

/// The first sector of a transfer of `len` bytes at `offset`, if both are whole sectors.
fn sector_of(offset: u64, len: usize) -> Result<u64, BackendError> {
    if offset.is_multiple_of(SECTOR as u64) && len.is_multiple_of(SECTOR) {
        Ok(offset / SECTOR as u64)
    } else {
        Err(BackendError::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("encrypted I/O must be whole 512-byte sectors (offset {offset}, {len} bytes)"),
        )))
    }
}

/// A backend whose data is encrypted with AES-XTS-256 ([the module docs](self)).
pub struct CryptBackend {
    inner: Arc<dyn Backend>,
    cipher: Xts,
}

impl std::fmt::Debug for CryptBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CryptBackend")
            .field("inner", &self.inner)
            .field("cipher", &self.cipher)
            .finish()
    }
}

impl CryptBackend {
    /// `inner` encrypted with `cipher`. The caller has checked the key against the namespace
    /// ([`KeyHeader`]); nothing is read or written here.
    pub fn new(inner: Arc<dyn Backend>, cipher: Xts) -> CryptBackend {
        CryptBackend { inner, cipher }
    }

    /// The backend holding the ciphertext.
    pub fn inner(&self) -> &Arc<dyn Backend> {
        &self.inner
    }
}

impl Backend for CryptBackend {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn resize(&self, new_size: u64) -> Result<(), BackendError> {
        self.inner.resize(new_size)
    }

    fn may_block(&self) -> bool {
        self.inner.may_block()
    }

    fn writes_block(&self) -> bool {
        self.inner.writes_block()
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        sector_of(offset, buf.len())?;
        self.inner.read(offset, buf)?;
        open_read(&self.cipher, offset, buf)
    }

    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), BackendError> {
        crate::check_range(offset, buf.len() as u64, self.size())?;
        let mut sealed = buf.to_vec();
        seal_write(&self.cipher, offset, &mut sealed)?;
        self.inner.write(offset, &sealed)
    }

    fn flush(&self) -> Result<(), BackendError> {
        self.inner.flush()
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.inner.write_zeroes(offset, len)
    }

    fn deallocate(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.inner.deallocate(offset, len)
    }

    fn allocated_bytes(&self) -> u64 {
        self.inner.allocated_bytes()
    }

    fn thin(&self) -> bool {
        self.inner.thin()
    }

    fn fs_space(&self) -> Option<FsSpace> {
        self.inner.fs_space()
    }

    fn crypt_io(&self) -> Option<CryptIo<'_>> {
        Some(CryptIo {
            raw: self.inner.raw_io()?,
            cipher: &self.cipher,
        })
    }

    fn encrypted(&self) -> bool {
        true
    }
}
