//! Per-namespace QoS through the management API (ADR 0020): limits on IOPS and bandwidth,
//! total and per direction (`[[subsystems.namespaces]] qos = { … }` of the configuration),
//! changed while hosts do I/O.
//!
//! `PUT …/qos` replaces the namespace's limits as a whole (a key not given is unlimited),
//! `DELETE …/qos` removes them ([`crate::control::Control::set_namespace_qos`],
//! [`crate::control::Control::clear_namespace_qos`]). Each change is checked as the
//! configuration file is (code `invalid-qos`, the key as field), recorded in the running
//! configuration (autosaved when configured) and applied to the live namespace at once: its
//! queues pick the new limits up at their next command, and commands already waiting under the
//! old limits are released within `nvmf_target::qos::RECHECK`. The namespace is otherwise
//! untouched (no event to hosts: QoS is not visible in NVMe).

use crate::api::{ApiError, QosRequest, QosView};
use crate::apply::Apply;
use ebof_config::Config;
use nvmf_target::qos::QosLimits;
use nvmf_target::{Namespace, Target};

/// The data path's limits for the configuration's.
pub fn limits(q: &ebof_config::Qos) -> QosLimits {
    QosLimits {
        iops: q.iops,
        mbps: q.mbps,
        read_iops: q.read_iops,
        write_iops: q.write_iops,
        read_mbps: q.read_mbps,
        write_mbps: q.write_mbps,
    }
}

/// What the API shows of `n`'s QoS: `None` when it has no limit and nothing waited.
pub(crate) fn qos_view(n: &Namespace) -> Option<QosView> {
    let l = n.qos.limits();
    let (waited, wait) = n.qos.waits();
    if l.is_unlimited() && waited == 0 {
        return None;
    }
    Some(QosView {
        limits: ebof_config::Qos {
            iops: l.iops,
            mbps: l.mbps,
            read_iops: l.read_iops,
            write_iops: l.write_iops,
            read_mbps: l.read_mbps,
            write_mbps: l.write_mbps,
        },
        waited,
        wait_us: u64::try_from(wait.as_micros()).unwrap_or(u64::MAX),
    })
}

/// The QoS applier ([`crate::apply`]): every configured namespace has its configured limits
/// (its queues pick them up at their next command). Namespaces are opened with their limits
/// ([`crate::build::open_namespace`]), so this finds nothing to do at start.
#[derive(Debug)]
pub struct Qos;

impl Apply for Qos {
    fn apply(&self, _old: &Config, new: &Config, live: &Target) -> Result<(), ApiError> {
        for s in &new.subsystems {
            let Some(ls) = live.subsystem(&s.nqn) else {
                continue;
            };
            for n in &s.namespaces {
                if let Some(ln) = ls.namespace(n.nsid)
                    && ln.qos.limits() != limits(&n.qos)
                {
                    ln.qos.set(limits(&n.qos));
                }
            }
        }
        Ok(())
    }
}

/// The limits of a `PUT …/qos` request, checked as the configuration file checks them (code
/// `invalid-qos`, the key as field).
pub(crate) fn requested(req: &QosRequest) -> Result<ebof_config::Qos, ApiError> {
    req.check("").map_err(|e| ApiError::from_config(&e, ""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::codes;
    use crate::build;
    use crate::control::Control;
    use ebof_config::Config;
    use std::sync::Arc;

    const NQN: &str = "nqn.2026-11.io.ebof:t";
    const TOML: &str = "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n\
                        [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:t\"\n\
                        [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n\
                        qos = { write_mbps = 7 }\n";

    fn control(file: Option<std::path::PathBuf>) -> Control {
        let mut cfg = Config::from_toml_str(TOML).unwrap();
        cfg.management.autosave = file.is_some();
        let target = Arc::new(build::build_target(&cfg).unwrap());
        Control::new(target, cfg, file)
    }

    fn live(c: &Control) -> QosLimits {
        c.target
            .subsystem(NQN)
            .unwrap()
            .namespace(1)
            .unwrap()
            .qos
            .limits()
    }

    #[test]
    fn limits_from_the_file_then_set_live_saved_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ebof.toml");
        let c = control(Some(file.clone()));
        assert_eq!(live(&c).write_mbps, 7);
        let req = QosRequest {
            iops: Some(1000),
            read_mbps: Some(50),
            ..Default::default()
        };
        let r = c.set_namespace_qos(NQN, "1", &req).unwrap();
        let v = r.namespace.qos.unwrap();
        // The whole set is replaced: write_mbps is gone.
        let l = v.limits;
        assert_eq!((l.iops, l.read_mbps, l.write_mbps), (1000, 50, 0));
        assert_eq!(
            live(&c),
            QosLimits {
                iops: 1000,
                read_mbps: 50,
                ..Default::default()
            }
        );
        let saved = std::fs::read_to_string(&file).unwrap();
        assert!(
            saved.contains("qos = { iops = 1000, read_mbps = 50 }"),
            "{saved}"
        );
        let r = c.clear_namespace_qos(NQN, "1").unwrap();
        assert_eq!(r.namespace.qos, None);
        assert!(live(&c).is_unlimited());
        assert!(c.running().subsystems[0].namespaces[0].qos.is_unlimited());
        assert!(!std::fs::read_to_string(&file).unwrap().contains("qos"));
    }

    #[test]
    fn bad_requests_name_their_field_and_change_nothing() {
        let c = control(None);
        let before = c.running();
        let bad = QosRequest {
            mbps: Some(-1),
            ..Default::default()
        };
        let ok = QosRequest {
            iops: Some(5),
            ..Default::default()
        };
        let cases = [
            (
                c.set_namespace_qos(NQN, "1", &bad),
                ebof_config::codes::INVALID_QOS,
                "mbps",
            ),
            (
                c.set_namespace_qos(NQN, "2", &ok),
                codes::UNKNOWN_NAMESPACE,
                "nsid",
            ),
            (
                c.set_namespace_qos(NQN, "0", &ok),
                ebof_config::codes::INVALID_NSID,
                "nsid",
            ),
            (
                c.clear_namespace_qos("nqn.2026-11.io.ebof:none", "1"),
                codes::UNKNOWN_SUBSYSTEM,
                "nqn",
            ),
        ];
        for (r, code, path) in cases {
            let e = r.unwrap_err();
            assert_eq!((e.code.as_str(), e.path.as_str()), (code, path), "{e}");
        }
        assert_eq!(c.running(), before);
        assert_eq!(live(&c).write_mbps, 7);
    }

    #[test]
    fn a_namespace_added_with_limits_is_limited_from_the_start() {
        let c = control(None);
        let ram = |qos: QosRequest| crate::api::NamespaceRequest {
            backend: "ram".into(),
            size: Some(1 << 20),
            qos: Some(qos),
            ..Default::default()
        };
        let r = c
            .add_namespace(
                NQN,
                &ram(QosRequest {
                    write_iops: Some(300),
                    ..Default::default()
                }),
            )
            .unwrap();
        assert_eq!(r.namespace.qos.map(|q| q.limits.write_iops), Some(300));
        let ns = c
            .target
            .subsystem(NQN)
            .unwrap()
            .namespace(2)
            .cloned()
            .unwrap();
        assert!(ns.qos.on());
        assert_eq!(ns.qos.limits().write_iops, 300);
        assert_eq!(c.running().subsystems[0].namespaces[1].qos.write_iops, 300);
        // A bad limit names its key under the namespace, and nothing is added.
        let before = c.running();
        let e = c
            .add_namespace(
                NQN,
                &ram(QosRequest {
                    iops: Some(-3),
                    ..Default::default()
                }),
            )
            .unwrap_err();
        assert_eq!(e.code, ebof_config::codes::INVALID_QOS, "{e}");
        assert!(e.path.ends_with("qos.iops"), "{e}");
        assert_eq!(c.running(), before);
        assert!(c.target.subsystem(NQN).unwrap().namespace(3).is_none());
    }
}
