//! The CSI Node service: attach a volume to this machine with the kernel's NVMe/TCP
//! initiator (every listener of the volume: native multipath), put a file system on it when
//! it has none, mount it at the staging path, bind it into pods, grow it, report its usage,
//! and undo each step. Every call is idempotent: a retried or half-done stage is finished.

use crate::names::{self, ctx};
use crate::pb;
use crate::pb::volume_capability::{AccessType, access_mode::Mode};
use crate::rpc::{BusySet, absolute, invalid, ok, required};
use crate::sys;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

/// Bound on one external command (connect, mkfs, mount…).
const CMD_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound on waiting for the kernel to show a connected namespace or its new size.
const DEVICE_WAIT: Duration = Duration::from_secs(30);
/// How often the waits look again.
const POLL: Duration = Duration::from_millis(100);

/// The node's identity and topology.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This host's NQN: the CSI node ID, what ControllerPublish allows on the subsystem.
    pub node_id: String,
    /// The zone this node is in (`topology.csi.ebof.io/zone`).
    pub zone: Option<String>,
}

impl NodeConfig {
    /// `--node-id` as given, else the content of `/etc/nvme/hostnqn`.
    pub fn new(node_id: Option<String>, zone: Option<String>) -> anyhow::Result<NodeConfig> {
        let node_id = match node_id {
            Some(n) => n,
            None => std::fs::read_to_string("/etc/nvme/hostnqn")
                .map_err(|e| {
                    anyhow::anyhow!(
                        "no --node-id and /etc/nvme/hostnqn cannot be read ({e}): the node ID is this host's NQN (`nvme gen-hostnqn > /etc/nvme/hostnqn`)"
                    )
                })?
                .trim()
                .to_string(),
        };
        if !node_id.starts_with("nqn.") || node_id.len() > 223 {
            anyhow::bail!("node ID {node_id:?} is not an NQN (nqn.…, at most 223 bytes)");
        }
        if let Some(z) = &zone
            && !crate::boxes::valid_label(z)
        {
            anyhow::bail!("--zone {z:?} is not a topology label value");
        }
        Ok(NodeConfig { node_id, zone })
    }
}

/// What the node runs and where it looks: the real system, unless a test points it at a
/// fake sysfs tree and fake tools.
#[derive(Clone, Debug)]
pub(crate) struct NodeSystem {
    /// The sysfs root (`/sys`).
    pub sysfs: PathBuf,
    /// nvme-cli.
    pub nvme: String,
    /// util-linux `blkid`.
    pub blkid: String,
    /// `mkfs.ext4`.
    pub mkfs_ext4: String,
    /// `mkfs.xfs`.
    pub mkfs_xfs: String,
    /// `mount`.
    pub mount: String,
    /// `umount`.
    pub umount: String,
    /// `resize2fs`.
    pub resize2fs: String,
    /// `xfs_growfs`.
    pub xfs_growfs: String,
}

impl Default for NodeSystem {
    fn default() -> NodeSystem {
        NodeSystem {
            sysfs: PathBuf::from("/sys"),
            nvme: "nvme".into(),
            blkid: "blkid".into(),
            mkfs_ext4: "mkfs.ext4".into(),
            mkfs_xfs: "mkfs.xfs".into(),
            mount: "mount".into(),
            umount: "umount".into(),
            resize2fs: "resize2fs".into(),
            xfs_growfs: "xfs_growfs".into(),
        }
    }
}

/// The Node service.
#[derive(Debug)]
pub struct Node {
    cfg: NodeConfig,
    busy: BusySet,
    os: NodeSystem,
}

/// Whether an access mode lets the node write.
fn writable(mode: i32) -> bool {
    !matches!(
        Mode::try_from(mode),
        Ok(Mode::SingleNodeReaderOnly | Mode::MultiNodeReaderOnly)
    )
}

/// What a capability asks for.
enum Access {
    Block,
    Mount { fs_type: String, flags: Vec<String> },
}

fn access(cap: Option<&pb::VolumeCapability>) -> Result<(Access, bool), Status> {
    let cap = cap.ok_or_else(|| invalid("volume_capability is required"))?;
    let mode = cap
        .access_mode
        .as_ref()
        .map(|m| m.mode)
        .ok_or_else(|| invalid("volume_capability.access_mode is required"))?;
    let a = match &cap.access_type {
        Some(AccessType::Block(_)) => Access::Block,
        Some(AccessType::Mount(m)) => Access::Mount {
            fs_type: crate::rpc::fs_type(&m.fs_type)
                .map_err(invalid)?
                .to_string(),
            flags: m.mount_flags.clone(),
        },
        None => return Err(invalid("volume_capability needs block or mount")),
    };
    Ok((a, writable(mode)))
}

impl Node {
    /// The Node service of a host named by `cfg`.
    pub fn new(cfg: NodeConfig) -> anyhow::Result<Node> {
        Ok(Node::with_system(cfg, NodeSystem::default()))
    }

    /// The Node service on the system `os` describes.
    pub(crate) fn with_system(cfg: NodeConfig, os: NodeSystem) -> Node {
        Node {
            cfg,
            busy: BusySet::default(),
            os,
        }
    }

    /// Connect every listener of the volume not connected yet; Ok when at least one path is
    /// up.
    async fn connect(
        &self,
        nqn: &str,
        paths: &[names::Path],
        secrets: &[String],
    ) -> Result<(), Status> {
        let mut errors = Vec::new();
        let mut up = 0;
        for p in paths {
            let have = sys::nvme_controllers(&self.os.sysfs, nqn)
                .iter()
                .any(|(_, a)| sys::address_is(a, &p.addr, p.port));
            if have {
                up += 1;
                continue;
            }
            let port = p.port.to_string();
            let mut args = vec![
                "connect",
                "-t",
                "tcp",
                "-a",
                p.addr.as_str(),
                "-s",
                port.as_str(),
                "-n",
                nqn,
                "--hostnqn",
                self.cfg.node_id.as_str(),
            ];
            args.extend(secrets.iter().map(String::as_str));
            match sys::run(&self.os.nvme, &args, CMD_TIMEOUT).await {
                Ok(_) => up += 1,
                Err(e) => {
                    // A path that came up meanwhile (a racing retry) counts.
                    if sys::nvme_controllers(&self.os.sysfs, nqn)
                        .iter()
                        .any(|(_, a)| sys::address_is(a, &p.addr, p.port))
                    {
                        up += 1;
                    } else {
                        tracing::warn!(nqn, path = %format!("{}:{}", p.addr, p.port), error = %e, "path not connected");
                        errors.push(e);
                    }
                }
            }
        }
        if up == 0 {
            let hint = if secrets.is_empty() {
                ""
            } else {
                " (the volume authenticates with DH-HMAC-CHAP: a node whose kernel has no DH-HMAC-CHAP host support, built without CONFIG_NVME_AUTH as Debian bookworm's 6.1 is, fails here and its kernel log says \"authentication setup failed\"; such nodes need a StorageClass with auth: none)"
            };
            return Err(Status::unavailable(format!(
                "no path to {nqn} connected: {}{hint}",
                errors.join("; ")
            )));
        }
        Ok(())
    }

    /// The block device of namespace [`names::NSID`] with `uuid` in subsystem `nqn`, once the
    /// kernel shows it.
    async fn wait_device(&self, nqn: &str, uuid: &str) -> Result<PathBuf, Status> {
        let t0 = Instant::now();
        loop {
            if let Some(d) = sys::nvme_device_in(&self.os.sysfs, nqn, uuid, names::NSID) {
                return Ok(d);
            }
            if t0.elapsed() > DEVICE_WAIT {
                return Err(Status::deadline_exceeded(format!(
                    "connected, but no NVMe block device with UUID {uuid} appeared in subsystem {nqn} within {DEVICE_WAIT:?}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn disconnect(&self, nqn: &str) -> Result<(), Status> {
        if sys::nvme_controllers(&self.os.sysfs, nqn).is_empty() {
            return Ok(());
        }
        sys::run(&self.os.nvme, &["disconnect", "-n", nqn], CMD_TIMEOUT)
            .await
            .map_err(Status::internal)?;
        let t0 = Instant::now();
        while !sys::nvme_controllers(&self.os.sysfs, nqn).is_empty() {
            if t0.elapsed() > DEVICE_WAIT {
                return Err(Status::internal(format!(
                    "{nqn}: controllers still present after nvme disconnect"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }

    /// What `dev` holds: a file system (its type), nothing (`blkid -p` found no signature:
    /// status 2, the only answer that means empty), or an error. A partition table, a
    /// partition or any other signature without a file system is an error (FAILED_PRECONDITION)
    /// and never "empty": formatting it would destroy data, as Kubernetes' mount-utils refuse
    /// to ("unknown data, probably partitions").
    async fn fs_on(&self, dev: &Path) -> Result<Option<String>, Status> {
        let d = dev.to_string_lossy();
        let out = sys::output(
            &self.os.blkid,
            &["-p", "-o", "export", "--", d.as_ref()],
            CMD_TIMEOUT,
        )
        .await
        .map_err(Status::internal)?;
        match out.status.code() {
            Some(0) => probed(&d, &String::from_utf8_lossy(&out.stdout)),
            Some(2) => Ok(None),
            _ => Err(Status::internal(format!(
                "blkid -p {d} ({}): {} (not formatting a device that cannot be probed)",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))),
        }
    }

    async fn umount_all(&self, path: &Path) -> Result<(), Status> {
        for _ in 0..8 {
            if sys::mounts_at(path).is_empty() {
                return Ok(());
            }
            sys::run(
                &self.os.umount,
                &["--", &path.to_string_lossy()],
                CMD_TIMEOUT,
            )
            .await
            .map_err(Status::internal)?;
        }
        if sys::mounts_at(path).is_empty() {
            Ok(())
        } else {
            Err(Status::internal(format!(
                "{} is still mounted after umount",
                path.display()
            )))
        }
    }

    /// The block device under `path`: the device node itself, or what is mounted there.
    fn device_of(&self, path: &Path) -> Option<PathBuf> {
        let meta = std::fs::metadata(path).ok()?;
        let devno = if meta.file_type().is_block_device() {
            use std::os::unix::fs::MetadataExt;
            let r = meta.rdev();
            format!("{}:{}", libc::major(r), libc::minor(r))
        } else {
            sys::mounts_at(path).last()?.dev.clone()
        };
        let link = std::fs::read_link(self.os.sysfs.join("dev/block").join(devno)).ok()?;
        Some(PathBuf::from("/dev").join(link.file_name()?))
    }
}

#[tonic::async_trait]
impl pb::node_server::Node for Node {
    async fn node_stage_volume(
        &self,
        req: Request<pb::NodeStageVolumeRequest>,
    ) -> Result<Response<pb::NodeStageVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        absolute(&r.staging_target_path, "staging_target_path")?;
        let (acc, rw) = access(r.volume_capability.as_ref())?;
        let get = |k: &str| {
            r.volume_context
                .get(k)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    invalid(format!(
                        "volume_context.{k} is required (made by CreateVolume)"
                    ))
                })
        };
        let nqn = get(ctx::NQN)?;
        let uuid = get(ctx::UUID)?;
        let paths = names::parse_listeners(get(ctx::LISTENERS)?)
            .map_err(|e| invalid(format!("volume_context.{}: {e}", ctx::LISTENERS)))?;
        let secrets = connect_secrets(&r.volume_context, &r.publish_context)?;
        let _busy = self.busy.hold(&r.volume_id)?;
        tracing::info!(volume = %r.volume_id, staging = %r.staging_target_path, dhchap = !secrets.is_empty(), "NodeStageVolume");
        self.connect(nqn, &paths, &secrets).await?;
        let dev = self.wait_device(nqn, uuid).await?;
        let Access::Mount { fs_type, flags } = acc else {
            return ok(pb::NodeStageVolumeResponse {});
        };
        let staging = PathBuf::from(&r.staging_target_path);
        if let Some(m) = sys::mounts_at(&staging).last() {
            if self.device_of(&staging).as_deref() == Some(dev.as_path()) {
                return ok(pb::NodeStageVolumeResponse {});
            }
            return Err(Status::already_exists(format!(
                "{} already has {} mounted, not volume {}",
                staging.display(),
                m.source,
                r.volume_id
            )));
        }
        std::fs::create_dir_all(&staging)
            .map_err(|e| Status::internal(format!("creating {}: {e}", staging.display())))?;
        let fs = match self.fs_on(&dev).await? {
            Some(t) => {
                if t != fs_type {
                    tracing::warn!(volume = %r.volume_id, have = %t, asked = %fs_type, "volume already holds another file system; mounting what it holds");
                }
                t
            }
            None if !rw => {
                return Err(Status::failed_precondition(format!(
                    "volume {} holds no file system and is staged read-only",
                    r.volume_id
                )));
            }
            None => {
                let d = dev.to_string_lossy();
                let (prog, args): (&str, Vec<&str>) = if fs_type == "xfs" {
                    (self.os.mkfs_xfs.as_str(), vec!["-q", "--", d.as_ref()])
                } else {
                    (
                        self.os.mkfs_ext4.as_str(),
                        vec!["-q", "-F", "--", d.as_ref()],
                    )
                };
                tracing::info!(volume = %r.volume_id, device = %d, fs = %fs_type, "formatting");
                sys::run(prog, &args, CMD_TIMEOUT)
                    .await
                    .map_err(Status::internal)?;
                fs_type
            }
        };
        let mut opts: Vec<String> = flags;
        if !rw {
            opts.push("ro".into());
        }
        let d = dev.to_string_lossy().into_owned();
        let s = staging.to_string_lossy().into_owned();
        let o = opts.join(",");
        let mut args = vec!["-t", fs.as_str()];
        if !o.is_empty() {
            args.extend(["-o", o.as_str()]);
        }
        args.extend(["--", d.as_str(), s.as_str()]);
        sys::run(&self.os.mount, &args, CMD_TIMEOUT)
            .await
            .map_err(Status::internal)?;
        ok(pb::NodeStageVolumeResponse {})
    }

    async fn node_unstage_volume(
        &self,
        req: Request<pb::NodeUnstageVolumeRequest>,
    ) -> Result<Response<pb::NodeUnstageVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        absolute(&r.staging_target_path, "staging_target_path")?;
        let _busy = self.busy.hold(&r.volume_id)?;
        tracing::info!(volume = %r.volume_id, staging = %r.staging_target_path, "NodeUnstageVolume");
        self.umount_all(Path::new(&r.staging_target_path)).await?;
        if names::is_volume_id(&r.volume_id) {
            self.disconnect(&r.volume_id).await?;
        }
        ok(pb::NodeUnstageVolumeResponse {})
    }

    async fn node_publish_volume(
        &self,
        req: Request<pb::NodePublishVolumeRequest>,
    ) -> Result<Response<pb::NodePublishVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        absolute(&r.target_path, "target_path")?;
        absolute(&r.staging_target_path, "staging_target_path")?;
        let (acc, rw) = access(r.volume_capability.as_ref())?;
        let readonly = r.readonly || !rw;
        let _busy = self.busy.hold(&r.volume_id)?;
        tracing::info!(volume = %r.volume_id, target = %r.target_path, readonly, "NodePublishVolume");
        let target = PathBuf::from(&r.target_path);
        let source = match acc {
            Access::Mount { .. } => {
                let staging = PathBuf::from(&r.staging_target_path);
                if sys::mounts_at(&staging).is_empty() {
                    return Err(Status::failed_precondition(format!(
                        "volume {} is not staged at {}",
                        r.volume_id, r.staging_target_path
                    )));
                }
                std::fs::create_dir_all(&target)
                    .map_err(|e| Status::internal(format!("creating {}: {e}", target.display())))?;
                staging
            }
            Access::Block => {
                let get = |k: &str| {
                    r.volume_context
                        .get(k)
                        .filter(|v| !v.is_empty())
                        .ok_or_else(|| invalid(format!("volume_context.{k} is required")))
                };
                let (nqn, uuid) = (get(ctx::NQN)?, get(ctx::UUID)?);
                let dev = sys::nvme_device_in(&self.os.sysfs, nqn, uuid, names::NSID)
                    .ok_or_else(|| {
                        Status::failed_precondition(format!(
                            "volume {} is not staged: no device with UUID {uuid} in subsystem {nqn}",
                            r.volume_id
                        ))
                    })?;
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        Status::internal(format!("creating {}: {e}", parent.display()))
                    })?;
                }
                if !target.exists() {
                    std::fs::File::create(&target).map_err(|e| {
                        Status::internal(format!("creating {}: {e}", target.display()))
                    })?;
                }
                dev
            }
        };
        if let Some(m) = sys::mounts_at(&target).last() {
            let is_ro = m.options.split(',').any(|o| o == "ro");
            if is_ro == readonly {
                return ok(pb::NodePublishVolumeResponse {});
            }
            return Err(Status::already_exists(format!(
                "{} is already published {}",
                target.display(),
                if is_ro { "read-only" } else { "read-write" }
            )));
        }
        let s = source.to_string_lossy().into_owned();
        let t = target.to_string_lossy().into_owned();
        sys::run(&self.os.mount, &["--bind", "--", &s, &t], CMD_TIMEOUT)
            .await
            .map_err(Status::internal)?;
        if readonly
            && let Err(e) = sys::run(
                &self.os.mount,
                &["-o", "remount,bind,ro", "--", &t],
                CMD_TIMEOUT,
            )
            .await
        {
            let _ = sys::run(&self.os.umount, &["--", &t], CMD_TIMEOUT).await;
            return Err(Status::internal(e));
        }
        ok(pb::NodePublishVolumeResponse {})
    }

    async fn node_unpublish_volume(
        &self,
        req: Request<pb::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<pb::NodeUnpublishVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        absolute(&r.target_path, "target_path")?;
        let _busy = self.busy.hold(&r.volume_id)?;
        tracing::info!(volume = %r.volume_id, target = %r.target_path, "NodeUnpublishVolume");
        let target = Path::new(&r.target_path);
        self.umount_all(target).await?;
        match std::fs::symlink_metadata(target) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir(target);
            }
            Ok(_) => {
                let _ = std::fs::remove_file(target);
            }
            Err(_) => {}
        }
        ok(pb::NodeUnpublishVolumeResponse {})
    }

    async fn node_get_volume_stats(
        &self,
        req: Request<pb::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<pb::NodeGetVolumeStatsResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        absolute(&r.volume_path, "volume_path")?;
        let p = Path::new(&r.volume_path);
        let meta =
            std::fs::metadata(p).map_err(|e| Status::not_found(format!("{}: {e}", p.display())))?;
        let byte = pb::volume_usage::Unit::Bytes as i32;
        if meta.file_type().is_block_device() {
            let total = self
                .device_of(p)
                .and_then(|d| sys::block_size_bytes(&self.os.sysfs, &d))
                .ok_or_else(|| Status::internal(format!("size of {}", p.display())))?;
            return ok(pb::NodeGetVolumeStatsResponse {
                usage: vec![pb::VolumeUsage {
                    total: total as i64,
                    unit: byte,
                    ..Default::default()
                }],
            });
        }
        if sys::mounts_at(p).is_empty() {
            return Err(Status::not_found(format!(
                "{} is not a published volume",
                p.display()
            )));
        }
        let s =
            statvfs(p).map_err(|e| Status::internal(format!("statvfs {}: {e}", p.display())))?;
        let f = s.f_frsize as i64;
        let total = s.f_blocks as i64 * f;
        let avail = s.f_bavail as i64 * f;
        let used = (s.f_blocks as i64 - s.f_bfree as i64) * f;
        ok(pb::NodeGetVolumeStatsResponse {
            usage: vec![
                pb::VolumeUsage {
                    available: avail,
                    total,
                    used,
                    unit: byte,
                },
                pb::VolumeUsage {
                    available: s.f_favail as i64,
                    total: s.f_files as i64,
                    used: s.f_files as i64 - s.f_ffree as i64,
                    unit: pb::volume_usage::Unit::Inodes as i32,
                },
            ],
        })
    }

    async fn node_expand_volume(
        &self,
        req: Request<pb::NodeExpandVolumeRequest>,
    ) -> Result<Response<pb::NodeExpandVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        absolute(&r.volume_path, "volume_path")?;
        let _busy = self.busy.hold(&r.volume_id)?;
        tracing::info!(volume = %r.volume_id, path = %r.volume_path, "NodeExpandVolume");
        let p = PathBuf::from(&r.volume_path);
        if !p.exists() {
            return Err(Status::not_found(format!("{} does not exist", p.display())));
        }
        let dev = self
            .device_of(&p)
            .ok_or_else(|| Status::not_found(format!("no volume device under {}", p.display())))?;
        let want = r
            .capacity_range
            .as_ref()
            .map(|c| c.required_bytes.max(0) as u64)
            .unwrap_or(0);
        // The target raised Namespace Attribute Changed; the kernel re-reads the size on its
        // own. Ask it to rescan too, then wait (bounded) until the device is as large as asked.
        if names::is_volume_id(&r.volume_id) {
            for (c, _) in sys::nvme_controllers(&self.os.sysfs, &r.volume_id) {
                let dev = format!("/dev/{c}");
                let _ = sys::run(&self.os.nvme, &["ns-rescan", &dev], CMD_TIMEOUT).await;
            }
        }
        let t0 = Instant::now();
        let size = loop {
            let s = sys::block_size_bytes(&self.os.sysfs, &dev).unwrap_or(0);
            if s >= want {
                break s;
            }
            if t0.elapsed() > DEVICE_WAIT {
                return Err(Status::unavailable(format!(
                    "{} is {s} bytes; {want} asked and the kernel has not seen the new size within {DEVICE_WAIT:?}",
                    dev.display()
                )));
            }
            tokio::time::sleep(POLL).await;
        };
        // A raw block volume is published as its device node bind-mounted onto a file (the
        // mount there is the device file system's, devtmpfs): nothing to grow but the device.
        let raw_block = std::fs::metadata(&p).is_ok_and(|m| m.file_type().is_block_device());
        if let Some(m) = sys::mounts_at(&p).last().cloned().filter(|_| !raw_block) {
            let d = dev.to_string_lossy().into_owned();
            let t = p.to_string_lossy().into_owned();
            let res = match m.fstype.as_str() {
                "ext4" | "ext3" | "ext2" => {
                    sys::run(&self.os.resize2fs, &["--", &d], CMD_TIMEOUT).await
                }
                "xfs" => sys::run(&self.os.xfs_growfs, &["--", &t], CMD_TIMEOUT).await,
                other => Err(format!("cannot grow a {other} file system")),
            };
            res.map_err(Status::internal)?;
        }
        ok(pb::NodeExpandVolumeResponse {
            capacity_bytes: size as i64,
        })
    }

    async fn node_get_capabilities(
        &self,
        _: Request<pb::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<pb::NodeGetCapabilitiesResponse>, Status> {
        use pb::node_service_capability::{Rpc, Type, rpc::Type as T};
        let cap = |t: T| pb::NodeServiceCapability {
            r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
        };
        ok(pb::NodeGetCapabilitiesResponse {
            capabilities: vec![
                cap(T::StageUnstageVolume),
                cap(T::GetVolumeStats),
                cap(T::ExpandVolume),
            ],
        })
    }

    async fn node_get_info(
        &self,
        _: Request<pb::NodeGetInfoRequest>,
    ) -> Result<Response<pb::NodeGetInfoResponse>, Status> {
        ok(pb::NodeGetInfoResponse {
            node_id: self.cfg.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: self.cfg.zone.as_ref().map(|z| pb::Topology {
                segments: [(crate::ZONE_KEY.to_string(), z.clone())].into(),
            }),
        })
    }
}

/// The `nvme connect` options that carry the volume's DH-HMAC-CHAP secrets from the publish
/// context (`--dhchap-secret=…`, `--dhchap-ctrl-secret=…`: one argument each, so that
/// [`sys`] redacts them from every message), or none when the volume does not authenticate.
/// A secret that is not one is INVALID_ARGUMENT without its value.
fn connect_secrets(
    volume_context: &std::collections::HashMap<String, String>,
    publish_context: &std::collections::HashMap<String, String>,
) -> Result<Vec<String>, Status> {
    use crate::keys::AuthMode;
    use crate::names::publish;
    let auth = match volume_context.get(ctx::AUTH) {
        None => AuthMode::DEFAULT,
        Some(v) => {
            AuthMode::parse(v).map_err(|e| invalid(format!("volume_context.{}: {e}", ctx::AUTH)))?
        }
    };
    let mut out = Vec::new();
    for (key, option) in [
        (publish::DHCHAP_SECRET, "--dhchap-secret="),
        (publish::DHCHAP_CTRL_SECRET, "--dhchap-ctrl-secret="),
    ] {
        let Some(v) = publish_context.get(key) else {
            continue;
        };
        nvme_auth::DhchapSecret::parse(v).map_err(|e| {
            invalid(format!(
                "publish_context.{key} is not a DH-HMAC-CHAP secret: {e}"
            ))
        })?;
        out.push(format!("{option}{}", v.trim()));
    }
    if out.len() == 1 && !publish_context.contains_key(publish::DHCHAP_SECRET) {
        return Err(invalid(format!(
            "publish_context.{} without publish_context.{}",
            publish::DHCHAP_CTRL_SECRET,
            publish::DHCHAP_SECRET
        )));
    }
    if auth == AuthMode::Dhchap && out.is_empty() && volume_context.contains_key(ctx::AUTH) {
        return Err(Status::failed_precondition(format!(
            "the volume authenticates with DH-HMAC-CHAP but the publish context has no {} (was it published by ControllerPublishVolume of this driver?)",
            publish::DHCHAP_SECRET
        )));
    }
    Ok(out)
}

/// What the node makes of `blkid -p -o export` output with status 0 (the fuzz target's entry
/// point): the file system type, or why the device counts as not empty. Never "empty": only
/// status 2 is.
pub fn blkid_verdict(export: &str) -> Result<Option<String>, String> {
    probed("DEV", export).map_err(|s| s.message().to_string())
}

/// What `blkid -p -o export` found on `dev` (it exited 0): the file system type when there is
/// one, else why the device is not empty.
fn probed(dev: &str, export: &str) -> Result<Option<String>, Status> {
    let mut fs = None;
    let mut found = Vec::new();
    for (k, v) in export.lines().filter_map(|l| l.trim().split_once('=')) {
        match k {
            "TYPE" if !v.is_empty() => fs = Some(v.to_string()),
            "PTTYPE" | "PART_ENTRY_SCHEME" | "USAGE" => found.push(format!("{k}={v}")),
            _ if k.starts_with("PART_ENTRY_") => found.push(format!("{k}={v}")),
            _ => {}
        }
    }
    if let Some(t) = fs {
        return Ok(Some(t));
    }
    let what = if found.iter().any(|f| f.starts_with("PTTYPE=")) {
        "a partition table"
    } else if found.is_empty() {
        "an unnamed signature"
    } else {
        "a signature"
    };
    Err(Status::failed_precondition(format!(
        "{dev} holds {what} and no file system ({}): refusing to format it; stage it as a block volume, or wipe it yourself if its data is unwanted",
        if found.is_empty() {
            "blkid found something it did not name".to_string()
        } else {
            found.join(", ")
        }
    )))
}

fn statvfs(p: &Path) -> std::io::Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a valid NUL-terminated path and `s` points to writable memory of the
    // right type; statvfs writes it fully on success and we read it only then.
    let rc = unsafe { libc::statvfs(c.as_ptr(), s.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised the struct.
    Ok(unsafe { s.assume_init() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::node_server::Node as _;
    use crate::pb::volume_capability::{AccessMode, MountVolume};
    use std::os::unix::fs::PermissionsExt;

    const NODE: &str = "nqn.2014-08.org.nvmexpress:uuid:0c5ea000-0000-4000-8000-00000000000a";

    /// A node on a fake system: a sysfs tree where the volume's subsystem is connected on
    /// 127.0.0.1:4420 with its namespace as `nvme2n1`, and tools that are shell scripts in
    /// `dir` (every call is logged to `dir/calls`).
    struct Fake {
        dir: tempfile::TempDir,
        node: Node,
        nqn: String,
        uuid: String,
    }

    fn script(dir: &Path, name: &str, body: &str) -> String {
        let p = dir.join(name);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"{name} $*\" >> '{}/calls'\n{body}\n",
                dir.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.to_string_lossy().into_owned()
    }

    /// `blkid` as util-linux answers for a disk that holds a GPT and no file system: with
    /// `-s TYPE -o value`, nothing and status 0; with `-o export`, the partition table.
    const BLKID_GPT_ONLY: &str = r#"case "$*" in
  *"-s TYPE -o value"*) exit 0 ;;
  *) echo DEVNAME=$(eval echo \${$#}); echo PTUUID=2f8a0b5e-7c1d-4e3a-9b1f-0a1b2c3d4e5f; echo PTTYPE=gpt; exit 0 ;;
esac"#;

    fn fake(blkid: &str) -> Fake {
        fake_with(blkid, true, "exit 0")
    }

    /// [`fake`], with the volume's subsystem `connected` already or not, and `nvme` doing
    /// what `nvme_script` says.
    fn fake_with(blkid: &str, connected: bool, nvme_script: &str) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let nqn = names::volume_nqn("pvc-k2");
        let uuid = names::volume_uuid("pvc-k2");
        let sysfs = d.join("sys");
        crate::sys::tests::fake_sysfs(
            &sysfs,
            &[("nvme-subsys2", &nqn, &[("nvme2n1", &uuid, names::NSID)])],
            false,
        );
        if connected {
            let ctrl = sysfs.join("class/nvme/nvme2");
            std::fs::create_dir_all(&ctrl).unwrap();
            std::fs::write(ctrl.join("subsysnqn"), format!("{nqn}\n")).unwrap();
            std::fs::write(ctrl.join("address"), "traddr=127.0.0.1,trsvcid=4420\n").unwrap();
        }
        let os = NodeSystem {
            sysfs,
            nvme: script(d, "nvme", nvme_script),
            blkid: script(d, "blkid", blkid),
            mkfs_ext4: script(d, "mkfs.ext4", "exit 0"),
            mkfs_xfs: script(d, "mkfs.xfs", "exit 0"),
            mount: script(d, "mount", "exit 0"),
            umount: script(d, "umount", "exit 0"),
            resize2fs: script(d, "resize2fs", "exit 0"),
            xfs_growfs: script(d, "xfs_growfs", "exit 0"),
        };
        let cfg = NodeConfig::new(Some(NODE.into()), None).unwrap();
        Fake {
            node: Node::with_system(cfg, os),
            dir,
            nqn,
            uuid,
        }
    }

    impl Fake {
        fn calls(&self) -> String {
            std::fs::read_to_string(self.dir.path().join("calls")).unwrap_or_default()
        }

        fn stage_request(&self, staging: &str) -> pb::NodeStageVolumeRequest {
            pb::NodeStageVolumeRequest {
                volume_id: self.nqn.clone(),
                staging_target_path: staging.into(),
                volume_capability: Some(pb::VolumeCapability {
                    access_type: Some(AccessType::Mount(MountVolume {
                        fs_type: "ext4".into(),
                        ..Default::default()
                    })),
                    access_mode: Some(AccessMode {
                        mode: Mode::SingleNodeWriter as i32,
                    }),
                }),
                volume_context: [
                    (ctx::NQN.to_string(), self.nqn.clone()),
                    (ctx::UUID.to_string(), self.uuid.clone()),
                    (ctx::LISTENERS.to_string(), "tcp:127.0.0.1:4420".to_string()),
                ]
                .into(),
                ..Default::default()
            }
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_partition_table_without_a_file_system_is_not_formatted() {
        // K2: blkid finds a GPT and no file system; staging must refuse, and run no mkfs.
        let f = fake(BLKID_GPT_ONLY);
        let staging = f.dir.path().join("staging");
        let req = f.stage_request(staging.to_str().unwrap());
        let e = block_on(f.node.node_stage_volume(Request::new(req))).unwrap_err();
        let calls = f.calls();
        assert!(!calls.contains("mkfs"), "mkfs ran:\n{calls}");
        assert!(!calls.contains("mount"), "mount ran:\n{calls}");
        assert!(calls.contains("blkid"), "{calls}");
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        assert!(
            e.message().contains("partition table") && e.message().contains("gpt"),
            "{e:?}"
        );
    }

    #[test]
    fn an_empty_device_is_formatted_and_a_file_system_is_mounted_as_it_is() {
        // Status 2 (nothing found) is the only "empty": mkfs, then mount.
        let f = fake("exit 2");
        let staging = f.dir.path().join("staging");
        let req = f.stage_request(staging.to_str().unwrap());
        block_on(f.node.node_stage_volume(Request::new(req))).unwrap();
        let calls = f.calls();
        assert!(calls.contains("mkfs.ext4 -q -F -- /dev/nvme2n1"), "{calls}");
        assert!(
            calls.contains(&format!(
                "mount -t ext4 -- /dev/nvme2n1 {}",
                staging.display()
            )),
            "{calls}"
        );
        assert!(
            !calls.contains("nvme connect"),
            "already connected: {calls}"
        );

        let f = fake("echo DEVNAME=/dev/nvme2n1; echo UUID=x; echo TYPE=xfs; exit 0");
        let req = f.stage_request(staging.to_str().unwrap());
        block_on(f.node.node_stage_volume(Request::new(req))).unwrap();
        let calls = f.calls();
        assert!(!calls.contains("mkfs"), "{calls}");
        assert!(calls.contains("mount -t xfs -- /dev/nvme2n1"), "{calls}");

        // blkid failing (status 8: ambivalent result) is an error, never "empty".
        let f = fake("exit 8");
        let req = f.stage_request(staging.to_str().unwrap());
        let e = block_on(f.node.node_stage_volume(Request::new(req))).unwrap_err();
        assert!(!f.calls().contains("mkfs"), "{}", f.calls());
        assert_eq!(e.code(), tonic::Code::Internal, "{e:?}");
    }

    #[test]
    fn paths_must_be_absolute_and_never_reach_a_tool_as_options() {
        // K4: kubelet paths are absolute; anything else is INVALID_ARGUMENT before any tool.
        let f = fake("exit 2");
        for bad in ["-oremount", "relative/dir", "--bind"] {
            let req = f.stage_request(bad);
            let e = block_on(f.node.node_stage_volume(Request::new(req))).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}: {e:?}");
            let req = pb::NodePublishVolumeRequest {
                volume_id: f.nqn.clone(),
                staging_target_path: f.dir.path().join("staging").to_string_lossy().into(),
                target_path: bad.into(),
                volume_capability: f.stage_request("/x").volume_capability,
                volume_context: f.stage_request("/x").volume_context,
                ..Default::default()
            };
            let e = block_on(f.node.node_publish_volume(Request::new(req))).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}: {e:?}");
            let req = pb::NodeUnpublishVolumeRequest {
                volume_id: f.nqn.clone(),
                target_path: bad.into(),
            };
            let e = block_on(f.node.node_unpublish_volume(Request::new(req))).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}: {e:?}");
            let req = pb::NodeUnstageVolumeRequest {
                volume_id: f.nqn.clone(),
                staging_target_path: bad.into(),
            };
            let e = block_on(f.node.node_unstage_volume(Request::new(req))).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}: {e:?}");
        }
        assert_eq!(f.calls(), "", "no tool ran");
    }

    #[test]
    fn the_node_connects_with_the_secrets_of_the_publish_context() {
        use crate::names::publish;
        let pair = crate::keys::KeySeed::from_token("t").dhchap("v", NODE);
        let f = fake_with("exit 2", false, "exit 0");
        let staging = f.dir.path().join("staging");
        let mut req = f.stage_request(staging.to_str().unwrap());
        req.volume_context.insert(ctx::AUTH.into(), "dhchap".into());
        req.publish_context = [
            (publish::DHCHAP_SECRET.to_string(), pair.host.to_string()),
            (
                publish::DHCHAP_CTRL_SECRET.to_string(),
                pair.ctrl.to_string(),
            ),
        ]
        .into();
        block_on(f.node.node_stage_volume(Request::new(req.clone()))).unwrap();
        let calls = f.calls();
        assert!(
            calls.contains(&format!(
                "--hostnqn {NODE} --dhchap-secret={} --dhchap-ctrl-secret={}",
                *pair.host, *pair.ctrl
            )),
            "{calls}"
        );

        // A connect that fails (and echoes its arguments) says so without the secrets.
        let f = fake_with("exit 2", false, "echo \"$*\" >&2; exit 1");
        let e = block_on(f.node.node_stage_volume(Request::new(req.clone()))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        let b64 = pair.host.split(':').nth(2).unwrap().to_string();
        assert!(!e.message().contains(&b64), "{e:?}");
        assert!(e.message().contains("--dhchap-secret=<redacted>"), "{e:?}");
        assert!(e.message().contains("CONFIG_NVME_AUTH"), "the hint: {e:?}");

        // A volume that authenticates, published without a secret: refused before connecting.
        let f = fake_with("exit 2", false, "exit 0");
        let mut r2 = req.clone();
        r2.publish_context.clear();
        let e = block_on(f.node.node_stage_volume(Request::new(r2))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        // A malformed secret: INVALID_ARGUMENT, without its value.
        let mut r3 = req.clone();
        r3.publish_context.insert(
            publish::DHCHAP_SECRET.into(),
            "DHHC-1:01:bm90LWEta2V5:".into(),
        );
        let e = block_on(f.node.node_stage_volume(Request::new(r3))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(!e.message().contains("bm90LWEta2V5"), "{e:?}");
        assert_eq!(f.calls(), "", "no tool ran");
    }

    #[test]
    fn real_blkid_on_images_a_partition_table_is_not_empty() {
        // K2 with util-linux itself (no root, no loop device: blkid probes image files). An
        // MBR with one partition and no file system is what `-s TYPE -o value` answered with
        // status 0 and nothing, which was taken for "empty".
        if std::process::Command::new("blkid")
            .arg("-V")
            .output()
            .is_err()
        {
            eprintln!("no blkid here: skipped");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let node = Node::with_system(
            NodeConfig::new(Some(NODE.into()), None).unwrap(),
            NodeSystem::default(),
        );
        let mut mbr = vec![0u8; 8 << 20];
        // one partition entry: type 0x83 from LBA 2048, 4096 sectors; the boot signature
        mbr[446 + 4] = 0x83;
        mbr[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
        mbr[446 + 12..446 + 16].copy_from_slice(&4096u32.to_le_bytes());
        mbr[440..444].copy_from_slice(&0x1234_5678u32.to_le_bytes());
        mbr[510] = 0x55;
        mbr[511] = 0xaa;
        let img = d.path().join("mbr.img");
        std::fs::write(&img, &mbr).unwrap();
        let e = block_on(node.fs_on(&img)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("PTTYPE=dos"), "{e:?}");
        let zeros = d.path().join("zeros.img");
        std::fs::write(&zeros, vec![0u8; 8 << 20]).unwrap();
        assert_eq!(
            block_on(node.fs_on(&zeros)).unwrap(),
            None,
            "all zeros: empty"
        );
        let ext4 = d.path().join("ext4.img");
        std::fs::write(&ext4, vec![0u8; 8 << 20]).unwrap();
        let made = std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F", "--"])
            .arg(&ext4)
            .output();
        if made.is_ok_and(|o| o.status.success()) {
            assert_eq!(
                block_on(node.fs_on(&ext4)).unwrap().as_deref(),
                Some("ext4")
            );
        }
    }
}
