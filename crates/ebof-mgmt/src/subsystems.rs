//! Subsystems and the hosts they admit through the management API: [`crate::ops`] changes
//! the target (the authority on who may connect), and the running configuration follows what
//! was applied.

use crate::api::{ApiError, SubsystemRemoved, SubsystemRequest, SubsystemView};
use crate::lookup::{check, subsystem_index};
use crate::ops;
use crate::running::Running;
use ebof_config::Config;

/// Add a subsystem ([`ops::add_subsystem`]) and record it in the running configuration.
pub(crate) fn add(r: &Running, req: &SubsystemRequest) -> Result<SubsystemView, ApiError> {
    r.change(|cfg| {
        let v = ops::add_subsystem(r.target(), req, &cfg.target.serial_prefix)?;
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
pub(crate) fn remove(r: &Running, nqn: &str) -> Result<SubsystemRemoved, ApiError> {
    let mut owned = Vec::new();
    let removed = r.change(|cfg| {
        let si = subsystem_index(cfg, nqn)?;
        let gone = cfg.subsystems.remove(si);
        check(cfg)?;
        let r = ops::remove_subsystem(r.target(), nqn)?;
        for n in &gone.namespaces {
            owned.extend(crate::build::owned_files(
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
pub(crate) fn allow_host(r: &Running, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ApiError> {
    r.change(|cfg| {
        let v = ops::allow_host(r.target(), nqn, hostnqn)?;
        sync_hosts(cfg, &v);
        Ok(v)
    })
}

/// Refuse new Connects of `hostnqn` on `nqn` ([`ops::deny_host`]; its controllers stay);
/// recorded in the running configuration.
pub(crate) fn deny_host(r: &Running, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ApiError> {
    r.change(|cfg| {
        let v = ops::deny_host(r.target(), nqn, hostnqn)?;
        sync_hosts(cfg, &v);
        Ok(v)
    })
}

/// Open subsystem `nqn` to any host, or restrict it to its host list
/// ([`ops::set_allow_any_host`]); recorded in the running configuration.
pub(crate) fn set_allow_any_host(
    r: &Running,
    nqn: &str,
    on: bool,
) -> Result<SubsystemView, ApiError> {
    r.change(|cfg| {
        let v = ops::set_allow_any_host(r.target(), nqn, on)?;
        sync_hosts(cfg, &v);
        Ok(v)
    })
}

/// Host changes are checked by `ops` (the target is the authority on who may connect);
/// the configuration follows what was applied.
fn sync_hosts(cfg: &mut Config, v: &SubsystemView) {
    if let Some(s) = cfg.subsystems.iter_mut().find(|s| s.nqn == v.nqn) {
        s.hosts = v.hosts.clone();
        s.allow_any_host = v.allow_any_host;
    }
}
