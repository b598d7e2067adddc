//! The boxes file of `ebof csi --controller --boxes FILE`: which ebof boxes the controller
//! provisions on, how to reach their management API, and their topology.
//!
//! ```toml
//! [[boxes]]
//! name = "ebof-1"               # optional; default the API address
//! api = "https://10.0.0.11:9651"   # the box's `[management] listen` (HTTPS: tls_cert/tls_key)
//! ca_file = "/etc/ebof-csi/ca.pem" # optional: the CA that signed the box's certificate
//! token_file = "/etc/ebof-csi/tokens/ebof-1"   # its bearer token (never logged)
//! zone = "rack-a"               # optional: the topology.csi.ebof.io/zone of its volumes
//! ```
//!
//! A top-level `witness = "ADDR:PORT"` (before the first `[[boxes]]`) names the witness the
//! boxes' replicated volumes use (`replicas: "2"`): each box's own `[mirror] witness` in its
//! configuration (the driver does not configure boxes); the controller then places no copy
//! of a replicated volume on the box listening at that address while another pair of boxes
//! can hold it (see `controller::mirror`).
//!
//! `api = "HOST:PORT"` (or `http://…`) is plain HTTP: the token would travel in clear, so it
//! is refused for an address that is not loopback unless `insecure_http = true` (issue 32,
//! review M1; the management client's rule, `ebof_api::client`).
//!
//! A token file is read again when it changes (its inode, size or modification time: a
//! file rewritten, or a Kubernetes Secret's symlink swapped), at the next call to the box:
//! a rotated token needs no restart ([`TokenFile`]). The DH-HMAC-CHAP key seed stays the one
//! of the token read at start, so published nodes keep their keys.

use ebof_api::Client;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One box as the file names it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BoxSpec {
    /// How messages name it; default the API address.
    #[serde(default)]
    pub name: Option<String>,
    /// `https://HOST:PORT` (or plain `HOST:PORT`) of its management API on TCP.
    pub api: String,
    /// CA certificates (PEM) that sign the box's certificate (HTTPS only); relative to the
    /// boxes file. Default: the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Send the token over plain HTTP to an address that is not loopback.
    #[serde(default)]
    pub insecure_http: bool,
    /// File holding its bearer token.
    pub token_file: PathBuf,
    /// Topology zone of the box.
    #[serde(default)]
    pub zone: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BoxesFile {
    #[serde(default)]
    witness: Option<String>,
    #[serde(default)]
    boxes: Vec<BoxSpec>,
}

/// The whole boxes file: the boxes, and the witness of their replicated volumes.
#[derive(Clone, Debug)]
pub struct Fleet {
    /// The boxes, in file order.
    pub boxes: Vec<Box>,
    /// `witness = "ADDR:PORT"`: the NVMe listener of the box the pool boxes' `[mirror]
    /// witness` names.
    pub witness: Option<std::net::SocketAddr>,
}

/// A box the controller talks to.
#[derive(Clone, Debug)]
pub struct Box {
    /// Its name in messages (the file's `name`, else the API address).
    pub name: String,
    /// `HOST:PORT` of the management API.
    pub api: String,
    /// Its zone, if any.
    pub zone: Option<String>,
    /// The management API client with the token read at start (token inside; its Debug
    /// does not show it). Calls use [`TokenFile::client`] of `tokens`: the token now.
    pub client: Client,
    /// Its token file, read again when it changes.
    pub tokens: Arc<TokenFile>,
    /// What the DH-HMAC-CHAP secrets of its volumes are derived from (from its token).
    pub key_seed: crate::keys::KeySeed,
}

/// What tells a token file's versions apart: device, inode, size, modification time.
type Stamp = (u64, u64, u64, Option<std::time::SystemTime>);

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.len(), m.modified().ok()))
}

/// A box's token file and the client made with what it held when last read.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    api: String,
    ca_file: Option<PathBuf>,
    insecure_http: bool,
    /// The file's stamp when last read, and the client with its token.
    now: Mutex<(Option<Stamp>, Client)>,
}

impl TokenFile {
    /// The token file's path (`ebof ctl --boxes FILE dump` reads it to keep the token out
    /// of the bundle).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The client with the token the file holds now: read again (blocking: call it off the
    /// async threads) when the file changed since it was last read. A file that cannot be
    /// read or holds no token keeps the last token, said in the log.
    pub fn client(&self) -> Client {
        let st = stamp(&self.path);
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        if st.is_none() || st == now.0 {
            return now.1.clone();
        }
        let made = ebof_api::read_token_file(&self.path)
            .map_err(|e| e.to_string())
            .and_then(|t| {
                Client::api(&self.api, self.ca_file.as_deref(), Some(t)).map_err(|e| e.to_string())
            });
        match made {
            Ok(c) => {
                tracing::info!(api = %self.api, file = %self.path.display(), "the box's token file changed: its new token is used");
                *now = (st, c.allow_plain_http(self.insecure_http));
            }
            Err(e) => {
                tracing::warn!(api = %self.api, error = %e, "the box's token file changed but cannot be used: the last token stays");
                now.0 = st;
            }
        }
        now.1.clone()
    }
}

/// Why the boxes file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BoxesError {
    /// Reading the file failed.
    #[error("boxes file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not the expected TOML.
    #[error("boxes file {}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Read and check the boxes file at `path`, and each box's token.
pub fn load(path: &Path) -> Result<Vec<Box>, BoxesError> {
    load_fleet(path).map(|f| f.boxes)
}

/// Read and check the boxes file at `path`, each box's token, and the witness.
pub fn load_fleet(path: &Path) -> Result<Fleet, BoxesError> {
    let text = std::fs::read_to_string(path).map_err(|source| BoxesError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let invalid = |message: String| BoxesError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let file: BoxesFile = toml::from_str(&text).map_err(|e| invalid(e.message().to_string()))?;
    if file.boxes.is_empty() {
        return Err(invalid("no [[boxes]]: name at least one box".into()));
    }
    let witness = match &file.witness {
        None => None,
        Some(w) => Some(w.parse::<std::net::SocketAddr>().map_err(|_| {
            invalid(format!(
                "witness: {w:?} is not ADDR:PORT (the NVMe listener of the box the pool boxes' [mirror] witness names)"
            ))
        })?),
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out: Vec<Box> = Vec::with_capacity(file.boxes.len());
    for (i, b) in file.boxes.into_iter().enumerate() {
        let at = format!("boxes[{i}]");
        let https = b.api.starts_with("https://");
        let authority = b
            .api
            .strip_prefix("https://")
            .or_else(|| b.api.strip_prefix("http://"))
            .unwrap_or(&b.api);
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        let literal = authority.parse::<std::net::SocketAddr>().ok();
        if literal.is_none() && !looks_like_host_port(authority) {
            return Err(invalid(format!(
                "{at}.api: {:?} is not HOST:PORT or https://HOST:PORT of a management API",
                b.api
            )));
        }
        if !https
            && !b.insecure_http
            && literal.is_some_and(|a| !a.ip().to_canonical().is_loopback())
        {
            return Err(invalid(format!(
                "{at}.api: plain HTTP to {authority} would send the box's token in clear: \
                 write api = \"https://{authority}\" (the box's [management] tls_cert and \
                 tls_key; ca_file for a private CA), or insecure_http = true on a network you \
                 trust"
            )));
        }
        if let Some(z) = &b.zone
            && !valid_label(z)
        {
            return Err(invalid(format!(
                "{at}.zone: {z:?} is not a topology label value (1 to 63 of [A-Za-z0-9._-], alphanumeric at both ends)"
            )));
        }
        let name = b.name.clone().unwrap_or_else(|| b.api.clone());
        if out.iter().any(|o| o.name == name || o.api == b.api) {
            return Err(invalid(format!(
                "{at}: box {name} ({}) is named twice",
                b.api
            )));
        }
        let token_path = if b.token_file.is_absolute() {
            b.token_file.clone()
        } else {
            base.join(&b.token_file)
        };
        let read_at = stamp(&token_path);
        let token = ebof_api::read_token_file(&token_path)
            .map_err(|e| invalid(format!("{at}.token_file: {e}")))?;
        let ca_file = b.ca_file.as_ref().map(|c| {
            if c.is_absolute() {
                c.clone()
            } else {
                base.join(c)
            }
        });
        let key_seed = crate::keys::KeySeed::from_token(token.expose());
        let client = Client::api(&b.api, ca_file.as_deref(), Some(token))
            .map_err(|e| invalid(format!("{at}: {e}")))?
            .allow_plain_http(b.insecure_http);
        let tokens = Arc::new(TokenFile {
            path: token_path,
            api: b.api.clone(),
            ca_file,
            insecure_http: b.insecure_http,
            now: Mutex::new((read_at, client.clone())),
        });
        out.push(Box {
            name,
            api: b.api.clone(),
            zone: b.zone.clone(),
            key_seed,
            client,
            tokens,
        });
    }
    Ok(Fleet {
        boxes: out,
        witness,
    })
}

fn looks_like_host_port(s: &str) -> bool {
    match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && port.parse::<u16>().is_ok_and(|p| p != 0)
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        }
        None => false,
    }
}

/// A Kubernetes label value: 1 to 63 of `[A-Za-z0-9._-]`, alphanumeric first and last.
pub fn valid_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn boxes_load_with_relative_tokens_and_zones() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "t1", "secret-token-1\n");
        let f = write(
            d.path(),
            "boxes.toml",
            "[[boxes]]\napi = \"127.0.0.1:8080\"\ntoken_file = \"t1\"\nzone = \"rack-a\"\n\n[[boxes]]\nname = \"b2\"\napi = \"box2.example:8080\"\ntoken_file = \"t1\"\n",
        );
        let b = load(&f).unwrap();
        assert_eq!(b.len(), 2);
        assert!(load_fleet(&f).unwrap().witness.is_none());
        let w = write(
            d.path(),
            "witnessed.toml",
            "witness = \"10.0.0.9:4420\"\n[[boxes]]\napi = \"127.0.0.1:8080\"\ntoken_file = \"t1\"\n",
        );
        assert_eq!(
            load_fleet(&w).unwrap().witness,
            Some("10.0.0.9:4420".parse().unwrap())
        );
        assert_eq!(b[0].name, "127.0.0.1:8080");
        assert_eq!(b[0].zone.as_deref(), Some("rack-a"));
        assert_eq!(b[1].name, "b2");
        assert!(!format!("{:?}", b[0].client).contains("secret-token-1"));
    }

    /// Issue 32 (M1): `api = "https://…"` with a `ca_file` (relative to the boxes file), and
    /// plain HTTP beyond loopback only when asked for.
    #[test]
    fn boxes_over_https_or_plain_http_when_asked() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "t", "tok\n");
        write(d.path(), "ca.pem", "not a certificate\n");
        let f = write(
            d.path(),
            "boxes.toml",
            "[[boxes]]\napi = \"https://10.0.0.11:9651\"\ntoken_file = \"t\"\n\
             [[boxes]]\napi = \"box2.example:9651\"\ntoken_file = \"t\"\n\
             [[boxes]]\napi = \"10.0.0.13:9651\"\ninsecure_http = true\ntoken_file = \"t\"\n",
        );
        let b = load(&f).unwrap();
        assert_eq!(
            b[0].client.endpoint(),
            "management API at https://10.0.0.11:9651"
        );
        assert_eq!(b[2].client.endpoint(), "management API at 10.0.0.13:9651");
        // A CA file that holds no certificate: said at load.
        let f = write(
            d.path(),
            "boxes.toml",
            "[[boxes]]\napi = \"https://10.0.0.11:9651\"\nca_file = \"ca.pem\"\ntoken_file = \"t\"\n",
        );
        let e = load(&f).unwrap_err().to_string();
        assert!(e.contains("ca.pem"), "{e}");
    }

    #[test]
    fn bad_boxes_files_say_what_is_wrong() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "t", "tok\n");
        let cases = [
            ("", "no [[boxes]]"),
            (
                "[[boxes]]\napi = \"nope\"\ntoken_file = \"t\"\n",
                "boxes[0].api",
            ),
            (
                "[[boxes]]\napi = \"127.0.0.1:1\"\ntoken_file = \"t\"\nzone = \"-x\"\n",
                "boxes[0].zone",
            ),
            (
                "[[boxes]]\napi = \"127.0.0.1:1\"\ntoken_file = \"missing\"\n",
                "boxes[0].token_file",
            ),
            (
                "[[boxes]]\napi = \"127.0.0.1:1\"\ntoken_file = \"t\"\n[[boxes]]\napi = \"127.0.0.1:1\"\ntoken_file = \"t\"\n",
                "named twice",
            ),
            (
                "[[boxes]]\napi = \"127.0.0.1:1\"\ntoken = \"t\"\n",
                "unknown field",
            ),
            // Issue 32 (M1): no token in clear beyond loopback; a CA is for HTTPS.
            (
                "[[boxes]]\napi = \"10.0.0.11:9651\"\ntoken_file = \"t\"\n",
                "would send the box's token in clear",
            ),
            (
                "[[boxes]]\napi = \"http://10.0.0.11:9651\"\ntoken_file = \"t\"\n",
                "https://10.0.0.11:9651",
            ),
            (
                "[[boxes]]\napi = \"127.0.0.1:9651\"\nca_file = \"ca.pem\"\ntoken_file = \"t\"\n",
                "for HTTPS",
            ),
            (
                "[[boxes]]\napi = \"https://10.0.0.11\"\ntoken_file = \"t\"\n",
                "boxes[0].api",
            ),
            (
                "witness = \"box3\"\n[[boxes]]\napi = \"127.0.0.1:1\"\ntoken_file = \"t\"\n",
                "witness: \"box3\" is not ADDR:PORT",
            ),
        ];
        for (text, want) in cases {
            let f = write(d.path(), "b.toml", text);
            let e = load(&f).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
