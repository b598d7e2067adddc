//! nvmf-tls (work in progress)
pub mod psk;
