//! What the node plugin asks of the operating system: running tools with a time bound, the
//! mount table, and the NVMe devices and controllers in sysfs.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Run `program args…`, bounded by `timeout`, and collect what it says, whatever its status;
/// an error names the command when it cannot run or does not finish.
pub(crate) async fn output(
    program: &str,
    args: &[&str],
    timeout: Duration,
) -> Result<std::process::Output, String> {
    let shown = || format!("{program} {}", args.join(" "));
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
    let shown = format!("{program} {}", args.join(" "));
    let out = output(program, args, timeout).await?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim();
        let text = if err.is_empty() {
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        } else {
            err.to_string()
        };
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
/// on) whose UUID is `uuid`, if the kernel has one.
pub(crate) fn nvme_device_by_uuid(uuid: &str) -> Option<PathBuf> {
    let want = uuid.to_ascii_lowercase();
    let dir = std::fs::read_dir("/sys/block").ok()?;
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| is_namespace_head(n))
        .collect();
    names.sort();
    names.into_iter().find_map(|n| {
        let u = std::fs::read_to_string(format!("/sys/block/{n}/uuid")).ok()?;
        (u.trim().to_ascii_lowercase() == want).then(|| PathBuf::from(format!("/dev/{n}")))
    })
}

/// `nvme0n1` yes; `nvme0c1n1` (a hidden multipath path) and `nvme0n1p1` no.
fn is_namespace_head(n: &str) -> bool {
    let Some(rest) = n.strip_prefix("nvme") else {
        return false;
    };
    let Some((c, ns)) = rest.split_once('n') else {
        return false;
    };
    !c.is_empty()
        && c.bytes().all(|b| b.is_ascii_digit())
        && !ns.is_empty()
        && ns.bytes().all(|b| b.is_ascii_digit())
}

/// Size in bytes of block device `dev` (`/dev/nvme0n1`) as sysfs reports it.
pub(crate) fn block_size_bytes(dev: &Path) -> Option<u64> {
    let name = dev.file_name()?.to_str()?;
    let sectors: u64 = std::fs::read_to_string(format!("/sys/block/{name}/size"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(sectors * 512)
}

/// The NVMe controllers (`nvme0`…) connected to subsystem `nqn`, with their address line
/// (`traddr=…,trsvcid=…`).
pub(crate) fn nvme_controllers(nqn: &str) -> Vec<(String, String)> {
    let Ok(dir) = std::fs::read_dir("/sys/class/nvme") else {
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
mod tests {
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
        assert!(is_namespace_head("nvme0n1"));
        assert!(is_namespace_head("nvme12n3"));
        assert!(!is_namespace_head("nvme0c1n1"));
        assert!(!is_namespace_head("nvme0n1p1"));
        assert!(!is_namespace_head("nvme0"));
        assert!(!is_namespace_head("sda"));
        let l = "traddr=10.77.0.1,trsvcid=4420,src_addr=10.77.0.2";
        assert!(address_is(l, "10.77.0.1", 4420));
        assert!(!address_is(l, "10.77.0.1", 4421));
        assert!(!address_is(l, "10.77.0.11", 4420));
    }
}
