//! The Node service against fake `nvme`, `blkid`, `mkfs` and `mount` tools (and real
//! `blkid` on images where it is installed).

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

/// Issue 34: a replicated volume lists the listeners of both boxes; the node connects every
/// one not connected yet (a box that is down does not stop the stage), with paths that never
/// give up, and the one device is found by the namespace UUID.
#[test]
fn a_replicated_volume_is_staged_through_the_paths_of_both_boxes() {
    let f = fake_with(
        "exit 2",
        true,
        "case \"$*\" in *127.0.0.3*) echo unreachable >&2; exit 1 ;; esac; exit 0",
    );
    let staging = f.dir.path().join("staging");
    let mut req = f.stage_request(staging.to_str().unwrap());
    req.volume_context.insert(
        ctx::LISTENERS.into(),
        "tcp:127.0.0.1:4420,tcp:127.0.0.2:4420,tcp:127.0.0.3:4421".into(),
    );
    req.volume_context.insert(ctx::REPLICAS.into(), "2".into());
    req.volume_context.insert(ctx::AUTH.into(), "none".into());
    block_on(f.node.node_stage_volume(Request::new(req))).unwrap();
    let calls = f.calls();
    let connects: Vec<&str> = calls
        .lines()
        .filter(|l| l.starts_with("nvme connect"))
        .collect();
    assert_eq!(connects.len(), 2, "{calls}");
    assert!(connects[0].contains("-a 127.0.0.2 -s 4420"), "{calls}");
    assert!(connects[1].contains("-a 127.0.0.3 -s 4421"), "{calls}");
    assert!(
        connects.iter().all(|c| c.ends_with("--ctrl-loss-tmo=-1")),
        "paths of a replicated volume never give up: {calls}"
    );
    assert!(calls.contains("/dev/nvme2n1"), "the one device: {calls}");
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

/// NodeGetVolumeStats of a raw block volume reports the device's condition: gone (no sysfs
/// entry for its number: no size, abnormal), read-only, or present and writable. Needs a
/// block device node to point at (any in /dev; the test says so and passes without one).
#[test]
fn volume_stats_report_a_gone_or_read_only_device() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Some((dev, rdev)) = std::fs::read_dir("/dev").ok().and_then(|d| {
        d.filter_map(|e| e.ok()).find_map(|e| {
            let m = std::fs::metadata(e.path()).ok()?;
            m.file_type()
                .is_block_device()
                .then(|| (e.path(), m.rdev()))
        })
    }) else {
        eprintln!("SKIPPED: no block device node in /dev");
        return;
    };
    let f = fake("exit 2");
    let sysfs = f.dir.path().join("sys");
    let devno = format!("{}:{}", libc::major(rdev), libc::minor(rdev));
    let stats = || {
        block_on(
            f.node
                .node_get_volume_stats(Request::new(pb::NodeGetVolumeStatsRequest {
                    volume_id: f.nqn.clone(),
                    volume_path: dev.to_string_lossy().into_owned(),
                    ..Default::default()
                })),
        )
        .unwrap()
        .into_inner()
    };
    let r = stats();
    let c = r.volume_condition.unwrap();
    assert!(c.abnormal && c.message.contains("gone"), "{c:?}");
    assert!(
        r.usage.is_empty(),
        "a gone device has no size: {:?}",
        r.usage
    );
    // The device as sysfs shows it: 64 MiB, read-only, then writable.
    let node = sysfs.join("devices/virtual/block/nvme9n1");
    std::fs::create_dir_all(&node).unwrap();
    std::fs::create_dir_all(sysfs.join("dev/block")).unwrap();
    std::os::unix::fs::symlink(&node, sysfs.join("dev/block").join(&devno)).unwrap();
    std::fs::create_dir_all(sysfs.join("block")).unwrap();
    std::os::unix::fs::symlink(&node, sysfs.join("block/nvme9n1")).unwrap();
    std::fs::write(node.join("size"), "131072\n").unwrap();
    std::fs::write(node.join("ro"), "1\n").unwrap();
    let r = stats();
    let c = r.volume_condition.unwrap();
    assert!(c.abnormal && c.message.contains("read-only"), "{c:?}");
    assert_eq!(r.usage[0].total, 64 << 20);
    std::fs::write(node.join("ro"), "0\n").unwrap();
    let c = stats().volume_condition.unwrap();
    assert!(!c.abnormal, "{c:?}");
    // Not a published volume at all: NOT_FOUND, as before.
    let e = block_on(
        f.node
            .node_get_volume_stats(Request::new(pb::NodeGetVolumeStatsRequest {
                volume_id: f.nqn.clone(),
                volume_path: f.dir.path().join("nothing").to_string_lossy().into_owned(),
                ..Default::default()
            })),
    )
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
}

#[test]
fn stats_and_expand_of_a_path_that_holds_no_volume_are_not_found() {
    // csi-sanity (v5.2.0 to v5.4.0): a volume not at the path given, a relative one included,
    // is NOT_FOUND; no path at all is INVALID_ARGUMENT; no tool runs.
    let f = fake("exit 2");
    let missing = f.dir.path().join("nothing-here");
    for (path, want) in [
        ("some/path", tonic::Code::NotFound),
        ("-oremount", tonic::Code::NotFound),
        (missing.to_str().unwrap(), tonic::Code::NotFound),
        ("", tonic::Code::InvalidArgument),
    ] {
        let req = pb::NodeGetVolumeStatsRequest {
            volume_id: f.nqn.clone(),
            volume_path: path.into(),
            ..Default::default()
        };
        let e = block_on(f.node.node_get_volume_stats(Request::new(req))).unwrap_err();
        assert_eq!(e.code(), want, "stats {path:?}: {e:?}");
        let req = pb::NodeExpandVolumeRequest {
            volume_id: f.nqn.clone(),
            volume_path: path.into(),
            ..Default::default()
        };
        let e = block_on(f.node.node_expand_volume(Request::new(req))).unwrap_err();
        assert_eq!(e.code(), want, "expand {path:?}: {e:?}");
    }
    assert_eq!(f.calls(), "", "no tool ran");
}
