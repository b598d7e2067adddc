//! `ebof ctl dump -o FILE.tar.gz`: a support bundle of one box, safe to attach to a ticket.
//!
//! What is in it: `state.json` (`ebof ctl show --json`), `stats.json`, `config.toml` (the
//! running configuration from `GET /v1/support`: the box replaces every inline secret by
//! `<redacted>`; paths of key, token and certificate files stay, their contents are never
//! read), `metrics.txt` (a scrape), `versions.txt`, `logs.txt` where logs can be had, and a
//! `MANIFEST` listing each file and what could not be collected. Nothing secret: besides
//! the box's own redaction, every file passes through [`scrub`], which removes anything
//! shaped like a DH-HMAC-CHAP secret (`DHHC-1:…`) or a TLS PSK (`NVMeTLSkey-1:…`), and the
//! API token `ebof ctl` holds.

use super::CtlArgs;
use anyhow::{Context, Result};
use ebof_api::{Client, REDACTED, SupportView};
use std::io::Write;
use std::path::Path;

/// One file of the bundle: its name, what it is, and its content (or why there is none).
struct Part {
    name: &'static str,
    what: &'static str,
    body: Result<String, String>,
}

/// `ebof ctl dump -o FILE`.
pub fn run(c: &Client, a: &CtlArgs, output: &Path) -> Result<()> {
    let state = c.state().map_err(super::err)?;
    // Asked once: the configuration and the box's kernel both come from it.
    let support = c.support().map_err(|e| e.to_string());
    let token = held_token(a);
    let parts = vec![
        Part {
            name: "state.json",
            what: "ebof ctl show --json",
            body: Ok(pretty(&state)),
        },
        Part {
            name: "stats.json",
            what: "ebof ctl stats --json",
            body: c.stats().map(|s| pretty(&s)).map_err(|e| e.to_string()),
        },
        Part {
            name: "config.toml",
            what: "the running configuration, inline secrets redacted by the box",
            body: support
                .as_ref()
                .map(|s| {
                    format!(
                        "# running configuration of the box ({} secret(s) replaced by {REDACTED})\n{}",
                        s.redacted, s.config
                    )
                })
                .map_err(Clone::clone),
        },
        Part {
            name: "metrics.txt",
            what: "a scrape of GET /metrics",
            body: c.metrics().map_err(|e| e.to_string()),
        },
        Part {
            name: "versions.txt",
            what: "versions of ebof (box and ctl) and the kernels",
            body: Ok(versions(c, &state.version, &support)),
        },
        Part {
            name: "logs.txt",
            what: "the box's recent log",
            body: logs(a),
        },
    ];
    write(output, &parts, token.as_deref())?;
    println!(
        "support bundle written to {} ({} files; see its MANIFEST)",
        output.display(),
        parts.iter().filter(|p| p.body.is_ok()).count() + 1
    );
    Ok(())
}

/// An answer as pretty JSON.
fn pretty<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("(not JSON: {e})"))
}

/// The token `ebof ctl` sends, to be sure it is nowhere in the bundle.
fn held_token(a: &CtlArgs) -> Option<String> {
    a.api.as_ref()?;
    match &a.token_file {
        Some(p) => ebof_api::read_token_file(p)
            .ok()
            .map(|t| t.expose().to_string()),
        None => std::env::var(super::TOKEN_ENV).ok(),
    }
}

/// `versions.txt`.
fn versions(c: &Client, box_version: &str, support: &Result<SupportView, String>) -> String {
    let kernel = match support {
        Ok(s) => s.kernel.clone(),
        Err(e) => format!("unknown ({e})"),
    };
    format!(
        "box: ebof {box_version}\nbox kernel: {kernel}\nebof ctl: ebof {}\nctl kernel: {}\nasked: {}\n",
        env!("CARGO_PKG_VERSION"),
        ebof_mgmt::support::kernel(),
        c.endpoint()
    )
}

/// The box's recent log: `ebof serve` logs to its standard error (the journal under the
/// systemd unit `ebof.service`) and keeps no log file itself, so the log is had only on the
/// box's machine (the management socket), from the journal.
fn logs(a: &CtlArgs) -> Result<String, String> {
    if a.api.is_some() {
        return Err(
            "not collected: ebof serve keeps no log itself (it logs to standard error, the \
             journal under systemd); run `ebof ctl dump` on the box, or `journalctl -u ebof` there"
                .into(),
        );
    }
    let out = std::process::Command::new("journalctl")
        .args(["-u", "ebof.service", "-n", "2000", "--no-pager", "-o", "short-iso"])
        .output()
        .map_err(|e| {
            format!("not collected: ebof serve keeps no log itself (standard error) and journalctl cannot be run: {e}")
        })?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || text.trim().is_empty() || text.contains("-- No entries --") {
        return Err(
            "not collected: ebof serve keeps no log itself (it logs to standard error) and the \
             journal has nothing of ebof.service (started by hand? its standard error is the log)"
                .into(),
        );
    }
    Ok(text)
}

/// `text` without anything shaped like a secret: DH-HMAC-CHAP secrets (`DHHC-1:…`), TLS
/// PSKs in their interchange form (`NVMeTLSkey-1:…`), and `token`.
pub fn scrub(text: &str, token: Option<&str>) -> String {
    let mut out = text.to_string();
    if let Some(t) = token.filter(|t| !t.is_empty()) {
        out = out.replace(t, REDACTED);
    }
    for prefix in ["DHHC-1:", "NVMeTLSkey-1:"] {
        let mut done = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(i) = rest.find(prefix) {
            done.push_str(&rest[..i]);
            done.push_str(REDACTED);
            let tail = &rest[i + prefix.len()..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, ':' | '+' | '/' | '=')))
                .unwrap_or(tail.len());
            rest = &tail[end..];
        }
        done.push_str(rest);
        out = done;
    }
    out
}

/// The bundle: a directory `ebof-dump-SECONDS/` of `parts` and the MANIFEST, gzipped, made
/// owner-only.
fn write(output: &Path, parts: &[Part], token: Option<&str>) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let dir = format!("ebof-dump-{now}");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(output)
        .with_context(|| format!("cannot create {}", output.display()))?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mut manifest = format!(
        "ebof support bundle, made {} by ebof ctl dump {}\n\
         Secrets: inline keys of the configuration are redacted by the box; every file is\n\
         scrubbed of DH-HMAC-CHAP secrets, TLS PSKs and the API token. Paths of key files\n\
         stay; their contents are never read.\n\nFILE  BYTES  WHAT\n",
        super::render::utc_text(now),
        env!("CARGO_PKG_VERSION")
    );
    let mut missing = String::new();
    for p in parts {
        match &p.body {
            Ok(body) => {
                let body = scrub(body, token);
                manifest.push_str(&format!("{}  {}  {}\n", p.name, body.len(), p.what));
                add(&mut tar, &format!("{dir}/{}", p.name), body.as_bytes(), now)?;
            }
            Err(why) => {
                missing.push_str(&format!("{} ({}): {}\n", p.name, p.what, scrub(why, token)))
            }
        }
    }
    if !missing.is_empty() {
        manifest.push_str("\nNot in the bundle:\n");
        manifest.push_str(&missing);
    }
    add(
        &mut tar,
        &format!("{dir}/MANIFEST"),
        manifest.as_bytes(),
        now,
    )?;
    let gz = tar.into_inner().context("writing the bundle")?;
    let mut file = gz.finish().context("writing the bundle")?;
    file.flush().context("writing the bundle")?;
    file.sync_all().context("writing the bundle")?;
    Ok(())
}

/// One regular file, mode 0644, in the archive.
fn add<W: Write>(tar: &mut tar::Builder<W>, path: &str, body: &[u8], mtime: u64) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(body.len() as u64);
    h.set_mode(0o644);
    h.set_mtime(mtime);
    h.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut h, path, body)
        .with_context(|| format!("adding {path} to the bundle"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_scrubbed() {
        let key = "DHHC-1:00:ia6zGodOr5SEG0Ldz9AqJ1h9pNOEVPsm2hYEbSGnF3m2y8cv:";
        let psk = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        let text = format!("dhchap_key = \"{key}\"\ntls_key = \"{psk}\"\ntoken abc123tok end\n");
        let s = scrub(&text, Some("abc123tok"));
        assert!(
            !s.contains("ia6zGod") && !s.contains("VRLbtnN9") && !s.contains("abc123tok"),
            "{s}"
        );
        assert_eq!(
            s,
            "dhchap_key = \"<redacted>\"\ntls_key = \"<redacted>\"\ntoken <redacted> end\n"
        );
    }
}
