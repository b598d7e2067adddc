//! The node's view of a volume's health (`VOLUME_CONDITION` of the Node service), reported by
//! NodeGetVolumeStats: abnormal when the block device under the published path is gone (the
//! kernel dropped the namespace: every NVMe path lost past `ctrl_loss_tmo`, or the namespace
//! removed on its box) or read-only (the kernel's `ro` attribute of the device: a namespace
//! the box write-protects); normal otherwise.
//!
//! What it does not see: a file system the kernel switched to read-only after an error
//! (`errors=remount-ro`) looks the same in the mount table as a volume staged read-only,
//! which the node service does not remember.

use crate::pb;
use std::path::Path;

/// The condition of the volume whose block device is `devno` (`MAJOR:MINOR`; `None`: none
/// found behind `shown`, the path the message names), read from the sysfs root `sysfs`.
pub(super) fn device_condition(
    sysfs: &Path,
    devno: Option<&str>,
    shown: &Path,
) -> pb::VolumeCondition {
    let abnormal = |message: String| pb::VolumeCondition {
        abnormal: true,
        message,
    };
    let Some(devno) = devno else {
        return abnormal(format!("no block device is behind {}", shown.display()));
    };
    let dir = sysfs.join("dev/block").join(devno);
    let name = std::fs::read_link(&dir)
        .ok()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()));
    let Some(name) = name else {
        return abnormal(format!(
            "the volume's block device ({devno}, under {}) is gone: its NVMe paths were lost or its namespace was removed",
            shown.display()
        ));
    };
    let ro = std::fs::read_to_string(dir.join("ro")).unwrap_or_default();
    if ro.trim() == "1" {
        return abnormal(format!("the volume's block device {name} is read-only"));
    }
    pb::VolumeCondition {
        abnormal: false,
        message: format!("block device {name} present and writable"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gone_and_read_only_devices_are_abnormal() {
        let d = tempfile::tempdir().unwrap();
        let sysfs = d.path();
        let dev = sysfs.join("devices/virtual/nvme-subsystem/nvme-subsys2/nvme2n1");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(sysfs.join("dev/block")).unwrap();
        std::os::unix::fs::symlink(&dev, sysfs.join("dev/block/259:3")).unwrap();
        std::fs::write(dev.join("ro"), "0\n").unwrap();
        let p = Path::new("/var/lib/kubelet/x");
        let c = device_condition(sysfs, Some("259:3"), p);
        assert!(!c.abnormal, "{c:?}");
        assert!(c.message.contains("nvme2n1"), "{c:?}");
        std::fs::write(dev.join("ro"), "1\n").unwrap();
        let c = device_condition(sysfs, Some("259:3"), p);
        assert!(c.abnormal && c.message.contains("read-only"), "{c:?}");
        let c = device_condition(sysfs, Some("259:9"), p);
        assert!(c.abnormal && c.message.contains("gone"), "{c:?}");
        let c = device_condition(sysfs, None, p);
        assert!(
            c.abnormal && c.message.contains("/var/lib/kubelet/x"),
            "{c:?}"
        );
    }
}
