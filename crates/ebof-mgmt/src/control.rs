//! The management API's request surface: one method per request, each a thin call into the
//! feature module that does it.
//!
//! [`Control`] holds the running configuration (`crate::running::Running`: the configuration
//! `ebof serve` runs, with the target and the appliers that keep the target in step with it,
//! [`crate::apply`]) and the services it steers, given at construction ([`Services`]: the
//! listeners' control, the mDNS responder, the CDC). Every change goes through `crate::running::Running::change`: a copy
//! of the configuration is edited and validated as a configuration file is (errors carry the
//! file's field paths and codes), the appliers make the target match it, and only then does the
//! copy become the running configuration. A request either applies whole or changes nothing.
//! `save` writes the running configuration as TOML; with `[management] autosave = true` every
//! change does.
//!
//! | requests | module |
//! |---|---|
//! | subsystems, their hosts | [`crate::subsystems`] ([`crate::ops`]) |
//! | namespaces: add, remove, resize | [`crate::namespaces`] |
//! | namespace QoS, host masking | [`crate::qos`], [`crate::masking`] |
//! | DH-HMAC-CHAP keys | [`crate::hostkeys`] |
//! | listeners, ANA, referrals, mDNS | [`crate::listeners`], [`crate::ana`], [`crate::referrals`], [`crate::mdns`] |
//! | snapshots, clones, pools | [`crate::snapshots`], [`crate::pools`] |
//! | the CDC | [`crate::cdc`] |

use crate::api::{
    AnaChanged, AnaRequest, ApiError, CdcMemberRequest, CdcMemberView, CdcTrusted, CdcView,
    CloneMade, CloneRequest, DimRegistrationView, Disconnected, ListenerRemoved, ListenerRequest,
    ListenerView, NamespaceChanged, NamespaceRemoved, NamespaceRequest, PoolView, QosRequest,
    ReferralRequest, Referrals, ResizeRequest, SaveRequest, Saved, SnapshotDeleted,
    SnapshotRequest, SnapshotView, State, Stats, SubsystemRemoved, SubsystemRequest, SubsystemView,
    codes,
};
use crate::hostkeys::{HostKeyRequest, HostKeyView};
use crate::ops::namespace_changed;
use crate::running::Running;
use crate::{
    ana, build, cdc, hostkeys, listeners, masking, namespaces, ops, pools, qos, referrals,
    snapshots, subsystems,
};
use ebof_config::Config;
use ebof_runtime::ListenerControl;
use nvmf_target::Target;
use std::path::PathBuf;
use std::sync::{Arc, MutexGuard};

pub use crate::running::write_config;

/// The control plane of one running `ebof serve`.
#[derive(Debug)]
pub struct Control {
    /// The target it changes (shared with the transports).
    pub target: Arc<Target>,
    running: Running,
    /// The transports' listeners, when a server runs ([`Services::listeners`]).
    listeners: Option<ListenerControl>,
    /// The mDNS responder, when the box runs one ([`Services::mdns`]).
    pub(crate) mdns: Option<Arc<crate::mdns::Responder>>,
    /// The Central Discovery Controller, when this box runs one ([`Services::cdc`]).
    cdc: Option<Arc<ebof_fleet::Cdc>>,
    /// Where snapshots are looked for ([`crate::snapshots`]).
    snapshots_book: snapshots::Book,
}

/// The running services a [`Control`] steers besides the target, given at construction
/// ([`crate::Node`] starts them first); each is absent when the box does not run it.
#[derive(Debug, Default)]
pub struct Services {
    /// Adds and removes the transports' listeners; without it, listener changes are refused.
    pub listeners: Option<ListenerControl>,
    /// The mDNS responder: it publishes the running configuration's discovery listeners from
    /// construction on, and follows every listener and mode change.
    pub mdns: Option<Arc<crate::mdns::Responder>>,
    /// The Central Discovery Controller (started from `[cdc]`): later changes of `[cdc]` reach
    /// it ([`cdc::CdcMembers`]).
    pub cdc: Option<Arc<ebof_fleet::Cdc>>,
}

impl Control {
    /// A control plane with no services: `running` is the configuration the target was built
    /// from, `config_file` where `save` writes by default and autosave writes (see
    /// [`Control::with_services`]).
    pub fn new(target: Arc<Target>, running: Config, config_file: Option<PathBuf>) -> Control {
        Control::with_services(target, running, config_file, Services::default())
    }

    /// The control plane of a box: `running` is the configuration the target was built from
    /// (after start-up checks, ports bound as 0 settled: [`build::settle_bound_ports`]);
    /// `config_file` is where `save` writes by default and autosave writes; `services` are
    /// what it steers besides the target. The mDNS responder publishes `running` at once.
    pub fn with_services(
        target: Arc<Target>,
        running: Config,
        config_file: Option<PathBuf>,
        services: Services,
    ) -> Control {
        let snapshots_book = snapshots::Book::new(&running);
        let mut appliers = build::appliers();
        if let Some(c) = &services.cdc {
            appliers.push(Arc::new(cdc::CdcMembers(c.clone())));
        }
        let c = Control {
            snapshots_book,
            running: Running::new(target.clone(), running, config_file, appliers),
            target,
            listeners: services.listeners,
            mdns: services.mdns,
            cdc: services.cdc,
        };
        let found = c.snapshots().len();
        if found > 0 {
            tracing::info!(snapshots = found, "snapshots found");
        }
        c.sync_mdns();
        c
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Config> {
        self.running.lock()
    }

    /// The running configuration (what `save` would write).
    pub fn running(&self) -> Config {
        self.running.get()
    }

    /// `GET /v1/state`: the target's state, with the namespaces' paths and the discovery
    /// listener from the running configuration.
    pub fn state(&self) -> State {
        let mdns = self.mdns();
        let cfg = self.running.lock();
        let mut s = ops::state(&self.target);
        for sv in &mut s.subsystems {
            let Some(sc) = cfg.subsystems.iter().find(|c| c.nqn == sv.nqn) else {
                continue;
            };
            for nv in &mut sv.namespaces {
                nv.path = sc
                    .namespaces
                    .iter()
                    .find(|n| n.nsid == nv.nsid)
                    .and_then(|n| n.backend.path())
                    .map(|p| p.display().to_string());
            }
        }
        if let Some(d) = &cfg.discovery {
            s.listeners.push(ListenerView {
                address: d.socket_addr().to_string(),
                portid: 0,
                discovery: true,
                tls: "off".into(),
                transport: cfg.transport(d).name().into(),
            });
        }
        s.mdns = Some(mdns);
        drop(cfg);
        s.cdc = self.cdc_view();
        s.snapshots = self.snapshots();
        s.pools = self.pools();
        s
    }

    /// Counters of namespaces and connections ([`ops::stats`]).
    pub fn stats(&self) -> Stats {
        ops::stats(&self.target)
    }

    /// Tear down controller `cntlid` ([`ops::disconnect`]); the running configuration is unchanged.
    pub fn disconnect(&self, cntlid: &str) -> Result<Disconnected, ApiError> {
        ops::disconnect(&self.target, cntlid)
    }

    /// Add a subsystem ([`ops::add_subsystem`]) and record it in the running configuration.
    pub fn add_subsystem(&self, req: &SubsystemRequest) -> Result<SubsystemView, ApiError> {
        subsystems::add(&self.running, req)
    }

    /// Remove a subsystem, disconnecting its controllers ([`ops::remove_subsystem`]), and drop
    /// it from the running configuration (its pool namespaces' files go once that is committed).
    pub fn remove_subsystem(&self, nqn: &str) -> Result<SubsystemRemoved, ApiError> {
        subsystems::remove(&self.running, nqn)
    }

    /// Allow host `hostnqn` on subsystem `nqn` ([`ops::allow_host`]); recorded in the running
    /// configuration.
    pub fn allow_host(&self, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ApiError> {
        subsystems::allow_host(&self.running, nqn, hostnqn)
    }

    /// Refuse new Connects of `hostnqn` on `nqn` ([`ops::deny_host`]; its controllers stay);
    /// recorded in the running configuration.
    pub fn deny_host(&self, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ApiError> {
        subsystems::deny_host(&self.running, nqn, hostnqn)
    }

    /// Open subsystem `nqn` to any host, or restrict it to its host list
    /// ([`ops::set_allow_any_host`]); recorded in the running configuration.
    pub fn set_allow_any_host(&self, nqn: &str, on: bool) -> Result<SubsystemView, ApiError> {
        subsystems::set_allow_any_host(&self.running, nqn, on)
    }

    /// `POST /v1/subsystems/{nqn}/namespaces`: open (or create) the storage and attach it;
    /// connected hosts are told with a Namespace Attribute Changed event
    /// (`namespaces::add_in`).
    pub fn add_namespace(
        &self,
        nqn: &str,
        req: &NamespaceRequest,
    ) -> Result<NamespaceChanged, ApiError> {
        namespaces::add(&self.running, nqn, req)
    }

    /// `DELETE /v1/subsystems/{nqn}/namespaces/{nsid}`: detach the namespace
    /// (`namespaces::remove`).
    pub fn remove_namespace(&self, nqn: &str, nsid: &str) -> Result<NamespaceRemoved, ApiError> {
        namespaces::remove(&self.running, nqn, nsid)
    }

    /// `PUT /v1/subsystems/{nqn}/namespaces/{nsid}/size`: grow (or, when confirmed, shrink)
    /// the namespace in place (`namespaces::resize`).
    pub fn resize_namespace(
        &self,
        nqn: &str,
        nsid: &str,
        req: &ResizeRequest,
    ) -> Result<NamespaceChanged, ApiError> {
        namespaces::resize(&self.running, nqn, nsid, req)
    }

    /// `PUT /v1/subsystems/{nqn}/namespaces/{nsid}/qos`: namespace `nsid` of `nqn` gets the
    /// limits `req` (replacing any it had; a key not given is unlimited). Errors: a bad value
    /// (`invalid-qos`, field the key), an unknown subsystem or namespace.
    pub fn set_namespace_qos(
        &self,
        nqn: &str,
        nsid: &str,
        req: &QosRequest,
    ) -> Result<NamespaceChanged, ApiError> {
        let q = qos::requested(req)?;
        self.change_qos(nqn, nsid, q)
    }

    /// `DELETE /v1/subsystems/{nqn}/namespaces/{nsid}/qos`: namespace `nsid` of `nqn` is
    /// unlimited again.
    pub fn clear_namespace_qos(&self, nqn: &str, nsid: &str) -> Result<NamespaceChanged, ApiError> {
        self.change_qos(nqn, nsid, ebof_config::Qos::default())
    }

    /// The namespace's QoS becomes `q` in the running configuration; [`qos::Qos`] applies it.
    fn change_qos(
        &self,
        nqn: &str,
        nsid: &str,
        q: ebof_config::Qos,
    ) -> Result<NamespaceChanged, ApiError> {
        let ((), live, c) = self.running.change_namespace(nqn, nsid, |ns| {
            ns.qos = q;
            Ok(())
        })?;
        tracing::info!(
            subsystem = nqn,
            nsid = c.nsid,
            qos = %q.inline_table(),
            "namespace QoS limits changed by the management API"
        );
        Ok(namespace_changed(nqn, &live, &c))
    }

    /// `PUT /v1/subsystems/{nqn}/namespaces/{nsid}/hosts`: only `hosts` see namespace `nsid`
    /// of `nqn` (none, for an empty list). Errors name `hosts[i]` for a bad or repeated NQN.
    pub fn set_namespace_hosts(
        &self,
        nqn: &str,
        nsid: &str,
        hosts: &[String],
    ) -> Result<NamespaceChanged, ApiError> {
        masking::set(&self.running, nqn, nsid, hosts)
    }

    /// `DELETE /v1/subsystems/{nqn}/namespaces/{nsid}/hosts`: namespace `nsid` of `nqn` is
    /// visible to every host the subsystem admits again.
    pub fn unmask_namespace(&self, nqn: &str, nsid: &str) -> Result<NamespaceChanged, ApiError> {
        masking::unmask(&self.running, nqn, nsid)
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
        masking::attach(&self.running, nqn, nsid, hostnqn)
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
        masking::detach(&self.running, nqn, nsid, hostnqn)
    }

    /// `PUT /v1/subsystems/{nqn}/hosts/{hostnqn}/dhchap`: from the next Connect on, `hostnqn`
    /// must authenticate with these keys on `nqn` (and only there) (`hostkeys::set_key`).
    pub fn set_host_key(
        &self,
        nqn: &str,
        hostnqn: &str,
        req: &HostKeyRequest,
    ) -> Result<HostKeyView, ApiError> {
        hostkeys::set_key(&self.running, nqn, hostnqn, req)
    }

    /// `DELETE /v1/subsystems/{nqn}/hosts/{hostnqn}/dhchap`: the keys of `hostnqn` on `nqn`
    /// go (`hostkeys::remove_key`).
    pub fn remove_host_key(&self, nqn: &str, hostnqn: &str) -> Result<HostKeyView, ApiError> {
        hostkeys::remove_key(&self.running, nqn, hostnqn)
    }

    /// `POST /v1/listeners`: bind and start accepting; the discovery log lists a new NVMe
    /// listener at once (and discovery controllers hear of it), and mDNS publishes it if the
    /// mode asks for it.
    pub fn add_listener(&self, req: &ListenerRequest) -> Result<ListenerView, ApiError> {
        let added = listeners::add(&self.running, self.listener_control()?, req)?;
        self.sync_mdns();
        Ok(added)
    }

    /// `DELETE /v1/listeners/{address}`: close the listening socket. Connections that came in
    /// through it are kept unless `disconnect` asks to end their controllers too. Its mDNS
    /// record is withdrawn (goodbye packets).
    pub fn remove_listener(
        &self,
        address: &str,
        disconnect: bool,
    ) -> Result<ListenerRemoved, ApiError> {
        let removed =
            listeners::remove(&self.running, self.listener_control()?, address, disconnect)?;
        self.sync_mdns();
        Ok(removed)
    }

    fn listener_control(&self) -> Result<&ListenerControl, ApiError> {
        self.listeners.as_ref().ok_or_else(|| {
            ApiError::new(
                codes::UNSUPPORTED,
                "",
                "this server cannot change its listeners at run time",
            )
        })
    }

    /// `PUT /v1/ana`: the request is checked as a configuration change (the listener must be
    /// an NVMe listener of the running configuration, the group 1..=1024, the state one of the
    /// five names), then the target's table is set and the controllers on that listener told.
    pub fn set_ana(&self, req: &AnaRequest) -> Result<AnaChanged, ApiError> {
        ana::set(&self.running, req)
    }

    /// `GET /v1/discovery/referrals`.
    pub fn referrals(&self) -> Referrals {
        referrals::view(&self.target)
    }

    /// `POST /v1/discovery/referrals`: refer hosts to one more discovery service; discovery
    /// controllers with Discovery Log Page Change enabled get the event. Recorded in the
    /// running configuration (`[discovery] referrals`).
    pub fn add_referral(&self, req: &ReferralRequest) -> Result<Referrals, ApiError> {
        referrals::add(&self.running, req)
    }

    /// `DELETE /v1/discovery/referrals/{address}`: stop referring hosts to `address`
    /// (`ADDR[:PORT]`, port 8009 by default).
    pub fn remove_referral(&self, address: &str) -> Result<Referrals, ApiError> {
        referrals::remove(&self.running, address)
    }

    /// `GET /v1/discovery/registrations`.
    pub fn registrations(&self) -> Vec<DimRegistrationView> {
        referrals::registrations(&self.target)
    }

    /// `GET /v1/pools`: every storage pool with its accounting.
    pub fn pools(&self) -> Vec<PoolView> {
        pools::pool_views(&self.running.lock(), &self.target)
    }

    /// `GET /v1/snapshots`: every snapshot, by name.
    pub fn snapshots(&self) -> Vec<SnapshotView> {
        snapshots::list(&self.running, &self.snapshots_book)
    }

    /// `POST /v1/subsystems/{nqn}/namespaces/{nsid}/snapshots`: a crash-consistent
    /// point-in-time copy of file namespace `nsid` of `nqn` ([`crate::snapshots`]).
    pub fn snapshot_namespace(
        &self,
        nqn: &str,
        nsid: &str,
        req: &SnapshotRequest,
    ) -> Result<SnapshotView, ApiError> {
        snapshots::snapshot_namespace(&self.running, &self.snapshots_book, nqn, nsid, req)
    }

    /// `DELETE /v1/snapshots/{name}`: delete a snapshot (`snapshots::delete`).
    pub fn delete_snapshot(&self, name: &str) -> Result<SnapshotDeleted, ApiError> {
        snapshots::delete(&self.running, &self.snapshots_book, name)
    }

    /// `POST /v1/snapshots/{name}/clone`: a new namespace from a snapshot
    /// (`snapshots::clone`).
    pub fn clone_snapshot(&self, name: &str, req: &CloneRequest) -> Result<CloneMade, ApiError> {
        snapshots::clone(&self.running, &self.snapshots_book, name, req)
    }

    /// The CDC's view, when this box is one.
    pub fn cdc_view(&self) -> Option<CdcView> {
        self.cdc.as_deref().map(cdc::view)
    }

    /// `GET /v1/cdc`.
    pub fn cdc(&self) -> Result<CdcView, ApiError> {
        cdc::get(self.cdc.as_deref())
    }

    /// `POST /v1/cdc/members`: add a member (recorded in `[cdc] members`).
    pub fn add_cdc_member(&self, req: &CdcMemberRequest) -> Result<CdcMemberView, ApiError> {
        cdc::add_member(&self.running, self.cdc.as_deref(), req)
    }

    /// `GET /v1/cdc/trusted`.
    pub fn cdc_trusted(&self) -> Result<CdcTrusted, ApiError> {
        cdc::get_trusted(self.cdc.as_deref())
    }

    /// `PUT /v1/cdc/trusted`: replace `[cdc] trusted`, live (later registrations are checked
    /// against it) and in the running configuration. Every entry is an IP address or an NQN;
    /// the first that is neither is the error (`trusted[i]`), and nothing changes.
    pub fn set_cdc_trusted(&self, req: &CdcTrusted) -> Result<CdcTrusted, ApiError> {
        cdc::set_trusted(&self.running, self.cdc.as_deref(), req)
    }

    /// `DELETE /v1/cdc/members/{address}`: remove a member; its entries leave every host's
    /// view at once. Returns the CDC as it is now.
    pub fn remove_cdc_member(&self, address: &str) -> Result<CdcView, ApiError> {
        cdc::remove_member(&self.running, self.cdc.as_deref(), address)
    }

    /// Publish what the running configuration asks for over mDNS ([`crate::mdns::sync`]).
    pub(crate) fn sync_mdns(&self) -> Option<crate::api::MdnsView> {
        crate::mdns::sync(self.mdns.as_deref(), &self.running)
    }

    /// `GET /v1/mdns`: the mode and the records.
    pub fn mdns(&self) -> crate::api::MdnsView {
        crate::mdns::view(self.mdns.as_deref(), &self.running)
    }

    /// `PUT /v1/mdns`: set the mode (`[discovery] mdns` of the running configuration, saved by
    /// `save` and autosave) and publish or withdraw accordingly.
    pub fn set_mdns(
        &self,
        req: &crate::api::MdnsRequest,
    ) -> Result<crate::api::MdnsView, ApiError> {
        crate::mdns::set_mode(self.mdns.as_deref(), &self.running, req)
    }

    /// `POST /v1/save`: write the running configuration to `req.path` or the file serve was
    /// started with, atomically (a reader sees the old file or the new one, never a part).
    pub fn save(&self, req: &SaveRequest) -> Result<Saved, ApiError> {
        self.running.save(req.path.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebof_config::codes as cfg_codes;
    use std::path::Path;

    const NQN: &str = "nqn.2026-11.io.ebof:t";

    #[test]
    fn a_saved_configuration_with_inline_keys_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ebof.toml");
        std::fs::write(&path, "# old\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut cfg = Config::from_toml_str(TOML).unwrap();
        write_config(&cfg, &path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o644, "no secrets: the owner's mode is kept");
        let with_key = format!(
            "{TOML}[[hosts]]\nnqn = \"nqn.2014-08.org.example:h\"\ndhchap_key = \"DHHC-1:00:ZjRhMWY3MzY0NjhhNTFmMmUwOGQ4ZTc5ZTc3YTc3Zjc0OTNlYzQyN2IwNDYyYjQ=:\"\n"
        );
        cfg = Config::from_toml_str(&with_key).unwrap();
        write_config(&cfg, &path).unwrap();
        assert_eq!(
            mode(&path),
            0o600,
            "inline keys: group and others lose access"
        );
    }
    const TOML: &str = "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n\
                        [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:t\"\n\
                        [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n";

    fn control() -> Control {
        let cfg = Config::from_toml_str(TOML).unwrap();
        let target = Arc::new(build::build_target(&cfg).unwrap());
        Control::new(target, cfg, None)
    }

    fn ram(size: u64) -> NamespaceRequest {
        NamespaceRequest {
            backend: "ram".into(),
            size: Some(size),
            ..Default::default()
        }
    }

    /// The configuration file with `req` as its second namespace (NSID `nsid`).
    fn as_file(req: &NamespaceRequest, nsid: u32) -> String {
        let mut t = format!("{TOML}[[subsystems.namespaces]]\nnsid = {nsid}\n");
        t += &format!("backend = {:?}\n", req.backend);
        match req.size {
            // TOML integers are i64: a larger size is written as text.
            Some(v) if i64::try_from(v).is_err() => t += &format!("size = \"{v}\"\n"),
            Some(v) => t += &format!("size = {v}\n"),
            None => {}
        }
        if let Some(v) = &req.path {
            t += &format!("path = {v:?}\n");
        }
        if let Some(v) = req.block_size {
            t += &format!("block_size = {v}\n");
        }
        if let Some(v) = &req.uuid {
            t += &format!("uuid = {v:?}\n");
        }
        if let Some(v) = req.direct {
            t += &format!("direct = {v}\n");
        }
        if let Some(v) = req.ana_group {
            t += &format!("ana_group = {v}\n");
        }
        t
    }

    /// A namespace added through the API is the one the file would give, defaults included.
    #[test]
    fn an_added_namespace_is_the_one_the_file_gives() {
        let c = control();
        let dir = tempfile::tempdir().unwrap();
        c.lock().management.data_dirs.push(dir.path().to_path_buf());
        let img = dir.path().join("disk.img").display().to_string();
        let requests = [
            NamespaceRequest {
                nsid: Some(5),
                block_size: Some(4096),
                uuid: Some(" 0b5e3c1a-7f2d-4c9e-9a41-2f6c8e1d3b57 ".into()),
                ana_group: Some(2),
                ..ram(2 << 20)
            },
            ram(1 << 20),
            NamespaceRequest {
                backend: "file".into(),
                path: Some(img),
                size: Some(1 << 20),
                direct: Some(false),
                ..Default::default()
            },
        ];
        for (i, req) in requests.iter().enumerate() {
            let added = c.add_namespace(NQN, req).unwrap();
            let nsid = added.namespace.nsid;
            let file = Config::from_toml_str(&as_file(req, nsid)).unwrap();
            assert_eq!(
                c.running().subsystems[0].namespaces[i + 1],
                file.subsystems[0].namespaces[1],
                "{req:?}"
            );
        }
        // Without an NSID: the lowest free one (the file numbers by position instead).
        assert_eq!(c.running().subsystems[0].namespaces[2].nsid, 2);
    }

    /// A refused namespace gets the code and field path the file gets for it, and changes
    /// nothing.
    #[test]
    fn a_refused_namespace_gets_the_file_s_code_and_path() {
        let c = control();
        let before = c.running();
        let cases = [
            (
                NamespaceRequest {
                    size: None,
                    ..ram(0)
                },
                cfg_codes::MISSING_FIELD,
                "size",
            ),
            (
                NamespaceRequest {
                    path: Some("/tmp/x".into()),
                    ..ram(1 << 20)
                },
                cfg_codes::FORBIDDEN_FIELD,
                "path",
            ),
            (
                NamespaceRequest {
                    direct: Some(true),
                    ..ram(1 << 20)
                },
                cfg_codes::FORBIDDEN_FIELD,
                "direct",
            ),
            (
                NamespaceRequest {
                    backend: "block".into(),
                    path: Some("/dev/null".into()),
                    ..ram(1 << 20)
                },
                cfg_codes::FORBIDDEN_FIELD,
                "size",
            ),
            (
                NamespaceRequest {
                    backend: "file".into(),
                    ..Default::default()
                },
                cfg_codes::MISSING_FIELD,
                "path",
            ),
            (
                NamespaceRequest {
                    backend: "tape".into(),
                    ..ram(1 << 20)
                },
                cfg_codes::INVALID_BACKEND,
                "backend",
            ),
            (
                NamespaceRequest {
                    uuid: Some("not-a-uuid".into()),
                    ..ram(1 << 20)
                },
                cfg_codes::INVALID_UUID,
                "uuid",
            ),
            (
                NamespaceRequest {
                    block_size: Some(520),
                    ..ram(1 << 20)
                },
                cfg_codes::INVALID_BLOCK_SIZE,
                "block_size",
            ),
            (ram(1000), cfg_codes::INVALID_SIZE, "size"),
            (ram(u64::MAX), cfg_codes::INVALID_SIZE, "size"),
            (
                NamespaceRequest {
                    nsid: Some(0),
                    ..ram(1 << 20)
                },
                cfg_codes::INVALID_NSID,
                "nsid",
            ),
            (
                NamespaceRequest {
                    ana_group: Some(0),
                    ..ram(1 << 20)
                },
                cfg_codes::INVALID_ANA_GROUP,
                "ana_group",
            ),
        ];
        for (req, code, field) in cases {
            let e = c.add_namespace(NQN, &req).unwrap_err();
            assert_eq!(e.code, code, "{req:?}: {e}");
            assert_eq!(
                e.path,
                format!("subsystems[0].namespaces[1].{field}"),
                "{req:?}"
            );
            assert!(e.message.len() > 10, "{e}");
            let nsid = req.nsid.unwrap_or(2);
            let f = Config::from_toml_str(&as_file(&req, nsid)).unwrap_err();
            assert_eq!(
                (f.code, f.path.as_str()),
                (code, e.path.as_str()),
                "{req:?}"
            );
        }
        assert_eq!(c.running(), before);
        assert_eq!(c.target.subsystems()[0].namespaces.len(), 1);
    }
}

/// Issue 32 (M1, M5): what the management token may touch.
#[cfg(test)]
mod allowlist_tests {
    use super::*;
    use ebof_config::codes as cfg_codes;
    use std::path::Path;

    const NQN: &str = "nqn.2026-11.io.ebof:t";

    /// A box with `data` as its only data directory and a pool in `pool`.
    fn control(data: &Path, pool: &Path, config_file: Option<PathBuf>) -> Control {
        let text = format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n\
             [management]\ndata_dirs = [{:?}]\n\
             [[pools]]\nname = \"p\"\ndirectory = {:?}\n\
             [[subsystems]]\nnqn = \"{NQN}\"\n\
             [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n",
            data.display().to_string(),
            pool.display().to_string(),
        );
        let cfg = Config::from_toml_str(&text).unwrap();
        crate::pools::ensure_directories(&cfg).unwrap();
        let target = Arc::new(build::build_target(&cfg).unwrap());
        Control::new(target, cfg, config_file)
    }

    fn file(path: &Path) -> NamespaceRequest {
        NamespaceRequest {
            backend: "file".into(),
            path: Some(path.display().to_string()),
            size: Some(1 << 20),
            ..Default::default()
        }
    }

    #[test]
    fn namespaces_only_inside_pools_and_data_dirs() {
        let t = tempfile::tempdir().unwrap();
        let (data, pool) = (t.path().join("data"), t.path().join("pool"));
        std::fs::create_dir_all(&data).unwrap();
        let c = control(&data, &pool, None);
        let before = c.running();
        let outside = t.path().join("outside.img");
        let cases = [
            (file(&outside), codes::PATH_NOT_ALLOWED),
            (file(&data.join("../outside.img")), codes::PATH_NOT_ALLOWED),
            (
                file(Path::new("/root/.ssh/authorized_keys")),
                codes::PATH_NOT_ALLOWED,
            ),
            (
                NamespaceRequest {
                    backend: "block".into(),
                    path: Some("/etc/hostname".into()),
                    ..Default::default()
                },
                codes::DEVICE_NOT_ALLOWED,
            ),
            (
                NamespaceRequest {
                    backend: "block".into(),
                    path: Some("/dev/null".into()),
                    ..Default::default()
                },
                codes::DEVICE_NOT_ALLOWED,
            ),
        ];
        for (req, code) in cases {
            let e = c.add_namespace(NQN, &req).unwrap_err();
            assert_eq!(
                (e.code.as_str(), e.path.as_str()),
                (code, "subsystems[0].namespaces[1].path"),
                "{req:?}: {e}"
            );
        }
        assert!(!outside.exists(), "nothing made outside");
        assert_eq!(c.running(), before);
        // Inside the data directory and the pool's: fine; directories made for the file are
        // owner-only, as the file is (M2), whatever the umask.
        crate::paths::tests::umask_022();
        c.add_namespace(NQN, &file(&data.join("a.img"))).unwrap();
        c.add_namespace(NQN, &file(&pool.join("b.img"))).unwrap();
        c.add_namespace(NQN, &file(&data.join("new/dir/c.img")))
            .unwrap();
        use std::os::unix::fs::MetadataExt;
        for p in [data.join("new"), data.join("new/dir")] {
            assert_eq!(
                std::fs::metadata(&p).unwrap().mode() & 0o777,
                0o700,
                "{p:?}"
            );
        }
        for p in [data.join("a.img"), data.join("new/dir/c.img")] {
            assert_eq!(
                std::fs::metadata(&p).unwrap().mode() & 0o777,
                0o600,
                "{p:?}"
            );
        }
    }

    #[test]
    fn save_only_over_the_configuration_or_in_data_dirs() {
        let t = tempfile::tempdir().unwrap();
        let (data, pool) = (t.path().join("data"), t.path().join("pool"));
        std::fs::create_dir_all(&data).unwrap();
        let conf = t.path().join("ebof.toml");
        let c = control(&data, &pool, Some(conf.clone()));
        let save = |p: &Path| {
            c.save(&SaveRequest {
                path: Some(p.display().to_string()),
            })
        };
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let e = save(&victim).unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.path.as_str()),
            (codes::SAVE_PATH_NOT_ALLOWED, "path")
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        save(&conf).unwrap();
        save(&data.join("copy.toml")).unwrap();
        c.save(&SaveRequest { path: None }).unwrap();
    }

    /// M5: `/pool/sub/../x.img` is `/pool/x.img`: the pool namespace that wants that file
    /// must not clear it as an orphan.
    #[test]
    fn one_file_under_two_names_is_a_duplicate_path() {
        let t = tempfile::tempdir().unwrap();
        let (data, pool) = (t.path().join("data"), t.path().join("pool"));
        std::fs::create_dir_all(&data).unwrap();
        let c = control(&data, &pool, None);
        std::fs::create_dir_all(pool.join("sub")).unwrap();
        let name = ebof_config::pool_file_name(NQN, 7);
        let first = pool.join("sub").join("..").join(&name);
        c.add_namespace(NQN, &file(&first)).unwrap();
        std::fs::write(pool.join(&name), vec![0xAB; 4096]).unwrap();
        let e = c
            .add_namespace(
                NQN,
                &NamespaceRequest {
                    nsid: Some(7),
                    pool: Some("p".into()),
                    size: Some(1 << 20),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert_eq!(e.code, cfg_codes::DUPLICATE_PATH, "{e}");
        assert_eq!(
            std::fs::read(&first).unwrap()[..4],
            [0xAB; 4],
            "its data is intact"
        );
        // Two names of one file that does not exist yet.
        let e = c
            .add_namespace(NQN, &file(&data.join("sub/../d.img")))
            .unwrap_err();
        assert_eq!(
            e.code,
            codes::PATH_NOT_ALLOWED,
            "data/sub does not exist: {e}"
        );
        std::fs::create_dir_all(data.join("sub")).unwrap();
        c.add_namespace(NQN, &file(&data.join("d.img"))).unwrap();
        let e = c
            .add_namespace(NQN, &file(&data.join("sub/../d.img")))
            .unwrap_err();
        assert_eq!(e.code, cfg_codes::DUPLICATE_PATH, "{e}");
    }

    /// M2: a saved configuration is owner-only whatever the umask, and the temporary file
    /// is not at a name anyone can guess.
    #[test]
    fn a_saved_configuration_is_owner_only() {
        use std::os::unix::fs::MetadataExt;
        crate::paths::tests::umask_022();
        let t = tempfile::tempdir().unwrap();
        let (data, pool) = (t.path().join("data"), t.path().join("pool"));
        std::fs::create_dir_all(&data).unwrap();
        let c = control(&data, &pool, None);
        // The old, predictable temporary name, with a link planted at it.
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let planted = data.join(format!(".new.toml.tmp-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let new = data.join("new.toml");
        c.save(&SaveRequest {
            path: Some(new.display().to_string()),
        })
        .unwrap();
        assert_eq!(std::fs::metadata(&new).unwrap().mode() & 0o7777, 0o600);
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(Config::load(&new).is_ok());
        // An existing file keeps its mode.
        let open = data.join("open.toml");
        std::fs::write(&open, b"").unwrap();
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o640))
            .unwrap();
        write_config(&c.running(), &open).unwrap();
        assert_eq!(std::fs::metadata(&open).unwrap().mode() & 0o7777, 0o640);
        let left: Vec<_> = std::fs::read_dir(&data)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-") && !planted.ends_with(n))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
