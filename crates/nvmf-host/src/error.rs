//! The host's error type: one enum for every way a host operation can fail.
//!
//! Three planes, as in the rest of ebof: a command the controller completed with an error status
//! ([`HostError::Status`], the association lives on); a peer that broke the NVMe/TCP rules
//! ([`HostError::Protocol`], [`HostError::TermReq`], [`HostError::UnexpectedPdu`]; the queue is
//! dead); and local failures (socket errors, timeouts, bad arguments).
//!
//! Each cause is said once: a variant whose message already includes an inner error does not
//! also return it from `source()`, so a chain printer (`anyhow`'s `{:#}`) does not repeat it.

use nvme_spec::Status;
use nvme_spec::fabrics::{IATTR_CONNECT_DATA, connect_data_off, connect_sqe_off};
use nvmf_tcp::ProtocolError;

/// Why a host operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The controller completed the command with a non-success status.
    #[error("command failed: {0}")]
    Status(Status),
    /// The Fabrics Connect command was rejected. For Connect Invalid Parameters, `dw0` bits 15:0
    /// hold the offending byte offset (IPO) and bit 16 (IATTR) says whether it is an offset into
    /// the Connect data (1) or the SQE (0) (NVMe-oF 1.1, 3.3). The message says what the
    /// rejection means (see [`connect_rejection_reason`]).
    #[error("connect rejected: {}", connect_rejection_reason(*status, *dw0))]
    ConnectRejected {
        /// The Connect response's status.
        status: Status,
        /// The Connect response's DW0 (IPO and IATTR for Invalid Parameters).
        dw0: u32,
    },
    /// A socket error (connect refused, reset, ...). The OS error is part of the message, not a
    /// `source()`, so it is printed once.
    #[error("transport: {0}")]
    Transport(std::io::Error),
    /// The controller's bytes did not decode as valid NVMe/TCP (framing, digests, limits).
    /// Boxed: it carries the offending header, and results on the I/O path stay small.
    #[error(transparent)]
    Protocol(Box<ProtocolError>),
    /// The controller terminated the connection with a C2HTermReq.
    #[error("controller terminated the connection (C2HTermReq fes {fes:#x} fei {fei:#x})")]
    TermReq {
        /// Fatal Error Status (FES) of the C2HTermReq.
        fes: u16,
        /// Fatal Error Information (FEI): e.g. the offset of the offending header field.
        fei: u32,
    },
    /// A well-formed PDU that makes no sense in our state: a response for a command ID that is
    /// not outstanding, data beyond the command's length, an R2T for a read...
    #[error("unexpected PDU from controller: {reason} (cid {cid})")]
    UnexpectedPdu {
        /// What was wrong with it.
        reason: &'static str,
        /// The command ID the PDU named.
        cid: u16,
    },
    /// Initialize Connection negotiation failed (the controller refused what we asked for).
    #[error("connection negotiation failed: {0}")]
    Negotiation(String),
    /// A bounded wait expired.
    #[error("timed out: {0}")]
    Timeout(&'static str),
    /// The connection is gone; commands that were in flight on it are failed with this.
    #[error("connection lost")]
    Disconnected,
    /// The controller reported a fatal status (CSTS.CFS) or never became ready.
    #[error("controller failure: {0}")]
    Controller(String),
    /// Data returned by the controller (Identify, log page) did not decode.
    #[error("malformed data from controller: {0}")]
    Decode(nvme_spec::identify::DecodeError),
    /// A caller error: a size, queue id or buffer the host cannot use.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A single-command helper was called while low-level submissions were outstanding.
    #[error("queue has commands in flight from submit(); poll them first")]
    QueueBusy,
    /// The controller asks for something this host does not implement (e.g. authentication).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// In-band authentication (DH-HMAC-CHAP) failed.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// NVMe/TCP TLS failed (handshake refused, wrong PSK, bad record).
    #[error("TLS: {0}")]
    Tls(String),
    /// NVMe/RDMA failed below NVMe: no RDMA device or library, address or route resolution,
    /// the CM connect rejected (with the NVMe/RDMA reject status), a failed work request.
    #[error("RDMA: {0}")]
    Rdma(String),
}

impl From<ProtocolError> for HostError {
    fn from(e: ProtocolError) -> HostError {
        HostError::Protocol(Box::new(e))
    }
}

impl From<std::io::Error> for HostError {
    fn from(e: std::io::Error) -> HostError {
        HostError::Transport(e)
    }
}

impl From<nvme_spec::identify::DecodeError> for HostError {
    fn from(e: nvme_spec::identify::DecodeError) -> HostError {
        HostError::Decode(e)
    }
}

/// What a rejected Fabrics Connect means, in words a person can act on, followed by the raw
/// status and DW0 for reference.
///
/// The Connect-specific status codes are NVMe-oF 1.1 Figure 21 (SCT 1: 80h Incompatible Format,
/// 81h Controller Busy, 82h Invalid Parameters, 83h Restart Discovery, 84h Invalid Host). For
/// Invalid Parameters (and the Linux target's Invalid Host), DW0 bits 15:0 are the Invalid
/// Parameter Offset (IPO) and bit 16 (IATTR) says whether it points into the 1024-byte Connect
/// data (HOSTID 0, CNTLID 16, SUBNQN 256, HOSTNQN 512) or into the SQE (RECFMT 40, QID 42,
/// SQSIZE 44, CATTR 46, KATO 48).
pub fn connect_rejection_reason(status: Status, dw0: u32) -> String {
    let what = match (status.sct, status.sc) {
        (1, 0x80) => "the target does not support this Connect command format \
                      (SQE offset 40: RECFMT)"
            .to_string(),
        (1, 0x81) => "the target has no controller free for this host right now \
                      (Controller Busy); try again later"
            .to_string(),
        (1, 0x82) => invalid_parameter(dw0),
        (1, 0x83) => "the target asks the host to run discovery again (Restart Discovery): \
                      the subsystem may have moved"
            .to_string(),
        (1, 0x84) => "this host is not allowed to connect to the subsystem (Invalid Host): \
                      the target does not list this host NQN (Connect data offset 512: \
                      HOSTNQN) among the subsystem's allowed hosts"
            .to_string(),
        _ => "the target failed the Connect command".to_string(),
    };
    format!("{what} [{status}, dw0 {dw0:#x}]")
}

/// Connect Invalid Parameters: name the field at IPO in the place IATTR points to.
fn invalid_parameter(dw0: u32) -> String {
    let ipo = (dw0 & 0xFFFF) as u16;
    if dw0 & IATTR_CONNECT_DATA != 0 {
        match ipo {
            connect_data_off::HOSTID => {
                "the target rejected the host identifier (Connect data offset 0: HOSTID)".into()
            }
            connect_data_off::CNTLID => "the target does not accept the requested controller ID \
                 (Connect data offset 16: CNTLID): an admin queue asks for FFFFh, an I/O queue \
                 names the live controller of its admin queue"
                .into(),
            connect_data_off::SUBNQN => {
                "the target has no subsystem with this NQN (Connect data offset 256: SUBNQN)".into()
            }
            connect_data_off::HOSTNQN => {
                "the target does not accept this host NQN (Connect data offset 512: HOSTNQN)".into()
            }
            other => format!("the target rejected the Connect data at offset {other}"),
        }
    } else {
        match ipo {
            connect_sqe_off::RECFMT => {
                "the target does not support this record format (SQE offset 40: RECFMT)".into()
            }
            connect_sqe_off::QID => "the target does not accept this queue ID (SQE offset 42: \
                 QID): more I/O queues than it grants, or an I/O queue on a discovery controller"
                .into(),
            connect_sqe_off::SQSIZE => "the target does not accept this queue size (SQE offset \
                 44: SQSIZE): larger than its maximum queue size, or zero"
                .into(),
            connect_sqe_off::CATTR => {
                "the target does not accept these connect attributes (SQE offset 46: CATTR)".into()
            }
            connect_sqe_off::KATO => {
                "the target does not accept this keep-alive timeout (SQE offset 48: KATO)".into()
            }
            other => format!("the target rejected the Connect command at SQE offset {other}"),
        }
    }
}

impl HostError {
    /// The NVMe status, if the failure was a command completing with an error status.
    pub fn status(&self) -> Option<Status> {
        match self {
            HostError::Status(s) | HostError::ConnectRejected { status: s, .. } => Some(*s),
            HostError::Transport(_)
            | HostError::Protocol(_)
            | HostError::TermReq { .. }
            | HostError::UnexpectedPdu { .. }
            | HostError::Negotiation(_)
            | HostError::Timeout(_)
            | HostError::Disconnected
            | HostError::Controller(_)
            | HostError::Decode(_)
            | HostError::InvalidArgument(_)
            | HostError::QueueBusy
            | HostError::Unsupported(_)
            | HostError::Auth(_)
            | HostError::Tls(_)
            | HostError::Rdma(_) => None,
        }
    }

    /// True if the error means the connection it happened on can no longer be used.
    pub fn is_fatal_for_connection(&self) -> bool {
        match self {
            HostError::Status(_)
            | HostError::InvalidArgument(_)
            | HostError::QueueBusy
            | HostError::Decode(_) => false,
            HostError::ConnectRejected { .. }
            | HostError::Transport(_)
            | HostError::Protocol(_)
            | HostError::TermReq { .. }
            | HostError::UnexpectedPdu { .. }
            | HostError::Negotiation(_)
            | HostError::Timeout(_)
            | HostError::Disconnected
            | HostError::Controller(_)
            | HostError::Unsupported(_)
            | HostError::Auth(_)
            | HostError::Tls(_)
            | HostError::Rdma(_) => true,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = HostError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    /// The chain as `anyhow`'s `{:#}` prints it: each error's message, joined by ": ".
    fn chain(e: &dyn Error) -> String {
        let mut out = e.to_string();
        let mut cur = e.source();
        while let Some(s) = cur {
            out += ": ";
            out += &s.to_string();
            cur = s.source();
        }
        out
    }

    #[test]
    fn transport_error_names_the_os_error_once() {
        let e = HostError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let text = chain(&e);
        assert_eq!(text.matches("refused").count(), 1, "{text}");
        // ECONNREFUSED on Linux: the message ends in "(os error 111)".
        let e = HostError::from(std::io::Error::from_raw_os_error(111));
        let text = chain(&e);
        assert_eq!(text.matches("os error 111").count(), 1, "{text}");
        assert!(text.starts_with("transport: "), "{text}");
    }

    #[test]
    fn decode_error_is_said_once() {
        let inner = nvme_spec::identify::DecodeError::Short { need: 1024, got: 3 };
        let once = inner.to_string();
        let text = chain(&HostError::from(inner));
        assert_eq!(text.matches(once.as_str()).count(), 1, "{text}");
    }

    fn rejected(status: Status, dw0: u32) -> String {
        HostError::ConnectRejected { status, dw0 }.to_string()
    }

    #[test]
    fn connect_rejections_are_explained() {
        let data = |off: u16| u32::from(off) | IATTR_CONNECT_DATA;
        let sqe = |off: u16| u32::from(off);
        let p = Status::CONNECT_INVALID_PARAM;
        let cases = [
            (
                p,
                data(256),
                "no subsystem with this NQN (Connect data offset 256: SUBNQN)",
            ),
            (
                p,
                data(512),
                "does not accept this host NQN (Connect data offset 512: HOSTNQN)",
            ),
            (
                p,
                data(16),
                "controller ID (Connect data offset 16: CNTLID)",
            ),
            (
                p,
                data(0),
                "host identifier (Connect data offset 0: HOSTID)",
            ),
            (p, data(300), "Connect data at offset 300"),
            (p, sqe(42), "queue ID (SQE offset 42: QID)"),
            (p, sqe(44), "queue size (SQE offset 44: SQSIZE)"),
            (p, sqe(46), "connect attributes (SQE offset 46: CATTR)"),
            (p, sqe(48), "keep-alive timeout (SQE offset 48: KATO)"),
            (p, sqe(40), "record format (SQE offset 40: RECFMT)"),
            (p, sqe(52), "at SQE offset 52"),
            (
                Status::CONNECT_INVALID_HOST,
                data(512),
                "this host is not allowed",
            ),
            (Status::CONNECT_CTRL_BUSY, 0xFFFF, "try again later"),
            (
                Status::CONNECT_INCOMPATIBLE_FORMAT,
                sqe(40),
                "Connect command format",
            ),
            (Status::CONNECT_RESTART_DISC, 0, "run discovery again"),
            (Status::INTERNAL, 0, "failed the Connect command"),
        ];
        for (status, dw0, want) in cases {
            let text = rejected(status, dw0);
            assert!(text.starts_with("connect rejected: "), "{text}");
            assert!(text.contains(want), "{text:?} lacks {want:?}");
            // The raw facts stay available, once, at the end.
            assert!(
                text.ends_with(&format!("[{status}, dw0 {dw0:#x}]")),
                "{text}"
            );
        }
        // The SUBNQN case reads as the issue asked: no raw status first.
        assert!(
            rejected(p, data(256))
                .starts_with("connect rejected: the target has no subsystem with this NQN")
        );
    }
}
