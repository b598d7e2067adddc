//! The CSI Node service: attach a volume to this machine with the kernel's NVMe/TCP
//! initiator (every listener of the volume: native multipath), put a file system on it when
//! it has none, mount it at the staging path, bind it into pods, grow it, report its usage,
//! and undo each step. Every call is idempotent: a retried or half-done stage is finished.

use crate::names::{self, ctx};
use crate::pb;
use crate::pb::volume_capability::{AccessType, access_mode::Mode};
use crate::rpc::{BusySet, absolute, invalid, ok, published_path, required};
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
    /// up. A `replicated` volume's paths never give up (`--ctrl-loss-tmo=-1`): a box that
    /// comes back after a long loss may be the one that serves the volume next.
    async fn connect(
        &self,
        nqn: &str,
        paths: &[names::Path],
        secrets: &[String],
        replicated: bool,
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
            if replicated {
                args.push("--ctrl-loss-tmo=-1");
            }
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

    /// `MAJOR:MINOR` of the block device under `path`: the device node itself, or what is
    /// mounted there.
    fn devno_of(path: &Path) -> Option<String> {
        let meta = std::fs::metadata(path).ok()?;
        if meta.file_type().is_block_device() {
            use std::os::unix::fs::MetadataExt;
            let r = meta.rdev();
            Some(format!("{}:{}", libc::major(r), libc::minor(r)))
        } else {
            Some(sys::mounts_at(path).last()?.dev.clone())
        }
    }

    /// The block device under `path`: the device node itself, or what is mounted there.
    fn device_of(&self, path: &Path) -> Option<PathBuf> {
        let devno = Self::devno_of(path)?;
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
        let replicated = r
            .volume_context
            .get(ctx::REPLICAS)
            .is_some_and(|n| n != "1");
        self.connect(nqn, &paths, &secrets, replicated).await?;
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
        published_path(&r.volume_path, "volume_path")?;
        let p = Path::new(&r.volume_path);
        let meta =
            std::fs::metadata(p).map_err(|e| Status::not_found(format!("{}: {e}", p.display())))?;
        let byte = pb::volume_usage::Unit::Bytes as i32;
        if !meta.file_type().is_block_device() && sys::mounts_at(p).is_empty() {
            return Err(Status::not_found(format!(
                "{} is not a published volume",
                p.display()
            )));
        }
        let cond = health::device_condition(&self.os.sysfs, Self::devno_of(p).as_deref(), p);
        if meta.file_type().is_block_device() {
            // A device that is gone has no size: its condition says why.
            let total = self
                .device_of(p)
                .and_then(|d| sys::block_size_bytes(&self.os.sysfs, &d));
            return ok(pb::NodeGetVolumeStatsResponse {
                usage: total
                    .map(|t| pb::VolumeUsage {
                        total: t as i64,
                        unit: byte,
                        ..Default::default()
                    })
                    .into_iter()
                    .collect(),
                volume_condition: Some(cond),
            });
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
            volume_condition: Some(cond),
        })
    }

    async fn node_expand_volume(
        &self,
        req: Request<pb::NodeExpandVolumeRequest>,
    ) -> Result<Response<pb::NodeExpandVolumeResponse>, Status> {
        let r = req.into_inner();
        required(&r.volume_id, "volume_id")?;
        published_path(&r.volume_path, "volume_path")?;
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
                cap(T::VolumeCondition),
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

mod health;
#[cfg(test)]
mod tests;
