//! ANA states from the configuration and the management API onto the target's ANA table
//! ([`nvmf_target::ana`]): applied at start and after every change by [`Ana`], set at run time
//! (`PUT /v1/ana`, `ebof ctl ana set`), shown in `GET /v1/state`.

use crate::api::{AnaChanged, AnaRequest, AnaView, ApiError, codes};
use crate::apply::Apply;
use crate::lookup::check;
use crate::running::Running;
use ebof_config::{AnaState, Config, codes as cfg_codes};
use nvmf_target::Target;
use nvmf_target::ana::AnaError;

/// The ANA applier ([`crate::apply`]): on every NVMe listener of the configuration, the
/// configured states are set and every other group is optimized (a listener added at run time
/// starts optimized: its old states, if it had some, went with its removal from the
/// configuration). Listeners no longer configured keep their table rows, for the connections
/// that came in through them.
#[derive(Debug)]
pub struct Ana;

impl Apply for Ana {
    fn apply(&self, _old: &Config, new: &Config, live: &Target) -> Result<(), ApiError> {
        for l in &new.listeners {
            let addr = l.socket_addr();
            for (i, a) in new.ana.iter().enumerate() {
                if a.listener == *l && live.ana.state(addr, a.group) != a.state {
                    live.set_ana_state(addr, a.group, a.state)
                        .map_err(|e| ana_error(e, &format!("ana[{i}]")))?;
                }
            }
            for (g, _) in live.ana.non_optimized(addr) {
                if !new.ana.iter().any(|a| a.listener == *l && a.group == g)
                    && !crate::mirror::mirrored_group(new, g)
                {
                    let _ = live.set_ana_state(addr, g, AnaState::Optimized);
                }
            }
        }
        Ok(())
    }
}

/// The states that are not optimized on the NVMe listeners, listener by listener, groups
/// ascending.
pub fn views(target: &Target) -> Vec<AnaView> {
    target
        .listeners()
        .iter()
        .flat_map(|l| {
            target
                .ana
                .non_optimized(l.addr)
                .into_iter()
                .map(move |(group, state)| AnaView {
                    listener: l.addr.to_string(),
                    group,
                    state: state.name().to_string(),
                })
        })
        .collect()
}

/// The table's refusal as an API error at `path`.
fn ana_error(e: AnaError, path: &str) -> ApiError {
    match e {
        AnaError::Group(_) => ApiError::new(cfg_codes::INVALID_ANA_GROUP, path, e.to_string()),
        AnaError::TooManyPorts => ApiError::new(codes::INTERNAL, path, e.to_string()),
    }
}

/// `PUT /v1/ana`: the request is checked as a configuration change (the listener must be an
/// NVMe listener of the running configuration, the group 1..=1024, the state one of the five
/// names), then [`Ana`] sets the target's table and the controllers on that listener are told.
pub(crate) fn set(r: &Running, req: &AnaRequest) -> Result<AnaChanged, ApiError> {
    let listener = ebof_config::parse_listener(&req.listener, ebof_config::DEFAULT_PORT)
        .map_err(|e| ApiError::from_config(&e, "listener"))?;
    let group = ebof_config::check_ana_group(i64::from(req.group))
        .map_err(|e| ApiError::from_config(&e, "group"))?;
    let state =
        ebof_config::parse_ana_state(&req.state).map_err(|e| ApiError::from_config(&e, "state"))?;
    let addr = listener.socket_addr();
    let changed = r
        .change(|cfg| {
            if !cfg.listeners.contains(&listener) {
                return Err(ApiError::new(
                    codes::UNKNOWN_LISTENER,
                    "listener",
                    format!(
                        "no NVMe listener on {listener} (see `ebof ctl show`; ANA states are per listener)"
                    ),
                ));
            }
            cfg.set_ana_state(listener, group, state);
            check(cfg)?;
            Ok(r.target().ana.state(addr, group) != state)
        })
        .map_err(|mut e| {
            // The request's own fields, not the configuration's `ana[i]`.
            if e.path.starts_with("ana[") {
                e.path = if e.code == cfg_codes::INVALID_ANA_GROUP {
                    "group"
                } else {
                    "listener"
                }
                .into();
            }
            e
        })?;
    Ok(AnaChanged {
        ana: AnaView {
            listener: addr.to_string(),
            group,
            state: state.name().to_string(),
        },
        changed,
        change_count: r.target().ana.change_count(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Control;
    use std::net::SocketAddr;
    use std::sync::Arc;

    const TOML: &str = r#"
[[listeners]]
address = "127.0.0.1"
port = 4420

[[listeners]]
address = "127.0.0.1"
port = 4421

[[subsystems]]
nqn = "nqn.2026-11.io.ebof:ana"

[[subsystems.namespaces]]
backend = "ram"
size = "1M"

[[subsystems.namespaces]]
backend = "ram"
size = "1M"
ana_group = 2

[[ana]]
listener = "127.0.0.1:4421"
group = 2
state = "non-optimized"
"#;

    fn control() -> Control {
        let cfg = Config::from_toml_str(TOML).unwrap();
        let target = Arc::new(crate::build::build_target(&cfg).unwrap());
        Control::new(target, cfg, None)
    }

    fn addr(p: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], p))
    }

    fn req(l: &str, group: u32, state: &str) -> AnaRequest {
        AnaRequest {
            listener: l.into(),
            group,
            state: state.into(),
        }
    }

    #[test]
    fn configuration_reaches_the_target() {
        let c = control();
        let t = &c.target;
        let ns = t.subsystems()[0].namespaces.clone();
        assert_eq!(ns[0].ana_group(), 1);
        assert_eq!(ns[1].ana_group(), 2);
        assert_eq!(t.ana.state(addr(4421), 2), AnaState::NonOptimized);
        assert_eq!(t.ana.state(addr(4420), 2), AnaState::Optimized);
        assert_eq!(
            c.state().ana,
            vec![AnaView {
                listener: "127.0.0.1:4421".into(),
                group: 2,
                state: "non-optimized".into()
            }]
        );
        assert_eq!(c.state().subsystems[0].namespaces[1].ana_group, 2);
    }

    #[test]
    fn set_changes_target_and_running_configuration() {
        let c = control();
        let r = c
            .set_ana(&req("127.0.0.1:4420", 2, "inaccessible"))
            .unwrap();
        assert!(r.changed);
        assert_eq!(r.change_count, c.target.ana.change_count());
        assert_eq!(c.target.ana.state(addr(4420), 2), AnaState::Inaccessible);
        let again = c
            .set_ana(&req("127.0.0.1:4420", 2, "inaccessible"))
            .unwrap();
        assert!(!again.changed);
        assert_eq!(again.change_count, r.change_count);
        let run = c.running();
        assert_eq!(run.ana.len(), 2);
        assert_eq!(run.ana_state(&run.listeners[0], 2), AnaState::Inaccessible);
        // Back to optimized: the entry leaves the configuration, which still round-trips.
        c.set_ana(&req("127.0.0.1:4420", 2, "optimized")).unwrap();
        let run = c.running();
        assert_eq!(run.ana.len(), 1);
        assert_eq!(Config::from_toml_str(&run.to_toml_string()).unwrap(), run);
    }

    #[test]
    fn bad_requests_change_nothing() {
        let c = control();
        let before = (c.running(), c.target.ana.change_count());
        for (r, code, field) in [
            (
                req("127.0.0.1:4422", 1, "inaccessible"),
                codes::UNKNOWN_LISTENER,
                "listener",
            ),
            (
                req("127.0.0.1:4420", 0, "inaccessible"),
                cfg_codes::INVALID_ANA_GROUP,
                "group",
            ),
            (
                req("127.0.0.1:4420", 1025, "inaccessible"),
                cfg_codes::INVALID_ANA_GROUP,
                "group",
            ),
            (
                req("127.0.0.1:4420", 1, "down"),
                cfg_codes::INVALID_ANA_STATE,
                "state",
            ),
            (
                req("not-an-address", 1, "change"),
                cfg_codes::INVALID_ADDRESS,
                "listener",
            ),
        ] {
            let e = c.set_ana(&r).unwrap_err();
            assert_eq!((e.code.as_str(), e.path.as_str()), (code, field), "{e}");
        }
        assert_eq!((c.running(), c.target.ana.change_count()), before);
    }
}
