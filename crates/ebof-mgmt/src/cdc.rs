//! The Central Discovery Controller through the API: its members' state, and live member
//! add/remove kept in step with the running configuration (`[cdc] members`).

use crate::api::{ApiError, CdcMemberRequest, CdcMemberView, CdcTrusted, CdcView, codes};
use crate::apply::Apply;
use crate::running::Running;
use ebof_config::Config;
use nvmf_target::Target;
use std::sync::Arc;

/// The API view of one member.
fn member_view(m: &ebof_fleet::MemberStatus) -> CdcMemberView {
    CdcMemberView {
        address: m.address.to_string(),
        connected: m.connected,
        last_error: m.last_error.clone(),
        entries: m.entries,
        last_change: m
            .last_change
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs()),
        announced: m.announced,
    }
}

/// The API view of a running CDC.
pub fn view(c: &ebof_fleet::Cdc) -> CdcView {
    CdcView {
        hostnqn: c.hostnqn().to_string(),
        hosts: c.known_hosts(),
        members: c.members().iter().map(member_view).collect(),
    }
}

/// `[cdc] trusted` as the CDC takes it.
pub fn trusted(list: &[ebof_config::TrustedAnnouncer]) -> Vec<ebof_fleet::Trusted> {
    list.iter()
        .map(|t| match t {
            ebof_config::TrustedAnnouncer::Address(a) => ebof_fleet::Trusted::Address(*a),
            ebof_config::TrustedAnnouncer::Nqn(n) => ebof_fleet::Trusted::Nqn(n.clone()),
        })
        .collect()
}

/// The DH-HMAC-CHAP secrets of the CDC's `[[hosts]]` that apply to discovery (entries for
/// every subsystem or for the discovery NQN), by host NQN, for the CDC's reads of its members
/// as those hosts ([`ebof_fleet::CdcConfig::host_keys`]). A malformed secret is an error that
/// names its place, never its value.
pub fn host_keys(
    cfg: &ebof_config::Config,
) -> Result<std::collections::HashMap<String, ebof_fleet::DhchapKeys>, String> {
    let parse = |s: &ebof_config::SecretSource, path: String| {
        let text = s.resolve().map_err(|e| format!("{path}: {e}"))?;
        nvme_auth::DhchapSecret::parse(&text).map_err(|e| format!("{path}: {e}"))
    };
    let mut out = std::collections::HashMap::new();
    for (i, h) in cfg.hosts.iter().enumerate() {
        let Some(k) = &h.dhchap_key else { continue };
        if h.subsystem
            .as_deref()
            .is_some_and(|s| s != nvme_spec::DISCOVERY_NQN)
        {
            continue;
        }
        let host = parse(k, format!("hosts[{i}].dhchap_key"))?;
        let ctrl = h
            .dhchap_ctrl_key
            .as_ref()
            .map(|c| parse(c, format!("hosts[{i}].dhchap_ctrl_key")))
            .transpose()?;
        out.insert(h.nqn.clone(), ebof_fleet::DhchapKeys { host, ctrl });
    }
    Ok(out)
}

fn not_a_cdc() -> ApiError {
    ApiError::new(
        codes::NOT_A_CDC,
        "",
        "this box is not a Central Discovery Controller (no [cdc] in its configuration)",
    )
}

/// `ADDR[:PORT]` of a member (port 8009 by default), errors at `path`.
fn parse_member(address: &str, path: &str) -> Result<std::net::SocketAddr, ApiError> {
    ebof_config::parse_listener(address, ebof_fleet::DEFAULT_MEMBER_PORT)
        .map(|l| l.socket_addr())
        .map_err(|e| ApiError::from_config(&e.at(path), path))
}

/// The CDC applier ([`crate::apply`]), given to the control plane with the CDC (which starts from `[cdc]` of the
/// same configuration): members configured since `old` join, members no longer configured
/// leave (their entries leave every host's view at once), and a changed trust list is live for
/// later registrations.
#[derive(Debug)]
pub struct CdcMembers(pub Arc<ebof_fleet::Cdc>);

impl Apply for CdcMembers {
    fn apply(&self, old: &Config, new: &Config, _live: &Target) -> Result<(), ApiError> {
        let members = |c: &Config| -> Vec<std::net::SocketAddr> {
            c.cdc
                .iter()
                .flat_map(|c| c.members.iter().map(|m| m.socket_addr()))
                .collect()
        };
        let (was, is) = (members(old), members(new));
        for a in is.iter().filter(|a| !was.contains(a)) {
            self.0.add_member(*a);
        }
        for a in was.iter().filter(|a| !is.contains(a)) {
            self.0.remove_member(*a);
        }
        let list = |c: &Config| c.cdc.as_ref().map(|c| c.trusted.clone());
        if let Some(t) = list(new)
            && list(old).as_ref() != Some(&t)
        {
            self.0.set_trusted(trusted(&t));
        }
        Ok(())
    }
}

/// `GET /v1/cdc`: the CDC's view, or `not-a-cdc`.
pub(crate) fn get(cdc: Option<&ebof_fleet::Cdc>) -> Result<CdcView, ApiError> {
    cdc.map(view).ok_or_else(not_a_cdc)
}

/// `POST /v1/cdc/members`: add a member (recorded in `[cdc] members`).
pub(crate) fn add_member(
    r: &Running,
    cdc: Option<&ebof_fleet::Cdc>,
    req: &CdcMemberRequest,
) -> Result<CdcMemberView, ApiError> {
    let cdc = cdc.ok_or_else(not_a_cdc)?;
    let addr = parse_member(&req.address, "address")?;
    r.change(|cfg| {
        let c = cfg.cdc.as_mut().ok_or_else(not_a_cdc)?;
        if c.members.iter().any(|m| m.socket_addr() == addr) {
            return Err(ApiError::new(
                codes::DUPLICATE_MEMBER,
                "address",
                format!("{addr} is already a member"),
            ));
        }
        c.members.push(ebof_config::Listener {
            address: addr.ip(),
            port: addr.port(),
        });
        cfg.validate()
            .map_err(|e| ApiError::from_config(&e, "address"))
    })?;
    cdc.members()
        .iter()
        .find(|m| m.address == addr)
        .map(member_view)
        .ok_or_else(|| ApiError::new(codes::INTERNAL, "", "member vanished"))
}

/// `GET /v1/cdc/trusted`.
pub(crate) fn get_trusted(cdc: Option<&ebof_fleet::Cdc>) -> Result<CdcTrusted, ApiError> {
    let cdc = cdc.ok_or_else(not_a_cdc)?;
    Ok(CdcTrusted {
        trusted: cdc.trusted().iter().map(|t| t.to_string()).collect(),
    })
}

/// `PUT /v1/cdc/trusted`: replace `[cdc] trusted`, live (later registrations are checked
/// against it) and in the running configuration. Every entry is an IP address or an NQN; the
/// first that is neither is the error (`trusted[i]`), and nothing changes.
pub(crate) fn set_trusted(
    r: &Running,
    cdc: Option<&ebof_fleet::Cdc>,
    req: &CdcTrusted,
) -> Result<CdcTrusted, ApiError> {
    cdc.ok_or_else(not_a_cdc)?;
    let mut list = Vec::with_capacity(req.trusted.len());
    for (i, t) in req.trusted.iter().enumerate() {
        let path = format!("trusted[{i}]");
        let t = ebof_config::TrustedAnnouncer::parse(t.trim())
            .map_err(|e| ApiError::from_config(&e.at(&path), &path))?;
        if !list.contains(&t) {
            list.push(t);
        }
    }
    r.change(|cfg| {
        let c = cfg.cdc.as_mut().ok_or_else(not_a_cdc)?;
        c.trusted = list.clone();
        cfg.validate()
            .map_err(|e| ApiError::from_config(&e, "trusted"))
    })?;
    tracing::info!(
        trusted = list.len(),
        "central discovery: trusted announcers replaced"
    );
    get_trusted(cdc)
}

/// `DELETE /v1/cdc/members/{address}`: remove a member; its entries leave every host's view at
/// once. Returns the CDC as it is now.
pub(crate) fn remove_member(
    r: &Running,
    cdc: Option<&ebof_fleet::Cdc>,
    address: &str,
) -> Result<CdcView, ApiError> {
    let cdc = cdc.ok_or_else(not_a_cdc)?;
    let addr = parse_member(address, "address")?;
    r.change(|cfg| {
        let c = cfg.cdc.as_mut().ok_or_else(not_a_cdc)?;
        let before = c.members.len();
        c.members.retain(|m| m.socket_addr() != addr);
        if c.members.len() == before {
            return Err(ApiError::new(
                codes::UNKNOWN_MEMBER,
                "address",
                format!("{addr} is not a member (see `ebof ctl cdc list`)"),
            ));
        }
        Ok(())
    })?;
    Ok(view(cdc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NamespaceRequest, SubsystemRequest};
    use crate::client::{Client, ClientError};
    use crate::control::Control;
    use ebof_config::Config;

    fn control(toml: &str) -> (Arc<Control>, Arc<nvmf_target::Target>) {
        let cfg = Config::from_toml_str(toml).unwrap();
        let target = Arc::new(crate::build::build_target(&cfg).unwrap());
        (Arc::new(Control::new(target.clone(), cfg, None)), target)
    }

    /// A pool box starts with no subsystems; the API provisions it.
    #[test]
    fn a_pool_box_is_provisioned_through_the_api() {
        let (c, target) = control("[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n");
        assert!(c.state().subsystems.is_empty());
        assert!(target.subsystems().is_empty());
        c.add_subsystem(&SubsystemRequest {
            nqn: "nqn.2026-11.io.ebof:pool-1".into(),
            serial: None,
            model: None,
            allow_any_host: Some(true),
        })
        .unwrap();
        c.add_namespace(
            "nqn.2026-11.io.ebof:pool-1",
            &NamespaceRequest {
                backend: "ram".into(),
                size: Some(1 << 20),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(target.subsystems().len(), 1);
        let saved = Config::from_toml_str(&c.running().to_toml_string()).unwrap();
        assert_eq!(saved.subsystems.len(), 1);
        assert_eq!(saved.subsystems[0].namespaces.len(), 1);
        // And back to empty: still a valid configuration.
        c.remove_subsystem("nqn.2026-11.io.ebof:pool-1").unwrap();
        assert!(
            Config::from_toml_str(&c.running().to_toml_string())
                .unwrap()
                .subsystems
                .is_empty()
        );
        assert_eq!(c.cdc().unwrap_err().code, codes::NOT_A_CDC);
        assert!(c.state().cdc.is_none());
    }

    #[test]
    fn cdc_members_are_added_and_removed_live_and_saved() {
        let running = Config::from_toml_str(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n[cdc]\nmembers = []\n",
        )
        .unwrap();
        let target = Arc::new(crate::build::build_target(&running).unwrap());
        let mut cfg = ebof_fleet::CdcConfig::new(vec![], "nqn.2026-11.io.example:cdc".into());
        cfg.backoff_max = std::time::Duration::from_millis(300);
        let cdc = Arc::new(ebof_fleet::Cdc::start(&target, cfg).unwrap());
        let services = crate::control::Services {
            cdc: Some(cdc.clone()),
            ..Default::default()
        };
        let c = Arc::new(Control::with_services(
            target.clone(),
            running,
            None,
            services,
        ));
        let token = crate::Token::new("t0k3n-0123456789").unwrap();
        let l = crate::server::bind_api_tcp("127.0.0.1:0".parse().unwrap(), token.clone()).unwrap();
        let srv = crate::server::start(c.clone(), None, None, Some(l)).unwrap();
        let api = Client::tcp(srv.api_addr.unwrap().to_string(), Some(token));

        // Nobody listens on port 9 of loopback: the member is there, not connected.
        let m = api.add_cdc_member("127.0.0.1:9").unwrap();
        assert_eq!(m.address, "127.0.0.1:9");
        let m = api.add_cdc_member("127.0.0.2").unwrap();
        assert_eq!(m.address, "127.0.0.2:8009");
        for (bad, code) in [
            ("127.0.0.1:9", codes::DUPLICATE_MEMBER),
            ("box-3", ebof_config::codes::INVALID_ADDRESS),
        ] {
            match api.add_cdc_member(bad) {
                Err(ClientError::Api(e)) => {
                    assert_eq!((e.code.as_str(), e.path.as_str()), (code, "address"), "{e}")
                }
                other => panic!("{other:?}"),
            }
        }
        let saved = Config::from_toml_str(&c.running().to_toml_string()).unwrap();
        let members: Vec<String> = saved
            .cdc
            .unwrap()
            .members
            .iter()
            .map(|m| m.to_string())
            .collect();
        assert_eq!(members, ["127.0.0.1:9", "127.0.0.2:8009"]);
        // The state shows the members; a refused connection is an error there.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let v = api.state().unwrap().cdc.unwrap();
            assert_eq!(v.members.len(), 2);
            if v.members
                .iter()
                .any(|m| m.address == "127.0.0.1:9" && m.last_error.is_some())
            {
                assert!(v.members.iter().all(|m| !m.connected));
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{v:?}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let v = api.remove_cdc_member("127.0.0.1:9").unwrap();
        assert_eq!(v.members.len(), 1);
        match api.remove_cdc_member("127.0.0.1:9") {
            Err(ClientError::Api(e)) => assert_eq!(e.code, codes::UNKNOWN_MEMBER),
            other => panic!("{other:?}"),
        }
        assert_eq!(api.cdc().unwrap().members.len(), 1);
        assert_eq!(c.running().cdc.unwrap().members.len(), 1);

        // Who may announce: empty by default, replaced live, saved, refused whole when bad.
        assert!(api.cdc_trusted().unwrap().trusted.is_empty());
        let want = ["10.0.0.2".to_string(), "nqn.2026-11.io.example:ddc".into()];
        assert_eq!(api.set_cdc_trusted(&want).unwrap().trusted, want);
        assert_eq!(
            cdc.trusted(),
            [
                ebof_fleet::Trusted::Address("10.0.0.2".parse().unwrap()),
                ebof_fleet::Trusted::Nqn("nqn.2026-11.io.example:ddc".into())
            ]
        );
        let saved = Config::from_toml_str(&c.running().to_toml_string()).unwrap();
        assert_eq!(saved.cdc.unwrap().trusted.len(), 2);
        match api.set_cdc_trusted(&["10.0.0.3".into(), "box-3".into()]) {
            Err(ClientError::Api(e)) => assert_eq!(
                (e.code.as_str(), e.path.as_str()),
                (ebof_config::codes::INVALID_ADDRESS, "trusted[1]"),
                "{e}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(api.cdc_trusted().unwrap().trusted, want);
        assert!(api.set_cdc_trusted(&[]).unwrap().trusted.is_empty());
        assert!(cdc.trusted().is_empty());
        // DIM refusals are a metric.
        assert!(
            crate::metrics::render(&target)
                .unwrap()
                .contains("ebof_dim_refusals_total 0")
        );
        srv.stop();
        cdc.stop();
    }
}
