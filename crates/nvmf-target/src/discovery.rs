//! The discovery service: the Discovery log page (NVMe-oF 1.1 section 5.3) as the connected
//! host may see it — one entry per subsystem it may access × listener, plus the current
//! discovery subsystem entry for the listener the host came in through.

use crate::Transport;
use crate::controller::Controller;
use crate::model::ADMIN_QUEUE_MAX;
use crate::queue::Queue;
use crate::{ListenerInfo, ListenerTls};
use nvme_spec::DISCOVERY_NQN;
use nvme_spec::discovery::{
    CNTLID_DYNAMIC, DiscoveryLogEntry, adrfam, eflags, encode_discovery_log, rdma_tsas, subtype,
    tcp_sectype, treq,
};

/// TREQ (secure channel bits) and TSAS security type of a listener with TLS `tls`.
fn security(tls: ListenerTls) -> (u8, u8) {
    match tls {
        ListenerTls::Off => (treq::NOT_REQUIRED, tcp_sectype::NONE),
        ListenerTls::Optional => (treq::NOT_REQUIRED, tcp_sectype::TLS13),
        ListenerTls::Required => (treq::REQUIRED, tcp_sectype::TLS13),
    }
}

fn entry(l: &ListenerInfo, sub: u8, nqn: &str, flags: u16) -> DiscoveryLogEntry {
    let (addr, portid) = (l.addr, l.portid);
    let (mut secure, mut sectype) = security(l.tls);
    let (mut prtype, mut cms) = (0, 0);
    if l.transport == Transport::Rdma {
        // TSAS of an RDMA port: reliable connected, provider not specified, RDMA_CM (as Linux
        // nvmet-rdma and SPDK advertise); no secure channel on RDMA.
        secure = treq::NOT_SPECIFIED;
        (sectype, prtype, cms) = (
            rdma_tsas::QPTYPE_CONNECTED,
            rdma_tsas::PRTYPE_NOT_SPECIFIED,
            rdma_tsas::CMS_RDMA_CM,
        );
    }
    DiscoveryLogEntry {
        trtype: l.transport.trtype(),
        adrfam: if addr.is_ipv4() {
            adrfam::IPV4
        } else {
            adrfam::IPV6
        },
        subtype: sub,
        treq: secure | treq::DISABLE_SQFLOW,
        portid,
        cntlid: CNTLID_DYNAMIC,
        asqsz: ADMIN_QUEUE_MAX as u16,
        eflags: flags,
        trsvcid: addr.port().to_string(),
        subnqn: nqn.to_string(),
        traddr: addr.ip().to_string(),
        tcp_sectype: sectype,
        rdma_prtype: prtype,
        rdma_cms: cms,
    }
}

/// The source of a Central Discovery Controller's entries (TP 8010): what the members of the
/// fleet would show each host. Set with [`crate::Target::set_central`]; the target then reports
/// DCTYPE 2 (CDC) and serves, after its own subsystems, the entries this gives for the host.
///
/// Implemented outside the sans-IO core (the CDC keeps connections to its members); every
/// method is called on a reactor thread and must return at once.
pub trait CentralDiscovery: Send + Sync + std::fmt::Debug {
    /// A host connected to the discovery service (Fabrics Connect on the discovery NQN): the
    /// CDC should have its view ready soon.
    fn host_seen(&self, hostnqn: &str);
    /// The member entries host `hostnqn` may see (NVM subsystem entries, SUBTYPE 2), or `None`
    /// while the first fetch for this host is still running: the host's discovery controller
    /// then keeps CSTS.RDY at 0, so the host waits (within CAP.TO) instead of reading a
    /// partial log. The CDC must answer `Some` within a bounded time.
    fn entries(&self, hostnqn: &str) -> Option<std::sync::Arc<Vec<DiscoveryLogEntry>>>;
}

impl Queue {
    /// The full discovery log page for the host of `ctrl`.
    pub(crate) fn discovery_log(&self, ctrl: &Controller) -> Vec<u8> {
        let t = self.session.target();
        let local = self.session.local();
        let listeners = t.listeners();
        let mut entries = Vec::new();
        for s in t
            .subsystems()
            .iter()
            .filter(|s| s.host_allowed(&ctrl.hostnqn))
        {
            for l in listeners.iter() {
                entries.push(entry(l, subtype::NVME, &s.nqn, 0));
            }
        }
        if let Some(c) = t.central()
            && let Some(more) = c.entries(&ctrl.hostnqn)
        {
            entries.extend(more.iter().cloned());
        }
        // The current discovery subsystem, reachable where this host is connected.
        let here = listeners
            .iter()
            .find(|l| l.addr == local)
            .copied()
            .unwrap_or(ListenerInfo {
                addr: local,
                portid: 0,
                tls: ListenerTls::Off,
                transport: self.session.transport(),
            });
        entries.push(entry(
            &here,
            subtype::CURRENT_DISCOVERY,
            DISCOVERY_NQN,
            eflags::EPCSD | eflags::DUPRETINFO,
        ));
        encode_discovery_log(t.discovery_genctr(), &entries)
    }
}
