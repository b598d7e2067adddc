//! From configuration to target: open the backends of namespaces, build the [`Target`] and
//! apply the rest of the configuration to it through the appliers ([`crate::apply`], listed in
//! `appliers`), as the change from nothing ([`nothing`]) to the file. Used by `ebof serve` at
//! start; the management API opens the namespaces it adds with the same [`open_namespace`] and
//! runs the same appliers after every change, so both check and apply the configuration the same
//! way and fail with the same messages.

use crate::ana::Ana;
use crate::api::ApiError;
use crate::apply::Apply;
use crate::hostkeys::HostKeys;
use crate::masking::Masking;
use crate::qos::Qos;
use crate::referrals::Referrals;
use ebof_backend::{BackendOptions, BackendSpec};
use ebof_config::{BackendChoice, Config};
use nvmf_target::reservation::{FileStore, NsReservations};
use nvmf_target::{ListenerInfo, ListenerTls, Namespace, Subsystem, Target, TargetLimits};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Largest transfer (MDTS) we advertise by default over NVMe/TCP (`[target] max_transfer`).
pub const MAX_TRANSFER: u32 = ebof_config::DEFAULT_MAX_TRANSFER;

/// What to open for a configured backend.
pub fn backend_spec(b: &BackendChoice, ram_huge_pages: bool) -> BackendSpec {
    match b {
        BackendChoice::Ram { size } if ram_huge_pages => BackendSpec::RamHugePages { size: *size },
        BackendChoice::Ram { size } => BackendSpec::Ram { size: *size },
        // A file named without a size is used at its current size, or created with the
        // default size when missing.
        BackendChoice::File { path, size } => BackendSpec::File {
            path: path.clone(),
            size: size.or_else(|| (!path.exists()).then_some(ebof_config::DEFAULT_FILE_SIZE)),
        },
        BackendChoice::Block { path } => BackendSpec::Block { path: path.clone() },
    }
}

/// A file namespace whose file does not exist yet is created, and so is its directory: the
/// guide's (docs/guide/serving.md) `/var/lib/ebof/disk1.img` should work on a fresh machine. When the directory cannot
/// be created, say which one and how to fix it.
pub fn ensure_parent_dir(field: &str, path: &Path) -> Result<(), String> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if path.exists() || dir.is_dir() {
        return Ok(());
    }
    // Owner-only, as the file it will hold (issue 32, M2).
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            format!(
                "{field}: directory {} does not exist and cannot be created; create it \
             (mkdir -p {}) or choose another path: {e}",
                dir.display(),
                dir.display()
            )
        })?;
    tracing::info!(directory = %dir.display(), "created directory for a file namespace");
    Ok(())
}

/// O_DIRECT transfers whole device blocks: a namespace block smaller than the device's logical
/// block (or the file system's direct-I/O granularity) would make every I/O fail, so refuse it,
/// naming the field and the fix.
pub fn check_direct_block_size(
    field: &str,
    block_size: u32,
    granularity: u32,
    path: &Path,
) -> Result<(), String> {
    if block_size < granularity {
        return Err(format!(
            "{field}: block_size {block_size} is smaller than the logical block size \
             {granularity} of {} (needed with direct = true); use block_size = {granularity} \
             or direct = false",
            path.display()
        ));
    }
    Ok(())
}

/// Open the backend of configured namespace `n` of subsystem `nqn` in configuration `cfg`
/// (creating a missing file and its directory) and make the namespace; a mirrored one runs its
/// mirror ([`crate::mirror::open`]). `field` names it in errors, e.g.
/// `subsystems[0].namespaces[1]`.
pub fn open_namespace(
    nqn: &str,
    n: &ebof_config::Namespace,
    cfg: &Config,
    field: &str,
) -> Result<Arc<Namespace>, String> {
    let (ram_huge_pages, state_dir) = (cfg.target.ram_huge_pages, cfg.target.state_dir.as_deref());
    // Encrypted (ADR 0029): the key is read and checked before anything is created.
    let crypt = crate::crypt::prepare(n, cfg, field)?;
    if let BackendChoice::File { path, .. } = &n.backend {
        ensure_parent_dir(&format!("{field}.path"), path)?;
    }
    let options = BackendOptions { direct: n.direct };
    let backend = ebof_backend::open_with(&backend_spec(&n.backend, ram_huge_pages), options)
        .map_err(|e| format!("{field} (nsid {}): cannot open backend: {e}", n.nsid))?;
    if let Some(granularity) = backend.raw_io().and_then(|r| r.direct) {
        check_direct_block_size(
            &format!("{field}.block_size"),
            n.block_size,
            granularity,
            n.backend.path().unwrap_or(Path::new("")),
        )?;
    }
    if backend.size() % u64::from(n.block_size) != 0 || backend.size() == 0 {
        return Err(format!(
            "{field}: backend size {} is not a positive multiple of block_size {}",
            backend.size(),
            n.block_size
        ));
    }
    let backend = match crypt {
        Some(p) => crate::crypt::wrap(p, backend)?,
        None => backend,
    };
    let mirror = match &n.mirror {
        Some(m) => Some(crate::mirror::open(nqn, n, m, cfg, backend.clone(), field)?),
        None => None,
    };
    let backend = mirror.as_ref().map_or(backend, |m| m.backend.clone());
    let mut ns = Namespace::new(n.nsid, backend, n.block_size, n.uuid).with_ana_group(n.ana_group);
    if let Some(m) = &mirror {
        ns = ns.with_mirror(m.fence.clone());
    }
    if !n.qos.is_unlimited() {
        ns.qos.set(crate::qos::limits(&n.qos));
    }
    if let Some(path) = reservation_state_path(n, state_dir) {
        ns = ns.with_reservations(load_reservations(&path, field)?);
    }
    let ns = Arc::new(ns);
    if let Some(m) = mirror {
        m.attach(&ns);
    }
    Ok(ns)
}

/// Where namespace `n` persists its reservations (Persist Through Power Loss): in
/// `[target] state_dir` as `ns-<uuid>.resv`, else beside a file namespace's file as
/// `<path>.resv`; RAM and block namespaces without a state directory cannot persist.
pub fn reservation_state_path(
    n: &ebof_config::Namespace,
    state_dir: Option<&Path>,
) -> Option<PathBuf> {
    match (state_dir, &n.backend) {
        (Some(d), _) => Some(d.join(format!("ns-{}.resv", uuid::Uuid::from_bytes(n.uuid)))),
        (None, BackendChoice::File { path, .. }) => {
            let mut p = path.clone().into_os_string();
            p.push(".resv");
            Some(PathBuf::from(p))
        }
        (None, _) => None,
    }
}

/// The files a pool namespace owns (deleted with it, [`crate::pools::delete_files`]): its key
/// header (encrypted pools; destroyed first), its data file and its persisted reservation
/// state.
pub(crate) fn owned_files(n: &ebof_config::Namespace, state_dir: Option<&Path>) -> Vec<PathBuf> {
    let (Some(_), Some(path)) = (&n.pool, n.backend.path()) else {
        return Vec::new();
    };
    // The key header first: deleting destroys the key before the data (crypto-erase).
    let mut files = vec![
        ebof_backend::crypt::KeyHeader::path_for(path),
        path.to_path_buf(),
    ];
    files.extend(reservation_state_path(n, state_dir));
    files
}

/// The persisted reservation state at `path` (none yet: empty). An unreadable or corrupt file
/// is an error: persisted reservations are never dropped silently.
fn load_reservations(path: &Path, field: &str) -> Result<NsReservations, String> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(|e| {
            format!(
                "{field}: cannot create the state directory {}: {e}",
                dir.display()
            )
        })?;
    }
    let table = FileStore::load(path)
        .map_err(|e| {
            format!("{field}: persisted reservation state unusable: {e} (fix or remove the file)")
        })?
        .unwrap_or_default();
    if !table.regs.is_empty() {
        tracing::info!(file = %path.display(), registrants = table.regs.len(),
            reserved = table.reservation.is_some(), "reservations restored (PTPL)");
    }
    Ok(NsReservations::with_store(
        Arc::new(FileStore::new(path)),
        table,
    ))
}

/// The appliers of the configuration's parts that have live state in the target, in the order
/// they run ([`crate::apply`]). The services a control plane is given add theirs (the CDC's
/// members, [`crate::control::Control::with_services`]).
pub(crate) fn appliers() -> Vec<Arc<dyn Apply>> {
    vec![
        Arc::new(Ana),
        Arc::new(Referrals),
        Arc::new(Qos),
        Arc::new(Masking),
        Arc::new(HostKeys),
        Arc::new(crate::mirror::MirrorApply),
    ]
}

/// What start-up applies the configuration from: `cfg` without anything the appliers set (no
/// subsystems, listeners, ANA states, referrals, host keys or CDC).
pub fn nothing(cfg: &Config) -> Config {
    let mut c = cfg.clone();
    c.subsystems.clear();
    c.listeners.clear();
    c.discovery = None;
    c.ana.clear();
    c.discovery_settings.referrals.clear();
    c.hosts.clear();
    c.cdc = None;
    c
}

/// An applier's refusal at start, as start-up reports it (`path: message`).
fn start_error(e: ApiError) -> String {
    if e.path.is_empty() {
        e.message
    } else {
        format!("{}: {}", e.path, e.message)
    }
}

/// Open every backend and build the target model. Nothing is started on failure.
pub fn build_target(cfg: &Config) -> Result<Target, String> {
    crate::pools::ensure_directories(cfg)?;
    let mut subsystems = Vec::new();
    for (si, s) in cfg.subsystems.iter().enumerate() {
        let mut namespaces = Vec::new();
        for (ni, n) in s.namespaces.iter().enumerate() {
            let field = format!("subsystems[{si}].namespaces[{ni}]");
            namespaces.push(open_namespace(&s.nqn, n, cfg, &field)?);
        }
        subsystems.push(Subsystem {
            nqn: s.nqn.clone(),
            serial: s.serial.clone(),
            model: s.model.clone(),
            allow_any_host: s.allow_any_host,
            hosts: s.hosts.clone(),
            namespaces,
            ns_hosts: crate::masking::ns_hosts(s),
        });
    }
    let t = &cfg.target;
    let limits = TargetLimits {
        io_inline_data: t.io_inline_data,
        max_io_queues: t.max_io_queues,
        max_namespaces: t.max_namespaces,
        max_queue_size: t.max_queue_size,
        max_transfer: t.max_transfer,
        cntlid_min: t.cntlid_min,
        cntlid_max: t.cntlid_max,
    };
    let target = Target::new(subsystems, listener_infos(cfg), limits, Instant::now());
    target.host_io.set_enabled(cfg.metrics_per_host_io);
    let appliers = appliers();
    crate::apply::all(appliers.iter().map(|a| &**a), &nothing(cfg), cfg, &target)
        .map_err(start_error)?;
    Ok(target)
}

/// Listeners configured with port 0 (any free port) get the port the server bound (`bound`: I/O
/// listeners, then discovery, as configured), in `cfg` and in the target's discovery log.
pub fn settle_bound_ports(cfg: &mut Config, bound: &[std::net::SocketAddr], target: &Target) {
    let mut changed = false;
    for (l, b) in cfg
        .listeners
        .iter_mut()
        .chain(cfg.discovery.iter_mut())
        .zip(bound)
    {
        if l.port == 0 {
            // ANA states named for port 0 follow the port the listener got.
            for a in cfg.ana.iter_mut().filter(|a| a.listener == *l) {
                a.listener.port = b.port();
            }
            l.port = b.port();
            changed = true;
        }
    }
    if changed {
        target.set_listeners(listener_infos(cfg));
        if let Err(e) = Ana.apply(cfg, cfg, target) {
            tracing::warn!(error = %start_error(e), "ANA states of listeners on port 0 not applied");
        }
    }
}

/// The configured NVMe listeners as the discovery log numbers them (port IDs from 1).
pub fn listener_infos(cfg: &Config) -> Vec<ListenerInfo> {
    cfg.listeners
        .iter()
        .enumerate()
        .map(|(i, l)| ListenerInfo {
            addr: l.socket_addr(),
            portid: (i + 1) as u16,
            tls: match cfg.tls_mode(l) {
                ebof_config::TlsMode::Off => ListenerTls::Off,
                ebof_config::TlsMode::Optional => ListenerTls::Optional,
                ebof_config::TlsMode::Required => ListenerTls::Required,
            },
            transport: match cfg.transport(l) {
                ebof_config::Transport::Tcp => nvmf_target::Transport::Tcp,
                ebof_config::Transport::Rdma => nvmf_target::Transport::Rdma,
            },
        })
        .collect()
}

/// A [`Control`](crate::control::Control) over one subsystem (`nqn.2026-11.io.ebof:t`) with a
/// 1 MiB RAM namespace and no configuration file: the fixture of the crate's unit tests.
#[cfg(test)]
pub(crate) fn test_control() -> std::sync::Arc<crate::control::Control> {
    use std::sync::Arc;
    let cfg = ebof_config::Config::from_toml_str(
        "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n\
         [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:t\"\n\
         [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n",
    )
    .unwrap();
    let target = Arc::new(build_target(&cfg).unwrap());
    Arc::new(crate::control::Control::new(target, cfg, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_parent_directories_of_a_file_namespace_are_created() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("var/lib/ebof/disk1.img");
        let toml = format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:t\"\n\
             [[subsystems.namespaces]]\nbackend = \"file\"\npath = {:?}\nsize = \"1M\"\n",
            path.display().to_string()
        );
        let cfg = Config::from_toml_str(&toml).unwrap();
        let target = build_target(&cfg).unwrap();
        assert_eq!(target.subsystems()[0].namespaces[0].backend.size(), 1 << 20);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
    }

    /// PTPL: a reservation persisted beside a file namespace (or in `state_dir`) is there
    /// again after a rebuild (a restart); without PTPL it is not; a corrupt file stops the
    /// start with an error naming it.
    #[test]
    fn reservations_with_ptpl_survive_a_restart_and_corruption_is_refused() {
        use nvme_spec::resv::{ResvCdw10, ResvKeys, cptpl, racqa, rrega, rtype};
        let tmp = tempfile::tempdir().unwrap();
        let img = tmp.path().join("disk.img");
        let file_cfg = format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:t\"\n\
             [[subsystems.namespaces]]\nbackend = \"file\"\npath = {:?}\nsize = \"1M\"\n",
            img.display().to_string()
        );
        let ram_cfg = format!(
            "[target]\nstate_dir = {:?}\n[[listeners]]\naddress = \"127.0.0.1\"\n[[subsystems]]\n\
             nqn = \"nqn.2026-11.io.ebof:t\"\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n",
            tmp.path().join("state").display().to_string()
        );
        let host = [3u8; 16];
        for (toml, file) in [
            (file_cfg.clone(), tmp.path().join("disk.img.resv")),
            (
                ram_cfg,
                tmp.path().join("state").join(format!(
                    "ns-{}.resv",
                    uuid::Uuid::from_bytes(
                        Config::from_toml_str(&file_cfg).unwrap().subsystems[0].namespaces[0].uuid
                    )
                )),
            ),
        ] {
            let cfg = Config::from_toml_str(&toml).unwrap();
            let ns = build_target(&cfg).unwrap().subsystems()[0].namespaces[0].clone();
            assert!(ns.resv.ptpl_capable());
            let mut reg = ResvCdw10::from_cdw10(u32::from(rrega::REGISTER));
            reg.cptpl = cptpl::SET;
            let keys = ResvKeys {
                crkey: 0x11,
                second: 0x11,
            };
            ns.resv
                .update(|t| t.register(&host, reg, keys, true))
                .unwrap();
            let acq = ResvCdw10::from_cdw10(
                u32::from(racqa::ACQUIRE) | u32::from(rtype::EXCLUSIVE_ACCESS) << 8,
            );
            ns.resv.update(|t| t.acquire(&host, acq, keys)).unwrap();
            let before = ns.resv.snapshot();
            drop(ns);
            assert!(file.exists(), "{}", file.display());
            let again = build_target(&cfg).unwrap().subsystems()[0].namespaces[0].clone();
            assert_eq!(again.resv.snapshot(), before);
            assert!(
                again
                    .resv
                    .check(&[9; 16], nvme_spec::opcode::io::READ)
                    .is_err()
            );
            // PTPL off: the next start has nothing.
            let mut off = ResvCdw10::from_cdw10(u32::from(rrega::REGISTER));
            off.cptpl = cptpl::CLEAR;
            again
                .resv
                .update(|t| t.register(&host, off, keys, true))
                .unwrap();
            drop(again);
            let third = build_target(&cfg).unwrap().subsystems()[0].namespaces[0].clone();
            assert!(third.resv.snapshot().regs.is_empty());
            drop(third);
            std::fs::write(&file, "ebof-reservations 1\ngeneration 1\nptpl 1\n").unwrap();
            let e = build_target(&cfg).map(|_| ()).unwrap_err();
            assert!(
                e.contains(&file.display().to_string())
                    && e.contains("subsystems[0].namespaces[0]"),
                "{e}"
            );
        }
    }

    #[test]
    fn an_uncreatable_directory_is_named_with_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        // A regular file where a directory would have to be.
        let blocker = tmp.path().join("not-a-dir");
        std::fs::write(&blocker, b"x").unwrap();
        let path = blocker.join("sub/disk.img");
        let err = ensure_parent_dir("subsystems[0].namespaces[0].path", &path).unwrap_err();
        let text = err;
        let dir = blocker.join("sub");
        assert!(
            text.starts_with(&format!(
                "subsystems[0].namespaces[0].path: directory {} does not exist",
                dir.display()
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("mkdir -p {}", dir.display())),
            "{text}"
        );
        assert!(!dir.exists());
    }

    #[test]
    fn direct_namespaces_need_blocks_of_at_least_the_device_granularity() {
        let field = "subsystems[0].namespaces[1].block_size";
        let dev = Path::new("/dev/sdz");
        check_direct_block_size(field, 4096, 4096, dev).unwrap();
        check_direct_block_size(field, 4096, 512, dev).unwrap();
        let err = check_direct_block_size(field, 512, 4096, dev).unwrap_err();
        assert_eq!(
            err,
            "subsystems[0].namespaces[1].block_size: block_size 512 is smaller than the logical \
             block size 4096 of /dev/sdz (needed with direct = true); use block_size = 4096 or \
             direct = false"
        );
    }
}
