//! Encryption at rest in the control plane (ADR 0029): which key a namespace uses, its key
//! header, the encrypting backend around it, and crypto-erase when a pool namespace is deleted.
//!
//! [`prepare`] runs before the namespace's backend is opened, so a missing, unreadable, loose
//! or wrong key is refused before any file is created or written; [`wrap`] runs after, writes
//! a new namespace's key header and puts [`CryptBackend`] around the backend.

use ebof_backend::Backend;
use ebof_backend::crypt::{CryptBackend, KeyError, KeyHeader, NsKeySource, PoolKey, Xts};
use ebof_config::{BackendChoice, Config};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A namespace's key, checked, before its backend is opened.
pub(crate) struct Prepared {
    source: NsKeySource,
    header_path: PathBuf,
    /// The header on disk, if there is one (its key already checked against `source`).
    header: Option<KeyHeader>,
    field: String,
}

/// Where the key header of namespace `n` lives: beside a file (`PATH.key`); for a block
/// device, in `[target] state_dir` as `ns-<uuid>.key`.
pub(crate) fn header_path(n: &ebof_config::Namespace, cfg: &Config) -> Option<PathBuf> {
    match &n.backend {
        BackendChoice::File { path, .. } => Some(KeyHeader::path_for(path)),
        BackendChoice::Block { .. } => cfg
            .target
            .state_dir
            .as_ref()
            .map(|d| d.join(format!("ns-{}.key", uuid::Uuid::from_bytes(n.uuid)))),
        BackendChoice::Ram { .. } => None,
    }
}

/// The key file of namespace `n` and whether its key is derived (pool) or its own, with the
/// configuration field that names the key file.
fn key_file(
    n: &ebof_config::Namespace,
    cfg: &Config,
    field: &str,
) -> Option<(PathBuf, bool, String)> {
    if let Some(e) = &n.encryption {
        return Some((
            e.key_file.clone(),
            false,
            format!("{field}.encryption.key_file"),
        ));
    }
    let name = n.pool.as_deref()?;
    let i = cfg.pools.iter().position(|p| p.name == name)?;
    let e = cfg.pools[i].encryption.as_ref()?;
    Some((
        e.key_file.clone(),
        true,
        format!("pools[{i}].encryption.key_file"),
    ))
}

/// A namespace without a key whose data is encrypted (its key header beside it: a clone or
/// file of an encrypted namespace added without the key, or in a pool without it) is refused:
/// served as it is, its hosts would read ciphertext as data.
fn no_key(n: &ebof_config::Namespace, cfg: &Config, field: &str) -> Result<(), String> {
    let (Some(data), Some(header)) = (n.backend.path(), header_path(n, cfg)) else {
        return Ok(());
    };
    if !data.exists() || !header.exists() {
        return Ok(());
    }
    Err(format!(
        "{field}: {} is encrypted (its key header {} is beside it) but the namespace has no key: \
         give it the key it was written with (`encryption = {{ key_file }}`, `--key-file`) or \
         make it in the encrypted pool it came from (key-header)",
        data.display(),
        header.display()
    ))
}

fn key_error(field: &str, e: &KeyError) -> String {
    format!("{field}: {e} ({})", e.code())
}

/// Reads and checks namespace `n`'s key (nothing is written): `Ok(None)` when it is not
/// encrypted. `exists`: whether its data already exists (a file that is there, a device).
pub(crate) fn prepare(
    n: &ebof_config::Namespace,
    cfg: &Config,
    field: &str,
) -> Result<Option<Prepared>, String> {
    let Some((key_path, derived, key_field)) = key_file(n, cfg, field) else {
        return no_key(n, cfg, field).map(|()| None);
    };
    let key =
        ebof_backend::crypt::read_key_file(&key_path).map_err(|e| key_error(&key_field, &e))?;
    let key = PoolKey::new(key);
    let source = if derived {
        NsKeySource::Pool(key)
    } else {
        NsKeySource::Own(key)
    };
    let header_path = header_path(n, cfg).ok_or_else(|| {
        format!(
            "{field}.encryption: an encrypted block namespace keeps its key header in \
             [target] state_dir: set one (invalid-encryption)"
        )
    })?;
    let data_exists = n.backend.path().is_some_and(Path::exists);
    let header = KeyHeader::read(&header_path).map_err(|e| key_error(field, &e))?;
    let header = match header {
        Some(h) if data_exists => {
            if h.key(&source).is_none() {
                let data = n.backend.path().unwrap_or(Path::new("")).to_path_buf();
                let e = KeyError::WrongKey {
                    data,
                    header: header_path,
                };
                return Err(key_error(&key_field, &e));
            }
            Some(h)
        }
        // A header without its data: left by a namespace deleted before; a new one is made.
        Some(_) => None,
        // Data without a header: a namespace with its own key adopts the file (written by
        // cryptsetup, for instance); a pool namespace's key is gone (crypto-erased).
        None if data_exists && derived => {
            let e = KeyError::Header {
                path: header_path,
                reason: "missing, but the namespace's file exists: its key was destroyed \
                         (crypto-erase) or the file was moved here without it"
                    .into(),
            };
            return Err(key_error(field, &e));
        }
        None => None,
    };
    Ok(Some(Prepared {
        source,
        header_path,
        header,
        field: field.to_string(),
    }))
}

/// Puts the encrypting backend around `backend`, writing a new namespace's key header first.
pub(crate) fn wrap(p: Prepared, backend: Arc<dyn Backend>) -> Result<Arc<dyn Backend>, String> {
    let key = match &p.header {
        Some(h) => h.key(&p.source),
        None => {
            let (header, key) = KeyHeader::create(&p.source)
                .map_err(|e| format!("{}: cannot make a namespace key: {e}", p.field))?;
            header.write(&p.header_path).map_err(|e| {
                format!(
                    "{}: cannot write the key header {}: {e}",
                    p.field,
                    p.header_path.display()
                )
            })?;
            Some(key)
        }
    };
    let key = key.ok_or_else(|| format!("{}: the namespace key changed while opening", p.field))?;
    Ok(Arc::new(CryptBackend::new(backend, Xts::new(&key))))
}

/// Crypto-erase: the key headers among `files` are overwritten and removed first, so the data
/// files that follow are unreadable even where deleting them fails or copies exist.
pub(crate) fn erase_headers(files: &[PathBuf]) {
    for f in files {
        if f.extension().is_some_and(|e| e == "key") && matches!(KeyHeader::read(f), Ok(Some(_))) {
            match KeyHeader::destroy(f) {
                Ok(()) => {
                    tracing::info!(path = %f.display(), "namespace key destroyed (crypto-erase)")
                }
                Err(e) => {
                    tracing::warn!(path = %f.display(), error = %e, "namespace key not destroyed")
                }
            }
        }
    }
}

/// A snapshot or clone of an encrypted namespace keeps its origin's key (ADR 0029): the key
/// header beside `from` (a data file) is copied beside `to`. Nothing happens when `from` has
/// none (not encrypted).
pub(crate) fn copy_header(from: &Path, to: &Path) -> std::io::Result<()> {
    let (src, dst) = (KeyHeader::path_for(from), KeyHeader::path_for(to));
    match KeyHeader::read(&src) {
        Ok(Some(h)) => h.write(&dst),
        Ok(None) => Ok(()),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

/// Crypto-erase of a deleted snapshot's data file `data`: its key header is destroyed.
pub(crate) fn erase_header_of(data: &Path) {
    erase_headers(&[KeyHeader::path_for(data)]);
}
