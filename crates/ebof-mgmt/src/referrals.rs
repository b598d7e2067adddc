//! The discovery service's fleet settings from the configuration and the management API onto
//! the target: referrals (`[discovery] referrals`, `POST`/`DELETE /v1/discovery/referrals`,
//! `ebof ctl referral`), served as discovery log entries of SUBTYPE 1; and the DIM
//! registrations hosts made (`GET /v1/discovery/registrations`, `ebof ctl dim list`), which
//! the target keeps ([`nvmf_target::Target::dim_registrations`]).

use crate::api::{
    ApiError, DimEntryView, DimRegistrationView, ReferralRequest, Referrals as ReferralsView,
    codes, uuid_string,
};
use crate::apply::Apply;
use crate::lookup::check;
use crate::running::Running;
use ebof_config::{Config, Listener};
use nvmf_target::{MAX_REFERRALS, Referral, Target};
use std::time::Instant;

/// The referrals of `cfg` as the target serves them (NVMe/TCP).
fn referrals_of(cfg: &Config) -> Vec<Referral> {
    cfg.discovery_settings
        .referrals
        .iter()
        .map(|l| Referral::tcp(l.socket_addr()))
        .collect()
}

/// The referrals applier ([`crate::apply`]): the discovery log serves the configured
/// referrals (discovery controllers with Discovery Log Page Change enabled get the event when
/// they change).
#[derive(Debug)]
pub struct Referrals;

impl Apply for Referrals {
    fn apply(&self, _old: &Config, new: &Config, live: &Target) -> Result<(), ApiError> {
        live.set_referrals(referrals_of(new))
            .map(|_| ())
            .map_err(|e| {
                ApiError::new(
                    codes::TOO_MANY_REFERRALS,
                    "discovery.referrals",
                    e.to_string(),
                )
            })
    }
}

/// `ADDR:PORT` of every referral served, in discovery log order.
pub fn list(target: &Target) -> Vec<String> {
    target
        .referrals()
        .iter()
        .map(|r| r.addr.to_string())
        .collect()
}

fn trtype_name(t: u8) -> String {
    use nvme_spec::discovery::trtype;
    match t {
        trtype::TCP => "tcp".into(),
        trtype::RDMA => "rdma".into(),
        trtype::FC => "fc".into(),
        n => n.to_string(),
    }
}

/// Every DIM registration the target holds.
pub fn registrations(target: &Target) -> Vec<DimRegistrationView> {
    let now = Instant::now();
    target
        .dim_registrations()
        .into_iter()
        .map(|r| DimRegistrationView {
            host: r.hostnqn,
            hostid: uuid_string(&r.hostid),
            entity_type: r.entity_type.name().into(),
            entity: r.entity_nqn,
            name: r.name,
            version: r.version,
            symname: r.symname,
            entries: r
                .entries
                .iter()
                .map(|e| DimEntryView {
                    transport: trtype_name(e.trtype),
                    address: e.traddr.clone(),
                    service: e.trsvcid.clone(),
                    nqn: e.subnqn.clone(),
                })
                .collect(),
            local: r.local.to_string(),
            peer: r.peer.map(|p| p.to_string()),
            registered_secs_ago: now.saturating_duration_since(r.registered).as_secs(),
            updated_secs_ago: now.saturating_duration_since(r.updated).as_secs(),
        })
        .collect()
}

fn parse(address: &str) -> Result<Listener, ApiError> {
    let l = ebof_config::parse_listener(address, ebof_config::DEFAULT_DISCOVERY_PORT)
        .map_err(|e| ApiError::from_config(&e, "address"))?;
    if l.port == 0 {
        // Port 0 means "any free port" for a listener; a host cannot connect to it.
        return Err(ApiError::new(
            ebof_config::codes::INVALID_PORT,
            "address",
            format!("a referral needs the other discovery service's port, not 0 ({address})"),
        ));
    }
    Ok(l)
}

/// `GET /v1/discovery/referrals`.
pub(crate) fn view(target: &Target) -> ReferralsView {
    ReferralsView {
        referrals: list(target),
        changed: false,
        genctr: target.discovery_genctr(),
    }
}

/// `POST /v1/discovery/referrals`: refer hosts to one more discovery service; discovery
/// controllers with Discovery Log Page Change enabled get the event. Recorded in the running
/// configuration (`[discovery] referrals`).
pub(crate) fn add(r: &Running, req: &ReferralRequest) -> Result<ReferralsView, ApiError> {
    let l = parse(&req.address)?;
    change(r, |list| {
        if list.contains(&l) {
            return Err(ApiError::new(
                codes::DUPLICATE_REFERRAL,
                "address",
                format!("hosts are referred to {l} already"),
            ));
        }
        if list.len() >= MAX_REFERRALS {
            return Err(ApiError::new(
                codes::TOO_MANY_REFERRALS,
                "address",
                format!(
                    "{MAX_REFERRALS} referrals are served already, the most the discovery log holds"
                ),
            ));
        }
        list.push(l);
        Ok(())
    })
}

/// `DELETE /v1/discovery/referrals/{address}`: stop referring hosts to `address`
/// (`ADDR[:PORT]`, port 8009 by default).
pub(crate) fn remove(r: &Running, address: &str) -> Result<ReferralsView, ApiError> {
    let l = parse(address)?;
    change(r, |list| {
        let Some(i) = list.iter().position(|x| *x == l) else {
            return Err(ApiError::new(
                codes::UNKNOWN_REFERRAL,
                "address",
                format!("no referral to {l} (see `ebof ctl referral list`)"),
            ));
        };
        list.remove(i);
        Ok(())
    })
}

/// Edit the configured referrals with `f`; [`Referrals`] serves them.
fn change(
    r: &Running,
    f: impl FnOnce(&mut Vec<Listener>) -> Result<(), ApiError>,
) -> Result<ReferralsView, ApiError> {
    let changed = r
        .change(|cfg| {
            let before = referrals_of(cfg);
            f(&mut cfg.discovery_settings.referrals)?;
            check(cfg)?;
            Ok(referrals_of(cfg) != before)
        })
        .map_err(|mut e| {
            if e.path == "discovery.referrals" {
                e.path = "address".into();
            }
            e
        })?;
    Ok(ReferralsView {
        changed,
        ..view(r.target())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Control;
    use nvme_spec::dim::{DimData, DimTask};
    use nvme_spec::fabrics::{ConnectCmd, ConnectData, PropertyCmd, cc, prop};
    use nvme_spec::opcode::{admin, fctype};
    use nvme_spec::{CommandId, ControllerId, DISCOVERY_NQN, QueueId, Sqe, Status};
    use nvmf_target::{C2hData, Disposition, Queue};
    use std::net::SocketAddr;
    use std::sync::Arc;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000e1";

    fn control(extra: &str) -> Control {
        let toml = format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = 4420\n\n{extra}\n\
             [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:r\"\n[[subsystems.namespaces]]\n\
             backend = \"ram\"\nsize = \"1M\"\n"
        );
        let cfg = Config::from_toml_str(&toml).unwrap();
        let target = Arc::new(crate::build::build_target(&cfg).unwrap());
        Control::new(target, cfg, None)
    }

    /// One command on `q`, its status.
    fn cmd(q: &mut Queue, sqe: Sqe, data: &[u8]) -> Status {
        let now = std::time::Instant::now();
        match q.handle_command(&sqe, data, now) {
            Disposition::Done => {}
            Disposition::Execute { slot } => q.execute_inline(slot),
            d => panic!("unexpected {d:?}"),
        }
        let mut st = None;
        q.drain_completions(|c, _: C2hData<'_>, _| {
            st = Some(c.status);
            Ok(())
        });
        q.output_sent();
        st.unwrap()
    }

    #[test]
    fn configured_referrals_are_served_and_changed_live() {
        let c = control("[discovery]\nreferrals = [\"10.0.0.2\", \"10.0.0.3:8010\"]\n");
        assert_eq!(
            c.referrals().referrals,
            vec!["10.0.0.2:8009", "10.0.0.3:8010"]
        );
        let g = c.target.discovery_genctr();
        let r = c
            .add_referral(&ReferralRequest {
                address: "[fd00::4]".into(),
            })
            .unwrap();
        assert!(r.changed);
        assert!(r.genctr > g);
        assert_eq!(r.referrals[2], "[fd00::4]:8009");
        assert_eq!(c.running().discovery_settings.referrals.len(), 3);
        let e = c.remove_referral("10.0.0.9").unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.path.as_str()),
            (codes::UNKNOWN_REFERRAL, "address")
        );
        let e = c
            .add_referral(&ReferralRequest {
                address: "10.0.0.3:8010".into(),
            })
            .unwrap_err();
        assert_eq!(e.code, codes::DUPLICATE_REFERRAL);
        let e = c
            .add_referral(&ReferralRequest {
                address: "x:y".into(),
            })
            .unwrap_err();
        assert_eq!(e.path, "address");
        c.remove_referral("10.0.0.2").unwrap();
        assert_eq!(c.state().referrals, vec!["10.0.0.3:8010", "[fd00::4]:8009"]);
    }

    #[test]
    fn too_many_referrals_are_refused() {
        let c = control("");
        for i in 0..MAX_REFERRALS {
            c.add_referral(&ReferralRequest {
                address: format!("10.1.{}.{}", i / 200, i % 200 + 1),
            })
            .unwrap();
        }
        let e = c
            .add_referral(&ReferralRequest {
                address: "10.9.9.9".into(),
            })
            .unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.path.as_str()),
            (codes::TOO_MANY_REFERRALS, "address")
        );
        assert_eq!(c.referrals().referrals.len(), MAX_REFERRALS);
    }

    #[test]
    fn dim_registrations_show_in_state() {
        let c = control("");
        let local: SocketAddr = "127.0.0.1:4420".parse().unwrap();
        let mut q = Queue::new(c.target.clone(), local, std::time::Instant::now());
        q.set_peer("127.0.0.9:40000".parse().unwrap());
        let mut sqe = ConnectCmd {
            recfmt: 0,
            qid: QueueId(0),
            sqsize: 31,
            cattr: 0,
            kato: 0,
        }
        .to_sqe(CommandId(1));
        sqe.set_sgl_icd(1024);
        let data = ConnectData {
            hostid: [9; 16],
            cntlid: ControllerId(0xFFFF),
            subnqn: DISCOVERY_NQN.into(),
            hostnqn: HOST.into(),
        };
        assert!(cmd(&mut q, sqe, &data.encode()).is_success());
        let mut sqe = Sqe::new(admin::FABRICS, CommandId(2));
        sqe.set_fctype(fctype::PROPERTY_SET);
        PropertyCmd {
            size8: false,
            ofst: prop::CC,
            value: u64::from(cc::enable_value(0)),
        }
        .encode_into(&mut sqe);
        assert!(cmd(&mut q, sqe, &[]).is_success());
        let dim = DimData::host(HOST, [9; 16], "h1", "Linux", Some("sym"), None).encode();
        let mut sqe = Sqe::new(admin::DISCOVERY_INFO_MGMT, CommandId(3));
        sqe.set_cdw(10, DimTask::Register.cdw10());
        sqe.set_sgl_icd(dim.len() as u32);
        assert!(cmd(&mut q, sqe, &dim).is_success());

        let st = c.state();
        assert_eq!(st.registrations.len(), 1);
        let r = &st.registrations[0];
        assert_eq!(r.host, HOST);
        assert_eq!(r.entity, HOST);
        assert_eq!(r.entity_type, "host");
        assert_eq!(r.name, "h1");
        assert_eq!(r.version, "Linux");
        assert_eq!(r.symname.as_deref(), Some("sym"));
        assert_eq!(r.local, "127.0.0.1:4420");
        assert_eq!(r.peer.as_deref(), Some("127.0.0.9:40000"));
        assert_eq!(r.entries[0].transport, "tcp");
        assert_eq!(r.entries[0].address, "127.0.0.9");
        assert_eq!(r.hostid, uuid_string(&[9; 16]));
        assert_eq!(c.registrations(), st.registrations);
    }
}
