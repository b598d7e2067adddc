//! Bearer-token authentication of the management API on TCP (`[management] listen`).
//!
//! The Unix socket needs none (its file mode, 0600, is the guard). On TCP every request must
//! carry `Authorization: Bearer TOKEN`, compared in constant time with the token that
//! `ebof serve` read at start from `[management] token_file`. The token is never logged, nor
//! printed by `Debug`. The token itself and its file are `ebof_api::token`'s (the clients read
//! it too), re-exported here.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use ebof_api::token::{
    TOKEN_MAX_LEN, Token, TokenError, TokenFileError, load_token_file, read_token_file,
};

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization` header.
    Missing,
    /// An `Authorization` header that is not `Bearer TOKEN`.
    NotBearer,
    /// A bearer token that is not ours.
    Wrong,
}

impl Refusal {
    /// For the log line (never the token).
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Missing => "no Authorization header",
            Refusal::NotBearer => "Authorization is not a bearer token",
            Refusal::Wrong => "wrong bearer token",
        }
    }

    /// For the client's error message.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Missing | Refusal::NotBearer => {
                "this management endpoint requires `Authorization: Bearer TOKEN` (ebof ctl: --token-file PATH or EBOF_TOKEN)"
            }
            Refusal::Wrong => {
                "the bearer token is not the one this ebof serve was started with (its [management] token_file)"
            }
        }
    }
}

/// Check the `Authorization` header value (`None`: absent) against `token`. The scheme is
/// case-insensitive (RFC 9110, 11.1); the token is compared in constant time.
pub fn check(authorization: Option<&[u8]>, token: &Token) -> Result<(), Refusal> {
    let value = authorization.ok_or(Refusal::Missing)?;
    let (scheme, rest) = match value.iter().position(|b| *b == b' ') {
        Some(i) => (&value[..i], &value[i + 1..]),
        None => return Err(Refusal::NotBearer),
    };
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Err(Refusal::NotBearer);
    }
    let presented = rest.trim_ascii();
    if token.matches(presented) {
        Ok(())
    } else {
        Err(Refusal::Wrong)
    }
}

/// Refused requests are logged at warn at most once per period, with the
/// number of those not logged since.
#[derive(Debug)]
pub struct RateLimit {
    period: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl RateLimit {
    /// A limiter letting one event through per `period`.
    pub fn new(period: Duration) -> RateLimit {
        RateLimit {
            period,
            state: Mutex::new((None, 0)),
        }
    }

    /// One more event at `now`: `Some(n)` to log it (`n` were suppressed since the last one
    /// logged), `None` to stay quiet.
    pub fn event(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match s.0 {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                s.1 += 1;
                None
            }
            _ => {
                let suppressed = s.1;
                *s = (Some(now), 0);
                Some(suppressed)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(s: &str) -> Token {
        Token::new(s).unwrap()
    }

    #[test]
    fn check_wants_the_bearer_token() {
        let t = tok("s3cr3t");
        assert_eq!(check(Some(b"Bearer s3cr3t"), &t), Ok(()));
        assert_eq!(check(Some(b"bearer s3cr3t"), &t), Ok(()));
        assert_eq!(check(Some(b"BEARER   s3cr3t "), &t), Ok(()));
        assert_eq!(check(None, &t), Err(Refusal::Missing));
        assert_eq!(check(Some(b"s3cr3t"), &t), Err(Refusal::NotBearer));
        assert_eq!(check(Some(b"Basic s3cr3t"), &t), Err(Refusal::NotBearer));
        assert_eq!(check(Some(b"Bearer s3cr3"), &t), Err(Refusal::Wrong));
        assert_eq!(check(Some(b"Bearer s3cr3tt"), &t), Err(Refusal::Wrong));
        assert_eq!(check(Some(b"Bearer S3CR3T"), &t), Err(Refusal::Wrong));
        assert_eq!(check(Some(b"Bearer "), &t), Err(Refusal::Wrong));
        assert_eq!(check(Some(b"Bearer \xff\x00"), &t), Err(Refusal::Wrong));
        assert_eq!(check(Some(b""), &t), Err(Refusal::NotBearer));
    }

    #[test]
    fn refusals_are_logged_at_most_once_a_period() {
        let r = RateLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(r.event(t0), Some(0));
        assert_eq!(r.event(t0 + Duration::from_secs(1)), None);
        assert_eq!(r.event(t0 + Duration::from_secs(9)), None);
        assert_eq!(r.event(t0 + Duration::from_secs(10)), Some(2));
        assert_eq!(r.event(t0 + Duration::from_secs(11)), None);
        assert_eq!(r.event(t0 + Duration::from_secs(30)), Some(1));
    }
}
