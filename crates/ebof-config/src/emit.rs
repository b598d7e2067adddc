//! Writes a [`Config`] back as TOML, every default spelt out, so that the
//! effective configuration (after defaults and overrides) can be shown,
//! saved and reloaded to an equal `Config`.

use std::fmt::Write;

use crate::model::{BackendChoice, Config, Listener};
use crate::parse::format_size;

/// A TOML string literal, escaped by the `toml` crate.
pub(crate) fn string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// A size: `"1G"` when a unit divides it, else an integer; a string of
/// digits when it does not fit TOML's signed 64-bit integers.
pub(crate) fn size(bytes: u64) -> String {
    let formatted = format_size(bytes);
    if formatted.bytes().all(|b| b.is_ascii_digit()) && i64::try_from(bytes).is_ok() {
        formatted
    } else {
        string(&formatted)
    }
}

fn listener(out: &mut String, header: &str, l: &Listener) {
    let _ = writeln!(out, "{header}");
    let _ = writeln!(out, "address = {}", string(&l.address.to_string()));
    let _ = writeln!(out, "port = {}", l.port);
}

impl Config {
    /// The configuration as TOML with every value explicit (derived serials
    /// and UUIDs included). [`Config::from_toml_str`] reads it back to an
    /// equal `Config`. Paths that are not UTF-8 are written lossily.
    pub fn to_toml_string(&self) -> String {
        let mut out = String::new();
        let t = &self.target;
        out.push_str("[target]\n");
        if let Some(cores) = &t.cores {
            let list: Vec<String> = cores.iter().map(usize::to_string).collect();
            let _ = writeln!(out, "cores = [{}]", list.join(", "));
        }
        let _ = writeln!(out, "io_inline_data = {}", t.io_inline_data);
        let _ = writeln!(out, "max_h2c_data = {}", t.max_h2c_data);
        let _ = writeln!(out, "c2h_data_max = {}", t.c2h_data_max);
        let _ = writeln!(out, "max_transfer = {}", t.max_transfer);
        let _ = writeln!(out, "max_io_queues = {}", t.max_io_queues);
        let _ = writeln!(out, "max_namespaces = {}", t.max_namespaces);
        let _ = writeln!(out, "max_queue_size = {}", t.max_queue_size);
        if (t.cntlid_min, t.cntlid_max) != (crate::model::CNTLID_MIN, crate::model::CNTLID_MAX) {
            let _ = writeln!(out, "cntlid_min = {}", t.cntlid_min);
            let _ = writeln!(out, "cntlid_max = {}", t.cntlid_max);
        }
        let _ = writeln!(out, "handshake_timeout_ms = {}", t.handshake_timeout_ms);
        let _ = writeln!(out, "max_connections = {}", t.max_connections);
        let _ = writeln!(
            out,
            "max_connections_per_address = {}",
            t.max_connections_per_address
        );
        let _ = writeln!(out, "serial_prefix = {}", string(&t.serial_prefix));
        let _ = writeln!(out, "ram_huge_pages = {}", t.ram_huge_pages);
        let _ = writeln!(out, "io_engine = {}", string(t.io_engine.name()));
        let _ = writeln!(out, "io_threads = {}", t.io_threads);
        if let Some(d) = &t.state_dir {
            let _ = writeln!(out, "state_dir = {}", string(&d.to_string_lossy()));
        }
        let _ = writeln!(out, "tls_rekey_records = {}", t.tls_rekey_records);
        let _ = writeln!(out, "tls_key_update = {}", string(t.tls_key_update.name()));
        for l in &self.listeners {
            out.push('\n');
            listener(&mut out, "[[listeners]]", l);
            let tls = self.tls_mode(l);
            if tls != crate::TlsMode::Off {
                let _ = writeln!(out, "tls = {}", string(tls.name()));
            }
            if self.transport(l) != crate::Transport::Tcp {
                let _ = writeln!(out, "transport = {}", string(self.transport(l).name()));
            }
        }
        if let Some(d) = &self.discovery {
            out.push('\n');
            listener(&mut out, "[discovery]", d);
            if self.transport(d) != crate::Transport::Tcp {
                let _ = writeln!(out, "transport = {}", string(self.transport(d).name()));
            }
        } else if self.discovery_settings != crate::model::DiscoverySettings::default() {
            out.push_str("\n[discovery]\n");
        }
        if let Some(m) = self.discovery_settings.mdns {
            let _ = writeln!(out, "mdns = {m}");
        }
        if !self.discovery_settings.referrals.is_empty() {
            let list: Vec<String> = self
                .discovery_settings
                .referrals
                .iter()
                .map(|r| string(&r.to_string()))
                .collect();
            let _ = writeln!(out, "referrals = [{}]", list.join(", "));
        }
        if let Some(c) = &self.discovery_settings.cdc {
            let _ = writeln!(out, "cdc = {}", string(&c.to_string()));
        }
        if self.management != crate::model::Management::default() {
            out.push_str("\n[management]\n");
            if let Some(p) = &self.management.socket {
                let _ = writeln!(out, "socket = {}", string(&p.to_string_lossy()));
            }
            if self.management.disabled {
                out.push_str("enabled = false\n");
            }
            if self.management.autosave {
                out.push_str("autosave = true\n");
            }
            if let Some(l) = &self.management.listen {
                let _ = writeln!(out, "listen = {}", string(&l.to_string()));
            }
            if let Some(p) = &self.management.token_file {
                let _ = writeln!(out, "token_file = {}", string(&p.to_string_lossy()));
            }
            if let Some(p) = &self.management.tls_cert {
                let _ = writeln!(out, "tls_cert = {}", string(&p.to_string_lossy()));
            }
            if let Some(p) = &self.management.tls_key {
                let _ = writeln!(out, "tls_key = {}", string(&p.to_string_lossy()));
            }
            let paths = |v: &[std::path::PathBuf]| {
                v.iter()
                    .map(|p| string(&p.to_string_lossy()))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if !self.management.data_dirs.is_empty() {
                let _ = writeln!(out, "data_dirs = [{}]", paths(&self.management.data_dirs));
            }
            if !self.management.block_devices.is_empty() {
                let _ = writeln!(
                    out,
                    "block_devices = [{}]",
                    paths(&self.management.block_devices)
                );
            }
        }
        if self.metrics.is_some() || self.metrics_host_labels || self.metrics_per_host_io {
            out.push_str("\n[metrics]\n");
            if let Some(m) = &self.metrics {
                let _ = writeln!(out, "listen = {}", string(&m.to_string()));
            }
            if self.metrics_host_labels {
                out.push_str("host_labels = true\n");
            }
            if self.metrics_per_host_io {
                out.push_str("per_host_io = true\n");
            }
        }
        if let Some(c) = &self.cdc {
            out.push_str("\n[cdc]\n");
            let list: Vec<String> = c.members.iter().map(|m| string(&m.to_string())).collect();
            let _ = writeln!(out, "members = [{}]", list.join(", "));
            if let Some(n) = &c.hostnqn {
                let _ = writeln!(out, "hostnqn = {}", string(n));
            }
            if !c.trusted.is_empty() {
                let list: Vec<String> = c.trusted.iter().map(|t| string(&t.to_string())).collect();
                let _ = writeln!(out, "trusted = [{}]", list.join(", "));
            }
        }
        crate::pool::emit(&mut out, self);
        for s in &self.subsystems {
            out.push_str("\n[[subsystems]]\n");
            let _ = writeln!(out, "nqn = {}", string(&s.nqn));
            let _ = writeln!(out, "serial = {}", string(&s.serial));
            let _ = writeln!(out, "model = {}", string(&s.model));
            let _ = writeln!(out, "allow_any_host = {}", s.allow_any_host);
            let hosts: Vec<String> = s.hosts.iter().map(|h| string(h)).collect();
            let _ = writeln!(out, "hosts = [{}]", hosts.join(", "));
            for ns in &s.namespaces {
                out.push_str("\n[[subsystems.namespaces]]\n");
                let _ = writeln!(out, "nsid = {}", ns.nsid);
                let _ = writeln!(out, "backend = {}", string(ns.backend.kind()));
                match &ns.backend {
                    BackendChoice::Ram { size: bytes } => {
                        let _ = writeln!(out, "size = {}", size(*bytes));
                    }
                    BackendChoice::File { path, size: bytes } => {
                        let _ = writeln!(out, "path = {}", string(&path.to_string_lossy()));
                        if let Some(bytes) = bytes {
                            let _ = writeln!(out, "size = {}", size(*bytes));
                        }
                        if let Some(pool) = &ns.pool {
                            let _ = writeln!(out, "pool = {}", string(pool));
                        }
                    }
                    BackendChoice::Block { path } => {
                        let _ = writeln!(out, "path = {}", string(&path.to_string_lossy()));
                    }
                }
                let _ = writeln!(out, "block_size = {}", ns.block_size);
                if !matches!(ns.backend, BackendChoice::Ram { .. }) {
                    let _ = writeln!(out, "direct = {}", ns.direct);
                }
                let _ = writeln!(
                    out,
                    "uuid = {}",
                    string(&uuid::Uuid::from_bytes(ns.uuid).to_string())
                );
                let _ = writeln!(out, "ana_group = {}", ns.ana_group);
                if let Some(hosts) = &ns.hosts {
                    let hosts: Vec<String> = hosts.iter().map(|h| string(h)).collect();
                    let _ = writeln!(out, "hosts = [{}]", hosts.join(", "));
                }
                if let Some(e) = &ns.encryption {
                    let _ = writeln!(out, "{}", e.line(string));
                }
                crate::qos::emit(&mut out, &ns.qos);
                crate::mirror::emit_ns(&mut out, &ns.mirror);
            }
        }
        crate::ana::emit(&mut out, self);
        crate::security::emit(&mut out, self);
        crate::mirror::emit(&mut out, self);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_valid_toml_values() {
        assert_eq!(size(1 << 30), "\"1G\"");
        assert_eq!(size(1536), "1536");
        assert_eq!(size(u64::MAX - 511), "\"18446744073709551104\"");
    }

    #[test]
    fn embedded_default_text() {
        let text = Config::embedded_default().to_toml_string();
        assert!(
            text.contains("nqn = \"nqn.2026-11.io.ebof:default\""),
            "{text}"
        );
        assert!(text.contains("size = \"1G\""), "{text}");
        assert!(
            text.contains("address = \"127.0.0.1\"\nport = 4420"),
            "{text}"
        );
        assert!(
            text.contains("[discovery]\naddress = \"127.0.0.1\"\nport = 8009"),
            "{text}"
        );
    }

    /// A valid document to add tables to.
    const SMALL: &str = "[[listeners]]\naddress = \"127.0.0.1\"\n\
                         [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:a\"\n\
                         [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n";

    #[test]
    fn management_and_metrics_round_trip() {
        let base = SMALL;
        let text = format!(
            "{base}[management]\nsocket = \"/tmp/x/ebof.sock\"\n[metrics]\nlisten = \"127.0.0.1\"\n"
        );
        let c = Config::from_toml_str(&text).unwrap();
        assert_eq!(
            c.management.socket.as_deref(),
            Some(std::path::Path::new("/tmp/x/ebof.sock"))
        );
        assert_eq!(c.metrics.unwrap().port, crate::DEFAULT_METRICS_PORT);
        assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
        let plain = Config::from_toml_str(base).unwrap();
        assert!(!plain.to_toml_string().contains("[management]"));
        let e =
            Config::from_toml_str(&format!("{base}[metrics]\nlisten = \"nope\"\n")).unwrap_err();
        assert_eq!(
            (e.code, e.path.as_str()),
            (crate::codes::INVALID_ADDRESS, "metrics.listen")
        );
        let e = Config::from_toml_str(&format!("{base}[management]\nsocket = \"\"\n")).unwrap_err();
        assert_eq!(
            (e.code, e.path.as_str()),
            (crate::codes::INVALID_PATH, "management.socket")
        );
        let e = Config::from_toml_str(&format!("{base}[management]\nsockt = \"a\"\n")).unwrap_err();
        assert_eq!(e.code, crate::codes::UNKNOWN_FIELD);
    }

    #[test]
    fn state_dir_round_trips_and_is_checked() {
        let text = format!("[target]\nstate_dir = \"/var/lib/ebof\"\n{SMALL}");
        let c = Config::from_toml_str(&text).unwrap();
        assert_eq!(
            c.target.state_dir.as_deref(),
            Some(std::path::Path::new("/var/lib/ebof"))
        );
        let out = c.to_toml_string();
        assert!(out.contains("state_dir = \"/var/lib/ebof\"\n"), "{out}");
        assert_eq!(Config::from_toml_str(&out).unwrap(), c);
        assert!(
            !Config::from_toml_str(SMALL)
                .unwrap()
                .to_toml_string()
                .contains("state_dir")
        );
        let e = Config::from_toml_str(&format!("[target]\nstate_dir = \"\"\n{SMALL}")).unwrap_err();
        assert_eq!(
            (e.code, e.path.as_str()),
            (crate::codes::INVALID_PATH, "target.state_dir")
        );
    }

    #[test]
    fn cntlid_range_round_trips_and_is_checked() {
        let text = format!("[target]\ncntlid_min = 1001\ncntlid_max = 2000\n{SMALL}");
        let c = Config::from_toml_str(&text).unwrap();
        assert_eq!((c.target.cntlid_min, c.target.cntlid_max), (1001, 2000));
        let out = c.to_toml_string();
        assert!(
            out.contains("cntlid_min = 1001\ncntlid_max = 2000\n"),
            "{out}"
        );
        assert_eq!(Config::from_toml_str(&out).unwrap(), c);
        // the default range is not written out
        let d = Config::from_toml_str(SMALL).unwrap();
        assert_eq!((d.target.cntlid_min, d.target.cntlid_max), (1, 0xFFEF));
        assert!(!d.to_toml_string().contains("cntlid"));
        for (bad, path) in [
            ("cntlid_min = 0", "target.cntlid_min"),
            ("cntlid_max = 65520", "target.cntlid_max"),
            ("cntlid_min = 10\ncntlid_max = 9", "target.cntlid_min"),
        ] {
            let e = Config::from_toml_str(&format!("[target]\n{bad}\n{SMALL}")).unwrap_err();
            assert_eq!(
                (e.code, e.path.as_str()),
                (crate::codes::INVALID_TUNING, path),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn management_listener_and_token_file_round_trip() {
        let base = SMALL;
        let text = format!(
            "{base}[management]\nlisten = \"[::1]:7000\"\ntoken_file = \"/etc/ebof/token\"\nautosave = true\n"
        );
        let c = Config::from_toml_str(&text).unwrap();
        assert_eq!(c.management.listen.unwrap().to_string(), "[::1]:7000");
        assert_eq!(
            c.management.token_file.as_deref(),
            Some(std::path::Path::new("/etc/ebof/token"))
        );
        let out = c.to_toml_string();
        assert!(out.contains("listen = \"[::1]:7000\"\n"), "{out}");
        assert!(out.contains("token_file = \"/etc/ebof/token\"\n"), "{out}");
        assert_eq!(Config::from_toml_str(&out).unwrap(), c);
        // A bare address takes the default port.
        let c = Config::from_toml_str(&format!(
            "{base}[management]\nlisten = \"127.0.0.1\"\ntoken_file = \"t\"\n"
        ))
        .unwrap();
        assert_eq!(
            c.management.listen.unwrap().port,
            crate::DEFAULT_MANAGEMENT_PORT
        );
        assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
    }

    #[test]
    fn fleet_trust_settings_round_trip_and_are_checked() {
        let base = "[[listeners]]\naddress = \"127.0.0.1\"\n";
        let text = format!(
            "{base}[management]\nlisten = \"127.0.0.1:7000\"\ntoken_file = \"/t\"\ntls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\ndata_dirs = [\"/srv/a\", \"/srv/b\"]\nblock_devices = [\"/dev/vdb\"]\n[metrics]\nhost_labels = true\nper_host_io = true\n[cdc]\nmembers = [\"10.0.0.1\"]\ntrusted = [\"10.0.0.2\", \"nqn.2014-08.org.example:ddc\"]\n"
        );
        let c = Config::from_toml_str(&text).unwrap();
        assert_eq!(c.management.data_dirs.len(), 2);
        assert_eq!(c.management.block_devices[0].to_str(), Some("/dev/vdb"));
        assert!(c.metrics_host_labels);
        assert!(c.metrics_per_host_io);
        assert_eq!(
            c.cdc.as_ref().unwrap().trusted,
            vec![
                crate::TrustedAnnouncer::Address("10.0.0.2".parse().unwrap()),
                crate::TrustedAnnouncer::Nqn("nqn.2014-08.org.example:ddc".into()),
            ]
        );
        let again = Config::from_toml_str(&c.to_toml_string()).unwrap();
        assert_eq!(again, c);

        let bad = |extra: &str| Config::from_toml_str(&format!("{base}{extra}")).unwrap_err();
        let e = bad("[management]\ndata_dirs = [\"rel/dir\"]\n");
        assert_eq!(
            (e.code, e.path.as_str()),
            (crate::codes::INVALID_PATH, "management.data_dirs[0]")
        );
        let e =
            bad("[management]\nlisten = \"127.0.0.1\"\ntoken_file = \"/t\"\ntls_cert = \"/c\"\n");
        assert_eq!(
            (e.code, e.path.as_str()),
            (crate::codes::MISSING_FIELD, "management.tls_key")
        );
        let e = bad("[cdc]\ntrusted = [\"not an address\"]\n");
        assert_eq!(
            (e.code, e.path.as_str()),
            (crate::codes::INVALID_ADDRESS, "cdc.trusted[0]")
        );
        let e = bad("[target]\ntls_rekey_records = 3\n");
        assert_eq!(
            (e.code, e.path.as_str()),
            (crate::codes::INVALID_TUNING, "target.tls_rekey_records")
        );
        let e = bad("[target]\ntls_key_update = \"never\"\n");
        assert_eq!(
            (e.code, e.path.as_str()),
            (crate::codes::INVALID_TUNING, "target.tls_key_update")
        );
    }
}
