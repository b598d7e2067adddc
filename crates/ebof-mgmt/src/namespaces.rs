//! Namespaces through the management API: add (open or create the storage, in a pool or at a
//! path the configuration allows), remove, resize. A namespace is opened whole from its
//! configuration by [`crate::build::open_namespace`], the function start-up uses too, so one
//! added through the API is the one the file would give (same checks, codes and field paths).

use crate::api::{
    ApiError, NamespaceChanged, NamespaceRemoved, NamespaceRequest, ResizeRequest, codes,
};
use crate::lookup::{
    check, live_namespace, namespace_index, parse_nsid, subsystem_index, update_error,
};
use crate::running::Running;
use crate::{build, ops};
use ebof_config::{BackendChoice, Config, codes as cfg_codes};
use nvmf_target::{Namespace, Target};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `POST /v1/subsystems/{nqn}/namespaces`: [`add_in`] as a change of the running
/// configuration.
pub(crate) fn add(
    r: &Running,
    nqn: &str,
    req: &NamespaceRequest,
) -> Result<NamespaceChanged, ApiError> {
    let out = r.change(|cfg| add_in(r.target(), cfg, nqn, req, None))?;
    crate::mirror::bind(r.target());
    Ok(out)
}

/// `POST /v1/subsystems/{nqn}/namespaces` on the copy `cfg` of the running configuration
/// (inside [`Running::change`]): open (or create) the storage and attach it; connected hosts
/// are told with a Namespace Attribute Changed event. `prepared`: the pool file the caller made already (a clone into a
/// pool, capacity checked by the caller under the same lock), used as it is.
pub(crate) fn add_in(
    target: &Target,
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
        if fields.mirror.is_some() && fields.ana_group.is_none() {
            // A mirrored namespace drives an ANA group of its own: the lowest unused one.
            fields.ana_group = crate::mirror::free_ana_group(cfg).map(i64::from);
        }
        // In a pool the box names the file, and the pool must hold the size (checked
        // before the namespace is in the configuration: it is not counted yet).
        let mut pool_file: Option<(PathBuf, crate::api::PoolView)> = None;
        if let Some(name) = &req.pool {
            let pool = requested_pool(cfg, req, name, &field)?;
            let path = match prepared {
                Some(p) => p.to_path_buf(),
                None => pool.file_for(nqn, nsid),
            };
            fields.path = Some(path.display().to_string());
            fields.backend.get_or_insert_with(|| "file".into());
            let view = crate::pools::pool_view(cfg, target, &pool);
            pool_file = Some((path, view));
        }
        let ns = ebof_config::Namespace::from_fields(fields, &field, ni, nqn)
            .map_err(|e| ApiError::from_config(&e, ""))?;
        cfg.subsystems[si].namespaces.push(ns.clone());
        // A mirrored namespace's subsystem admits this box's replication link (the
        // configuration demands it; an API client such as the CSI driver need not know the
        // box's `[mirror] link_hostnqn`).
        let link = cfg.mirror.link_hostnqn.clone();
        let sub = &mut cfg.subsystems[si];
        let add_link = (ns.mirror.is_some() && !sub.allow_any_host && !sub.hosts.contains(&link))
            .then_some(link);
        if let Some(l) = &add_link {
            sub.hosts.push(l.clone());
        }
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
        let opened = build::open_namespace(nqn, &ns, cfg, &field).map_err(|m| {
            if let Some(p) = &undo_file {
                let _ = std::fs::remove_file(p);
            }
            ApiError::new(codes::BACKEND_FAILED, field, m)
        })?;
        target
            .update_subsystem(nqn, |s| {
                let mut n = s.clone();
                n.namespaces.push(opened.clone());
                if let Some(l) = &add_link
                    && !n.hosts.contains(l)
                {
                    n.hosts.push(l.clone());
                }
                // Masked from the start: no host outside the list ever sees it.
                if let Some(hosts) = &ns.hosts {
                    n.ns_hosts.insert(nsid, hosts.clone());
                }
                Ok::<_, ApiError>(n)
            })
            .map_err(|e| update_error(nqn, e))?;
        // A mirrored namespace's group takes its role's state before any host can see it.
        crate::mirror::apply_now(&opened, target);
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
            namespace: ops::configured_view(&opened, &ns),
        })
    }
}

/// Pool `name` of a request to make a namespace in it, or why not: an unknown pool, a `path`
/// (the box names the file) or no `size`, at `field`.
fn requested_pool(
    cfg: &Config,
    req: &NamespaceRequest,
    name: &str,
    field: &str,
) -> Result<ebof_config::Pool, ApiError> {
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
    Ok(pool)
}

/// `DELETE /v1/subsystems/{nqn}/namespaces/{nsid}`: detach the namespace. Commands in
/// flight on it fail with Invalid Namespace; its storage is flushed and closed when the
/// last of them is done (a file or device is left as it is).
pub(crate) fn remove(r: &Running, nqn: &str, nsid: &str) -> Result<NamespaceRemoved, ApiError> {
    let nsid = parse_nsid(nsid)?;
    let mut owned = Vec::new();
    let removed = r.change(|cfg| {
        let si = subsystem_index(cfg, nqn)?;
        let ni = namespace_index(cfg, si, nsid)?;
        let gone = cfg.subsystems[si].namespaces.remove(ni);
        check(cfg)?;
        owned = crate::build::owned_files(&gone, cfg.target.state_dir.as_deref());
        let mut removed: Option<Arc<Namespace>> = None;
        r.target()
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
pub(crate) fn resize(
    r: &Running,
    nqn: &str,
    nsid: &str,
    req: &ResizeRequest,
) -> Result<NamespaceChanged, ApiError> {
    let nsid = parse_nsid(nsid)?;
    r.change(|cfg| {
        let si = subsystem_index(cfg, nqn)?;
        let ni = namespace_index(cfg, si, nsid)?;
        let live = live_namespace(r.target(), nqn, nsid)?;
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
            let view = crate::pools::pool_view(cfg, r.target(), pool);
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
        r.target().namespace_changed(nqn, nsid);
        tracing::info!(
            subsystem = nqn,
            nsid,
            from = current,
            to = req.size,
            "namespace resized by the management API"
        );
        Ok(NamespaceChanged {
            subsystem: nqn.to_string(),
            namespace: ops::configured_view(&live, &ns),
        })
    })
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
        qos: req.qos.clone(),
        pool: req.pool.clone(),
        mirror: req.mirror.clone(),
        encryption: req.encryption.clone(),
    }
}
