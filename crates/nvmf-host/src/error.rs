//! The host's error type: one enum for every way a host operation can fail.
//!
//! Three planes, as in the rest of ebof: a command the controller completed with an error status
//! ([`HostError::Status`], the association lives on); a peer that broke the NVMe/TCP rules
//! ([`HostError::Protocol`], [`HostError::TermReq`], [`HostError::UnexpectedPdu`]; the queue is
//! dead); and local failures (socket errors, timeouts, bad arguments).

use nvme_spec::Status;
use nvmf_tcp::ProtocolError;

/// Why a host operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The controller completed the command with a non-success status.
    #[error("command failed: {0}")]
    Status(Status),
    /// The Fabrics Connect command was rejected. For Connect Invalid Parameters, `dw0` bits 15:0
    /// hold the offending byte offset (IPO) and bit 16 (IATTR) says whether it is an offset into
    /// the Connect data (1) or the SQE (0) (NVMe-oF 1.1, 3.3).
    #[error("connect rejected: {status} (dw0 {dw0:#x})")]
    ConnectRejected { status: Status, dw0: u32 },
    /// A socket error (connect refused, reset, ...).
    #[error("transport: {0}")]
    Transport(#[from] std::io::Error),
    /// The controller's bytes did not decode as valid NVMe/TCP (framing, digests, limits).
    /// Boxed: it carries the offending header, and results on the I/O path stay small.
    #[error(transparent)]
    Protocol(Box<ProtocolError>),
    /// The controller terminated the connection with a C2HTermReq.
    #[error("controller terminated the connection (C2HTermReq fes {fes:#x} fei {fei:#x})")]
    TermReq { fes: u16, fei: u32 },
    /// A well-formed PDU that makes no sense in our state: a response for a command ID that is
    /// not outstanding, data beyond the command's length, an R2T for a read...
    #[error("unexpected PDU from controller: {reason} (cid {cid})")]
    UnexpectedPdu { reason: &'static str, cid: u16 },
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
    Decode(#[from] nvme_spec::identify::DecodeError),
    /// A caller error: a size, queue id or buffer the host cannot use.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A single-command helper was called while low-level submissions were outstanding.
    #[error("queue has commands in flight from submit(); poll them first")]
    QueueBusy,
    /// The controller asks for something this host does not implement (e.g. authentication).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
}

impl From<ProtocolError> for HostError {
    fn from(e: ProtocolError) -> HostError {
        HostError::Protocol(Box::new(e))
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
            | HostError::Unsupported(_) => None,
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
            | HostError::Unsupported(_) => true,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = HostError> = std::result::Result<T, E>;
