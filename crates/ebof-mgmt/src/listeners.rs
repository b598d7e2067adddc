//! NVMe listeners through the management API: bind or close a listening socket on the running
//! transport, keep the discovery log and the running configuration in step. Binding is the
//! fallible step, and the port a listener gets feeds back into the configuration, so listeners
//! are changed here, not by an applier ([`crate::apply`]); the ANA and mDNS appliers follow the
//! listener list of the changed configuration.

use crate::api::{ApiError, ListenerRemoved, ListenerRequest, ListenerView, codes};
use crate::lookup::check;
use crate::running::Running;
use ebof_config::codes as cfg_codes;
use ebof_runtime::ListenerControl;
use nvmf_target::ListenerInfo;

/// `POST /v1/listeners`: bind and start accepting; the discovery log lists a new NVMe
/// listener at once (and discovery controllers hear of it). The caller publishes it over mDNS.
pub(crate) fn add(
    r: &Running,
    control: &ListenerControl,
    req: &ListenerRequest,
) -> Result<ListenerView, ApiError> {
    let default_port = if req.discovery {
        ebof_config::DEFAULT_DISCOVERY_PORT
    } else {
        ebof_config::DEFAULT_PORT
    };
    let l = ebof_config::parse_listener(&req.address, default_port)
        .map_err(|e| ApiError::from_config(&e, "address"))?;
    let added = r.change(|cfg| {
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
            let mut v = r.target().listeners().as_ref().clone();
            portid = v.iter().map(|x| x.portid).max().unwrap_or(0) + 1;
            v.push(ListenerInfo {
                addr: bound,
                portid,
                tls: Default::default(),
                transport: Default::default(),
            });
            // Its ANA states start optimized: the ANA applier resets any it had.
            r.target().set_listeners(v);
        }
        Ok(ListenerView {
            address: bound.to_string(),
            portid,
            discovery: req.discovery,
            tls: "off".into(),
            transport: "tcp".into(),
        })
    })?;
    Ok(added)
}

/// `DELETE /v1/listeners/{address}`: close the listening socket. Connections that came in
/// through it are kept unless `disconnect` asks to end their controllers too.
pub(crate) fn remove(
    r: &Running,
    control: &ListenerControl,
    address: &str,
    disconnect: bool,
) -> Result<ListenerRemoved, ApiError> {
    let l = ebof_config::parse_listener(address, ebof_config::DEFAULT_PORT)
        .map_err(|e| ApiError::from_config(&e, "address"))?;
    let addr = l.socket_addr();
    let removed = r.change(|cfg| {
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
        let (portid, tls) = r
            .target()
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
            let v: Vec<ListenerInfo> = r
                .target()
                .listeners()
                .iter()
                .filter(|x| x.addr != addr)
                .copied()
                .collect();
            r.target().set_listeners(v);
        }
        let mut disconnected = Vec::new();
        if disconnect {
            for c in r.target().controllers() {
                if c.local_addr() == Some(addr) {
                    c.kill();
                    disconnected.push(c.cntlid.0);
                }
            }
            r.target()
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
    Ok(removed)
}

fn listen_error(addr: &std::net::SocketAddr, e: &ebof_runtime::server::ServerError) -> ApiError {
    let mut msg = e.to_string();
    if let Some(src) = std::error::Error::source(e) {
        msg = format!("{msg}: {src}");
    }
    ApiError::new(codes::LISTEN_FAILED, "address", format!("{addr}: {msg}"))
}
