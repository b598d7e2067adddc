//! The running configuration and every change that keeps it and the target in step.
//!
//! [`Control`] holds the configuration `ebof serve` runs (the file plus command-line overrides,
//! as validated at start) and changes it together with the live [`Target`]: each request edits
//! a copy of the configuration, validates the copy exactly as a configuration file is validated
//! (so errors carry the file's field paths and codes), then applies the change to the target as
//! its last fallible step, and only then makes the copy the running configuration. A request
//! either applies whole or changes nothing. `save` writes the running configuration as TOML;
//! with `[management] autosave = true` every change does.
//!
//! One mutex serialises the writers (requests are rare and short); the data path never takes
//! it: the target's own snapshots are what reactors read.

use crate::api::{
    ApiError, Disconnected, ListenerRemoved, ListenerRequest, ListenerView, NamespaceChanged,
    NamespaceRemoved, NamespaceRequest, NamespaceView, ResizeRequest, SaveRequest, Saved, State,
    Stats, SubsystemRemoved, SubsystemRequest, SubsystemView, codes,
};
use crate::{build, ops};
use ebof_config::{BackendChoice, Config, codes as cfg_codes};
use ebof_runtime::ListenerControl;
use nvmf_target::{ListenerInfo, Namespace, Target, UpdateError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The control plane of one running `ebof serve`.
#[derive(Debug)]
pub struct Control {
    /// The target it changes (shared with the transports).
    pub target: Arc<Target>,
    running: Mutex<Config>,
    listeners: std::sync::OnceLock<ListenerControl>,
    config_file: Option<PathBuf>,
    /// The mDNS responder, once serve attaches it ([`Control::attach_mdns`]).
    pub(crate) mdns: std::sync::OnceLock<Arc<crate::mdns::Responder>>,
    /// The Central Discovery Controller, when this box runs one ([`Control::attach_cdc`]).
    pub(crate) cdc: std::sync::OnceLock<Arc<ebof_cdc::Cdc>>,
    /// Where snapshots are looked for ([`crate::snapshots`]).
    pub(crate) snapshots_book: crate::snapshots::Book,
}

impl Control {
    /// `running` is the configuration the target was built from (after start-up checks);
    /// `config_file` is where `save` writes by default and autosave writes. Listener changes
    /// are refused until [`Control::attach_server`].
    pub fn new(target: Arc<Target>, running: Config, config_file: Option<PathBuf>) -> Control {
        let snapshots_book = crate::snapshots::Book::new(&running);
        let c = Control {
            snapshots_book,
            target,
            running: Mutex::new(running),
            listeners: std::sync::OnceLock::new(),
            config_file,
            mdns: std::sync::OnceLock::new(),
            cdc: std::sync::OnceLock::new(),
        };
        let found = c.snapshots().len();
        if found > 0 {
            tracing::info!(snapshots = found, "snapshots found");
        }
        c
    }

    /// The NVMe/TCP server is up: `listeners` reaches its reactors, `bound` are the addresses
    /// it bound (I/O listeners, then discovery, as configured). Listeners configured with port
    /// 0 get the port they were given, in the running configuration and the discovery log.
    pub fn attach_server(&self, listeners: ListenerControl, bound: &[std::net::SocketAddr]) {
        let _ = self.listeners.set(listeners);
        build::settle_bound_ports(&mut self.lock(), bound, &self.target);
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Config> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The running configuration (what `save` would write).
    pub fn running(&self) -> Config {
        self.lock().clone()
    }

    /// Edit a copy of the running configuration with `f` (which validates it and applies the
    /// change to the target last); on success the copy becomes the running configuration.
    pub(crate) fn change<T>(
        &self,
        f: impl FnOnce(&mut Config) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let mut cfg = self.lock();
        let mut next = cfg.clone();
        let out = f(&mut next)?;
        *cfg = next;
        if cfg.management.autosave
            && let Some(path) = &self.config_file
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

    /// `GET /v1/state`: the target's state, with the namespaces' paths and the discovery
    /// listener from the running configuration.
    pub fn state(&self) -> State {
        let mdns = self.mdns();
        let cfg = self.lock();
        let mut s = ops::state(&self.target);
        for sv in &mut s.subsystems {
            let Some(sc) = cfg.subsystems.iter().find(|c| c.nqn == sv.nqn) else {
                continue;
            };
            for nv in &mut sv.namespaces {
                nv.path = sc
                    .namespaces
                    .iter()
                    .find(|n| n.nsid == nv.nsid)
                    .and_then(|n| n.backend.path())
                    .map(|p| p.display().to_string());
            }
        }
        if let Some(d) = &cfg.discovery {
            s.listeners.push(ListenerView {
                address: d.socket_addr().to_string(),
                portid: 0,
                discovery: true,
                tls: "off".into(),
                transport: cfg.transport(d).name().into(),
            });
        }
        s.mdns = Some(mdns);
        drop(cfg);
        s.cdc = self.cdc_view();
        s.snapshots = self.snapshots();
        s.pools = self.pools();
        s
    }

    /// Counters of namespaces and connections ([`ops::stats`]).
    pub fn stats(&self) -> Stats {
        ops::stats(&self.target)
    }

    /// Tear down controller `cntlid` ([`ops::disconnect`]); the running configuration is unchanged.
    pub fn disconnect(&self, cntlid: &str) -> Result<Disconnected, ApiError> {
        ops::disconnect(&self.target, cntlid)
    }

    /// Add a subsystem ([`ops::add_subsystem`]) and record it in the running configuration.
    pub fn add_subsystem(&self, req: &SubsystemRequest) -> Result<SubsystemView, ApiError> {
        self.change(|cfg| {
            let v = ops::add_subsystem(&self.target, req, &cfg.target.serial_prefix)?;
            cfg.subsystems.push(ebof_config::Subsystem {
                nqn: v.nqn.clone(),
                serial: v.serial.clone(),
                model: v.model.clone(),
                allow_any_host: v.allow_any_host,
                hosts: Vec::new(),
                namespaces: Vec::new(),
            });
            Ok(v)
        })
    }

    /// Remove a subsystem, disconnecting its controllers ([`ops::remove_subsystem`]), and drop it
    /// from the running configuration.
    pub fn remove_subsystem(&self, nqn: &str) -> Result<SubsystemRemoved, ApiError> {
        let mut owned = Vec::new();
        let removed = self.change(|cfg| {
            let si = subsystem_index(cfg, nqn)?;
            let gone = cfg.subsystems.remove(si);
            check(cfg)?;
            let r = ops::remove_subsystem(&self.target, nqn)?;
            for n in &gone.namespaces {
                owned.extend(crate::pools::owned_files(
                    n,
                    cfg.target.state_dir.as_deref(),
                ));
            }
            Ok(r)
        })?;
        // Its pool namespaces' files go once the removal is committed.
        crate::pools::delete_files(&owned);
        Ok(removed)
    }

    /// Allow host `hostnqn` on subsystem `nqn` ([`ops::allow_host`]); recorded in the running
    /// configuration.
    pub fn allow_host(&self, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ApiError> {
        self.change(|cfg| {
            let v = ops::allow_host(&self.target, nqn, hostnqn)?;
            self.sync_hosts(cfg, &v);
            Ok(v)
        })
    }

    /// Refuse new Connects of `hostnqn` on `nqn` ([`ops::deny_host`]; its controllers stay);
    /// recorded in the running configuration.
    pub fn deny_host(&self, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ApiError> {
        self.change(|cfg| {
            let v = ops::deny_host(&self.target, nqn, hostnqn)?;
            self.sync_hosts(cfg, &v);
            Ok(v)
        })
    }

    /// Open subsystem `nqn` to any host, or restrict it to its host list
    /// ([`ops::set_allow_any_host`]); recorded in the running configuration.
    pub fn set_allow_any_host(&self, nqn: &str, on: bool) -> Result<SubsystemView, ApiError> {
        self.change(|cfg| {
            let v = ops::set_allow_any_host(&self.target, nqn, on)?;
            self.sync_hosts(cfg, &v);
            Ok(v)
        })
    }

    /// Host changes are checked by `ops` (the target is the authority on who may connect);
    /// the configuration follows what was applied.
    fn sync_hosts(&self, cfg: &mut Config, v: &SubsystemView) {
        if let Some(s) = cfg.subsystems.iter_mut().find(|s| s.nqn == v.nqn) {
            s.hosts = v.hosts.clone();
            s.allow_any_host = v.allow_any_host;
        }
    }

    /// `POST /v1/subsystems/{nqn}/namespaces`: open (or create) the storage and attach it;
    /// connected hosts are told with a Namespace Attribute Changed event.
    pub fn add_namespace(
        &self,
        nqn: &str,
        req: &NamespaceRequest,
    ) -> Result<NamespaceChanged, ApiError> {
        self.change(|cfg| self.add_namespace_in(cfg, nqn, req, None))
    }

    /// [`Control::add_namespace`] on the copy `cfg` of the running configuration (inside
    /// [`Control::change`]). `prepared`: the pool file the caller made already (a clone into a
    /// pool, capacity checked by the caller under the same lock), used as it is.
    pub(crate) fn add_namespace_in(
        &self,
        cfg: &mut Config,
        nqn: &str,
        req: &NamespaceRequest,
        prepared: Option<&Path>,
    ) -> Result<NamespaceChanged, ApiError> {
        {
            let si = subsystem_index(cfg, nqn)?;
            let nsid = match req.nsid {
                Some(n) => n,
                None => (1..=ebof_config::NSID_MAX)
                    .find(|n| !cfg.subsystems[si].namespaces.iter().any(|x| x.nsid == *n))
                    .unwrap_or(1),
            };
            // The namespace is built as the configuration file builds one (same checks, codes
            // and field paths: `subsystems[{si}].namespaces[{ni}].…`, as validation reports).
            let ni = cfg.subsystems[si].namespaces.len();
            let field = format!("subsystems[{si}].namespaces[{ni}]");
            let mut fields = namespace_fields(req, nsid);
            // In a pool the box names the file, and the pool must hold the size (checked
            // before the namespace is in the configuration: it is not counted yet).
            let mut pool_file: Option<(PathBuf, crate::api::PoolView)> = None;
            if let Some(name) = &req.pool {
                let pool = crate::pools::requested_pool(cfg, name, &format!("{field}.pool"))?;
                if req.path.is_some() {
                    return Err(ApiError::new(
                        cfg_codes::FORBIDDEN_FIELD,
                        format!("{field}.path"),
                        format!(
                            "a namespace made in pool {name} gets its file from the pool (in {}): leave `path` out",
                            pool.directory.display()
                        ),
                    ));
                }
                if req.size.is_none() {
                    return Err(ApiError::new(
                        cfg_codes::MISSING_FIELD,
                        format!("{field}.size"),
                        format!("size is required for a namespace made in pool {name}"),
                    ));
                }
                let path = match prepared {
                    Some(p) => p.to_path_buf(),
                    None => pool.file_for(nqn, nsid),
                };
                fields.path = Some(path.display().to_string());
                fields.backend.get_or_insert_with(|| "file".into());
                let view = crate::pools::pool_view(cfg, &self.target, &pool);
                pool_file = Some((path, view));
            }
            let ns = ebof_config::Namespace::from_fields(fields, &field, ni, nqn)
                .map_err(|e| ApiError::from_config(&e, ""))?;
            cfg.subsystems[si].namespaces.push(ns.clone());
            check(cfg)?;
            // The token is no key to the whole box: storage only where the configuration file
            // allows the API to make or open it, and never a file another namespace uses
            // under another name (the check above compares paths as text).
            crate::paths::check_namespace(cfg, &ns, &format!("{field}.path"))?;
            crate::paths::same_file_as(cfg, nqn, nsid, &format!("{field}.path"))?;
            // Only now (the request is valid, the file is no namespace's): room, then the file.
            let mut undo_file = None;
            if let Some((path, view)) = &pool_file
                && prepared.is_none()
            {
                let size = ns.backend.size().unwrap_or(0);
                crate::pools::ensure_room(view, size, "a namespace", &format!("{field}.size"))?;
                crate::pools::clear_orphan(path, &format!("{field}.pool"))?;
                undo_file = Some(path.clone());
            }
            let opened = build::open_namespace(
                &ns,
                cfg.target.ram_huge_pages,
                cfg.target.state_dir.as_deref(),
                &field,
            )
            .map_err(|m| {
                if let Some(p) = &undo_file {
                    let _ = std::fs::remove_file(p);
                }
                ApiError::new(codes::BACKEND_FAILED, field, m)
            })?;
            let opened = Arc::new(opened);
            self.target
                .update_subsystem(nqn, |s| {
                    let mut n = s.clone();
                    n.namespaces.push(opened.clone());
                    // Masked from the start: no host outside the list ever sees it.
                    if let Some(hosts) = &ns.hosts {
                        n.ns_hosts.insert(nsid, hosts.clone());
                    }
                    Ok::<_, ApiError>(n)
                })
                .map_err(|e| update_error(nqn, e))?;
            tracing::info!(
                subsystem = nqn,
                nsid,
                backend = ns.backend.kind(),
                size = opened.backend.size(),
                pool = ns.pool.as_deref().unwrap_or(""),
                "namespace added by the management API"
            );
            Ok(NamespaceChanged {
                subsystem: nqn.to_string(),
                namespace: namespace_view(&opened, &ns),
            })
        }
    }

    /// `DELETE /v1/subsystems/{nqn}/namespaces/{nsid}`: detach the namespace. Commands in
    /// flight on it fail with Invalid Namespace; its storage is flushed and closed when the
    /// last of them is done (a file or device is left as it is).
    pub fn remove_namespace(&self, nqn: &str, nsid: &str) -> Result<NamespaceRemoved, ApiError> {
        let nsid = parse_nsid(nsid)?;
        let mut owned = Vec::new();
        let removed = self.change(|cfg| {
            let si = subsystem_index(cfg, nqn)?;
            let ni = namespace_index(cfg, si, nsid)?;
            let gone = cfg.subsystems[si].namespaces.remove(ni);
            check(cfg)?;
            owned = crate::pools::owned_files(&gone, cfg.target.state_dir.as_deref());
            let mut removed: Option<Arc<Namespace>> = None;
            self.target
                .update_subsystem(nqn, |s| {
                    let mut n = s.clone();
                    if let Some(i) = n.namespaces.iter().position(|x| x.nsid == nsid) {
                        removed = Some(n.namespaces.remove(i));
                    }
                    Ok::<_, ApiError>(n)
                })
                .map_err(|e| update_error(nqn, e))?;
            if let Some(ns) = removed
                && let Err(e) = ns.backend.flush()
            {
                tracing::warn!(subsystem = nqn, nsid, error = %e, "flush of a removed namespace failed");
            }
            tracing::info!(subsystem = nqn, nsid, "namespace removed by the management API");
            Ok(NamespaceRemoved {
                subsystem: nqn.to_string(),
                nsid,
            })
        })?;
        // The pool owns the file: deleted once the removal is committed (and saved).
        crate::pools::delete_files(&owned);
        Ok(removed)
    }

    /// `PUT /v1/subsystems/{nqn}/namespaces/{nsid}/size`: grow (or, when confirmed, shrink)
    /// the namespace in place; I/O goes on, and connected hosts re-read its size on the
    /// Namespace Attribute Changed event.
    pub fn resize_namespace(
        &self,
        nqn: &str,
        nsid: &str,
        req: &ResizeRequest,
    ) -> Result<NamespaceChanged, ApiError> {
        let nsid = parse_nsid(nsid)?;
        self.change(|cfg| {
            let si = subsystem_index(cfg, nqn)?;
            let ni = namespace_index(cfg, si, nsid)?;
            let live = self.live_namespace(nqn, nsid)?;
            let current = live.backend.size();
            let field = format!("subsystems[{si}].namespaces[{ni}].size");
            if req.size == 0 || !req.size.is_multiple_of(u64::from(live.block_size)) {
                return Err(ApiError::new(
                    cfg_codes::INVALID_SIZE,
                    field,
                    format!(
                        "size {} is not a positive multiple of the block size {}",
                        req.size, live.block_size
                    ),
                ));
            }
            if req.size < current && !req.shrink {
                return Err(ApiError::new(
                    codes::SHRINK_NOT_CONFIRMED,
                    "size",
                    format!(
                        "{} is smaller than the namespace ({}): the data past the new end would \
                         be discarded; confirm with shrink (`ebof ctl ns resize … --shrink`)",
                        ebof_config::format_size(req.size),
                        ebof_config::format_size(current)
                    ),
                ));
            }
            if req.size > current
                && let Some(name) = cfg.subsystems[si].namespaces[ni].pool.clone()
                && let Some(pool) = cfg.pool(&name)
            {
                let view = crate::pools::pool_view(cfg, &self.target, pool);
                crate::pools::ensure_room(&view, req.size - current, "a growth", &field)?;
            }
            let ns = &mut cfg.subsystems[si].namespaces[ni];
            match &mut ns.backend {
                BackendChoice::Ram { size } => *size = req.size,
                BackendChoice::File { size, .. } => *size = Some(req.size),
                BackendChoice::Block { .. } => {}
            }
            let ns = ns.clone();
            check(cfg)?;
            live.backend
                .resize(req.size)
                .map_err(|e| ApiError::new(codes::BACKEND_FAILED, field, e.to_string()))?;
            self.target.namespace_changed(nqn, nsid);
            tracing::info!(
                subsystem = nqn,
                nsid,
                from = current,
                to = req.size,
                "namespace resized by the management API"
            );
            Ok(NamespaceChanged {
                subsystem: nqn.to_string(),
                namespace: namespace_view(&live, &ns),
            })
        })
    }

    /// `POST /v1/listeners`: bind and start accepting; the discovery log lists a new NVMe
    /// listener at once (and discovery controllers hear of it).
    pub fn add_listener(&self, req: &ListenerRequest) -> Result<ListenerView, ApiError> {
        let default_port = if req.discovery {
            ebof_config::DEFAULT_DISCOVERY_PORT
        } else {
            ebof_config::DEFAULT_PORT
        };
        let l = ebof_config::parse_listener(&req.address, default_port)
            .map_err(|e| ApiError::from_config(&e, "address"))?;
        let control = self.listener_control()?;
        let added = self.change(|cfg| {
            if req.discovery {
                if let Some(d) = &cfg.discovery {
                    return Err(ApiError::new(
                        cfg_codes::DUPLICATE_LISTENER,
                        "discovery",
                        format!(
                            "the discovery listener is {}; remove it first (one dedicated \
                             discovery listener at a time)",
                            d.socket_addr()
                        ),
                    ));
                }
                cfg.discovery = Some(l);
            } else {
                cfg.listeners.push(l);
            }
            check(cfg)?;
            let bound = control
                .add(l.socket_addr(), req.discovery)
                .map_err(|e| listen_error(&l.socket_addr(), &e))?;
            // Port 0 asks for any free port: record the one we got.
            let entry = if req.discovery {
                cfg.discovery.as_mut()
            } else {
                cfg.listeners.last_mut()
            };
            if let Some(e) = entry {
                e.port = bound.port();
            }
            let mut portid = 0;
            if !req.discovery {
                let mut v = self.target.listeners().as_ref().clone();
                portid = v.iter().map(|x| x.portid).max().unwrap_or(0) + 1;
                v.push(ListenerInfo {
                    addr: bound,
                    portid,
                    tls: Default::default(),
                    transport: Default::default(),
                });
                self.target.set_listeners(v);
                crate::ana::reset_listener(&self.target, bound);
            }
            Ok(ListenerView {
                address: bound.to_string(),
                portid,
                discovery: req.discovery,
                tls: "off".into(),
                transport: "tcp".into(),
            })
        })?;
        // Publish it over mDNS if the mode asks for it.
        self.sync_mdns();
        Ok(added)
    }

    /// `DELETE /v1/listeners/{address}`: close the listening socket. Connections that came in
    /// through it are kept unless `disconnect` asks to end their controllers too.
    pub fn remove_listener(
        &self,
        address: &str,
        disconnect: bool,
    ) -> Result<ListenerRemoved, ApiError> {
        let l = ebof_config::parse_listener(address, ebof_config::DEFAULT_PORT)
            .map_err(|e| ApiError::from_config(&e, "address"))?;
        let addr = l.socket_addr();
        let control = self.listener_control()?;
        let removed = self.change(|cfg| {
            if cfg.transport(&l) == ebof_config::Transport::Rdma {
                return Err(ApiError::new(
                    codes::UNSUPPORTED,
                    "address",
                    format!(
                        "{addr} is an NVMe/RDMA listener: RDMA listeners change with the configuration file and a restart"
                    ),
                ));
            }
            let discovery = if cfg.discovery.as_ref().map(|d| d.socket_addr()) == Some(addr) {
                cfg.discovery = None;
                true
            } else if let Some(i) = cfg.listeners.iter().position(|x| x.socket_addr() == addr) {
                cfg.listeners.remove(i);
                // Its ANA states and TLS mode go with it (a listener added again starts
                // optimized, without TLS).
                cfg.ana.retain(|a| a.listener.socket_addr() != addr);
                cfg.listener_tls.retain(|(x, _)| x.socket_addr() != addr);
                false
            } else {
                return Err(ApiError::new(
                    codes::UNKNOWN_LISTENER,
                    "address",
                    format!("no listener on {addr} (see `ebof ctl show`)"),
                ));
            };
            check(cfg)?;
            let (portid, tls) = self
                .target
                .listeners()
                .iter()
                .find(|x| x.addr == addr)
                .map_or((0, nvmf_target::ListenerTls::Off), |x| (x.portid, x.tls));
            match control.remove(addr) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(ApiError::new(
                        codes::INTERNAL,
                        "address",
                        format!("{addr} is configured but no reactor accepts on it"),
                    ));
                }
                Err(e) => return Err(listen_error(&addr, &e)),
            }
            if !discovery {
                let v: Vec<ListenerInfo> = self
                    .target
                    .listeners()
                    .iter()
                    .filter(|x| x.addr != addr)
                    .copied()
                    .collect();
                self.target.set_listeners(v);
            }
            let mut disconnected = Vec::new();
            if disconnect {
                for c in self.target.controllers() {
                    if c.local_addr() == Some(addr) {
                        c.kill();
                        disconnected.push(c.cntlid.0);
                    }
                }
                self.target
                    .events
                    .admin_disconnects
                    .fetch_add(disconnected.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            tracing::info!(%addr, discovery, controllers = ?disconnected, "listener removed by the management API");
            Ok(ListenerRemoved {
                listener: ListenerView {
                    address: addr.to_string(),
                    portid,
                    discovery,
                    tls: crate::ops::tls_name(tls).into(),
                    transport: "tcp".into(),
                },
                disconnected,
            })
        })?;
        // Withdraw its mDNS record (goodbye packets).
        self.sync_mdns();
        Ok(removed)
    }

    fn listener_control(&self) -> Result<&ListenerControl, ApiError> {
        self.listeners.get().ok_or_else(|| {
            ApiError::new(
                codes::UNSUPPORTED,
                "",
                "this server cannot change its listeners at run time",
            )
        })
    }

    /// `POST /v1/save`: write the running configuration to `req.path` or the file serve was
    /// started with, atomically (a reader sees the old file or the new one, never a part).
    pub fn save(&self, req: &SaveRequest) -> Result<Saved, ApiError> {
        let path = match (&req.path, &self.config_file) {
            (Some(p), _) if p.is_empty() || p.contains('\0') => {
                return Err(ApiError::new(
                    cfg_codes::INVALID_PATH,
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
        if req.path.is_some() {
            crate::paths::check_save(&cfg, self.config_file.as_deref(), &path, "path")?;
        }
        cfg.validate()
            .map_err(|e| ApiError::new(codes::SAVE_FAILED, "", format!("not saved: {e}")))?;
        let bytes =
            write_config(&cfg, &path).map_err(|e| ApiError::new(codes::SAVE_FAILED, "path", e))?;
        tracing::info!(path = %path.display(), bytes, "running configuration saved");
        Ok(Saved {
            path: path.display().to_string(),
            bytes,
        })
    }
}

/// Validate a changed configuration as a configuration file is validated. One difference: a
/// running target may serve no subsystem for a while (the last one removed, the next one not
/// yet added); only `save` insists on one, as a file must have it.
pub(crate) fn check(cfg: &Config) -> Result<(), ApiError> {
    match cfg.validate() {
        Err(e) if e.code == cfg_codes::NO_SUBSYSTEMS && cfg.subsystems.is_empty() => Ok(()),
        r => r.map_err(|e| ApiError::from_config(&e, "")),
    }
}

pub(crate) fn subsystem_index(cfg: &Config, nqn: &str) -> Result<usize, ApiError> {
    cfg.subsystems
        .iter()
        .position(|s| s.nqn == nqn)
        .ok_or_else(|| ops::unknown_subsystem(nqn))
}

pub(crate) fn namespace_index(cfg: &Config, si: usize, nsid: u32) -> Result<usize, ApiError> {
    cfg.subsystems[si]
        .namespaces
        .iter()
        .position(|n| n.nsid == nsid)
        .ok_or_else(|| unknown_namespace(&cfg.subsystems[si].nqn, nsid))
}

impl Control {
    /// The running namespace `nsid` of `nqn` (what hosts use now), or `unknown-namespace`.
    pub(crate) fn live_namespace(&self, nqn: &str, nsid: u32) -> Result<Arc<Namespace>, ApiError> {
        self.target
            .subsystem(nqn)
            .and_then(|s| s.namespace(nsid).cloned())
            .ok_or_else(|| unknown_namespace(nqn, nsid))
    }
}

pub(crate) fn unknown_namespace(nqn: &str, nsid: u32) -> ApiError {
    ApiError::new(
        codes::UNKNOWN_NAMESPACE,
        "nsid",
        format!("{nqn} has no namespace {nsid} (see `ebof ctl show`)"),
    )
}

pub(crate) fn parse_nsid(s: &str) -> Result<u32, ApiError> {
    s.parse::<u32>()
        .ok()
        .filter(|n| (1..=ebof_config::NSID_MAX).contains(n))
        .ok_or_else(|| {
            ApiError::new(
                cfg_codes::INVALID_NSID,
                "nsid",
                format!(
                    "{s:?} is not a namespace id (1 to {})",
                    ebof_config::NSID_MAX
                ),
            )
        })
}

pub(crate) fn update_error(nqn: &str, e: UpdateError<ApiError>) -> ApiError {
    match e {
        UpdateError::UnknownSubsystem => ops::unknown_subsystem(nqn),
        UpdateError::Rejected(e) => e,
    }
}

fn listen_error(addr: &std::net::SocketAddr, e: &ebof_runtime::server::ServerError) -> ApiError {
    let mut msg = e.to_string();
    if let Some(src) = std::error::Error::source(e) {
        msg = format!("{msg}: {src}");
    }
    ApiError::new(codes::LISTEN_FAILED, "address", format!("{addr}: {msg}"))
}

/// What a request says about the namespace, as the configuration file would say it (the
/// NSID already chosen). `direct: false` is the default and passes as absent: API clients send
/// defaults, and the file refuses `direct` of any value on a RAM namespace.
fn namespace_fields(req: &NamespaceRequest, nsid: u32) -> ebof_config::NamespaceFields {
    ebof_config::NamespaceFields {
        nsid: Some(i64::from(nsid)),
        // Absent (empty): `missing-field`, or `file` in a pool.
        backend: Some(req.backend.clone()).filter(|b| !b.is_empty()),
        size: req.size.map(ebof_config::SizeField::from),
        path: req.path.clone(),
        block_size: req.block_size.map(i64::from),
        uuid: req.uuid.clone(),
        direct: req.direct.filter(|&d| d),
        ana_group: req.ana_group.map(i64::from),
        hosts: req.hosts.clone(),
        qos: req.qos.as_ref().map(|q| ebof_config::QosFields {
            iops: q.iops,
            mbps: q.mbps,
            read_iops: q.read_iops,
            write_iops: q.write_iops,
            read_mbps: q.read_mbps,
            write_mbps: q.write_mbps,
        }),
        pool: req.pool.clone(),
    }
}

pub(crate) fn namespace_view(n: &Namespace, c: &ebof_config::Namespace) -> NamespaceView {
    let mut v = ops::namespace_view(n, c.backend.path().map(|p| p.display().to_string()));
    v.hosts = c.hosts.clone();
    v
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

#[cfg(test)]
mod tests {
    use super::*;

    const NQN: &str = "nqn.2026-11.io.ebof:t";

    #[test]
    fn a_saved_configuration_with_inline_keys_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ebof.toml");
        std::fs::write(&path, "# old\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut cfg = Config::from_toml_str(TOML).unwrap();
        write_config(&cfg, &path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o644, "no secrets: the owner's mode is kept");
        let with_key = format!(
            "{TOML}[[hosts]]\nnqn = \"nqn.2014-08.org.example:h\"\ndhchap_key = \"DHHC-1:00:ZjRhMWY3MzY0NjhhNTFmMmUwOGQ4ZTc5ZTc3YTc3Zjc0OTNlYzQyN2IwNDYyYjQ=:\"\n"
        );
        cfg = Config::from_toml_str(&with_key).unwrap();
        write_config(&cfg, &path).unwrap();
        assert_eq!(
            mode(&path),
            0o600,
            "inline keys: group and others lose access"
        );
    }
    const TOML: &str = "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n\
                        [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:t\"\n\
                        [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n";

    fn control() -> Control {
        let cfg = Config::from_toml_str(TOML).unwrap();
        let target = Arc::new(build::build_target(&cfg).unwrap());
        Control::new(target, cfg, None)
    }

    fn ram(size: u64) -> NamespaceRequest {
        NamespaceRequest {
            backend: "ram".into(),
            size: Some(size),
            ..Default::default()
        }
    }

    /// The configuration file with `req` as its second namespace (NSID `nsid`).
    fn as_file(req: &NamespaceRequest, nsid: u32) -> String {
        let mut t = format!("{TOML}[[subsystems.namespaces]]\nnsid = {nsid}\n");
        t += &format!("backend = {:?}\n", req.backend);
        match req.size {
            // TOML integers are i64: a larger size is written as text.
            Some(v) if i64::try_from(v).is_err() => t += &format!("size = \"{v}\"\n"),
            Some(v) => t += &format!("size = {v}\n"),
            None => {}
        }
        if let Some(v) = &req.path {
            t += &format!("path = {v:?}\n");
        }
        if let Some(v) = req.block_size {
            t += &format!("block_size = {v}\n");
        }
        if let Some(v) = &req.uuid {
            t += &format!("uuid = {v:?}\n");
        }
        if let Some(v) = req.direct {
            t += &format!("direct = {v}\n");
        }
        if let Some(v) = req.ana_group {
            t += &format!("ana_group = {v}\n");
        }
        t
    }

    /// A namespace added through the API is the one the file would give, defaults included.
    #[test]
    fn an_added_namespace_is_the_one_the_file_gives() {
        let c = control();
        let dir = tempfile::tempdir().unwrap();
        c.lock().management.data_dirs.push(dir.path().to_path_buf());
        let img = dir.path().join("disk.img").display().to_string();
        let requests = [
            NamespaceRequest {
                nsid: Some(5),
                block_size: Some(4096),
                uuid: Some(" 0b5e3c1a-7f2d-4c9e-9a41-2f6c8e1d3b57 ".into()),
                ana_group: Some(2),
                ..ram(2 << 20)
            },
            ram(1 << 20),
            NamespaceRequest {
                backend: "file".into(),
                path: Some(img),
                size: Some(1 << 20),
                direct: Some(false),
                ..Default::default()
            },
        ];
        for (i, req) in requests.iter().enumerate() {
            let added = c.add_namespace(NQN, req).unwrap();
            let nsid = added.namespace.nsid;
            let file = Config::from_toml_str(&as_file(req, nsid)).unwrap();
            assert_eq!(
                c.running().subsystems[0].namespaces[i + 1],
                file.subsystems[0].namespaces[1],
                "{req:?}"
            );
        }
        // Without an NSID: the lowest free one (the file numbers by position instead).
        assert_eq!(c.running().subsystems[0].namespaces[2].nsid, 2);
    }

    /// A refused namespace gets the code and field path the file gets for it, and changes
    /// nothing.
    #[test]
    fn a_refused_namespace_gets_the_file_s_code_and_path() {
        let c = control();
        let before = c.running();
        let cases = [
            (
                NamespaceRequest {
                    size: None,
                    ..ram(0)
                },
                cfg_codes::MISSING_FIELD,
                "size",
            ),
            (
                NamespaceRequest {
                    path: Some("/tmp/x".into()),
                    ..ram(1 << 20)
                },
                cfg_codes::FORBIDDEN_FIELD,
                "path",
            ),
            (
                NamespaceRequest {
                    direct: Some(true),
                    ..ram(1 << 20)
                },
                cfg_codes::FORBIDDEN_FIELD,
                "direct",
            ),
            (
                NamespaceRequest {
                    backend: "block".into(),
                    path: Some("/dev/null".into()),
                    ..ram(1 << 20)
                },
                cfg_codes::FORBIDDEN_FIELD,
                "size",
            ),
            (
                NamespaceRequest {
                    backend: "file".into(),
                    ..Default::default()
                },
                cfg_codes::MISSING_FIELD,
                "path",
            ),
            (
                NamespaceRequest {
                    backend: "tape".into(),
                    ..ram(1 << 20)
                },
                cfg_codes::INVALID_BACKEND,
                "backend",
            ),
            (
                NamespaceRequest {
                    uuid: Some("not-a-uuid".into()),
                    ..ram(1 << 20)
                },
                cfg_codes::INVALID_UUID,
                "uuid",
            ),
            (
                NamespaceRequest {
                    block_size: Some(520),
                    ..ram(1 << 20)
                },
                cfg_codes::INVALID_BLOCK_SIZE,
                "block_size",
            ),
            (ram(1000), cfg_codes::INVALID_SIZE, "size"),
            (ram(u64::MAX), cfg_codes::INVALID_SIZE, "size"),
            (
                NamespaceRequest {
                    nsid: Some(0),
                    ..ram(1 << 20)
                },
                cfg_codes::INVALID_NSID,
                "nsid",
            ),
            (
                NamespaceRequest {
                    ana_group: Some(0),
                    ..ram(1 << 20)
                },
                cfg_codes::INVALID_ANA_GROUP,
                "ana_group",
            ),
        ];
        for (req, code, field) in cases {
            let e = c.add_namespace(NQN, &req).unwrap_err();
            assert_eq!(e.code, code, "{req:?}: {e}");
            assert_eq!(
                e.path,
                format!("subsystems[0].namespaces[1].{field}"),
                "{req:?}"
            );
            assert!(e.message.len() > 10, "{e}");
            let nsid = req.nsid.unwrap_or(2);
            let f = Config::from_toml_str(&as_file(&req, nsid)).unwrap_err();
            assert_eq!(
                (f.code, f.path.as_str()),
                (code, e.path.as_str()),
                "{req:?}"
            );
        }
        assert_eq!(c.running(), before);
        assert_eq!(c.target.subsystems()[0].namespaces.len(), 1);
    }
}

/// Issue 32 (M1, M5): what the management token may touch.
#[cfg(test)]
mod allowlist_tests {
    use super::*;

    const NQN: &str = "nqn.2026-11.io.ebof:t";

    /// A box with `data` as its only data directory and a pool in `pool`.
    fn control(data: &Path, pool: &Path, config_file: Option<PathBuf>) -> Control {
        let text = format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n\
             [management]\ndata_dirs = [{:?}]\n\
             [[pools]]\nname = \"p\"\ndirectory = {:?}\n\
             [[subsystems]]\nnqn = \"{NQN}\"\n\
             [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n",
            data.display().to_string(),
            pool.display().to_string(),
        );
        let cfg = Config::from_toml_str(&text).unwrap();
        crate::pools::ensure_directories(&cfg).unwrap();
        let target = Arc::new(build::build_target(&cfg).unwrap());
        Control::new(target, cfg, config_file)
    }

    fn file(path: &Path) -> NamespaceRequest {
        NamespaceRequest {
            backend: "file".into(),
            path: Some(path.display().to_string()),
            size: Some(1 << 20),
            ..Default::default()
        }
    }

    #[test]
    fn namespaces_only_inside_pools_and_data_dirs() {
        let t = tempfile::tempdir().unwrap();
        let (data, pool) = (t.path().join("data"), t.path().join("pool"));
        std::fs::create_dir_all(&data).unwrap();
        let c = control(&data, &pool, None);
        let before = c.running();
        let outside = t.path().join("outside.img");
        let cases = [
            (file(&outside), codes::PATH_NOT_ALLOWED),
            (file(&data.join("../outside.img")), codes::PATH_NOT_ALLOWED),
            (
                file(Path::new("/root/.ssh/authorized_keys")),
                codes::PATH_NOT_ALLOWED,
            ),
            (
                NamespaceRequest {
                    backend: "block".into(),
                    path: Some("/etc/hostname".into()),
                    ..Default::default()
                },
                codes::DEVICE_NOT_ALLOWED,
            ),
            (
                NamespaceRequest {
                    backend: "block".into(),
                    path: Some("/dev/null".into()),
                    ..Default::default()
                },
                codes::DEVICE_NOT_ALLOWED,
            ),
        ];
        for (req, code) in cases {
            let e = c.add_namespace(NQN, &req).unwrap_err();
            assert_eq!(
                (e.code.as_str(), e.path.as_str()),
                (code, "subsystems[0].namespaces[1].path"),
                "{req:?}: {e}"
            );
        }
        assert!(!outside.exists(), "nothing made outside");
        assert_eq!(c.running(), before);
        // Inside the data directory and the pool's: fine; directories made for the file are
        // owner-only, as the file is (M2), whatever the umask.
        crate::paths::tests::umask_022();
        c.add_namespace(NQN, &file(&data.join("a.img"))).unwrap();
        c.add_namespace(NQN, &file(&pool.join("b.img"))).unwrap();
        c.add_namespace(NQN, &file(&data.join("new/dir/c.img")))
            .unwrap();
        use std::os::unix::fs::MetadataExt;
        for p in [data.join("new"), data.join("new/dir")] {
            assert_eq!(
                std::fs::metadata(&p).unwrap().mode() & 0o777,
                0o700,
                "{p:?}"
            );
        }
        for p in [data.join("a.img"), data.join("new/dir/c.img")] {
            assert_eq!(
                std::fs::metadata(&p).unwrap().mode() & 0o777,
                0o600,
                "{p:?}"
            );
        }
    }

    #[test]
    fn save_only_over_the_configuration_or_in_data_dirs() {
        let t = tempfile::tempdir().unwrap();
        let (data, pool) = (t.path().join("data"), t.path().join("pool"));
        std::fs::create_dir_all(&data).unwrap();
        let conf = t.path().join("ebof.toml");
        let c = control(&data, &pool, Some(conf.clone()));
        let save = |p: &Path| {
            c.save(&SaveRequest {
                path: Some(p.display().to_string()),
            })
        };
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let e = save(&victim).unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.path.as_str()),
            (codes::SAVE_PATH_NOT_ALLOWED, "path")
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        save(&conf).unwrap();
        save(&data.join("copy.toml")).unwrap();
        c.save(&SaveRequest { path: None }).unwrap();
    }

    /// M5: `/pool/sub/../x.img` is `/pool/x.img`: the pool namespace that wants that file
    /// must not clear it as an orphan.
    #[test]
    fn one_file_under_two_names_is_a_duplicate_path() {
        let t = tempfile::tempdir().unwrap();
        let (data, pool) = (t.path().join("data"), t.path().join("pool"));
        std::fs::create_dir_all(&data).unwrap();
        let c = control(&data, &pool, None);
        std::fs::create_dir_all(pool.join("sub")).unwrap();
        let name = ebof_config::pool_file_name(NQN, 7);
        let first = pool.join("sub").join("..").join(&name);
        c.add_namespace(NQN, &file(&first)).unwrap();
        std::fs::write(pool.join(&name), vec![0xAB; 4096]).unwrap();
        let e = c
            .add_namespace(
                NQN,
                &NamespaceRequest {
                    nsid: Some(7),
                    pool: Some("p".into()),
                    size: Some(1 << 20),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert_eq!(e.code, cfg_codes::DUPLICATE_PATH, "{e}");
        assert_eq!(
            std::fs::read(&first).unwrap()[..4],
            [0xAB; 4],
            "its data is intact"
        );
        // Two names of one file that does not exist yet.
        let e = c
            .add_namespace(NQN, &file(&data.join("sub/../d.img")))
            .unwrap_err();
        assert_eq!(
            e.code,
            codes::PATH_NOT_ALLOWED,
            "data/sub does not exist: {e}"
        );
        std::fs::create_dir_all(data.join("sub")).unwrap();
        c.add_namespace(NQN, &file(&data.join("d.img"))).unwrap();
        let e = c
            .add_namespace(NQN, &file(&data.join("sub/../d.img")))
            .unwrap_err();
        assert_eq!(e.code, cfg_codes::DUPLICATE_PATH, "{e}");
    }

    /// M2: a saved configuration is owner-only whatever the umask, and the temporary file
    /// is not at a name anyone can guess.
    #[test]
    fn a_saved_configuration_is_owner_only() {
        use std::os::unix::fs::MetadataExt;
        crate::paths::tests::umask_022();
        let t = tempfile::tempdir().unwrap();
        let (data, pool) = (t.path().join("data"), t.path().join("pool"));
        std::fs::create_dir_all(&data).unwrap();
        let c = control(&data, &pool, None);
        // The old, predictable temporary name, with a link planted at it.
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let planted = data.join(format!(".new.toml.tmp-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let new = data.join("new.toml");
        c.save(&SaveRequest {
            path: Some(new.display().to_string()),
        })
        .unwrap();
        assert_eq!(std::fs::metadata(&new).unwrap().mode() & 0o7777, 0o600);
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(Config::load(&new).is_ok());
        // An existing file keeps its mode.
        let open = data.join("open.toml");
        std::fs::write(&open, b"").unwrap();
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o640))
            .unwrap();
        write_config(&c.running(), &open).unwrap();
        assert_eq!(std::fs::metadata(&open).unwrap().mode() & 0o7777, 0o640);
        let left: Vec<_> = std::fs::read_dir(&data)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-") && !planted.ends_with(n))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
