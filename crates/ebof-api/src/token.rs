//! The management API's bearer token (`[management] token_file` of `ebof serve`, `ebof ctl
//! --token-file`, the CSI boxes file's `token_file`): what a valid one is and how its file is
//! read. The token is never logged, nor printed by `Debug`. The server's check of a presented
//! token is [`Token::matches`] (constant time).

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// Longest token accepted (a header line of reasonable size; 32 random bytes in base64 are 44).
pub const TOKEN_MAX_LEN: usize = 4096;

/// A bearer token: printable ASCII without spaces, not empty. `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Why a token (or its file) is not usable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// Nothing but white space.
    #[error("the token is empty")]
    Empty,
    /// Longer than `TOKEN_MAX_LEN` bytes.
    #[error("the token is longer than {TOKEN_MAX_LEN} bytes")]
    TooLong,
    /// A byte outside printable ASCII, or a space inside the token.
    #[error("the token must be printable ASCII without spaces (as a base64 or hex string is)")]
    NotPrintable,
}

impl Token {
    /// The token in `text`, surrounding whitespace (a trailing newline) removed.
    pub fn new(text: &str) -> Result<Token, TokenError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(TokenError::Empty);
        }
        if t.len() > TOKEN_MAX_LEN {
            return Err(TokenError::TooLong);
        }
        if !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::NotPrintable);
        }
        Ok(Token(t.to_string()))
    }

    /// The token itself (to send it; never to log it).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this token, in time independent of where they differ.
    pub fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.0.as_bytes().ct_eq(presented))
    }
}

/// Why `ebof serve` will not use a token file.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// The file does not exist.
    #[error(
        "management token file {p}: {source} (create it with the token in it, owner-only: `umask 077; head -c 32 /dev/urandom | base64 > {p}`)",
        p = path.display()
    )]
    Missing {
        /// The configured path.
        path: PathBuf,
        /// The error opening it.
        #[source]
        source: std::io::Error,
    },
    /// The file exists but could not be read (or its metadata not obtained).
    #[error("management token file {}: {source}", path.display())]
    Io {
        /// The configured path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The path is not a regular file (a directory, a device, ...).
    #[error("management token file {}: not a regular file", path.display())]
    NotAFile {
        /// The configured path.
        path: PathBuf,
    },
    /// Group or others have some permission on the file (`mode & 0o077` is not 0).
    #[error(
        "management token file {p} can be read or written by group or others (mode {mode:04o}); make it owner-only: chmod 600 {p}",
        p = path.display()
    )]
    Permissions {
        /// The configured path.
        path: PathBuf,
        /// The file's permission bits (`st_mode & 0o7777`).
        mode: u32,
    },
    /// The file's content is not a valid token.
    #[error("management token file {}: {source}", path.display())]
    Invalid {
        /// The configured path.
        path: PathBuf,
        /// What is wrong with the token.
        #[source]
        source: TokenError,
    },
}

/// Read the token of `[management] token_file` as `ebof serve` requires it: a regular file,
/// owner-only (mode & 0o077 == 0), holding one non-empty token.
pub fn load_token_file(path: &Path) -> Result<Token, TokenFileError> {
    let meta = std::fs::metadata(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            TokenFileError::Missing {
                path: path.to_path_buf(),
                source,
            }
        } else {
            TokenFileError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    if !meta.is_file() {
        return Err(TokenFileError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(TokenFileError::Permissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    read_token_file(path)
}

/// Read a token from `path` (what `ebof ctl --token-file` does; no mode check).
pub fn read_token_file(path: &Path) -> Result<Token, TokenFileError> {
    let text = std::fs::read(path).map_err(|source| TokenFileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(text).map_err(|_| TokenFileError::Invalid {
        path: path.to_path_buf(),
        source: TokenError::NotPrintable,
    })?;
    Token::new(&text).map_err(|source| TokenFileError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tok(s: &str) -> Token {
        Token::new(s).unwrap()
    }

    #[test]
    fn tokens_are_trimmed_checked_and_not_shown() {
        assert_eq!(tok("  abc\n").expose(), "abc");
        assert_eq!(Token::new(" \n"), Err(TokenError::Empty));
        assert_eq!(Token::new("a b"), Err(TokenError::NotPrintable));
        assert_eq!(Token::new("é"), Err(TokenError::NotPrintable));
        assert_eq!(
            Token::new(&"x".repeat(TOKEN_MAX_LEN + 1)),
            Err(TokenError::TooLong)
        );
        assert_eq!(format!("{:?}", tok("secret")), "Token(<redacted>)");
    }

    #[test]
    fn token_files_must_be_owner_only_and_hold_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        let e = load_token_file(&p).unwrap_err();
        assert!(matches!(e, TokenFileError::Missing { .. }), "{e}");
        assert!(e.to_string().contains("umask 077"), "{e}");

        std::fs::write(&p, "tok123\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_token_file(&p).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "management token file {0} can be read or written by group or others (mode 0644); make it owner-only: chmod 600 {0}",
                p.display()
            )
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(
            load_token_file(&p),
            Err(TokenFileError::Permissions { mode: 0o640, .. })
        ));
        // The client reads it regardless of its mode.
        assert_eq!(read_token_file(&p).unwrap().expose(), "tok123");

        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(load_token_file(&p).unwrap().expose(), "tok123");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(load_token_file(&p).unwrap().expose(), "tok123");

        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = load_token_file(&empty).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "management token file {}: the token is empty",
                empty.display()
            )
        );
        let e = load_token_file(dir.path()).unwrap_err();
        assert!(matches!(e, TokenFileError::NotAFile { .. }), "{e}");
    }
}
