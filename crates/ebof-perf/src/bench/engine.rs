//! Running a step: on the built-in initiator (each step connects its own controller with as
//! many I/O queues as the step has connections and runs perf's engine), or on fio against a
//! block device. Also the target's and the machine's facts for the report.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use nvmf_host::Controller;

use super::fio;
use super::plan::{Rw, Step};
use super::report::{Identity, Latency, Machine, Outcome, TargetInfo, buckets_from_hist};
use crate::Endpoint;
use crate::perf::{self, PerfOptions, RwMode};

/// Which engine runs a plan's I/O, and on what.
#[derive(Clone, Debug)]
pub enum EngineSpec {
    /// The built-in userspace NVMe/TCP initiator on namespace `nsid` (`None`: the first
    /// active one) of `endpoint`.
    Builtin {
        /// The subsystem.
        endpoint: Box<Endpoint>,
        /// The namespace.
        nsid: Option<u32>,
    },
    /// fio on a block device (or a plain file).
    Fio {
        /// The device, e.g. the Linux initiator's /dev/nvmeXnY.
        device: PathBuf,
    },
}

/// I/O queues asked for at the first connection (Number of Queues), to learn how many the
/// target grants.
const PROBE_IO_QUEUES: u16 = 64;

pub enum Engine {
    Builtin(Box<Builtin>),
    Fio(FioDev),
}

/// The built-in initiator's engine: the subsystem and what Identify said about it.
pub struct Builtin {
    rt: tokio::runtime::Runtime,
    endpoint: Box<Endpoint>,
    nsid: u32,
    identity: Identity,
    capacity: u64,
    lba_size: u64,
    /// Identify says the namespace is an ebof RAM namespace: nothing durable to destroy.
    ebof_ram: bool,
}

pub struct FioDev {
    device: PathBuf,
    capacity: u64,
    /// A block device: O_DIRECT and libaio. A plain file: psync, through the page cache.
    direct: bool,
}

impl Engine {
    /// Connect (built-in: Identify the controller and the namespace) or size the device.
    pub fn open(spec: EngineSpec) -> Result<Engine> {
        match spec {
            EngineSpec::Builtin { endpoint, nsid } => {
                Builtin::open(endpoint, nsid).map(|b| Engine::Builtin(Box::new(b)))
            }
            EngineSpec::Fio { device } => FioDev::open(device).map(Engine::Fio),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Engine::Builtin(_) => "builtin",
            Engine::Fio(_) => "fio",
        }
    }

    /// The target is an ebof RAM namespace (Identify Namespace's vendor-specific mark): writing
    /// to it destroys nothing anyone could lose, so the plans need no `--yes-destroy-data`.
    pub fn is_ebof_ram(&self) -> bool {
        matches!(self, Engine::Builtin(b) if b.ebof_ram)
    }

    /// What a write would destroy, for the guard's message.
    pub fn what(&self) -> String {
        match self {
            Engine::Builtin(b) => format!(
                "namespace {} of {} at {}",
                b.nsid, b.endpoint.subnqn, b.endpoint.addr
            ),
            Engine::Fio(f) => f.device.display().to_string(),
        }
    }

    pub fn capacity(&self) -> u64 {
        match self {
            Engine::Builtin(b) => b.capacity,
            Engine::Fio(f) => f.capacity,
        }
    }

    /// Top of the ADQ sweep when `--cores-max` is not given.
    pub fn cores_max(&self, default: u16) -> u16 {
        match self {
            Engine::Builtin(b) => b
                .identity
                .io_queues_granted
                .map_or(default, |q| (q / 3).clamp(1, default)),
            Engine::Fio(_) => default,
        }
    }

    /// The byte range a plan uses: `size` checked against the capacity, or all of it.
    pub fn range(&self, size: Option<(u64, u64)>) -> Result<(u64, u64)> {
        let cap = self.capacity();
        let align = match self {
            Engine::Builtin(b) => b.lba_size.max(1),
            Engine::Fio(_) => 4096,
        };
        let (s, e) = match size {
            Some((s, e)) => (s, e.min(cap)),
            None => (0, cap),
        };
        if s % align != 0 {
            bail!("--size start {s} is not a multiple of the {align}-byte block size");
        }
        // Every step's block (at most 128 KiB) must fit a few times.
        if e <= s || e - s < (1 << 20) {
            bail!("--size {s}-{e} leaves less than 1 MiB of the {cap}-byte capacity");
        }
        Ok((s, e))
    }

    pub fn target_info(&self) -> TargetInfo {
        match self {
            Engine::Builtin(b) => TargetInfo {
                address: Some(b.endpoint.addr.to_string()),
                subnqn: Some(b.endpoint.subnqn.clone()),
                nsid: Some(b.nsid),
                device: None,
                identify: Some(b.identity.clone()),
                capacity_bytes: b.capacity,
            },
            Engine::Fio(f) => f.target_info(),
        }
    }

    /// Run one step over `range`; `rate`: open loop at this many commands per second.
    pub fn run_step(
        &mut self,
        st: &Step,
        range: (u64, u64),
        rate: Option<f64>,
    ) -> Result<Outcome, String> {
        match self {
            Engine::Builtin(b) => b.run_step(st, range, rate).map_err(|e| format!("{e:#}")),
            Engine::Fio(f) => {
                let args = fio::args(st, &f.device, range, rate, f.direct);
                fio::run(&args, rate)
            }
        }
    }
}

fn version_str(v: u32) -> String {
    format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

impl Builtin {
    fn open(endpoint: Box<Endpoint>, nsid: Option<u32>) -> Result<Builtin> {
        // Ask for many I/O queues: what the target grants sizes the ADQ sweep.
        let cfg = endpoint.host_config(PROBE_IO_QUEUES);
        let rt = crate::runtime()?;
        let (identity, nsid, capacity, lba_size, ebof_ram) = rt.block_on(async {
            let ctrl = endpoint.connect(&cfg).await?;
            let r = identify(&ctrl, nsid).await;
            ctrl.disconnect().await;
            r
        })?;
        Ok(Builtin {
            rt,
            endpoint,
            nsid,
            identity,
            capacity,
            lba_size,
            ebof_ram,
        })
    }

    /// The step as perf options: a closed loop at the step's depth, or open at `rate`.
    fn perf_options(&self, st: &Step, range: (u64, u64), rate: Option<f64>) -> PerfOptions {
        PerfOptions {
            nsid: Some(self.nsid),
            rw: match st.rw {
                Rw::Read => RwMode::Read,
                Rw::Write => RwMode::Write,
                Rw::RandRead => RwMode::RandRead,
                Rw::RandWrite => RwMode::RandWrite,
            },
            bs: st.bs,
            qd: st.qd,
            queues: Some(st.queues),
            runtime: st.runtime,
            ramp: st.ramp,
            range: Some(range),
            rate_iops: rate,
            passes: st.passes,
            // The rest as `ebof perf` runs by default: no verify, flush or FUA, busy polling.
            ..PerfOptions::default()
        }
    }

    fn run_step(&mut self, st: &Step, range: (u64, u64), rate: Option<f64>) -> Result<Outcome> {
        let opts = self.perf_options(st, range, rate);
        let ep = &self.endpoint;
        let r = self
            .rt
            .block_on(ep.with_controller(st.queues, async |ctrl| {
                perf::run(&opts, ctrl, ep, &mut |_| {}).await
            }))?;
        let mut all = r.read.clone();
        all.merge(&r.write);
        Ok(Outcome {
            elapsed_s: r.window.as_secs_f64(),
            ios: all.ios,
            bytes: all.bytes,
            read_ios: r.read.ios,
            write_ios: r.write.ios,
            latency_us: Latency::from_hist(&all.hist),
            histogram: buckets_from_hist(&all.hist),
            errors: r.failures().0,
            rate_iops: rate,
            ..Default::default()
        }
        .with_rates())
    }
}

/// Identify Controller and Namespace (the first active one unless `nsid`).
async fn identify(ctrl: &Controller, nsid: Option<u32>) -> Result<(Identity, u32, u64, u64, bool)> {
    let c = ctrl.identify();
    let (nsid, ns) = perf::namespace(ctrl, nsid).await?;
    let lba = u64::from(ns.lba_size());
    let capacity = ns.nsze.saturating_mul(lba);
    let id = Identity {
        vid: c.vid,
        sn: c.sn.trim().to_string(),
        mn: c.mn.trim().to_string(),
        fr: c.fr.trim().to_string(),
        ver: version_str(c.ver),
        cntlid: c.cntlid,
        mdts_bytes: ctrl.max_transfer().map(|m| m as u64),
        io_capsule_bytes: ctrl.io_icd_max() as u64,
        nn: c.nn,
        io_queues_granted: ctrl.io_queues_granted(),
        subnqn: c.subnqn.clone(),
        namespace_blocks: ns.nsze,
        lba_size: ns.lba_size(),
    };
    let ebof_ram = ns.ebof_backend == Some(nvme_spec::identify::ebof_vs::Backend::Ram);
    Ok((id, nsid.0, capacity, lba, ebof_ram))
}

impl FioDev {
    fn open(device: PathBuf) -> Result<FioDev> {
        use std::io::{Seek, SeekFrom};
        let meta =
            std::fs::metadata(&device).with_context(|| format!("--device {}", device.display()))?;
        let direct = {
            use std::os::unix::fs::FileTypeExt;
            meta.file_type().is_block_device()
        };
        let capacity = if direct {
            let mut f = std::fs::File::open(&device)
                .with_context(|| format!("cannot open {}", device.display()))?;
            f.seek(SeekFrom::End(0))
                .with_context(|| format!("cannot size {}", device.display()))?
        } else {
            meta.len()
        };
        Ok(FioDev {
            device,
            capacity,
            direct,
        })
    }

    /// What sysfs says about the device (model, serial, firmware, transport address, NQN).
    fn target_info(&self) -> TargetInfo {
        let name = self
            .device
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let sys = |f: &str| {
            std::fs::read_to_string(format!("/sys/block/{name}/device/{f}"))
                .ok()
                .map(|s| s.trim().to_string())
        };
        let identify = sys("model").map(|mn| Identity {
            mn,
            sn: sys("serial").unwrap_or_default(),
            fr: sys("firmware_rev").unwrap_or_default(),
            subnqn: sys("subsysnqn").unwrap_or_default(),
            ..Default::default()
        });
        TargetInfo {
            address: sys("address"),
            subnqn: sys("subsysnqn"),
            nsid: None,
            device: Some(self.device.display().to_string()),
            identify,
            capacity_bytes: self.capacity,
        }
    }
}

/// Facts about this machine for the report.
pub fn machine() -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu_model = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let memory_bytes = read("/proc/meminfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")
                .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024);
    Machine {
        hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        cpu_model,
        // Online CPUs of the machine (not the ones this process may use).
        // SAFETY: sysconf reads a system value; no memory is passed.
        cpus: usize::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).unwrap_or(1),
        memory_bytes,
    }
}

/// `latency --local PATH`: the same QD1 step against a local file or block device with plain
/// `pread`/`pwrite` (O_DIRECT on a block device), for the latency the fabric adds. Uses the
/// first `range_len` bytes of `path` (at most its size).
pub fn run_local(path: &std::path::Path, st: &Step, range_len: u64) -> Result<Outcome, String> {
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let meta = std::fs::metadata(path).map_err(io)?;
    let direct = meta.file_type().is_block_device();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(st.rw.writes())
        .custom_flags(if direct { libc::O_DIRECT } else { 0 })
        .open(path)
        .map_err(io)?;
    let size = f.seek(SeekFrom::End(0)).map_err(io)?;
    let bs = st.bs.max(1);
    let units = size.min(range_len) / bs;
    if units == 0 {
        return Err(format!("{} holds no {bs}-byte block", path.display()));
    }
    // O_DIRECT wants an aligned buffer: take an aligned window of a larger one.
    let mut backing = vec![0x5au8; bs as usize + 4096];
    let off = backing.as_ptr().align_offset(4096).min(4096);
    let buf = &mut backing[off..off + bs as usize];
    let mut hist = crate::perf::report::DirStats::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(std::process::id());
    let t0 = std::time::Instant::now();
    let (ramp_end, end) = (t0 + st.ramp, t0 + st.ramp + st.runtime);
    loop {
        let now = std::time::Instant::now();
        if now >= end {
            break;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let pos = (x % units) * bs;
        let r = if st.rw.writes() {
            f.write_all_at(buf, pos)
        } else {
            f.read_exact_at(buf, pos)
        };
        r.map_err(io)?;
        if now >= ramp_end {
            hist.record(bs, now.elapsed().as_nanos() as u64);
        }
    }
    Ok(Outcome {
        elapsed_s: st.runtime.as_secs_f64(),
        ios: hist.ios,
        bytes: hist.bytes,
        read_ios: if st.rw.writes() { 0 } else { hist.ios },
        write_ios: if st.rw.writes() { hist.ios } else { 0 },
        latency_us: Latency::from_hist(&hist.hist),
        histogram: buckets_from_hist(&hist.hist),
        ..Default::default()
    }
    .with_rates())
}
