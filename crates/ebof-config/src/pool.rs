//! Storage pools (`[[pools]]`, ADR 0022): a directory that file namespaces are created in by
//! the management API, with an optional cap on what it hands out.
//!
//! This module holds the typed [`Pool`], its conversion from the file and its checks, the
//! namespace side (`pool = "NAME"` on a file namespace), and [`pool_file_name`], the file name
//! the box picks for a namespace made in a pool. Accounting (capacity, free space) needs the
//! file system and the running namespaces: it is the management plane's.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::error::{ConfigError, codes, quote};
use crate::model::{BackendChoice, Config};
use crate::raw::SizeField;

/// Longest pool name, in characters.
pub const POOL_NAME_MAX: usize = 64;

/// Longest file name the box makes in a pool (the usual `NAME_MAX` of Linux file systems).
pub const POOL_FILE_NAME_MAX: usize = 255;

/// A storage pool (`[[pools]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// `name`: 1..=[`POOL_NAME_MAX`] characters of `A-Z a-z 0-9 . _ -`, unique.
    pub name: String,
    /// `directory`: an absolute path; `ebof serve` creates it (mode 0750) when missing. The
    /// files of the pool's namespaces are made here.
    pub directory: PathBuf,
    /// `size`: the most the pool hands out (the sum of its namespaces' sizes); `None`: only the
    /// file system's free space limits it.
    pub size: Option<u64>,
    /// `encryption = { key_file }` (ADR 0029): every namespace made in the pool is encrypted
    /// with its own key derived from this one. `None`: not encrypted.
    pub encryption: Option<crate::crypt::Encryption>,
}

/// `[[pools]]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPool {
    /// Required.
    name: Option<String>,
    /// Required, absolute.
    directory: Option<String>,
    /// Optional cap, integer bytes or "100G".
    size: Option<SizeField>,
    /// Optional `encryption = { key_file = "…" }`.
    encryption: Option<crate::crypt::EncryptionFields>,
}

/// Check a pool name: 1 to [`POOL_NAME_MAX`] characters of `A-Z a-z 0-9 . _ -` (code
/// `invalid-pool`, empty path: the caller anchors it).
pub fn check_pool_name(name: &str) -> Result<(), ConfigError> {
    let err = |why: String| {
        Err(ConfigError::new(
            codes::INVALID_POOL,
            "",
            format!(
                "{} is not a pool name: {why} (allowed: 1 to {POOL_NAME_MAX} of A-Z a-z 0-9 . _ -)",
                quote(name)
            ),
        ))
    };
    if name.is_empty() {
        return err("it is empty".into());
    }
    if name.chars().count() > POOL_NAME_MAX {
        return err(format!("it has {} characters", name.chars().count()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return err(format!("{c:?} is not allowed"));
    }
    Ok(())
}

/// The file name (not the path) the box gives the namespace `nsid` of subsystem `nqn` made in
/// a pool: the NQN with every character outside `A-Z a-z 0-9 . _ -` as `_`, then
/// `.ns<NSID>.img`. Deterministic, so a retry after a crash finds the same file. A name
/// longer than [`POOL_FILE_NAME_MAX`] bytes (not possible with NQNs of at most 223 bytes, but
/// checked) keeps a prefix and a hash of the whole NQN.
pub fn pool_file_name(nqn: &str, nsid: u32) -> String {
    let clean: String = nqn
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    // A leading dot would hide the file (and `..` must never be a name).
    let clean = match clean.strip_prefix('.') {
        Some(rest) => format!("_{rest}"),
        None => clean,
    };
    let tail = format!(".ns{nsid}.img");
    if clean.len() + tail.len() <= POOL_FILE_NAME_MAX {
        return format!("{clean}{tail}");
    }
    let hash = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, nqn.as_bytes()).simple();
    let room = POOL_FILE_NAME_MAX - tail.len() - 33;
    format!("{}-{hash}{tail}", &clean[..room])
}

impl Pool {
    /// The file of namespace `nsid` of `nqn` in this pool ([`pool_file_name`]).
    pub fn file_for(&self, nqn: &str, nsid: u32) -> PathBuf {
        self.directory.join(pool_file_name(nqn, nsid))
    }

    /// Whether `path` lies inside the pool's directory (lexically: no `..`, same prefix).
    pub fn holds(&self, path: &Path) -> bool {
        path.starts_with(&self.directory)
            && path != self.directory
            && !path.components().any(|c| c == Component::ParentDir)
    }
}

impl Config {
    /// The pool called `name`, if configured.
    pub fn pool(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.name == name)
    }
}

/// `[[pools]]` as typed values (notation only; [`validate`] checks the rest).
pub(crate) fn convert(raw: Vec<RawPool>) -> Result<Vec<Pool>, ConfigError> {
    raw.into_iter()
        .enumerate()
        .map(|(i, p)| {
            let at = |f: &str| format!("pools[{i}].{f}");
            let name = p.name.ok_or_else(|| {
                ConfigError::new(codes::MISSING_FIELD, at("name"), "name is required")
            })?;
            let directory = p.directory.ok_or_else(|| {
                ConfigError::new(
                    codes::MISSING_FIELD,
                    at("directory"),
                    "directory is required",
                )
            })?;
            let size = match p.size {
                None => None,
                Some(SizeField::Int(v)) => Some(u64::try_from(v).map_err(|_| {
                    ConfigError::new(
                        codes::INVALID_SIZE,
                        at("size"),
                        format!("size {v} is negative"),
                    )
                })?),
                Some(SizeField::Str(s)) => {
                    Some(crate::parse::parse_size(&s).map_err(|e| e.at(at("size")))?)
                }
            };
            let encryption = p
                .encryption
                .as_ref()
                .map(|e| e.check(&at("encryption")))
                .transpose()?;
            Ok(Pool {
                name,
                directory: PathBuf::from(directory),
                size,
                encryption,
            })
        })
        .collect()
}

/// Pools and the namespaces that name one: names, directories and sizes of the pools; each
/// `pool = "…"` names a configured pool, on a file namespace whose file is in its directory.
pub(crate) fn validate(cfg: &Config) -> Result<(), ConfigError> {
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut dirs: HashMap<&Path, usize> = HashMap::new();
    for (i, p) in cfg.pools.iter().enumerate() {
        let at = |f: &str| format!("pools[{i}].{f}");
        check_pool_name(&p.name).map_err(|e| e.at(at("name")))?;
        if let Some(k) = names.insert(&p.name, i) {
            return Err(ConfigError::new(
                codes::DUPLICATE_POOL,
                at("name"),
                format!("pool {} is already defined by pools[{k}]", quote(&p.name)),
            ));
        }
        let d = &p.directory;
        if !d.is_absolute() || d.as_os_str().as_encoded_bytes().contains(&0) {
            return Err(ConfigError::new(
                codes::INVALID_PATH,
                at("directory"),
                format!(
                    "the directory of pool {} must be an absolute path without NUL bytes, not {}",
                    p.name,
                    quote(&d.to_string_lossy())
                ),
            ));
        }
        if d.components().any(|c| c == Component::ParentDir) || d == Path::new("/") {
            return Err(ConfigError::new(
                codes::INVALID_PATH,
                at("directory"),
                format!(
                    "the directory of pool {} must be a plain directory path (no `..`, not /)",
                    p.name
                ),
            ));
        }
        if let Some(k) = dirs.insert(d, i) {
            return Err(ConfigError::new(
                codes::DUPLICATE_PATH,
                at("directory"),
                format!("{} is already the directory of pools[{k}]", d.display()),
            ));
        }
        if p.size == Some(0) {
            return Err(ConfigError::new(
                codes::INVALID_SIZE,
                at("size"),
                "a pool's size must be positive (leave it out for no cap)",
            ));
        }
    }
    for (i, s) in cfg.subsystems.iter().enumerate() {
        for (j, n) in s.namespaces.iter().enumerate() {
            let Some(name) = &n.pool else { continue };
            let at = |f: &str| format!("subsystems[{i}].namespaces[{j}].{f}");
            let Some(pool) = cfg.pool(name) else {
                let known: Vec<&str> = cfg.pools.iter().map(|p| p.name.as_str()).collect();
                return Err(ConfigError::new(
                    codes::UNKNOWN_POOL,
                    at("pool"),
                    format!(
                        "no pool named {} (pools: {})",
                        quote(name),
                        if known.is_empty() {
                            "none configured".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            };
            match &n.backend {
                BackendChoice::File { path, .. } if pool.holds(path) => {}
                BackendChoice::File { path, .. } => {
                    return Err(ConfigError::new(
                        codes::INVALID_PATH,
                        at("path"),
                        format!(
                            "{} is not inside {}, the directory of pool {name}",
                            path.display(),
                            pool.directory.display()
                        ),
                    ));
                }
                other => {
                    return Err(ConfigError::new(
                        codes::FORBIDDEN_FIELD,
                        at("pool"),
                        format!(
                            "backend \"{}\" does not take `pool`: pools hold file namespaces",
                            other.kind()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `[[pools]]` tables, for [`Config::to_toml_string`].
pub(crate) fn emit(out: &mut String, cfg: &Config) {
    use std::fmt::Write;
    for p in &cfg.pools {
        out.push_str("\n[[pools]]\n");
        let _ = writeln!(out, "name = {}", crate::emit::string(&p.name));
        let _ = writeln!(
            out,
            "directory = {}",
            crate::emit::string(&p.directory.to_string_lossy())
        );
        if let Some(size) = p.size {
            let _ = writeln!(out, "size = {}", crate::emit::size(size));
        }
        if let Some(e) = &p.encryption {
            let _ = writeln!(out, "{}", e.line(crate::emit::string));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["fast", "a", "A.b_c-9", &"x".repeat(64)] {
            check_pool_name(ok).unwrap();
        }
        for bad in ["", "a b", "a/b", "é", &"x".repeat(65), "a:b"] {
            assert_eq!(
                check_pool_name(bad).unwrap_err().code,
                codes::INVALID_POOL,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn file_names_are_deterministic_and_safe() {
        assert_eq!(
            pool_file_name("nqn.2026-11.io.ebof:vol-1", 1),
            "nqn.2026-11.io.ebof_vol-1.ns1.img"
        );
        assert_eq!(pool_file_name("nqn.x:a/b..c", 42), "nqn.x_a_b..c.ns42.img");
        let long = format!("nqn.{}", "a".repeat(300));
        let n = pool_file_name(&long, 4_294_967_294);
        assert!(n.len() <= POOL_FILE_NAME_MAX, "{}", n.len());
        assert!(n.ends_with(".ns4294967294.img"));
        assert_eq!(n, pool_file_name(&long, 4_294_967_294));
        assert_ne!(n, pool_file_name(&format!("{long}b"), 4_294_967_294));
        // The longest NQN fits without a hash.
        let max = format!("nqn.{}", "b".repeat(crate::NQN_MAX_LEN - 4));
        assert_eq!(
            pool_file_name(&max, 4_294_967_294),
            format!("{max}.ns4294967294.img")
        );
    }

    #[test]
    fn holds() {
        let p = Pool {
            name: "p".into(),
            directory: "/var/lib/ebof/p".into(),
            size: None,
            encryption: None,
        };
        assert!(p.holds(Path::new("/var/lib/ebof/p/a.img")));
        assert!(p.holds(Path::new("/var/lib/ebof/p/sub/a.img")));
        assert!(!p.holds(Path::new("/var/lib/ebof/p")));
        assert!(!p.holds(Path::new("/var/lib/ebof/pp/a.img")));
        assert!(!p.holds(Path::new("/var/lib/ebof/p/../q/a.img")));
        assert!(!p.holds(Path::new("p/a.img")));
        assert_eq!(
            p.file_for("nqn.a:b", 3),
            Path::new("/var/lib/ebof/p/nqn.a_b.ns3.img")
        );
    }
}
