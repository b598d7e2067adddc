//! End-to-end: `ebof bench quick` against a spawned `ebof serve --ram` on loopback (tiny
//! `--duration-scale`), the report files checked (report.json validated against
//! `docs/bench-report.schema.json`, then its figures; SVGs parsed as XML), `ebof bench compare` of two runs, the refusals, and
//! the fio engine against a plain file when fio is installed. Every wait is bounded; servers
//! are killed by PID when a test ends.

mod common;

use std::path::Path;

use common::{Target, ebof};
use serde_json::Value;

const NQN: &str = "nqn.2026-11.io.ebof:bench";
/// Steps of ~2-3 s at scale 1 become 200-300 ms.
const SCALE: &str = "0.1";

/// `ebof serve` for one test, its log kept in a file so that a failure can show it.
struct Served {
    t: Target,
    _dir: tempfile::TempDir,
    log: std::path::PathBuf,
}

impl std::ops::Deref for Served {
    type Target = Target;
    fn deref(&self) -> &Target {
        &self.t
    }
}

fn serve() -> Served {
    let addr = format!("127.0.0.1:{}", common::free_port());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let t = Target::spawn_logged(
        &["serve", "--listen", &addr, "--ram", "64M", "--nqn", NQN],
        addr.parse().unwrap(),
        &log,
    );
    Served { t, _dir: dir, log }
}

/// `ebof bench quick` against `t`, writing into `out` (without the destroy-data consent).
fn quick_args<'a>(port: &'a str, out: &'a Path) -> Vec<&'a str> {
    vec![
        "bench",
        "quick",
        "-a",
        "127.0.0.1",
        "-s",
        port,
        "-n",
        NQN,
        "--out",
        out.to_str().unwrap(),
    ]
}

fn run_quick(t: &Served, out: &Path, extra: &[&str]) -> common::Output {
    let port = t.port();
    let mut args = quick_args(&port, out);
    args.extend([
        "--duration-scale",
        SCALE,
        "--size",
        "16M",
        "--yes-destroy-data",
    ]);
    args.extend(extra);
    let o = ebof(&args);
    assert!(
        o.ok,
        "bench quick failed: {}\n{}\nthe target ({}) logged:\n{}",
        o.stdout,
        o.stderr,
        t.describe(),
        std::fs::read_to_string(&t.log).unwrap_or_default()
    );
    o
}

/// report.json's JSON Schema (version 1).
const REPORT_SCHEMA: &str = include_str!("../../../docs/bench-report.schema.json");

/// Every error `docs/bench-report.schema.json` finds in `report`, one a line.
fn schema_errors(report: &Value) -> String {
    let schema: Value = serde_json::from_str(REPORT_SCHEMA).expect("the schema is JSON");
    let v = jsonschema::draft202012::new(&schema).expect("the schema compiles");
    v.iter_errors(report)
        .map(|e| format!("{}: {e}\n", e.instance_path()))
        .collect()
}

/// The report's files: JSON valid against its schema with positive figures, Markdown with the
/// reference column, and every chart a well-formed SVG document.
fn check_report(dir: &Path, engine: &str) -> Value {
    let text = std::fs::read_to_string(dir.join("report.json")).expect("report.json");
    let j: Value = serde_json::from_str(&text).expect("report.json is JSON");
    let errors = schema_errors(&j);
    assert!(
        errors.is_empty(),
        "report.json against its schema:\n{errors}"
    );
    assert_eq!(j["plan"], "quick");
    assert_eq!(j["engine"], engine);
    let steps = j["steps"].as_array().expect("steps");
    assert!(steps.len() >= 8, "{}", steps.len());
    for s in steps {
        let id = s["id"].as_str().expect("id");
        assert!(s["error"].is_null(), "{id}: {}", s["error"]);
        let o = &s["outcome"];
        assert!(o["iops"].as_f64().unwrap() > 0.0, "{id}: {o}");
        assert!(o["mib_s"].as_f64().unwrap() > 0.0, "{id}");
        assert!(o["ios"].as_u64().unwrap() > 0, "{id}");
        assert_eq!(o["errors"], 0, "{id}");
        let l = &o["latency_us"];
        for p in ["p50", "p99", "p99_9", "p99_99"] {
            assert!(l[p].as_f64().unwrap() > 0.0, "{id}.{p}");
        }
        assert!(l["p50"].as_f64() <= l["p99_99"].as_f64(), "{id}");
        assert!(!o["histogram"].as_array().unwrap().is_empty(), "{id}");
        if !s["reference"].is_null() {
            assert!(s["ratio"].as_f64().unwrap() > 0.0, "{id}");
            assert!(s["reference"]["source"].as_str().unwrap().contains("seed"));
        }
        if s["role"]["kind"] == "load" {
            // Open loop: never (much) faster than asked.
            let asked = o["rate_iops"].as_f64().unwrap();
            assert!(asked > 0.0, "{id}");
            assert!(
                o["iops"].as_f64().unwrap() <= asked * 1.1 + 50.0,
                "{id}: {o}"
            );
        }
    }
    let md = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    assert!(md.contains("| 128K sequential write, 1 job QD64 |"), "{md}");
    assert!(md.contains("2333 MB/s"), "{md}");
    assert!(md.contains("## Workload parameters"));
    assert!(md.contains("## Latency versus load"));
    let charts = j["charts"].as_array().expect("charts");
    for want in ["reference.svg", "latency-cdf.svg", "latency-vs-load.svg"] {
        assert!(charts.iter().any(|c| c == want), "{want} in {charts:?}");
    }
    for c in charts {
        let name = c.as_str().unwrap();
        let svg = std::fs::read_to_string(dir.join(name)).expect(name);
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg", "{name}");
        assert!(
            md.contains(&format!("![{name}]({name})")),
            "{name} in report.md"
        );
    }
    j
}

#[test]
fn quick_writes_a_report_and_compare_reads_two() {
    let t = serve();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    // With --local: every QD1 step again on a local file, and the fabric's share noted.
    let local = tmp.path().join("local.img");
    std::fs::File::create(&local)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let o = run_quick(&t, &a, &["--local", local.to_str().unwrap()]);
    assert!(o.stdout.contains("| step | ours | paper |"), "{}", o.stdout);
    let j = check_report(&a, "builtin");
    let ids: Vec<&str> = j["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"local-lat-randread-4k-qd1"), "{ids:?}");
    assert!(ids.contains(&"local-lat-randwrite-4k-qd1"), "{ids:?}");
    let notes = j["notes"].to_string();
    assert!(notes.contains("the fabric adds"), "{notes}");
    assert_eq!(j["target"]["identify"]["mn"], "ebof");
    assert_eq!(j["target"]["subnqn"], NQN);
    assert!(j["target"]["capacity_bytes"].as_u64().unwrap() == 64 << 20);
    run_quick(&t, &b, &[]);
    check_report(&b, "builtin");

    let o = ebof(&[
        "bench",
        "compare",
        a.join("report.json").to_str().unwrap(),
        b.join("report.json").to_str().unwrap(),
    ]);
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stdout.contains("| step | metric | A | B | B/A |"),
        "{}",
        o.stdout
    );
    for id in ["seq-write-128k-qd64", "rand-read-4k-qd64", "load-90pct"] {
        assert!(
            o.stdout.contains(&format!("| {id} |")),
            "{id}: {}",
            o.stdout
        );
    }
    // Not a report: one clear error.
    let o = ebof(&[
        "bench",
        "compare",
        a.join("report.md").to_str().unwrap(),
        b.join("report.json").to_str().unwrap(),
    ]);
    assert!(!o.ok);
    assert!(o.stderr.contains("is not JSON"), "{}", o.stderr);
}

#[test]
fn refusals_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    // Writing plans need --yes-destroy-data on storage that keeps data (a file namespace
    // here); nothing is written, no report made.
    let img = tmp.path().join("disk.img");
    let addr = format!("127.0.0.1:{}", common::free_port());
    let file_target = Target::spawn(
        &[
            "serve",
            "--listen",
            &addr,
            "--file",
            img.to_str().unwrap(),
            "--nqn",
            NQN,
        ],
        addr.parse().unwrap(),
        std::process::Stdio::null(),
    );
    let out = tmp.path().join("r");
    let file_port = file_target.port();
    let o = ebof(&quick_args(&file_port, &out));
    assert!(!o.ok);
    assert!(o.stderr.contains("--yes-destroy-data"), "{}", o.stderr);
    assert!(!out.join("report.json").exists());
    drop(file_target);
    // An ebof RAM namespace says so in Identify: nothing to lose, no consent needed.
    let t = serve();
    let port = t.port();
    let base = quick_args(&port, &out);
    let mut ram = base.clone();
    ram.extend(["--duration-scale", SCALE, "--size", "0-8M"]);
    let o = ebof(&ram);
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stderr.contains("is an ebof RAM namespace"),
        "{}",
        o.stderr
    );
    assert!(out.join("report.json").exists());
    std::fs::remove_dir_all(&out).unwrap();
    for (extra, want) in [
        (vec!["--duration-scale", "0"], "--duration-scale"),
        (vec!["--duration-scale", "nan"], "--duration-scale"),
        (
            vec!["--size", "0-4k", "--yes-destroy-data"],
            "less than 1 MiB",
        ),
        (vec!["--engine", "fio"], "--device"),
    ] {
        let mut args = base.clone();
        args.extend(extra.iter().copied());
        let o = ebof(&args);
        assert!(!o.ok, "{extra:?}");
        assert!(o.stderr.contains(want), "{extra:?}: {}", o.stderr);
        assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    }
    let o = ebof(&["bench", "quick", "--yes-destroy-data"]);
    assert!(!o.ok);
    assert!(o.stderr.contains("-a ADDR"), "{}", o.stderr);
    let o = ebof(&["bench", "nosuchplan"]);
    assert!(!o.ok);
    assert!(o.stderr.contains("quick"), "{}", o.stderr);
}

/// The fio engine's plumbing: the same plan through fio on a plain file (psync; on a real
/// /dev/nvmeXnY it would be libaio with O_DIRECT). Skipped, saying so, where fio is missing
/// (`./scripts/test.sh` installs it).
#[test]
fn quick_through_fio_on_a_file() {
    if std::process::Command::new("fio")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("fio is not installed: skipping the fio engine test");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("dev.img");
    let f = std::fs::File::create(&dev).unwrap();
    f.set_len(16 << 20).unwrap();
    let out = tmp.path().join("fio");
    let o = ebof(&[
        "bench",
        "quick",
        "--engine",
        "fio",
        "--device",
        dev.to_str().unwrap(),
        "--duration-scale",
        SCALE,
        "--out",
        out.to_str().unwrap(),
        "--yes-destroy-data",
    ]);
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let j = check_report(&out, "fio");
    assert_eq!(j["target"]["device"], dev.to_str().unwrap());
    assert_eq!(j["target"]["capacity_bytes"], 16 << 20);
}
