//! The boxes file of `ebof csi --controller --boxes FILE`: which ebof boxes the controller
//! provisions on, how to reach their management API, and their topology.
//!
//! ```toml
//! [[boxes]]
//! name = "ebof-1"               # optional; default the API address
//! api = "10.0.0.11:8080"        # the box's `[management] listen`
//! token_file = "/etc/ebof-csi/tokens/ebof-1"   # its bearer token (never logged)
//! zone = "rack-a"               # optional: the topology.csi.ebof.io/zone of its volumes
//! ```

use ebof_mgmt::Client;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// One box as the file names it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BoxSpec {
    /// How messages name it; default the API address.
    #[serde(default)]
    pub name: Option<String>,
    /// `HOST:PORT` of its management API on TCP.
    pub api: String,
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
    boxes: Vec<BoxSpec>,
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
    /// The management API client (token inside; its Debug does not show it).
    pub client: Client,
    /// What the DH-HMAC-CHAP secrets of its volumes are derived from (from its token).
    pub key_seed: crate::keys::KeySeed,
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
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out: Vec<Box> = Vec::with_capacity(file.boxes.len());
    for (i, b) in file.boxes.into_iter().enumerate() {
        let at = format!("boxes[{i}]");
        if b.api.parse::<std::net::SocketAddr>().is_err() && !looks_like_host_port(&b.api) {
            return Err(invalid(format!(
                "{at}.api: {:?} is not HOST:PORT of a management API",
                b.api
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
        let token = ebof_mgmt::read_token_file(&token_path)
            .map_err(|e| invalid(format!("{at}.token_file: {e}")))?;
        out.push(Box {
            name,
            api: b.api.clone(),
            zone: b.zone.clone(),
            key_seed: crate::keys::KeySeed::from_token(token.expose()),
            client: Client::tcp(b.api.clone(), Some(token)),
        });
    }
    Ok(out)
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
        assert_eq!(b[0].name, "127.0.0.1:8080");
        assert_eq!(b[0].zone.as_deref(), Some("rack-a"));
        assert_eq!(b[1].name, "b2");
        assert!(!format!("{:?}", b[0].client).contains("secret-token-1"));
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
                "[[boxes]]\napi = \"1.2.3.4:1\"\ntoken_file = \"t\"\nzone = \"-x\"\n",
                "boxes[0].zone",
            ),
            (
                "[[boxes]]\napi = \"1.2.3.4:1\"\ntoken_file = \"missing\"\n",
                "boxes[0].token_file",
            ),
            (
                "[[boxes]]\napi = \"1.2.3.4:1\"\ntoken_file = \"t\"\n[[boxes]]\napi = \"1.2.3.4:1\"\ntoken_file = \"t\"\n",
                "named twice",
            ),
            (
                "[[boxes]]\napi = \"1.2.3.4:1\"\ntoken = \"t\"\n",
                "unknown field",
            ),
        ];
        for (text, want) in cases {
            let f = write(d.path(), "b.toml", text);
            let e = load(&f).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
