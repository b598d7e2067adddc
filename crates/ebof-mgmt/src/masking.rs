//! Per-host namespace masking through the management API: which hosts see a namespace
//! (`[[subsystems.namespaces]] hosts` of the configuration), changed while hosts are connected.
//!
//! A namespace without a host list is visible to every host its subsystem admits; with one,
//! only to the hosts listed. [`Control::set_namespace_hosts`] sets the list (an empty list hides
//! the namespace from every host), [`Control::attach_namespace_host`] and
//! [`Control::detach_namespace_host`] add or remove one host, [`Control::unmask_namespace`]
//! drops the list. Each change is checked as the configuration file is, recorded in the
//! running configuration (autosaved when configured), and applied to the target as one
//! subsystem snapshot swap: connected hosts whose view changed get a Namespace Attribute
//! Changed event listing exactly the namespaces that appeared or disappeared for them
//! ([`nvmf_target::Subsystem::view`]). The namespace itself is untouched (same storage,
//! counters, reservations).

use crate::api::{ApiError, NamespaceChanged, codes};
use crate::control::{
    Control, check, namespace_index, namespace_view, parse_nsid, subsystem_index,
    unknown_namespace, update_error,
};
use ebof_config::codes as cfg;

impl Control {
    /// `PUT /v1/subsystems/{nqn}/namespaces/{nsid}/hosts`: only `hosts` see namespace `nsid`
    /// of `nqn` (none, for an empty list). Errors name `hosts[i]` for a bad or repeated NQN.
    pub fn set_namespace_hosts(
        &self,
        nqn: &str,
        nsid: &str,
        hosts: &[String],
    ) -> Result<NamespaceChanged, ApiError> {
        ebof_config::check_ns_hosts("hosts", hosts).map_err(|e| ApiError::from_config(&e, ""))?;
        self.change_ns_hosts(nqn, nsid, |_, _| Ok(Some(hosts.to_vec())))
    }

    /// `DELETE /v1/subsystems/{nqn}/namespaces/{nsid}/hosts`: namespace `nsid` of `nqn` is
    /// visible to every host the subsystem admits again.
    pub fn unmask_namespace(&self, nqn: &str, nsid: &str) -> Result<NamespaceChanged, ApiError> {
        self.change_ns_hosts(nqn, nsid, |_, _| Ok(None))
    }

    /// `POST /v1/subsystems/{nqn}/namespaces/{nsid}/hosts`: host `hostnqn` sees namespace
    /// `nsid` too. The namespace must have a host list (one visible to every host already is
    /// visible to this one: `namespace-not-masked`); a host already listed is
    /// `duplicate-host`.
    pub fn attach_namespace_host(
        &self,
        nqn: &str,
        nsid: &str,
        hostnqn: &str,
    ) -> Result<NamespaceChanged, ApiError> {
        ebof_config::check_nqn(hostnqn).map_err(|e| ApiError::from_config(&e, "hostnqn"))?;
        self.change_ns_hosts(nqn, nsid, |cur, nsid| {
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

    /// `DELETE /v1/subsystems/{nqn}/namespaces/{nsid}/hosts/{hostnqn}`: host `hostnqn` no
    /// longer sees namespace `nsid` (I/O it sends there fails with Invalid Namespace). A host
    /// not in the list is `unknown-host`; a namespace visible to every host is
    /// `namespace-not-masked` (restrict it with a host list instead).
    pub fn detach_namespace_host(
        &self,
        nqn: &str,
        nsid: &str,
        hostnqn: &str,
    ) -> Result<NamespaceChanged, ApiError> {
        self.change_ns_hosts(nqn, nsid, |cur, nsid| {
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

    /// Replace the host list of namespace `nsid` of `nqn` by `f(current list, nsid)`, in the
    /// running configuration (validated as a file is) and then in the target.
    fn change_ns_hosts(
        &self,
        nqn: &str,
        nsid: &str,
        f: impl FnOnce(Option<&[String]>, u32) -> Result<Option<Vec<String>>, ApiError>,
    ) -> Result<NamespaceChanged, ApiError> {
        let nsid = parse_nsid(nsid)?;
        self.change(|cfg| {
            let si = subsystem_index(cfg, nqn)?;
            let ni = namespace_index(cfg, si, nsid)?;
            let hosts = f(cfg.subsystems[si].namespaces[ni].hosts.as_deref(), nsid)?;
            cfg.subsystems[si].namespaces[ni].hosts = hosts.clone();
            check(cfg)?;
            let mut live = None;
            self.target
                .update_subsystem(nqn, |s| {
                    let Some(n) = s.namespace(nsid) else {
                        return Err(unknown_namespace(nqn, nsid));
                    };
                    live = Some(n.clone());
                    let mut s = s.clone();
                    match &hosts {
                        Some(h) => s.ns_hosts.insert(nsid, h.clone()),
                        None => s.ns_hosts.remove(&nsid),
                    };
                    Ok(s)
                })
                .map_err(|e| update_error(nqn, e))?;
            let live = live.ok_or_else(|| unknown_namespace(nqn, nsid))?;
            tracing::info!(
                subsystem = nqn,
                nsid,
                hosts = ?hosts,
                "namespace host list changed by the management API"
            );
            Ok(NamespaceChanged {
                subsystem: nqn.to_string(),
                namespace: namespace_view(&live, &cfg.subsystems[si].namespaces[ni]),
            })
        })
    }
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
