//! Persisted mirror state: epoch, role, synced (temp file + fsync + rename).

use std::io::Write;
use std::path::Path;

use crate::Role;

/// What a box remembers of one mirrored namespace across restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// Last epoch this box took part in.
    pub epoch: u64,
    /// Role when last saved (informational: a restart always comes back as secondary).
    pub role: Role,
    /// This box's copy was in sync at `epoch` (secondary) or it was the primary.
    pub synced: bool,
}

impl State {
    /// Text form: `epoch=N`, `role=primary|secondary`, `synced=0|1`, one per line.
    pub fn encode(&self) -> String {
        let role = match self.role {
            Role::Primary => "primary",
            Role::Secondary => "secondary",
        };
        format!(
            "epoch={}\nrole={role}\nsynced={}\n",
            self.epoch,
            u8::from(self.synced)
        )
    }

    /// Parse [`State::encode`]'s output; None when a field is missing or malformed.
    pub fn decode(s: &str) -> Option<State> {
        let (mut epoch, mut role, mut synced) = (None, None, None);
        for line in s.lines() {
            let (k, v) = line.split_once('=')?;
            match k.trim() {
                "epoch" => epoch = v.trim().parse().ok(),
                "role" => {
                    role = match v.trim() {
                        "primary" => Some(Role::Primary),
                        "secondary" => Some(Role::Secondary),
                        _ => None,
                    }
                }
                "synced" => synced = Some(v.trim() == "1"),
                _ => {}
            }
        }
        Some(State {
            epoch: epoch?,
            role: role?,
            synced: synced?,
        })
    }
}

/// Read the state at `path`: Ok(None) when there is no file.
pub fn load(path: &Path) -> std::io::Result<Option<State>> {
    match std::fs::read_to_string(path) {
        Ok(s) => State::decode(&s).map(Some).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed mirror state")
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Write `st` to `path` atomically (temp + fsync + rename + directory fsync).
pub fn save(path: &Path, st: &State) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(st.encode().as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_malformed() {
        let st = State {
            epoch: 7,
            role: Role::Primary,
            synced: true,
        };
        assert_eq!(State::decode(&st.encode()), Some(st));
        assert_eq!(State::decode("epoch=x\nrole=primary\nsynced=1\n"), None);
        assert_eq!(State::decode("epoch=1\nrole=boss\nsynced=1\n"), None);
        assert_eq!(State::decode("garbage"), None);
        let dir = std::env::temp_dir().join(format!("ebof-mirror-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("ns1.state");
        assert_eq!(load(&p).expect("load"), None);
        save(&p, &st).expect("save");
        assert_eq!(load(&p).expect("load"), Some(st));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
