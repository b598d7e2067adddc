//! Where snapshots are kept and how they are found (ADR 0021): the storage side of
//! [`crate::snapshots`].
//!
//! A snapshot is two files in a [`DIR_NAME`] directory beside its origin's file (same file
//! system, so a reflink is possible): `NAME.img`, the data, and `NAME.json`, its [`Manifest`].
//! The manifest is written last, atomically ([`write_atomic`]): it is what makes a snapshot
//! exist. A data file without one is left over from a crash and is never listed.
//!
//! **Finding them** (`find_all`). The directories scanned are: [`DIR_NAME`] beside every file
//! namespace of the running configuration, every directory a snapshot was made in since start,
//! and the catalogue [`CATALOGUE`] in `[target] state_dir` (when configured) that remembers
//! every directory ever used (`Book`), so a snapshot outlives its origin across restarts.

use crate::api::{self, ApiError, SnapshotView, codes};
use ebof_backend::clone::CloneMethod;
use ebof_config::{BackendChoice, Config};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Directory of a namespace's snapshots, beside the namespace's file.
pub const DIR_NAME: &str = ".ebof-snapshots";
/// The manifest version this code writes and reads.
pub const MANIFEST_VERSION: u32 = 1;
/// Longest snapshot name, in characters.
pub const NAME_MAX: usize = 64;
/// The catalogue of snapshot directories in `[target] state_dir`.
pub const CATALOGUE: &str = "snapshot-dirs.json";

/// Check a snapshot name: 1 to [`NAME_MAX`] characters of `A-Z a-z 0-9 . _ -`, the first a
/// letter or digit (so no hidden file, no `..`, no option look-alike, no path separator).
pub fn validate_name(name: &str) -> Result<(), ApiError> {
    let bad = |why: String| {
        Err(ApiError::new(
            codes::INVALID_SNAPSHOT_NAME,
            "name",
            format!(
                "{name:?} is not a snapshot name: {why} (allowed: 1 to {NAME_MAX} of A-Z a-z 0-9 \
                 . _ -, starting with a letter or digit)"
            ),
        ))
    };
    if name.is_empty() {
        return bad("it is empty".into());
    }
    if name.chars().count() > NAME_MAX {
        return bad(format!("it has {} characters", name.chars().count()));
    }
    if let Some((i, c)) = name
        .chars()
        .enumerate()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        let what = if c == '/' || c == '\\' {
            "a path separator".to_string()
        } else if c.is_control() {
            format!("a control character (U+{:04X})", u32::from(c))
        } else {
            format!("{c:?}")
        };
        return bad(format!("character {} is {what}", i + 1));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return bad("it does not start with a letter or digit".into());
    }
    Ok(())
}

/// Where a snapshot was taken from, as its manifest records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestOrigin {
    /// Subsystem NQN.
    pub subsystem: String,
    /// Namespace ID.
    pub nsid: u32,
    /// Namespace UUID, text form.
    pub uuid: String,
    /// The origin's file.
    pub path: String,
}

/// A snapshot's manifest (`NAME.json`, JSON). Unknown fields are ignored (a later ebof may add
/// some within version 1); a different `version` is refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_VERSION`].
    pub version: u32,
    /// The snapshot's name (the manifest's file stem).
    pub name: String,
    /// The namespace it copies.
    pub origin: ManifestOrigin,
    /// Bytes.
    pub size: u64,
    /// The origin's logical block size.
    pub block_size: u32,
    /// Seconds since the Unix epoch.
    pub created: u64,
    /// `reflink` or `copy`.
    pub method: String,
    /// The data file, relative to the manifest's directory (`NAME.img`).
    pub data: String,
    /// Microseconds the origin's I/O was held.
    #[serde(default)]
    pub pause_us: u64,
    /// Microseconds the whole snapshot took.
    #[serde(default)]
    pub duration_us: u64,
}

impl Manifest {
    /// The manifest as written (pretty JSON, a final newline).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Read a manifest from `text`; `stem` is its file name without `.json`, which must be
    /// its name. The error says what is wrong.
    pub fn parse(text: &str, stem: &str) -> Result<Manifest, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        match v.get("version").and_then(serde_json::Value::as_u64) {
            Some(n) if n == u64::from(MANIFEST_VERSION) => {}
            Some(n) => {
                return Err(format!(
                    "manifest version {n} is not supported (this ebof reads version \
                     {MANIFEST_VERSION})"
                ));
            }
            None => return Err("no manifest version".into()),
        }
        let m: Manifest =
            serde_json::from_value(v).map_err(|e| format!("not a snapshot manifest: {e}"))?;
        validate_name(&m.name).map_err(|e| e.message)?;
        if m.name != stem {
            return Err(format!(
                "it names snapshot {:?}, its file says {stem:?}",
                m.name
            ));
        }
        if m.data != data_file_name(&m.name) {
            return Err(format!("unexpected data file {:?}", m.data));
        }
        if m.method != CloneMethod::Reflink.as_str() && m.method != CloneMethod::Copy.as_str() {
            return Err(format!("unknown method {:?}", m.method));
        }
        Ok(m)
    }

    /// The API's view of the snapshot in `dir`.
    pub fn view(&self, dir: &Path) -> SnapshotView {
        SnapshotView {
            name: self.name.clone(),
            origin: api::SnapshotOrigin {
                subsystem: self.origin.subsystem.clone(),
                nsid: self.origin.nsid,
                uuid: self.origin.uuid.clone(),
                path: self.origin.path.clone(),
            },
            size: self.size,
            block_size: self.block_size,
            created: self.created,
            method: self.method.clone(),
            path: dir.join(&self.data).display().to_string(),
            pause_us: self.pause_us,
            duration_us: self.duration_us,
        }
    }
}

pub(crate) fn data_file_name(name: &str) -> String {
    format!("{name}.img")
}

pub(crate) fn manifest_file_name(name: &str) -> String {
    format!("{name}.json")
}

/// Write `bytes` as `dir/name` atomically: a temporary file in `dir` (owner-only, new, under
/// an unpredictable name: [`crate::paths::create_private`]), written and synced, renamed over
/// `name`, then `dir` synced. On failure the temporary file is removed.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(crate::paths::temp_name(name)?);
    let result = (|| {
        let mut f = crate::paths::create_private(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(name))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A snapshot found on disk.
#[derive(Clone, Debug)]
pub struct Found {
    /// Its directory.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

/// Read every manifest in `dir` (a missing directory has none). Manifests that cannot be
/// read come back as warnings (`path: why`), the rest as snapshots.
pub fn scan_dir(dir: &Path) -> (Vec<Found>, Vec<String>) {
    let (mut found, mut warnings) = (Vec::new(), Vec::new());
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return (found, warnings),
        Err(e) => {
            warnings.push(format!("{}: {e}", dir.display()));
            return (found, warnings);
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
        .collect();
    names.sort();
    for n in names {
        let path = dir.join(&n);
        let stem = &n[..n.len() - ".json".len()];
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| Manifest::parse(&t, stem));
        match parsed {
            Ok(manifest) => found.push(Found {
                dir: dir.to_path_buf(),
                manifest,
            }),
            Err(e) => warnings.push(format!("{}: {e} (skipped)", path.display())),
        }
    }
    (found, warnings)
}

/// The catalogue of snapshot directories kept in `[target] state_dir`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Catalogue {
    version: u32,
    dirs: BTreeSet<PathBuf>,
}

/// The control plane's memory of snapshot directories (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Book {
    inner: Mutex<BookInner>,
}

#[derive(Debug, Default)]
struct BookInner {
    /// Directories used or found since start (and those of the catalogue).
    dirs: BTreeSet<PathBuf>,
    /// Manifests already warned about (warned once, not on every list).
    warned: HashSet<String>,
}

impl Book {
    /// The book of a target configured with `cfg`: the catalogue in its `state_dir`, if any.
    pub(crate) fn new(cfg: &Config) -> Book {
        let book = Book::default();
        if let Some(sd) = &cfg.target.state_dir {
            let path = sd.join(CATALOGUE);
            match std::fs::read_to_string(&path) {
                Ok(t) => match serde_json::from_str::<Catalogue>(&t) {
                    Ok(c) if c.version == MANIFEST_VERSION => {
                        book.lock().dirs.extend(c.dirs);
                    }
                    Ok(c) => tracing::warn!(
                        path = %path.display(),
                        version = c.version,
                        "snapshot catalogue of an unknown version: ignored"
                    ),
                    Err(e) => tracing::warn!(
                        path = %path.display(),
                        error = %e,
                        "snapshot catalogue unreadable: ignored"
                    ),
                },
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "snapshot catalogue unreadable: ignored"
                ),
            }
        }
        book
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BookInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remember `dir`; with a `state_dir`, record it in the catalogue there (best effort: a
    /// failure is logged, the snapshot is made regardless).
    pub(crate) fn remember(&self, dir: &Path, state_dir: Option<&Path>) {
        let mut b = self.lock();
        let mut dirs = b.dirs.clone();
        dirs.insert(dir.to_path_buf());
        if let Some(sd) = state_dir {
            let cat = Catalogue {
                version: MANIFEST_VERSION,
                dirs: dirs.clone(),
            };
            let text = serde_json::to_string_pretty(&cat).unwrap_or_default();
            let r = crate::paths::private_dir(sd)
                .and_then(|()| write_atomic(sd, CATALOGUE, text.as_bytes()));
            if let Err(e) = r {
                tracing::warn!(
                    state_dir = %sd.display(),
                    error = %e,
                    "snapshot catalogue not written: the snapshot is found again after a \
                     restart only while a file namespace remains in its directory"
                );
            }
        }
        b.dirs = dirs;
    }
}

/// The snapshot directory of a file namespace at `path` (made absolute, so that the server's
/// working directory does not matter later).
pub(crate) fn snapshot_dir_of(path: &Path) -> PathBuf {
    let abs = std::fs::canonicalize(path)
        .unwrap_or_else(|_| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
    let parent = match abs.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    parent.join(DIR_NAME)
}

/// Every snapshot directory to look in (see the module docs).
pub(crate) fn snapshot_dirs(book: &Book, cfg: &Config) -> BTreeSet<PathBuf> {
    let mut dirs: BTreeSet<PathBuf> = book.lock().dirs.clone();
    for s in &cfg.subsystems {
        for n in &s.namespaces {
            if let BackendChoice::File { path, .. } = &n.backend {
                dirs.insert(snapshot_dir_of(path));
            }
        }
    }
    dirs
}

/// Every snapshot, by name (the first found wins a name found twice, with a warning).
pub(crate) fn find_all(book: &Book, cfg: &Config) -> Vec<Found> {
    let mut all: Vec<Found> = Vec::new();
    let mut warnings = Vec::new();
    for d in snapshot_dirs(book, cfg) {
        let (found, w) = scan_dir(&d);
        warnings.extend(w);
        for f in found {
            if let Some(first) = all.iter().find(|x| x.manifest.name == f.manifest.name) {
                warnings.push(format!(
                    "{}: snapshot {} is also in {} (skipped)",
                    f.dir.display(),
                    f.manifest.name,
                    first.dir.display()
                ));
                continue;
            }
            all.push(f);
        }
    }
    let mut inner = book.lock();
    for w in warnings {
        if inner.warned.insert(w.clone()) {
            tracing::warn!("snapshot manifest: {w}");
        }
    }
    let new: BTreeSet<PathBuf> = all
        .iter()
        .map(|f| f.dir.clone())
        .filter(|d| !inner.dirs.contains(d))
        .collect();
    drop(inner);
    // A directory found through a namespace of the configuration goes into the catalogue
    // too: the snapshot is then found after its origin is gone.
    for d in new {
        book.remember(&d, cfg.target.state_dir.as_deref());
    }
    all.sort_by(|a, b| a.manifest.name.cmp(&b.manifest.name));
    all
}
