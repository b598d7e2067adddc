//! What the node plugin asks of the operating system: running tools with a time bound, the
//! mount table, and the NVMe devices and controllers in sysfs.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Options whose value is a secret: shown as `OPTION=<redacted>` in every message.
const SECRET_OPTIONS: [&str; 2] = ["--dhchap-secret=", "--dhchap-ctrl-secret="];

/// `program args…` as messages show it: secrets (passed as `--option=value`) redacted.
fn shown(program: &str, args: &[&str]) -> String {
    let args: Vec<String> = args
        .iter()
        .map(
            |a| match SECRET_OPTIONS.iter().find(|o| a.starts_with(*o)) {
                Some(o) => format!("{o}<redacted>"),
                None => (*a).to_string(),
            },
        )
        .collect();
    format!("{program} {}", args.join(" "))
}

/// Run `program args…`, bounded by `timeout`, and collect what it says, whatever its status;
/// an error names the command when it cannot run or does not finish.
pub(crate) async fn output(
    program: &str,
    args: &[&str],
    timeout: Duration,
) -> Result<std::process::Output, String> {
    let shown = || shown(program, args);
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(timeout, child).await {
        Err(_) => Err(format!("`{}` did not finish within {timeout:?}", shown())),
        Ok(Err(e)) => Err(format!("`{}` could not run: {e}", shown())),
        Ok(Ok(o)) => Ok(o),
    }
}

/// Run `program args…`, bounded by `timeout`; its standard output on success, else a message
/// naming the command, its status and standard error.
pub(crate) async fn run(program: &str, args: &[&str], timeout: Duration) -> Result<String, String> {
    let shown = shown(program, args);
    let out = output(program, args, timeout).await?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim();
        let mut text = if err.is_empty() {
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        } else {
            err.to_string()
        };
        // A tool that echoed a secret back does not get it into our messages either.
        for a in args {
            if let Some(o) = SECRET_OPTIONS.iter().find(|o| a.starts_with(*o)) {
                let v = &a[o.len()..];
                if !v.is_empty() {
                    text = text.replace(v, "<redacted>");
                }
            }
        }
        Err(format!("`{shown}` failed ({}): {text}", out.status))
    }
}

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mount {
    /// Where it is mounted.
    pub target: PathBuf,
    /// The path inside the mounted file system (`/` unless a bind of a subtree).
    pub root: String,
    /// File system type.
    pub fstype: String,
    /// Mount source (`/dev/nvme0n1`, or `devtmpfs`/`udev` for a bind-mounted device node).
    pub source: String,
    /// Per-mount options (`ro`/`rw`…).
    pub options: String,
    /// `major:minor` of the mounted device.
    pub dev: String,
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse mountinfo text.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let f: Vec<&str> = pre.split(' ').collect();
            let g: Vec<&str> = post.split(' ').collect();
            if f.len() < 6 || g.len() < 2 {
                return None;
            }
            Some(Mount {
                dev: f[2].to_string(),
                root: unescape(f[3]),
                target: PathBuf::from(unescape(f[4])),
                options: f[5].to_string(),
                fstype: g[0].to_string(),
                source: unescape(g[1]),
            })
        })
        .collect()
}

/// The mounts at `path` now (the last is the one visible).
pub(crate) fn mounts_at(path: &Path) -> Vec<Mount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    parse_mountinfo(&text)
        .into_iter()
        .filter(|m| m.target == path)
        .collect()
}

/// The namespace block device (`/dev/nvmeXnY`, the multipath head when native multipath is
/// on) of namespace `nsid` with UUID `uuid` *in subsystem `nqn`*, if the kernel has one.
///
/// Only the subsystem the node connected is searched (`class/nvme-subsystem/*/subsysnqn` under
/// the sysfs root `sysfs`): a namespace with the same UUID elsewhere (another box, another
/// target the node is attached to) is never taken. With native multipath the heads are
/// children of the subsystem; without it, of each of its controllers. Among several (one per
/// path without multipath: the same namespace) the lowest numbered, compared as numbers.
pub(crate) fn nvme_device_in(sysfs: &Path, nqn: &str, uuid: &str, nsid: u32) -> Option<PathBuf> {
    let want = uuid.to_ascii_lowercase();
    let read = |p: PathBuf| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let entries = |d: &Path| -> Vec<(String, PathBuf)> {
        std::fs::read_dir(d)
            .map(|it| {
                it.filter_map(|e| e.ok())
                    .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut found: Vec<((u64, u64), String)> = Vec::new();
    for (_, sub) in entries(&sysfs.join("class/nvme-subsystem")) {
        if read(sub.join("subsysnqn")).as_deref() != Some(nqn) {
            continue;
        }
        let mut dirs = vec![sub.clone()];
        dirs.extend(
            entries(&sub)
                .into_iter()
                .filter(|(n, _)| is_controller(n))
                .map(|(_, p)| p),
        );
        for d in dirs {
            for (name, p) in entries(&d) {
                let Some(key) = namespace_head(&name) else {
                    continue;
                };
                if read(p.join("uuid")).map(|u| u.to_ascii_lowercase()) != Some(want.clone()) {
                    continue;
                }
                if let Some(n) = read(p.join("nsid"))
                    && n.parse::<u32>().ok() != Some(nsid)
                {
                    continue;
                }
                found.push((key, name));
            }
        }
    }
    found.sort();
    found
        .into_iter()
        .next()
        .map(|(_, n)| PathBuf::from(format!("/dev/{n}")))
}

/// `nvme0`: a controller's name.
fn is_controller(n: &str) -> bool {
    n.strip_prefix("nvme")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// `nvme0n1` → (0, 1); `nvme0c1n1` (a hidden multipath path), `nvme0n1p1` and the rest: none.
fn namespace_head(n: &str) -> Option<(u64, u64)> {
    let rest = n.strip_prefix("nvme")?;
    let (c, ns) = rest.split_once('n')?;
    let num = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
    };
    Some((num(c)?, num(ns)?))
}

/// Size in bytes of block device `dev` (`/dev/nvme0n1`) as sysfs reports it.
pub(crate) fn block_size_bytes(sysfs: &Path, dev: &Path) -> Option<u64> {
    let name = dev.file_name()?.to_str()?;
    let sectors: u64 = std::fs::read_to_string(sysfs.join("block").join(name).join("size"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(sectors * 512)
}

/// The NVMe controllers (`nvme0`…) connected to subsystem `nqn`, with their address line
/// (`traddr=…,trsvcid=…`).
pub(crate) fn nvme_controllers(sysfs: &Path, nqn: &str) -> Vec<(String, String)> {
    let Ok(dir) = std::fs::read_dir(sysfs.join("class/nvme")) else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = e.path();
            let sub = std::fs::read_to_string(p.join("subsysnqn")).ok()?;
            (sub.trim() == nqn).then(|| {
                let addr = std::fs::read_to_string(p.join("address")).unwrap_or_default();
                (name, addr.trim().to_string())
            })
        })
        .collect();
    out.sort();
    out
}

/// Whether an address line from sysfs names `addr`:`port`.
pub(crate) fn address_is(line: &str, addr: &str, port: u16) -> bool {
    let mut a = false;
    let mut p = false;
    for kv in line.split(',') {
        match kv.trim().split_once('=') {
            Some(("traddr", v)) => a = v == addr,
            Some(("trsvcid", v)) => p = v == port.to_string(),
            _ => {}
        }
    }
    a && p
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_parse_with_escapes() {
        let t = "36 35 98:0 / /mnt/with\\040space rw,noatime master:1 - ext4 /dev/nvme0n1 rw\n\
                 40 30 0:5 /nvme0n1 /var/lib/k/block rw,relatime shared:2 - devtmpfs udev rw,size=1k\n\
                 garbage line\n";
        let m = parse_mountinfo(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].target, PathBuf::from("/mnt/with space"));
        assert_eq!(m[0].fstype, "ext4");
        assert_eq!(m[0].source, "/dev/nvme0n1");
        assert_eq!(m[0].options, "rw,noatime");
        assert_eq!(m[1].root, "/nvme0n1");
        assert_eq!(m[1].dev, "0:5");
    }

    #[test]
    fn namespace_heads_and_addresses() {
        assert_eq!(namespace_head("nvme0n1"), Some((0, 1)));
        assert_eq!(namespace_head("nvme12n3"), Some((12, 3)));
        assert_eq!(namespace_head("nvme0c1n1"), None);
        assert_eq!(namespace_head("nvme0n1p1"), None);
        assert_eq!(namespace_head("nvme0"), None);
        assert_eq!(namespace_head("sda"), None);
        assert!(is_controller("nvme10") && !is_controller("nvme1n1") && !is_controller("nvme"));
        let l = "traddr=10.77.0.1,trsvcid=4420,src_addr=10.77.0.2";
        assert!(address_is(l, "10.77.0.1", 4420));
        assert!(!address_is(l, "10.77.0.1", 4421));
        assert!(!address_is(l, "10.77.0.11", 4420));
    }

    const UUID: &str = "5b0f00c5-1000-5000-8000-00000000000a";

    /// Namespace heads of a fake subsystem: (name, UUID, NSID).
    pub(crate) type Heads<'a> = &'a [(&'a str, &'a str, u32)];

    /// A fake sysfs: `subsystems` as (directory, NQN, heads as (name, uuid, nsid)), with the
    /// heads also under `block/` as the kernel lists them; `ctrl_heads` puts them under a
    /// controller `nvmeN` of the subsystem instead (native multipath off).
    pub(crate) fn fake_sysfs(root: &Path, subsystems: &[(&str, &str, Heads)], ctrl_heads: bool) {
        for (i, (dir, nqn, heads)) in subsystems.iter().enumerate() {
            let sub = root.join("class/nvme-subsystem").join(dir);
            std::fs::create_dir_all(&sub).unwrap();
            std::fs::write(sub.join("subsysnqn"), format!("{nqn}\n")).unwrap();
            let parent = if ctrl_heads {
                sub.join(format!("nvme{}", 50 + i))
            } else {
                sub.clone()
            };
            for (name, uuid, nsid) in heads.iter() {
                for d in [parent.join(name), root.join("block").join(name)] {
                    std::fs::create_dir_all(&d).unwrap();
                    std::fs::write(d.join("uuid"), format!("{uuid}\n")).unwrap();
                    std::fs::write(d.join("nsid"), format!("{nsid}\n")).unwrap();
                }
            }
        }
    }

    #[test]
    fn the_device_is_the_one_under_the_volumes_subsystem() {
        // K1: the same UUID under another subsystem (another box, a hostile target) is never
        // taken, though `nvme10n1` sorts before `nvme2n1` as a string.
        let want = "nqn.2026-11.io.ebof:csi:pvc-1-0011223344556677";
        let other = "nqn.2026-11.io.evil:imposter";
        for ctrl_heads in [false, true] {
            let d = tempfile::tempdir().unwrap();
            fake_sysfs(
                d.path(),
                &[
                    ("nvme-subsys10", other, &[("nvme10n1", UUID, 1)]),
                    ("nvme-subsys2", want, &[("nvme2n1", UUID, 1)]),
                ],
                ctrl_heads,
            );
            assert_eq!(
                nvme_device_in(d.path(), want, UUID, 1),
                Some(PathBuf::from("/dev/nvme2n1")),
                "multipath off: {ctrl_heads}"
            );
            assert_eq!(
                nvme_device_in(d.path(), want, &UUID.to_uppercase(), 1),
                Some(PathBuf::from("/dev/nvme2n1"))
            );
            assert_eq!(nvme_device_in(d.path(), want, UUID, 2), None, "wrong NSID");
            assert_eq!(
                nvme_device_in(d.path(), "nqn.2026-11.io.ebof:csi:none", UUID, 1),
                None,
                "not connected: nothing, whatever else has the UUID"
            );
        }
        // Several heads in the subsystem (one per path without multipath): the lowest by
        // number, not by string.
        let d = tempfile::tempdir().unwrap();
        fake_sysfs(
            d.path(),
            &[(
                "nvme-subsys3",
                want,
                &[("nvme10n1", UUID, 1), ("nvme9n1", UUID, 1)],
            )],
            false,
        );
        assert_eq!(
            nvme_device_in(d.path(), want, UUID, 1),
            Some(PathBuf::from("/dev/nvme9n1"))
        );
    }

    /// Issue 34: a replicated volume's subsystem has controllers to two boxes; with native
    /// multipath the kernel shows one head for the namespace and a hidden path node under
    /// each controller (`nvme4c4n1`, `nvme4c5n1`): the head is the device, once.
    #[test]
    fn a_volume_on_two_boxes_is_one_device_with_multipath() {
        let want = "nqn.2026-11.io.ebof:csi:pvc-2-0011223344556677";
        let d = tempfile::tempdir().unwrap();
        fake_sysfs(
            d.path(),
            &[("nvme-subsys4", want, &[("nvme4n1", UUID, 1)])],
            false,
        );
        let sub = d.path().join("class/nvme-subsystem/nvme-subsys4");
        for (ctrl, path) in [("nvme4", "nvme4c4n1"), ("nvme5", "nvme4c5n1")] {
            let p = sub.join(ctrl).join(path);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("uuid"), format!("{UUID}\n")).unwrap();
            std::fs::write(p.join("nsid"), "1\n").unwrap();
        }
        assert_eq!(
            nvme_device_in(d.path(), want, UUID, 1),
            Some(PathBuf::from("/dev/nvme4n1"))
        );
    }

    #[test]
    fn secrets_are_redacted_from_what_commands_say() {
        let s = "DHHC-1:01:c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTIzNDU2Nzg=:";
        let a = format!("--dhchap-secret={s}");
        let c = format!("--dhchap-ctrl-secret={s}");
        let shown = shown("nvme", &["connect", &a, &c, "-n", "nqn.x"]);
        assert!(!shown.contains("c2VjcmV0"), "{shown}");
        assert!(shown.contains("--dhchap-secret=<redacted>"), "{shown}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // A tool that fails and echoes its arguments: the message still hides the secret.
        let e = rt
            .block_on(run(
                "sh",
                &["-c", "echo \"$1\" >&2; exit 3", "sh", &a],
                Duration::from_secs(10),
            ))
            .unwrap_err();
        assert!(!e.contains("c2VjcmV0"), "{e}");
        assert!(e.contains("<redacted>"), "{e}");
    }
}
