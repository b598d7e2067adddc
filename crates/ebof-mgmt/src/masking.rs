//! Per-host namespace masking through the management API: which hosts see a namespace
//! (`[[subsystems.namespaces]] hosts` of the configuration), changed while hosts are connected.
//!
//! A namespace without a host list is visible to every host its subsystem admits; with one,
//! only to the hosts listed. `set` sets the list (an empty list hides the namespace from
//! every host), `attach` and `detach` add or remove one host, `unmask` drops the list
//! (`Control::set_namespace_hosts` and its siblings are their requests). Each change is checked as the configuration file is, recorded in the
//! running configuration (autosaved when configured), and applied to the target by [`Masking`]
//! as one subsystem snapshot swap: connected hosts whose view changed get a Namespace Attribute
//! Changed event listing exactly the namespaces that appeared or disappeared for them
//! ([`nvmf_target::Subsystem::view`]). The namespace itself is untouched (same storage,
//! counters, reservations).

use crate::api::{ApiError, NamespaceChanged, codes};
use crate::apply::Apply;
use crate::ops::namespace_changed;
use crate::running::Running;
use ebof_config::{Config, codes as cfg};
use nvmf_target::Target;
use std::collections::BTreeMap;

/// The per-host masking of a configured subsystem: the NSIDs that have a `hosts` list.
pub fn ns_hosts(s: &ebof_config::Subsystem) -> BTreeMap<u32, Vec<String>> {
    s.namespaces
        .iter()
        .filter_map(|n| n.hosts.clone().map(|h| (n.nsid, h)))
        .collect()
}

/// The masking applier ([`crate::apply`]): every configured namespace has its configured host
/// list, set in one subsystem snapshot swap per subsystem (connected hosts whose view changed
/// get a Namespace Attribute Changed event). Namespaces are opened masked
/// ([`crate::build::build_target`], `crate::namespaces::add_in`), so this finds nothing to
/// do at start or after an add.
#[derive(Debug)]
pub struct Masking;

impl Apply for Masking {
    fn apply(&self, _old: &Config, new: &Config, live: &Target) -> Result<(), ApiError> {
        for s in &new.subsystems {
            let Some(ls) = live.subsystem(&s.nqn) else {
                continue;
            };
            let differs =
                |n: &&ebof_config::Namespace| ls.ns_host_list(n.nsid) != n.hosts.as_deref();
            if !s.namespaces.iter().any(|n| differs(&n)) {
                continue;
            }
            live.update_subsystem(&s.nqn, |cur| {
                let mut next = cur.clone();
                for n in &s.namespaces {
                    match &n.hosts {
                        Some(h) => next.ns_hosts.insert(n.nsid, h.clone()),
                        None => next.ns_hosts.remove(&n.nsid),
                    };
                }
                Ok::<_, ApiError>(next)
            })
            .map_err(|e| crate::lookup::update_error(&s.nqn, e))?;
        }
        Ok(())
    }
}

/// `PUT /v1/subsystems/{nqn}/namespaces/{nsid}/hosts`: only `hosts` see namespace `nsid` of
/// `nqn` (none, for an empty list). Errors name `hosts[i]` for a bad or repeated NQN.
pub(crate) fn set(
    r: &Running,
    nqn: &str,
    nsid: &str,
    hosts: &[String],
) -> Result<NamespaceChanged, ApiError> {
    ebof_config::check_ns_hosts("hosts", hosts).map_err(|e| ApiError::from_config(&e, ""))?;
    change_hosts(r, nqn, nsid, |_, _| Ok(Some(hosts.to_vec())))
}

/// `DELETE /v1/subsystems/{nqn}/namespaces/{nsid}/hosts`: namespace `nsid` of `nqn` is
/// visible to every host the subsystem admits again.
pub(crate) fn unmask(r: &Running, nqn: &str, nsid: &str) -> Result<NamespaceChanged, ApiError> {
    change_hosts(r, nqn, nsid, |_, _| Ok(None))
}

/// `POST /v1/subsystems/{nqn}/namespaces/{nsid}/hosts`: host `hostnqn` sees namespace `nsid`
/// too (see [`crate::control::Control::attach_namespace_host`]).
pub(crate) fn attach(
    r: &Running,
    nqn: &str,
    nsid: &str,
    hostnqn: &str,
) -> Result<NamespaceChanged, ApiError> {
    ebof_config::check_nqn(hostnqn).map_err(|e| ApiError::from_config(&e, "hostnqn"))?;
    change_hosts(r, nqn, nsid, |cur, nsid| {
        let Some(list) = cur else {
            return Err(not_masked(nqn, nsid, hostnqn, "attach"));
        };
        if list.iter().any(|h| h == hostnqn) {
            return Err(ApiError::new(
                cfg::DUPLICATE_HOST,
                "hostnqn",
                format!("{hostnqn} is already attached to namespace {nsid} of {nqn}"),
            ));
        }
        let mut list = list.to_vec();
        list.push(hostnqn.to_string());
        Ok(Some(list))
    })
}

/// `DELETE /v1/subsystems/{nqn}/namespaces/{nsid}/hosts/{hostnqn}`: host `hostnqn` no longer
/// sees namespace `nsid` (see [`crate::control::Control::detach_namespace_host`]).
pub(crate) fn detach(
    r: &Running,
    nqn: &str,
    nsid: &str,
    hostnqn: &str,
) -> Result<NamespaceChanged, ApiError> {
    change_hosts(r, nqn, nsid, |cur, nsid| {
        let Some(list) = cur else {
            return Err(not_masked(nqn, nsid, hostnqn, "detach"));
        };
        let Some(i) = list.iter().position(|h| h == hostnqn) else {
            return Err(ApiError::new(
                codes::UNKNOWN_HOST,
                "hostnqn",
                format!(
                    "{hostnqn:?} is not attached to namespace {nsid} of {nqn} (attached: {})",
                    if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(", ")
                    }
                ),
            ));
        };
        let mut list = list.to_vec();
        list.remove(i);
        Ok(Some(list))
    })
}

/// Replace the host list of namespace `nsid` of `nqn` by `f(current list, nsid)` in the running
/// configuration (validated as a file is); [`Masking`] applies it.
fn change_hosts(
    r: &Running,
    nqn: &str,
    nsid: &str,
    f: impl FnOnce(Option<&[String]>, u32) -> Result<Option<Vec<String>>, ApiError>,
) -> Result<NamespaceChanged, ApiError> {
    let (hosts, live, c) = r.change_namespace(nqn, nsid, |ns| {
        ns.hosts = f(ns.hosts.as_deref(), ns.nsid)?;
        Ok(ns.hosts.clone())
    })?;
    tracing::info!(
        subsystem = nqn,
        nsid = c.nsid,
        hosts = ?hosts,
        "namespace host list changed by the management API"
    );
    Ok(namespace_changed(nqn, &live, &c))
}

fn not_masked(nqn: &str, nsid: u32, hostnqn: &str, what: &str) -> ApiError {
    ApiError::new(
        codes::NAMESPACE_NOT_MASKED,
        "nsid",
        format!(
            "namespace {nsid} of {nqn} is visible to every host, so there is no host list to \
             {what} {hostnqn} in; restrict it to a host list first \
             (`ebof ctl ns mask {nqn} {nsid} HOSTNQN…`)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NamespaceRequest, routes};
    use crate::client::{Client, ClientError};
    use crate::control::Control;
    use crate::server::{bind_api_tcp, start};
    use crate::{Token, build};
    use ebof_config::Config;
    use std::sync::Arc;

    const NQN: &str = "nqn.2026-11.io.ebof:t";
    const A: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1";
    const B: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000b2";
    const TOML: &str = "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n\
                        [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:t\"\n\
                        [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n";

    fn control(file: Option<std::path::PathBuf>) -> Control {
        let mut cfg = Config::from_toml_str(TOML).unwrap();
        cfg.management.autosave = file.is_some();
        let target = Arc::new(build::build_target(&cfg).unwrap());
        Control::new(target, cfg, file)
    }

    /// The live host list of namespace `nsid` (`None`: visible to every host).
    fn live(c: &Control, nsid: u32) -> Option<Vec<String>> {
        c.target
            .subsystem(NQN)
            .unwrap()
            .ns_host_list(nsid)
            .map(<[String]>::to_vec)
    }

    fn hosts(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn host_lists_change_live_and_in_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ebof.toml");
        let c = control(Some(file.clone()));
        let r = c.set_namespace_hosts(NQN, "1", &hosts(&[A])).unwrap();
        assert_eq!(r.namespace.hosts, Some(hosts(&[A])));
        assert_eq!(live(&c, 1), Some(hosts(&[A])));
        let r = c.attach_namespace_host(NQN, "1", B).unwrap();
        assert_eq!(r.namespace.hosts, Some(hosts(&[A, B])));
        let r = c.detach_namespace_host(NQN, "1", A).unwrap();
        assert_eq!(r.namespace.hosts, Some(hosts(&[B])));
        assert_eq!(live(&c, 1), Some(hosts(&[B])));
        // The state shows each namespace's host list.
        assert_eq!(
            c.state().subsystems[0].namespaces[0].hosts,
            Some(hosts(&[B]))
        );
        // Autosaved, and the saved file restores the same.
        assert_eq!(
            c.running().subsystems[0].namespaces[0].hosts,
            Some(hosts(&[B]))
        );
        let saved = Config::load(&file).unwrap();
        assert_eq!(saved, c.running());
        let again = build::build_target(&saved).unwrap();
        assert_eq!(
            again.subsystem(NQN).unwrap().ns_host_list(1),
            Some(&hosts(&[B])[..])
        );
        // Detaching the last host leaves an empty list (no host sees it), not "every host".
        c.detach_namespace_host(NQN, "1", B).unwrap();
        assert_eq!(live(&c, 1), Some(vec![]));
        // Visible to every host again: the list is gone everywhere.
        let r = c.unmask_namespace(NQN, "1").unwrap();
        assert_eq!(r.namespace.hosts, None);
        assert_eq!(live(&c, 1), None);
        assert_eq!(c.state().subsystems[0].namespaces[0].hosts, None);
        assert_eq!(
            Config::load(&file).unwrap().subsystems[0].namespaces[0].hosts,
            None
        );
        // The namespace is the same object throughout (same storage, counters, reservations).
        assert_eq!(c.target.subsystem(NQN).unwrap().namespaces.len(), 1);
        assert!(!c.target.subsystem(NQN).unwrap().namespaces[0].is_removed());
    }

    #[test]
    fn bad_requests_name_the_field_and_change_nothing() {
        let c = control(None);
        c.set_namespace_hosts(NQN, "1", &hosts(&[A])).unwrap();
        let before = c.running();
        let cases: Vec<(Result<NamespaceChanged, ApiError>, &str, &str)> = vec![
            (
                c.attach_namespace_host("nqn.2026-11.io.ebof:none", "1", B),
                codes::UNKNOWN_SUBSYSTEM,
                "nqn",
            ),
            (
                c.attach_namespace_host(NQN, "7", B),
                codes::UNKNOWN_NAMESPACE,
                "nsid",
            ),
            (
                c.attach_namespace_host(NQN, "x", B),
                cfg::INVALID_NSID,
                "nsid",
            ),
            (
                c.attach_namespace_host(NQN, "1", "not-an-nqn"),
                cfg::INVALID_NQN,
                "hostnqn",
            ),
            (
                c.attach_namespace_host(NQN, "1", A),
                cfg::DUPLICATE_HOST,
                "hostnqn",
            ),
            (
                c.detach_namespace_host(NQN, "1", B),
                codes::UNKNOWN_HOST,
                "hostnqn",
            ),
            (
                c.set_namespace_hosts(NQN, "1", &hosts(&[B, "bad"])),
                cfg::INVALID_NQN,
                "hosts[1]",
            ),
            (
                c.set_namespace_hosts(NQN, "1", &hosts(&[B, A, B])),
                cfg::DUPLICATE_HOST,
                "hosts[2]",
            ),
            (
                c.unmask_namespace(NQN, "2"),
                codes::UNKNOWN_NAMESPACE,
                "nsid",
            ),
        ];
        for (r, code, path) in cases {
            let e = r.unwrap_err();
            assert_eq!((e.code.as_str(), e.path.as_str()), (code, path), "{e}");
            assert!(e.message.len() > 10, "{e}");
        }
        assert_eq!(c.running(), before);
        assert_eq!(live(&c, 1), Some(hosts(&[A])));
        // A namespace visible to every host has no list to attach to or detach from.
        c.unmask_namespace(NQN, "1").unwrap();
        for r in [
            c.attach_namespace_host(NQN, "1", B),
            c.detach_namespace_host(NQN, "1", A),
        ] {
            let e = r.unwrap_err();
            assert_eq!(
                (e.code.as_str(), e.path.as_str()),
                (codes::NAMESPACE_NOT_MASKED, "nsid")
            );
            assert!(e.message.contains("ebof ctl ns mask"), "{e}");
            assert_eq!(e.http_status(), 409);
        }
        assert_eq!(live(&c, 1), None);
    }

    #[test]
    fn a_namespace_added_with_hosts_is_masked_from_the_start_and_removal_drops_the_list() {
        let c = control(None);
        let req = NamespaceRequest {
            backend: "ram".into(),
            size: Some(1 << 20),
            hosts: Some(hosts(&[A])),
            ..Default::default()
        };
        let r = c.add_namespace(NQN, &req).unwrap();
        assert_eq!(r.namespace.hosts, Some(hosts(&[A])));
        assert_eq!(live(&c, 2), Some(hosts(&[A])));
        let bad = NamespaceRequest {
            hosts: Some(hosts(&["bad"])),
            ..req.clone()
        };
        let e = c.add_namespace(NQN, &bad).unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.path.as_str()),
            (cfg::INVALID_NQN, "subsystems[0].namespaces[2].hosts[0]")
        );
        c.remove_namespace(NQN, "2").unwrap();
        assert!(c.target.subsystem(NQN).unwrap().ns_hosts.is_empty());
        // The NSID again, without hosts: visible to every host.
        let plain = NamespaceRequest {
            nsid: Some(2),
            hosts: None,
            ..req
        };
        c.add_namespace(NQN, &plain).unwrap();
        assert_eq!(live(&c, 2), None);
    }

    #[test]
    fn the_http_api_and_client_carry_masking() {
        let token = Token::new("t0k3n-0123456789").unwrap();
        let l = bind_api_tcp("127.0.0.1:0".parse().unwrap(), token.clone()).unwrap();
        let srv = start(Arc::new(control(None)), None, None, Some(l)).unwrap();
        let cl = Client::tcp(srv.api_addr.unwrap().to_string(), Some(token));
        let r = cl.set_namespace_hosts(NQN, "1", &hosts(&[A])).unwrap();
        assert_eq!(r.namespace.hosts, Some(hosts(&[A])));
        let r = cl.attach_namespace_host(NQN, "1", B).unwrap();
        assert_eq!(r.namespace.hosts, Some(hosts(&[A, B])));
        let r = cl.detach_namespace_host(NQN, "1", A).unwrap();
        assert_eq!(r.namespace.hosts, Some(hosts(&[B])));
        assert_eq!(
            cl.state().unwrap().subsystems[0].namespaces[0].hosts,
            Some(hosts(&[B]))
        );
        match cl.detach_namespace_host(NQN, "1", A) {
            Err(ClientError::Api(e)) => {
                assert_eq!(
                    (e.code.as_str(), e.path.as_str()),
                    (codes::UNKNOWN_HOST, "hostnqn")
                )
            }
            other => panic!("{other:?}"),
        }
        // A body that is not the request's shape.
        let uri = routes::fill(routes::NAMESPACE_HOSTS, &[NQN, "1"]);
        let (st, body) = cl
            .raw("PUT", &uri, Some(r#"{"hosts": "x"}"#.into()))
            .unwrap();
        let e: ApiError = serde_json::from_slice(&body).unwrap();
        assert_eq!((st, e.code.as_str()), (400, codes::BAD_REQUEST));
        let r = cl.unmask_namespace(NQN, "1").unwrap();
        assert_eq!(r.namespace.hosts, None);
        assert_eq!(cl.state().unwrap().subsystems[0].namespaces[0].hosts, None);
        srv.stop();
    }
}
