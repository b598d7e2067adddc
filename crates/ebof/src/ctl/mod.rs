//! `ebof ctl`: the management API's command line (wiring: the client and the types are in
//! `ebof-mgmt`): its arguments ([`args`]), one function per subcommand ([`run`]), and the text
//! the answers are printed as ([`render`]).

mod args;
mod dump;
mod fleet;
mod mirror;
mod render;
mod run;
mod top;

pub use args::CtlArgs;
pub use run::run;

use anyhow::Result;
use ebof_api::{Client, ClientError, Token};
use std::path::PathBuf;

/// The environment variable `ebof ctl --api` takes the token from without --token-file.
pub const TOKEN_ENV: &str = "EBOF_TOKEN";
/// `EBOF_ALLOW_PLAIN_HTTP=1`: what `ebof ctl --insecure-http` says.
pub const PLAIN_HTTP_ENV: &str = "EBOF_ALLOW_PLAIN_HTTP";

/// The client `ebof ctl` talks through: TCP with a token (`--api`), else the Unix socket.
fn client(a: &CtlArgs) -> Result<Client> {
    let Some(addr) = &a.api else {
        let path = a
            .socket
            .clone()
            .unwrap_or_else(ebof_api::default_socket_path);
        return Ok(Client::new(path));
    };
    let token = match &a.token_file {
        Some(p) => Some(ebof_api::read_token_file(p)?),
        None => match std::env::var(TOKEN_ENV) {
            Ok(t) => Some(Token::new(&t).map_err(|e| anyhow::anyhow!("{TOKEN_ENV}: {e}"))?),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(_)) => {
                anyhow::bail!("{TOKEN_ENV}: the token must be printable ASCII")
            }
        },
    };
    let plain = a.insecure_http || std::env::var_os(PLAIN_HTTP_ENV).is_some_and(|v| v == "1");
    Ok(Client::api(addr, a.ca_file.as_deref(), token)
        .map_err(err)?
        .allow_plain_http(plain))
}

/// Paths are resolved by the server, whose working directory may differ: send them absolute.
fn absolute(p: &std::path::Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// A client error as the CLI reports it (the API's message already says what and where).
fn err(e: ClientError) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}
