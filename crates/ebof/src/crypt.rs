//! `ebof crypt`: local, offline key tools for encryption at rest (ADR 0029). They read key
//! files themselves; no key ever leaves a box through the management API.
//!
//! * `ebof crypt new-key --out FILE`: a fresh random 64-byte key file, mode 0600.
//! * `ebof crypt derive-key --pool-key FILE --header NSFILE.key [--out FILE]`: the data key
//!   of a namespace of an encrypted pool (HKDF of the pool key and the namespace's salt),
//!   checked against the header's check value, as 64 raw bytes: what
//!   `cryptsetup open --type plain --cipher aes-xts-plain64 --key-size 512 --key-file KEY
//!   NSFILE NAME` needs to open the namespace's file without ebof.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use ebof_backend::crypt::{KeyHeader, NsKeySource, PoolKey, read_key_file};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `ebof crypt …`.
#[derive(Args)]
pub struct CryptArgs {
    #[command(subcommand)]
    cmd: CryptCmd,
}

#[derive(Subcommand)]
enum CryptCmd {
    /// Write a new random 512-bit key file (mode 0600) for `encryption = { key_file }`.
    NewKey {
        /// The key file to create (refused if it exists).
        #[arg(long)]
        out: PathBuf,
    },
    /// Derive a pool namespace's data key from the pool key file and the namespace's key
    /// header (`NSFILE.key`), for `cryptsetup --type plain` recovery.
    DeriveKey {
        /// The pool's key file.
        #[arg(long)]
        pool_key: PathBuf,
        /// The namespace's key header (the file `NSFILE.key` beside its data file).
        #[arg(long, alias = "ns-id")]
        header: PathBuf,
        /// Write the key to this file (created, mode 0600) instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// Runs `ebof crypt`.
pub fn run(a: CryptArgs) -> anyhow::Result<()> {
    match a.cmd {
        CryptCmd::NewKey { out } => {
            let mut key = zeroize::Zeroizing::new([0u8; ebof_backend::crypt::KEY_LEN]);
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| std::io::Read::read_exact(&mut f, key.as_mut()))
                .context("reading /dev/urandom")?;
            write_new(&out, key.as_ref())
        }
        CryptCmd::DeriveKey {
            pool_key,
            header,
            out,
        } => {
            let pool = PoolKey::new(read_key_file(&pool_key)?);
            let Some(h) = KeyHeader::read(&header)? else {
                bail!("{}: no such key header (crypto-erased?)", header.display());
            };
            if !h.derived {
                bail!(
                    "{}: this namespace uses its own key file, not a pool key: use that \
                     file with cryptsetup",
                    header.display()
                );
            }
            let Some(key) = h.key(&NsKeySource::Pool(pool)) else {
                bail!(
                    "{}: the pool key {} does not match this namespace's check value",
                    header.display(),
                    pool_key.display()
                );
            };
            match out {
                Some(p) => write_new(&p, key.as_ref()),
                None => {
                    let mut o = std::io::stdout().lock();
                    o.write_all(key.as_ref())?;
                    Ok(o.flush()?)
                }
            }
        }
    }
}

fn write_new(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}
