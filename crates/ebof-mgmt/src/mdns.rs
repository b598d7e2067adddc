//! mDNS / DNS-SD publication of the discovery listeners (NVMe TP 8009), the management API's
//! side: `GET`/`PUT /v1/mdns` and keeping the published records in step with the running
//! configuration. The responder itself, and what it publishes where ([`plan`], [`Responder`]),
//! is the fleet's: `ebof_fleet::mdns` (re-exported here).

pub use ebof_fleet::mdns::*;

use crate::api::{ApiError, MdnsRequest, MdnsView, codes};
use crate::running::Running;

/// Publish what the running configuration of `r` asks for with `responder` (after a listener
/// or mode change, and at start): the view afterwards.
pub(crate) fn sync(responder: Option<&Responder>, r: &Running) -> Option<MdnsView> {
    Some(responder?.apply_config(|| r.get()))
}

/// `GET /v1/mdns`: the mode and the records (without a responder: the configured mode, no
/// records, and why).
pub(crate) fn view(responder: Option<&Responder>, r: &Running) -> MdnsView {
    match responder {
        Some(x) => x.view(),
        None => MdnsView {
            mode: Mode::from_setting(r.get().discovery_settings.mdns)
                .name()
                .into(),
            records: Vec::new(),
            error: Some("this server has no mDNS responder".into()),
        },
    }
}

/// `PUT /v1/mdns`: set the mode (`[discovery] mdns` of the running configuration, saved by
/// `save` and autosave), then publish or withdraw accordingly ([`sync`]).
pub(crate) fn set_mode(
    responder: Option<&Responder>,
    r: &Running,
    req: &MdnsRequest,
) -> Result<MdnsView, ApiError> {
    let mode = Mode::parse(&req.mode).ok_or_else(|| {
        ApiError::new(
            codes::BAD_REQUEST,
            "mode",
            format!("unknown mDNS mode {:?}: on, off or auto", req.mode),
        )
    })?;
    r.change(|cfg| {
        cfg.discovery_settings.mdns = mode.setting();
        crate::lookup::check(cfg)
    })?;
    tracing::info!(mode = mode.name(), "mDNS mode set by the management API");
    Ok(sync(responder, r).unwrap_or_else(|| view(responder, r)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Control;
    use ebof_config::Config;
    use std::sync::Arc;

    #[test]
    fn the_mode_is_set_in_the_running_configuration_and_saved() {
        let toml = "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:t\"\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n";
        let cfg = Config::from_toml_str(toml).unwrap();
        let target = Arc::new(crate::build::build_target(&cfg).unwrap());
        // A responder: loopback only, so `auto` publishes nothing and opens no socket.
        let services = crate::control::Services {
            mdns: Some(Arc::new(Responder::new())),
            ..Default::default()
        };
        let c = Control::with_services(target, cfg, None, services);
        let v = c.mdns();
        assert_eq!(v.mode, "auto");
        assert_eq!(v.records.len(), 1);
        assert_eq!(v.records[0].state, "skipped");
        let v = c.set_mdns(&MdnsRequest { mode: "off".into() }).unwrap();
        assert_eq!(v.mode, "off");
        assert!(v.records.is_empty());
        assert_eq!(c.running().discovery_settings.mdns, Some(false));
        assert!(c.running().to_toml_string().contains("mdns = false"));
        let e = c
            .set_mdns(&MdnsRequest {
                mode: "sometimes".into(),
            })
            .unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.path.as_str()),
            (codes::BAD_REQUEST, "mode")
        );
        assert_eq!(c.running().discovery_settings.mdns, Some(false));
        assert_eq!(c.state().mdns.unwrap().mode, "off");
    }
}
