//! The seed papers' test plans as data: each plan is a list of [`Step`]s (workload, duration,
//! the figure the paper published for it, and where that figure is in the seed). Pure: no I/O,
//! so the parameters are unit-tested against the papers' tables below.
//!
//! Durations are the plan's at `--duration-scale 1`; the runner multiplies them. Sizes come
//! from `--size` (default: the whole namespace; `quick` uses 64 MiB).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The plans `ebof bench` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanName {
    /// A ~30 s smoke version of every plan (for CI).
    Quick,
    /// QD1 4K read and write latency distribution (OFA 2017 Linux NVMe-oF talk).
    Latency,
    /// ODCC Ethernet SSD white paper: preconditioning, 128K sequential and 4K random at QD64.
    Odcc,
    /// Ingrasys ES2000 EBOF: 4K/128K random at QD 64-256, aggregate sequential bandwidth 1-8.
    Es2000,
    /// Intel SPDK NVMe/TCP + ADQ: 4K randread QD32, 3 connections per core; latency vs load.
    Adq,
}

impl PlanName {
    /// Every plan, in `ebof bench`'s order.
    pub const ALL: [PlanName; 5] = [
        PlanName::Quick,
        PlanName::Latency,
        PlanName::Odcc,
        PlanName::Es2000,
        PlanName::Adq,
    ];

    /// The plan's name on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            PlanName::Quick => "quick",
            PlanName::Latency => "latency",
            PlanName::Odcc => "odcc",
            PlanName::Es2000 => "es2000",
            PlanName::Adq => "adq",
        }
    }
}

/// Access pattern (fio's `rw=` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
}

impl Rw {
    /// fio's `rw=` name.
    pub fn name(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
        }
    }
    /// The step writes (and so destroys data).
    pub fn writes(self) -> bool {
        matches!(self, Rw::Write | Rw::RandWrite)
    }
}

/// The figure a step is judged by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// I/O commands per second.
    Iops,
    /// 10^6 bytes per second.
    MbPerS,
    /// 2^20 bytes per second.
    MibPerS,
    /// 99.99th percentile latency, microseconds.
    P9999Us,
    /// Median latency, microseconds.
    P50Us,
}

impl Metric {
    /// The unit as the report writes it.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Iops => "IOPS",
            Metric::MbPerS => "MB/s",
            Metric::MibPerS => "MiB/s",
            Metric::P9999Us => "µs p99.99",
            Metric::P50Us => "µs p50",
        }
    }
    /// Higher is better (throughput) or lower is better (latency).
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::Iops | Metric::MbPerS | Metric::MibPerS)
    }
}

/// A published figure and where it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// The paper's figure.
    pub value: f64,
    /// What the figure measures.
    pub metric: Metric,
    /// The seed and the place in it, e.g. "ODCC Ethernet SSD white paper (seed 000), Table 1".
    pub source: String,
    /// What the paper measured it on.
    pub system: String,
}

/// What a step is for (how the report groups it).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Role {
    /// Preconditioning: run, reported, not judged.
    Precondition,
    /// A test item with a headline figure.
    Measure,
    /// One point of a connection sweep (`connections` I/O queues in parallel).
    Scaling {
        /// I/O queues in parallel.
        connections: u16,
    },
    /// One point of the ADQ sweep: `cores` assumed target cores, three connections each.
    Cores {
        /// Target cores assumed.
        cores: u16,
    },
    /// Closed-loop run whose IOPS the following load steps take as saturation.
    Saturation,
    /// Open-loop step at this fraction of the measured saturation IOPS.
    Load {
        /// Of the saturation IOPS.
        fraction: f64,
    },
}

/// One workload of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Stable identifier (what `compare` matches on), e.g. `seq-write-128k-qd64`.
    pub id: String,
    /// What the report calls the step.
    pub title: String,
    /// What the step is for.
    pub role: Role,
    /// Access pattern.
    pub rw: Rw,
    /// Bytes per I/O.
    pub bs: u64,
    /// Commands in flight per connection.
    pub qd: u16,
    /// I/O queues (TCP connections; fio: numjobs).
    pub queues: u16,
    /// Measured time at `--duration-scale 1` (for `passes` steps: the cap).
    #[serde(with = "secs")]
    pub runtime: Duration,
    #[serde(with = "secs")]
    /// Warm-up before measuring, at `--duration-scale 1`.
    pub ramp: Duration,
    /// Stop after this many passes over the range (fio `loops=`), or at `runtime`.
    pub passes: Option<f64>,
    /// The figure the step is judged by.
    pub metric: Metric,
    /// The paper's figure for it, if it published one.
    pub reference: Option<Reference>,
    /// The paper's command, as it ran it.
    pub paper: String,
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}

const ODCC: &str = "ODCC Ethernet SSD Testing White Paper 2021 (seed 000)";
const ODCC_SYS: &str = "Samsung dual-port 25GbE Ethernet SSD, NVMe-oF/RoCE, fio libaio";
const ES2000: &str = "Ingrasys ES2000 EBOF benchmark (seed 002)";
const ES2000_SYS: &str = "Kioxia EM6 Ethernet SSD behind the ES2000 switch, fio";
const ADQ: &str = "Intel SPDK NVMe/TCP with ADQ (seed 004)";
const ADQ_SYS: &str = "SPDK NVMe/TCP target, E810 100GbE with ADQ, MTU 1500";

fn reference(value: f64, metric: Metric, source: &str, place: &str, system: &str) -> Reference {
    Reference {
        value,
        metric,
        source: format!("{source}, {place}"),
        system: system.to_string(),
    }
}

#[allow(clippy::too_many_arguments)]
fn step(
    id: &str,
    title: &str,
    role: Role,
    rw: Rw,
    bs: u64,
    qd: u16,
    queues: u16,
    runtime_s: f64,
    metric: Metric,
) -> Step {
    Step {
        id: id.to_string(),
        title: title.to_string(),
        role,
        rw,
        bs,
        qd,
        queues,
        runtime: Duration::from_secs_f64(runtime_s),
        ramp: Duration::ZERO,
        passes: None,
        metric,
        reference: None,
        paper: String::new(),
    }
}

impl Step {
    fn with_ref(mut self, r: Reference) -> Step {
        self.reference = Some(r);
        self
    }
    fn with_paper(mut self, p: &str) -> Step {
        self.paper = p.to_string();
        self
    }
    fn with_ramp(mut self, s: f64) -> Step {
        self.ramp = Duration::from_secs_f64(s);
        self
    }
    fn with_passes(mut self, p: f64) -> Step {
        self.passes = Some(p);
        self
    }
}

const K4: u64 = 4096;
const K128: u64 = 128 << 10;

/// ODCC: preconditioning, then the four test items (white paper §6.4, Tables 1 and 2).
fn odcc(t: f64) -> Vec<Step> {
    vec![
        step(
            "precondition-seq",
            "Sequential precondition: 128K write QD8, 2 passes",
            Role::Precondition,
            Rw::Write,
            K128,
            8,
            1,
            1800.0 * t,
            Metric::MbPerS,
        )
        .with_passes(2.0)
        .with_paper("fio rw=write bs=128k numjobs=1 iodepth=8 loops=2 (whole device)"),
        step(
            "seq-write-128k-qd64",
            "128K sequential write, 1 job QD64",
            Role::Measure,
            Rw::Write,
            K128,
            64,
            1,
            60.0 * t,
            Metric::MbPerS,
        )
        .with_ramp(5.0 * t)
        .with_ref(reference(2333.0, Metric::MbPerS, ODCC, "Table 1", ODCC_SYS))
        .with_paper("fio rw=write bs=128k numjobs=1 iodepth=64"),
        step(
            "seq-read-128k-qd64",
            "128K sequential read, 1 job QD64",
            Role::Measure,
            Rw::Read,
            K128,
            64,
            1,
            60.0 * t,
            Metric::MbPerS,
        )
        .with_ramp(5.0 * t)
        .with_ref(reference(2717.0, Metric::MbPerS, ODCC, "Table 1", ODCC_SYS))
        .with_paper("fio rw=read bs=128k numjobs=1 iodepth=64"),
        step(
            "precondition-rand",
            "Random precondition: 4K randwrite 8 jobs QD256, 2 passes",
            Role::Precondition,
            Rw::RandWrite,
            K4,
            256,
            8,
            14400.0 * t,
            Metric::Iops,
        )
        .with_passes(2.0)
        .with_paper(
            "fio rw=randwrite bs=4k numjobs=8 iodepth=256 ramp_time=60 runtime=14400 time_based",
        ),
        step(
            "rand-write-4k-qd64",
            "4K random write, 1 job QD64",
            Role::Measure,
            Rw::RandWrite,
            K4,
            64,
            1,
            60.0 * t,
            Metric::Iops,
        )
        .with_ramp(5.0 * t)
        .with_ref(reference(
            139_000.0,
            Metric::Iops,
            ODCC,
            "Table 2",
            ODCC_SYS,
        ))
        .with_paper("fio rw=randwrite bs=4k numjobs=1 iodepth=64"),
        step(
            "rand-read-4k-qd64",
            "4K random read, 1 job QD64",
            Role::Measure,
            Rw::RandRead,
            K4,
            64,
            1,
            60.0 * t,
            Metric::Iops,
        )
        .with_ramp(5.0 * t)
        .with_ref(reference(
            669_000.0,
            Metric::Iops,
            ODCC,
            "Table 2",
            ODCC_SYS,
        ))
        .with_paper("fio rw=randread bs=4k numjobs=1 iodepth=64"),
    ]
}

/// ES2000: the per-drive fio table, the QD sweep, and the aggregate (IOR-style) curve.
fn es2000(t: f64) -> Vec<Step> {
    let mut v = vec![
        step(
            "seq-read-128k-qd64",
            "128K sequential read QD64",
            Role::Measure,
            Rw::Read,
            K128,
            64,
            1,
            30.0 * t,
            Metric::MibPerS,
        )
        .with_ref(reference(
            2734.0,
            Metric::MibPerS,
            ES2000,
            "fio table, sequential read",
            ES2000_SYS,
        ))
        .with_paper("fio rw=read bs=128k iodepth=64"),
        step(
            "seq-write-128k-qd32",
            "128K sequential write QD32",
            Role::Measure,
            Rw::Write,
            K128,
            32,
            1,
            30.0 * t,
            Metric::MibPerS,
        )
        .with_ref(reference(
            1668.0,
            Metric::MibPerS,
            ES2000,
            "fio table, sequential write",
            ES2000_SYS,
        ))
        .with_paper("fio rw=write bs=128k iodepth=32"),
    ];
    for (rw, bs) in [
        (Rw::RandRead, K4),
        (Rw::RandWrite, K4),
        (Rw::RandRead, K128),
        (Rw::RandWrite, K128),
    ] {
        for qd in [64u16, 128, 256] {
            let kb = bs >> 10;
            let metric = if bs == K4 {
                Metric::Iops
            } else {
                Metric::MibPerS
            };
            let mut s = step(
                &format!("{}-{kb}k-qd{qd}", rw.name()),
                &format!("{kb}K {} QD{qd}", rw.name()),
                Role::Measure,
                rw,
                bs,
                qd,
                1,
                30.0 * t,
                metric,
            )
            .with_paper(&format!("fio rw={} bs={kb}k iodepth={qd}", rw.name()));
            // The paper's random figures: 913k IOPS read (its text: 128 KiB QD256; its table: a
            // small block at QD64) and 560k IOPS write at 4 KiB QD64. We set the read figure
            // against 4K QD256, the write figure against 4K QD64.
            if bs == K4 && rw == Rw::RandRead && qd == 256 {
                s = s.with_ref(reference(
                    913_000.0,
                    Metric::Iops,
                    ES2000,
                    "random read (text: QD256)",
                    ES2000_SYS,
                ));
            }
            if bs == K4 && rw == Rw::RandWrite && qd == 64 {
                s = s.with_ref(reference(
                    560_000.0,
                    Metric::Iops,
                    ES2000,
                    "random write 4KiB QD64",
                    ES2000_SYS,
                ));
            }
            v.push(s);
        }
    }
    for n in [1u16, 2, 4, 8] {
        let mut s = step(
            &format!("aggregate-seq-read-x{n}"),
            &format!("Aggregate 128K sequential read, {n} connections"),
            Role::Scaling { connections: n },
            Rw::Read,
            K128,
            32,
            n,
            30.0 * t,
            Metric::MibPerS,
        )
        .with_paper("IOR (IO500), N processes across the drives");
        if n == 8 {
            s = s.with_ref(reference(
                60.0 * 1024.0,
                Metric::MibPerS,
                ES2000,
                "IOR with 8 processes, ~60 GiB/s (24 drives)",
                "24 Kioxia EM6 at 25GbE behind one ES2000, servers at 100GbE",
            ));
        }
        v.push(s);
    }
    v
}

/// The ADQ load fractions of saturation (open-loop steps).
pub const LOAD_FRACTIONS: [f64; 8] = [0.1, 0.25, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0];

/// ADQ: the core sweep (three connections per target core), then latency versus load.
fn adq(t: f64, cores_max: u16) -> Vec<Step> {
    let mut v = Vec::new();
    for c in 1..=cores_max.max(1) {
        let mut s = step(
            &format!("randread-4k-qd32-cores{c}"),
            &format!(
                "4K randread QD32, {} connections ({c} target cores x 3)",
                3 * c
            ),
            Role::Cores { cores: c },
            Rw::RandRead,
            K4,
            32,
            3 * c,
            30.0 * t,
            Metric::Iops,
        )
        .with_paper("SPDK perf 4K randread QD32, 3 connections per target core, MTU 1500");
        if c == 5 {
            s = s.with_ref(reference(
                2_800_000.0,
                Metric::Iops,
                ADQ,
                "Figure 6: 100 Gb/s saturated at 5 cores",
                ADQ_SYS,
            ));
        }
        v.push(s);
    }
    v.extend(load_curve(3, 20.0 * t, &LOAD_FRACTIONS));
    v
}

/// Saturation (closed loop, QD32 on `queues` connections), then open-loop steps at `fractions`.
fn load_curve(queues: u16, secs: f64, fractions: &[f64]) -> Vec<Step> {
    let mut v = vec![
        step(
            "load-saturation",
            "4K randread QD32 closed loop (saturation)",
            Role::Saturation,
            Rw::RandRead,
            K4,
            32,
            queues,
            secs,
            Metric::Iops,
        )
        .with_paper("latency-versus-load curve: the closed-loop rate is 100 %"),
    ];
    for &f in fractions {
        let pct = (f * 100.0).round() as u32;
        v.push(
            step(
                &format!("load-{pct}pct"),
                &format!("4K randread open loop at {pct} % of saturation"),
                Role::Load { fraction: f },
                Rw::RandRead,
                K4,
                32,
                queues,
                secs,
                Metric::P9999Us,
            )
            .with_paper("open-loop rate step, at most QD32 per connection"),
        );
    }
    v
}

/// OFA 2017: QD1 latency, read and write.
fn latency(t: f64) -> Vec<Step> {
    vec![
        step(
            "lat-randread-4k-qd1",
            "4K random read QD1 latency",
            Role::Measure,
            Rw::RandRead,
            K4,
            1,
            1,
            60.0 * t,
            Metric::P50Us,
        )
        .with_ramp(2.0 * t)
        .with_paper("fio rw=randread bs=4k iodepth=1 (fabric vs local)"),
        step(
            "lat-randwrite-4k-qd1",
            "4K random write QD1 latency",
            Role::Measure,
            Rw::RandWrite,
            K4,
            1,
            1,
            60.0 * t,
            Metric::P50Us,
        )
        .with_ramp(2.0 * t)
        .with_paper("fio rw=randwrite bs=4k iodepth=1 (fabric vs local)"),
    ]
}

/// `quick`: one short step of each plan, ~30 s at scale 1.
fn quick(t: f64) -> Vec<Step> {
    let o = odcc(1.0);
    let mut v = vec![o[0].clone().with_passes(1.0)];
    v[0].id = "precondition-seq".into();
    v[0].title = "Sequential precondition: 128K write QD8, 1 pass".into();
    v[0].runtime = Duration::from_secs_f64(3.0);
    for s in &o[1..] {
        if s.role == Role::Measure {
            let mut s = s.clone();
            s.runtime = Duration::from_secs_f64(3.0);
            s.ramp = Duration::ZERO;
            v.push(s);
        }
    }
    for mut s in latency(1.0) {
        s.runtime = Duration::from_secs_f64(2.5);
        s.ramp = Duration::ZERO;
        v.push(s);
    }
    for mut s in es2000(1.0) {
        if s.role == (Role::Scaling { connections: 2 }) {
            s.runtime = Duration::from_secs_f64(2.0);
            v.push(s);
        }
    }
    v.extend(load_curve(3, 2.0, &[0.5, 0.9]));
    for s in &mut v {
        s.runtime = s.runtime.mul_f64(t);
        s.ramp = s.ramp.mul_f64(t);
    }
    v
}

/// The steps of `plan` at duration scale `t` (`cores_max`: the ADQ sweep's top).
pub fn steps(plan: PlanName, t: f64, cores_max: u16) -> Vec<Step> {
    match plan {
        PlanName::Quick => quick(t),
        PlanName::Latency => latency(t),
        PlanName::Odcc => odcc(t),
        PlanName::Es2000 => es2000(t),
        PlanName::Adq => adq(t, cores_max),
    }
}

/// Default byte range size when `--size` is not given (`None`: the whole namespace).
pub fn default_size(plan: PlanName) -> Option<u64> {
    match plan {
        PlanName::Quick => Some(64 << 20),
        PlanName::Latency | PlanName::Odcc | PlanName::Es2000 | PlanName::Adq => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(v: &'a [Step], id: &str) -> &'a Step {
        v.iter()
            .find(|s| s.id == id)
            .unwrap_or_else(|| panic!("no step {id}"))
    }

    #[test]
    fn odcc_matches_white_paper_tables_1_and_2() {
        let v = steps(PlanName::Odcc, 1.0, 8);
        // §6.4 preconditioning: 128k QD8 loops=2; 4k randwrite 8 jobs QD256 for 14400 s.
        let p = find(&v, "precondition-seq");
        assert_eq!((p.bs, p.qd, p.queues, p.passes), (K128, 8, 1, Some(2.0)));
        let p = find(&v, "precondition-rand");
        assert_eq!((p.bs, p.qd, p.queues), (K4, 256, 8));
        assert_eq!(p.runtime, Duration::from_secs(14400));
        // Table 1: 128K sequential write 2,333 MB/s, read 2,717 MB/s at 1 job QD64.
        for (id, mbs) in [
            ("seq-write-128k-qd64", 2333.0),
            ("seq-read-128k-qd64", 2717.0),
        ] {
            let s = find(&v, id);
            assert_eq!((s.bs, s.qd, s.queues), (K128, 64, 1));
            let r = s.reference.as_ref().unwrap();
            assert_eq!((r.value, r.metric), (mbs, Metric::MbPerS));
            assert!(r.source.contains("Table 1"));
        }
        // Table 2: 4K random write 139k IOPS, read 669k IOPS at 1 job QD64.
        for (id, iops) in [("rand-write-4k-qd64", 139e3), ("rand-read-4k-qd64", 669e3)] {
            let s = find(&v, id);
            assert_eq!((s.bs, s.qd, s.queues), (K4, 64, 1));
            let r = s.reference.as_ref().unwrap();
            assert_eq!((r.value, r.metric), (iops, Metric::Iops));
            assert!(r.source.contains("Table 2"));
        }
        // Order: precondition before the items it conditions.
        let ids: Vec<_> = v.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids[0], "precondition-seq");
        assert_eq!(ids[3], "precondition-rand");
    }

    #[test]
    fn es2000_matches_the_benchmark_figures() {
        let v = steps(PlanName::Es2000, 1.0, 8);
        // 2,734 MiB/s sequential read 128 KiB QD64; 1,668 MiB/s write 128 KiB QD32.
        let s = find(&v, "seq-read-128k-qd64");
        assert_eq!(s.reference.as_ref().unwrap().value, 2734.0);
        let s = find(&v, "seq-write-128k-qd32");
        assert_eq!((s.qd, s.reference.as_ref().unwrap().value), (32, 1668.0));
        // 913k IOPS random read, 560k IOPS random write 4 KiB QD64.
        assert_eq!(
            find(&v, "randread-4k-qd256")
                .reference
                .as_ref()
                .unwrap()
                .value,
            913e3
        );
        assert_eq!(
            find(&v, "randwrite-4k-qd64")
                .reference
                .as_ref()
                .unwrap()
                .value,
            560e3
        );
        // QD 64/128/256 for 4K and 128K, read and write.
        assert_eq!(
            v.iter()
                .filter(|s| s.rw == Rw::RandRead || s.rw == Rw::RandWrite)
                .count(),
            12
        );
        // IOR: 1, 2, 4, 8 parallel connections; ~60 GiB/s at 8.
        let conns: Vec<_> = v
            .iter()
            .filter_map(|s| match s.role {
                Role::Scaling { connections } => Some(connections),
                _ => None,
            })
            .collect();
        assert_eq!(conns, [1, 2, 4, 8]);
        assert_eq!(
            find(&v, "aggregate-seq-read-x8")
                .reference
                .as_ref()
                .unwrap()
                .value,
            60.0 * 1024.0
        );
    }

    #[test]
    fn adq_matches_the_intel_study() {
        let v = steps(PlanName::Adq, 1.0, 6);
        // Figures 4-6: 4 KB random read, QD32, three connections per target core.
        for c in 1..=6u16 {
            let s = find(&v, &format!("randread-4k-qd32-cores{c}"));
            assert_eq!((s.rw, s.bs, s.qd, s.queues), (Rw::RandRead, K4, 32, 3 * c));
        }
        // ~2.8M IOPS with 5 target cores (100 Gb/s saturated).
        assert_eq!(
            find(&v, "randread-4k-qd32-cores5")
                .reference
                .as_ref()
                .unwrap()
                .value,
            2.8e6
        );
        // Latency vs load: saturation first, then every fraction, ascending, ending at 100 %.
        let i = v.iter().position(|s| s.role == Role::Saturation).unwrap();
        let f: Vec<f64> = v[i + 1..]
            .iter()
            .filter_map(|s| match s.role {
                Role::Load { fraction } => Some(fraction),
                _ => None,
            })
            .collect();
        assert_eq!(f, LOAD_FRACTIONS);
        assert!(f.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn latency_is_qd1_read_and_write() {
        let v = steps(PlanName::Latency, 1.0, 1);
        assert_eq!(v.len(), 2);
        assert!(v.iter().all(|s| s.qd == 1 && s.bs == K4 && s.queues == 1));
    }

    #[test]
    fn quick_is_about_30_seconds_and_scales() {
        let total = |t| -> f64 {
            steps(PlanName::Quick, t, 1)
                .iter()
                .map(|s| (s.runtime + s.ramp).as_secs_f64())
                .sum()
        };
        let t1 = total(1.0);
        assert!((25.0..=35.0).contains(&t1), "{t1}");
        assert!((total(0.1) - t1 / 10.0).abs() < 1e-6);
        // Every plan is represented, and ids are unique (compare matches on them).
        let v = steps(PlanName::Quick, 1.0, 1);
        let mut ids: Vec<_> = v.iter().map(|s| &s.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), v.len());
        assert!(v.iter().any(|s| matches!(s.role, Role::Load { .. })));
        assert!(v.iter().any(|s| s.qd == 1));
    }
}
