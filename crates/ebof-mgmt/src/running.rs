//! The running configuration, and the one way it changes.
//!
//! `Running` holds the configuration `ebof serve` runs (the file plus command-line overrides,
//! as validated at start) beside the live [`Target`], and the appliers ([`crate::apply`]) that
//! keep the target in step with it. `Running::change` edits a copy of the configuration
//! (the edit validates the copy exactly as a configuration file is validated, so errors carry
//! the file's field paths and codes, before any step that touches storage or sockets), runs
//! every applier, and only then makes the copy the running configuration. A request either
//! applies whole or changes nothing. With `[management] autosave = true` every change is saved
//! ([`write_config`]).
//!
//! One mutex serialises the writers (requests are rare and short); the data path never takes
//! it: the target's own snapshots are what reactors read.

use crate::api::{ApiError, codes};
use crate::apply::Apply;
use crate::lookup::{check, live_namespace, namespace_index, parse_nsid, subsystem_index};
use ebof_config::Config;
use nvmf_target::{Namespace, Target};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The running configuration of one `ebof serve`, its target and its appliers.
#[derive(Debug)]
pub(crate) struct Running {
    target: Arc<Target>,
    cfg: Mutex<Config>,
    file: Option<PathBuf>,
    appliers: Vec<Arc<dyn Apply>>,
}

impl Running {
    /// `cfg` is what `target` was built from; `file` is where autosave writes.
    pub(crate) fn new(
        target: Arc<Target>,
        cfg: Config,
        file: Option<PathBuf>,
        appliers: Vec<Arc<dyn Apply>>,
    ) -> Running {
        Running {
            target,
            cfg: Mutex::new(cfg),
            file,
            appliers,
        }
    }

    /// The live target.
    pub(crate) fn target(&self) -> &Arc<Target> {
        &self.target
    }

    /// The running configuration, locked (no change happens while it is held).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Config> {
        self.cfg.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of the running configuration.
    pub(crate) fn get(&self) -> Config {
        self.lock().clone()
    }

    /// Edit a copy of the running configuration with `f` (which validates the copy before
    /// any step that touches storage or sockets), make the target match it (every applier),
    /// and on success commit the copy (and autosave it when configured).
    pub(crate) fn change<T>(
        &self,
        f: impl FnOnce(&mut Config) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let mut cfg = self.lock();
        let mut next = cfg.clone();
        let out = f(&mut next)?;
        if let Err(e) = crate::apply::all(
            self.appliers.iter().map(|a| &**a),
            &cfg,
            &next,
            &self.target,
        ) {
            // Appliers diff against what is live, so the change back undoes what the ones
            // before the failure did: the request changes nothing.
            if let Err(back) = crate::apply::all(
                self.appliers.iter().map(|a| &**a),
                &next,
                &cfg,
                &self.target,
            ) {
                tracing::error!(error = %back.message, "a failed change could not be undone whole");
            }
            return Err(e);
        }
        *cfg = next;
        if cfg.management.autosave
            && let Some(path) = &self.file
        {
            match write_config(&cfg, path) {
                Ok(_) => tracing::debug!(path = %path.display(), "configuration autosaved"),
                Err(e) => {
                    tracing::error!(error = %e, "autosave failed: the change is live but not saved")
                }
            }
        }
        Ok(out)
    }

    /// A change of namespace `nsid` (as the request path gives it) of subsystem `nqn`: `f`
    /// edits its configuration, the copy is validated and applied (`Running::change`).
    /// Returns `f`'s result, the live namespace and its configuration after the change.
    pub(crate) fn change_namespace<T>(
        &self,
        nqn: &str,
        nsid: &str,
        f: impl FnOnce(&mut ebof_config::Namespace) -> Result<T, ApiError>,
    ) -> Result<(T, Arc<Namespace>, ebof_config::Namespace), ApiError> {
        let nsid = parse_nsid(nsid)?;
        self.change(|cfg| {
            let si = subsystem_index(cfg, nqn)?;
            let ni = namespace_index(cfg, si, nsid)?;
            let live = live_namespace(&self.target, nqn, nsid)?;
            let out = f(&mut cfg.subsystems[si].namespaces[ni])?;
            check(cfg)?;
            Ok((out, live, cfg.subsystems[si].namespaces[ni].clone()))
        })
    }

    /// `POST /v1/save`: write the running configuration to `path`, or the file serve was
    /// started with, atomically (a reader sees the old file or the new one, never a part).
    pub(crate) fn save(&self, path: Option<&str>) -> Result<crate::api::Saved, ApiError> {
        let dest = match (path, &self.file) {
            (Some(p), _) if p.is_empty() || p.contains('\0') => {
                return Err(ApiError::new(
                    ebof_config::codes::INVALID_PATH,
                    "path",
                    "the path must be a non-empty path without NUL bytes",
                ));
            }
            (Some(p), _) => PathBuf::from(p),
            (None, Some(p)) => p.clone(),
            (None, None) => {
                return Err(ApiError::new(
                    codes::NO_CONFIG_FILE,
                    "path",
                    "ebof serve was started without a configuration file: say where to save \
                     (`ebof ctl save FILE`)",
                ));
            }
        };
        let cfg = self.lock();
        if path.is_some() {
            crate::paths::check_save(&cfg, self.file.as_deref(), &dest, "path")?;
        }
        cfg.validate()
            .map_err(|e| ApiError::new(codes::SAVE_FAILED, "", format!("not saved: {e}")))?;
        let bytes =
            write_config(&cfg, &dest).map_err(|e| ApiError::new(codes::SAVE_FAILED, "path", e))?;
        tracing::info!(path = %dest.display(), bytes, "running configuration saved");
        Ok(crate::api::Saved {
            path: dest.display().to_string(),
            bytes,
        })
    }
}
/// Write `cfg` as TOML to `path` atomically: a temporary file beside it, written and synced,
/// renamed over it, and the directory synced. Returns the bytes written.
pub fn write_config(cfg: &Config, path: &Path) -> Result<u64, String> {
    let text = format!(
        "# ebof serve configuration, saved from the running target by the management API.\n{}",
        cfg.to_toml_string()
    );
    let name = path
        .file_name()
        .ok_or_else(|| format!("{} is not a file path", path.display()))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // Unpredictable, created new and owner-only from the start (the configuration may hold
    // inline keys): nobody can plant a link at the name or open the file while it is written.
    let tmp = dir.join(
        crate::paths::temp_name(&name.to_string_lossy())
            .map_err(|e| format!("cannot name a temporary file in {}: {e}", dir.display()))?,
    );
    let fail = |what: &str, e: std::io::Error| format!("{what} {}: {e}", tmp.display());
    let result = (|| {
        let mut f = crate::paths::create_private(&tmp).map_err(|e| fail("cannot create", e))?;
        f.write_all(text.as_bytes())
            .map_err(|e| fail("cannot write", e))?;
        f.sync_all().map_err(|e| fail("cannot sync", e))?;
        // A file that exists keeps the mode its owner gave it (the content is complete now),
        // except that a configuration holding inline secrets (DH-HMAC-CHAP keys the CSI
        // controller installs, TLS PSKs) is never left readable by group or others.
        if let Ok(meta) = std::fs::metadata(path) {
            use std::os::unix::fs::PermissionsExt;
            let mut mode = meta.permissions().mode() & 0o7777;
            if holds_inline_secrets(cfg) {
                mode &= 0o700;
            }
            let _ = f.set_permissions(std::fs::Permissions::from_mode(mode));
        }
        std::fs::rename(&tmp, path)
            .map_err(|e| format!("cannot replace {}: {e}", path.display()))?;
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(text.len() as u64)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Whether the configuration's text holds a secret itself (not a path to one).
fn holds_inline_secrets(cfg: &Config) -> bool {
    use ebof_config::SecretSource;
    cfg.hosts.iter().any(|h| {
        [&h.dhchap_key, &h.dhchap_ctrl_key, &h.tls_key]
            .into_iter()
            .any(|k| matches!(k, Some(SecretSource::Inline(_))))
    })
}
