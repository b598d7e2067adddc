//! The `/metrics` exposition: the fleet series (build info, ANA state, DIM registrations, CDC
//! members, pool usage), the classic text format for `promtool check metrics`, and
//! docs/metrics.md, whose table is generated here from a rendered exposition so it cannot drift
//! from the code (`EBOF_BLESS=1 cargo test -p ebof-mgmt --test metrics_doc` rewrites it).

use ebof_mgmt::api::{CdcMemberView, CdcView, PoolView};
use ebof_mgmt::metrics::{Extras, render_box, to_text_format, wants_text_format};
use std::collections::BTreeMap;

const CONFIG: &str = r#"
[[listeners]]
address = "127.0.0.1"
port = 4420
[[subsystems]]
nqn = "nqn.2026-11.io.ebof:m"
allow_any_host = true
[[subsystems.namespaces]]
backend = "ram"
size = "1M"
qos = { iops = 1000 }
[[subsystems.namespaces]]
backend = "ram"
size = "1M"
ana_group = 2
[[ana]]
listener = "127.0.0.1:4420"
group = 2
state = "inaccessible"
[mirror]
witness = "127.0.0.1:9"
[[subsystems.namespaces]]
backend = "file"
path = "PATH"
size = "1M"
ana_group = 3
mirror = { peer = "127.0.0.1:9", role = "primary" }
[metrics]
per_host_io = true
"#;

/// [`CONFIG`] with its mirrored namespace's file in a directory of its own.
fn config(dir: &std::path::Path) -> ebof_config::Config {
    let toml = CONFIG.replace("PATH", &dir.join("m.img").display().to_string());
    ebof_config::Config::from_toml_str(&toml).unwrap()
}

fn pool() -> PoolView {
    PoolView {
        name: "fast".into(),
        directory: "/srv/fast".into(),
        size_limit: None,
        capacity_bytes: 1 << 30,
        provisioned_bytes: 1 << 29,
        used_bytes: 1 << 20,
        free_bytes: 1 << 29,
        namespaces: 1,
        filesystem: None,
        encrypted: false,
    }
}

fn cdc() -> CdcView {
    CdcView {
        hostnqn: "nqn.2026-11.io.ebof:cdc".into(),
        hosts: 3,
        members: vec![
            CdcMemberView {
                address: "127.0.0.12:8009".into(),
                connected: true,
                last_error: None,
                entries: 4,
                last_change: None,
                announced: false,
            },
            CdcMemberView {
                address: "127.0.0.13:8009".into(),
                connected: false,
                last_error: Some("connection refused".into()),
                entries: 0,
                last_change: None,
                announced: true,
            },
        ],
    }
}

/// The exposition of a box with a pool, QoS, an inaccessible ANA group and CDC members.
fn exposition() -> String {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let target = ebof_mgmt::build::build_target(&cfg).unwrap();
    // One reactor's load, as a running box publishes it.
    let reactor = target.loads.register(0, nvmf_target::load::LoopKind::Tcp);
    reactor.publish(
        std::time::Duration::from_millis(1500),
        std::time::Duration::from_secs(6),
    );
    let pools = [pool()];
    let c = cdc();
    render_box(
        &target,
        &Extras {
            pools: &pools,
            host_labels: false,
            cdc: Some(&c),
        },
    )
    .unwrap()
}

#[test]
fn fleet_series_are_exported() {
    let text = exposition();
    for want in [
        &format!(
            "ebof_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        ),
        "ebof_ana_state{listener=\"127.0.0.1:4420\",group=\"1\",state=\"optimized\"} 1",
        "ebof_ana_state{listener=\"127.0.0.1:4420\",group=\"2\",state=\"inaccessible\"} 1",
        "ebof_dim_registrations 0",
        "ebof_cdc_hosts 3",
        "ebof_cdc_member_up{member=\"127.0.0.12:8009\"} 1",
        "ebof_cdc_member_up{member=\"127.0.0.13:8009\"} 0",
        "ebof_cdc_member_entries{member=\"127.0.0.12:8009\"} 4",
        "ebof_cdc_member_announced{member=\"127.0.0.13:8009\"} 1",
        "ebof_pool_used_bytes{pool=\"fast\"} 1048576",
        "ebof_namespace_qos_limit{subsystem=\"nqn.2026-11.io.ebof:m\",nsid=\"1\",limit=\"iops\"} 1000",
        "ebof_reactor_seconds_total{core=\"0\",loop=\"tcp\"} 6.0",
        "ebof_reactor_busy_seconds_total{core=\"0\",loop=\"tcp\"} 1.5",
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
    // No CDC: no CDC series.
    let dir = tempfile::tempdir().unwrap();
    let target = ebof_mgmt::build::build_target(&config(dir.path())).unwrap();
    let plain = render_box(&target, &Extras::default()).unwrap();
    assert!(!plain.contains("ebof_cdc_"), "{plain}");
    assert!(plain.contains("ebof_build_info{"), "{plain}");
}

#[test]
fn classic_text_format_describes_counters_by_their_sample_names() {
    let om = exposition();
    assert!(om.ends_with("# EOF\n"));
    let text = to_text_format(&om);
    assert!(!text.contains("# EOF"));
    assert!(text.contains("# TYPE ebof_connections_accepted_total counter\n"));
    assert!(text.contains("# HELP ebof_connections_accepted_total TCP connections accepted.\n"));
    assert!(text.contains("\nebof_connections_accepted_total 0\n"));
    assert!(text.contains("# TYPE ebof_namespace_read_latency_seconds histogram\n"));
    // Every sample line is kept as it was.
    let samples = |s: &str| s.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(samples(&om), samples(&text));
    // Prometheus' own Accept header and curl's get OpenMetrics; text/plain alone the classic.
    assert!(!wants_text_format(None));
    assert!(!wants_text_format(Some("*/*")));
    assert!(!wants_text_format(Some(
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )));
    assert!(wants_text_format(Some("text/plain; version=0.0.4")));
}

/// One family of the exposition: type, help, label names seen on its samples.
#[derive(Default)]
struct Family {
    kind: String,
    help: String,
    labels: Vec<String>,
}

fn families(text: &str) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    let mut order = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            order.push(name.to_string());
            out.entry(name.into()).or_default().help = help.to_string();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            out.entry(name.into()).or_default().kind = kind.to_string();
        } else if !line.starts_with('#') {
            let name_end = line.find(['{', ' ']).unwrap();
            let sample = &line[..name_end];
            let Some(family) = order.last().filter(|f| sample.starts_with(f.as_str())) else {
                continue;
            };
            let f = out.get_mut(family).unwrap();
            if let Some(labels) = line[name_end..]
                .strip_prefix('{')
                .and_then(|l| l.split_once('}'))
            {
                for pair in labels.0.split("\",") {
                    let key = pair.split('=').next().unwrap().to_string();
                    if key != "le" && !f.labels.contains(&key) {
                        f.labels.push(key);
                    }
                }
            }
        }
    }
    out
}

/// Labels of families the fixture leaves without samples (they appear only with errors, QoS
/// waits, live controllers or a mirrored namespace).
fn known_labels(name: &str) -> Option<&'static str> {
    Some(match name {
        "ebof_namespace_backend_errors" => "subsystem, nsid, class",
        "ebof_namespace_qos_waited_commands" | "ebof_namespace_qos_wait_seconds" => {
            "subsystem, nsid"
        }
        "ebof_controller_io_queues" => "cntlid, subsystem (hostnqn with `[metrics] host_labels`)",
        n if n.starts_with("ebof_mirror_") => "subsystem, nsid",
        n if n.starts_with("ebof_host_") && n != "ebof_host_terminations" => {
            "hostnqn (only with `[metrics] per_host_io`)"
        }
        _ => return None,
    })
}

fn table() -> String {
    let mut out = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for (name, f) in families(&exposition()) {
        let sample = if f.kind == "counter" {
            format!("{name}_total")
        } else {
            name.clone()
        };
        let labels = if f.labels.is_empty() {
            known_labels(&name).unwrap_or("").to_string()
        } else {
            f.labels.join(", ")
        };
        out.push_str(&format!(
            "| `{sample}` | {} | {labels} | {} |\n",
            f.kind,
            f.help.replace('|', "\\|")
        ));
    }
    out
}

const BEGIN: &str = "<!-- metrics table: generated by crates/ebof-mgmt/tests/metrics_doc.rs -->\n";
const END: &str = "<!-- end of metrics table -->\n";

#[test]
fn docs_metrics_table_matches_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let (head, rest) = doc
        .split_once(BEGIN)
        .expect("docs/metrics.md lacks the table marker");
    let (_, tail) = rest
        .split_once(END)
        .expect("docs/metrics.md lacks the end marker");
    let want = format!("{head}{BEGIN}{}{END}{tail}", table());
    if std::env::var_os("EBOF_BLESS").is_some() {
        std::fs::write(path, &want).unwrap();
        return;
    }
    assert!(
        doc == want,
        "docs/metrics.md's table differs from the exposition; run \
         EBOF_BLESS=1 cargo test -p ebof-mgmt --test metrics_doc and commit it.\nwant:\n{}",
        table()
    );
}
