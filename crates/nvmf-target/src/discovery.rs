//! The discovery service: the Discovery log page (NVMe-oF 1.1 section 5.3) as the connected
//! host may see it — one entry per subsystem it may access × listener, plus the current
//! discovery subsystem entry for the listener the host came in through.

use crate::model::ADMIN_QUEUE_MAX;
use crate::model::Transport;
use crate::{ListenerInfo, ListenerTls};
use nvme_spec::DISCOVERY_NQN;
use nvme_spec::dim::EntityType;
use nvme_spec::discovery::{
    CNTLID_DYNAMIC, DiscoveryLogEntry, adrfam, eflags, rdma_tsas, subtype, tcp_sectype, treq,
};
use std::net::SocketAddr;
use std::time::Instant;

/// TREQ (secure channel bits) and TSAS security type of a listener with TLS `tls`.
fn security(tls: ListenerTls) -> (u8, u8) {
    match tls {
        ListenerTls::Off => (treq::NOT_REQUIRED, tcp_sectype::NONE),
        ListenerTls::Optional => (treq::NOT_REQUIRED, tcp_sectype::TLS13),
        ListenerTls::Required => (treq::REQUIRED, tcp_sectype::TLS13),
    }
}

pub(crate) fn entry(l: &ListenerInfo, sub: u8, nqn: &str, flags: u16) -> DiscoveryLogEntry {
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
    /// A host or discovery controller registered (or updated) its discovery information with
    /// this target by DIM ([`crate::Target::dim_registrations`]); called after the registry
    /// changed, from the reactor thread that ran the command.
    fn registered(&self, reg: &DimRegistration) {
        let _ = reg;
    }
    /// A registration was removed by DIM deregister (or expired).
    fn deregistered(&self, reg: &DimRegistration) {
        let _ = reg;
    }
    /// A register or update replaced registration `old` of the same key by `new`: what `old`
    /// announced and `new` does not must be withdrawn. By default the same as
    /// [`CentralDiscovery::registered`] of `new`.
    fn replaced(&self, old: &DimRegistration, new: &DimRegistration) {
        let _ = old;
        self.registered(new);
    }
    /// May `task` for `reg` be applied? Asked, before the registry changes, for every DIM task
    /// whose entity type is a discovery controller (pull registration, ETYPE DDC or CDC): the
    /// CDC admits only discovery controllers it trusts, and only as many as it has room for.
    /// A refusal fails the command ([`DimDenial`]) and changes nothing. Called on a reactor
    /// thread: must return at once.
    fn admit(&self, task: nvme_spec::dim::DimTask, reg: &DimRegistration) -> Result<(), DimDenial> {
        let _ = (task, reg);
        Ok(())
    }
}

/// Why a [`CentralDiscovery`] refused a DIM task ([`CentralDiscovery::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DimDenial {
    /// The sender is not a discovery controller the CDC trusts (Access Denied).
    Untrusted,
    /// The CDC has no room for more announced members (Insufficient Discovery Resources).
    Full,
}

/// Most referrals a target serves ([`crate::Target::set_referrals`]).
pub const MAX_REFERRALS: usize = 64;

/// A referral to another discovery service: served as a discovery log entry of SUBTYPE 1 on
/// every discovery controller of the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Referral {
    /// The other discovery controller's address (TRADDR, TRSVCID, ADRFAM).
    pub addr: SocketAddr,
    /// Its transport (TRTYPE, TSAS).
    pub transport: Transport,
}

impl Referral {
    /// A referral to the NVMe/TCP discovery controller at `addr`.
    pub fn tcp(addr: SocketAddr) -> Referral {
        Referral {
            addr,
            transport: Transport::Tcp,
        }
    }

    /// The discovery log entry (SUBTYPE 1) for this referral, listed at position `index`
    /// (0-based) of the referral list.
    ///
    /// SUBNQN is the well-known discovery NQN (the referred service may have a unique NQN,
    /// but a host connects to the well-known one anywhere). TREQ is "not specified": we do
    /// not know the other service's secure channel policy, and a host then tries plain TCP
    /// first. PORTID is `index + 1`, stable while the list is. EFLAGS is 0: whether the
    /// referred controller keeps persistent connections is for its own SUBTYPE 3 entry to
    /// say (nvme-discoverd prefers that entry and only falls back to ours).
    pub fn log_entry(&self, index: usize) -> DiscoveryLogEntry {
        let (mut qptype, mut prtype, mut cms) = (tcp_sectype::NONE, 0, 0);
        if self.transport == Transport::Rdma {
            (qptype, prtype, cms) = (
                rdma_tsas::QPTYPE_CONNECTED,
                rdma_tsas::PRTYPE_NOT_SPECIFIED,
                rdma_tsas::CMS_RDMA_CM,
            );
        }
        DiscoveryLogEntry {
            trtype: self.transport.trtype(),
            adrfam: if self.addr.is_ipv4() {
                adrfam::IPV4
            } else {
                adrfam::IPV6
            },
            subtype: subtype::REFERRAL,
            treq: treq::NOT_SPECIFIED,
            portid: u16::try_from(index + 1).unwrap_or(u16::MAX),
            cntlid: CNTLID_DYNAMIC,
            asqsz: ADMIN_QUEUE_MAX as u16,
            eflags: 0,
            trsvcid: self.addr.port().to_string(),
            subnqn: DISCOVERY_NQN.to_string(),
            traddr: self.addr.ip().to_string(),
            tcp_sectype: qptype,
            rdma_prtype: prtype,
            rdma_cms: cms,
        }
    }
}

/// Why [`crate::Target::set_referrals`] refused a list.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReferralError {
    /// More than [`MAX_REFERRALS`].
    #[error("{0} referrals, at most {MAX_REFERRALS} are served")]
    TooMany(usize),
    /// The same address twice.
    #[error("referral {0} is listed twice")]
    Duplicate(SocketAddr),
}

/// Most DIM registrations one host NQN may hold (distinct entity NQNs); a further
/// registration fails with Insufficient Discovery Resources.
pub const MAX_DIM_PER_HOST: usize = 8;
/// Most DIM registrations the target holds in total.
pub const MAX_DIM_TOTAL: usize = 1024;
/// Of [`MAX_DIM_TOTAL`], the room only admitted pull registrations (a CDC's trusted discovery
/// controllers, [`DimRegistration::admitted`]) may take: host registrations and untrusted
/// ones cannot fill the registry against a real member.
pub const MAX_DIM_RESERVED: usize = 128;
/// Most DIM registrations made from one source address (IP) that are not admitted pull
/// registrations: host NQNs are self-declared, so a per-NQN cap alone limits nothing.
pub const MAX_DIM_PER_PEER: usize = 64;
/// A registration whose host has had no discovery connection to this target for this long
/// is dropped when room is needed (TP 8010 lets a registration outlive its connection; a
/// host that comes back registers again, as nvme-stas does on every connection).
pub const DIM_STALE: std::time::Duration = std::time::Duration::from_secs(10 * 60);
/// Most discovery information entries one registration may carry.
pub const MAX_DIM_ENTRIES: usize = 16;
/// Largest DIM data accepted (bytes): room for [`MAX_DIM_ENTRIES`] extended entries with a
/// few attributes each.
pub const MAX_DIM_DATA: u32 = 32 * 1024;

/// What a host (or a discovery controller announcing itself) registered with DIM (TP 8010).
///
/// Registrations are keyed by the NQN of the host that sent the command (its Connect
/// HOSTNQN) and the entity NQN (EID). TP 8010 makes a registration the host's until it
/// deregisters: it outlives the discovery connection that made it (nvme-stas registers once
/// per connection and deregisters on shutdown), and is replaced by the next registration of
/// the same key. The registry is bounded ([`MAX_DIM_PER_HOST`], [`MAX_DIM_PER_PEER`],
/// [`MAX_DIM_TOTAL`] with [`MAX_DIM_RESERVED`] kept for admitted pull registrations); when it
/// is full, registrations of hosts not connected for [`DIM_STALE`] make room. It lives in
/// memory only: a restart forgets it, and hosts register again when they reconnect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimRegistration {
    /// HOSTNQN of the connection that sent the registration.
    pub hostnqn: String,
    /// HOSTID of that connection.
    pub hostid: [u8; 16],
    /// Who the information describes (ETYPE).
    pub entity_type: EntityType,
    /// The entity's NQN (EID).
    pub entity_nqn: String,
    /// Entity name (ENAME, e.g. the host name).
    pub name: String,
    /// Entity version (EVER, e.g. "Linux 6.12").
    pub version: String,
    /// The symbolic name of the first entry that has one (libnvme: `hostsymname`).
    pub symname: Option<String>,
    /// Transport entries. An entry sent with an empty TRADDR ("the address of this
    /// connection", what libnvme sends) carries the connection's source address when the
    /// transport reported it ([`crate::Queue::set_peer`]).
    pub entries: Vec<DiscoveryLogEntry>,
    /// The discovery controller address the registration came in on.
    pub local: SocketAddr,
    /// The source address of that connection, when known.
    pub peer: Option<SocketAddr>,
    /// When the entity first registered (the queue's clock).
    pub registered: Instant,
    /// When it last registered or updated.
    pub updated: Instant,
    /// The connection that sent it completed DH-HMAC-CHAP (its host NQN is proven).
    pub authenticated: bool,
    /// A Central Discovery Controller admitted it as a pull registration from a discovery
    /// controller it trusts ([`CentralDiscovery::admit`]).
    pub admitted: bool,
}

/// EFLAGS of our own entry (SUBTYPE 3, current discovery subsystem): EPCSD only.
///
/// EPCSD says this discovery controller supports explicit persistent connections (we keep
/// them, with KATO, and raise Discovery Log Page Change on them). Hosts read it here and
/// nowhere else: libnvme's `--persistent=auto` and nvme-discoverd keep the connection only
/// when the self entry carries EPCSD, and otherwise disconnect and re-poll every 15 minutes.
///
/// DUPRETINFO is left clear although TP 8014 allows it on SUBTYPE 3 entries: nvme-discoverd
/// before nvme-cli PR #4000 (`discoverd/src/dlp.c`) skips every entry carrying DUPRETINFO
/// before it looks at the subtype, so a self entry with both flags is never seen, EPCSD
/// falls back to 0 and the daemon polls instead of staying connected. DUPRETINFO only helps
/// a host avoid a second connection to another port of the same discovery subsystem, and we
/// list a single self entry (the port the host came in on), which nvme-cli 2.x already
/// recognises as "already connected" by its address. With EPCSD alone: nvme-discoverd before
/// and after PR #4000 and current libnvme (self entry found by SUBTYPE) honour EPCSD;
/// nvme-cli 2.x `nvme discover --persistent` / `connect-all --persistent` keep the
/// connection because the well-known discovery NQN never needs EPCSD there; nvme-stas keeps
/// its discovery connections whatever the flags (it reads only NCC). Linux nvmet sets no
/// EFLAGS at all, so every one of these hosts already copes with DUPRETINFO clear.
pub const CURRENT_DISCOVERY_EFLAGS: u16 = eflags::EPCSD;
