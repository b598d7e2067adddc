//! Identifier newtypes, so a queue id is never confused with a command id.

/// Command Identifier (CID), SQE bytes 2..4; chosen by the host, unique among its outstanding
/// commands on one queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommandId(pub u16);

/// Queue Identifier: 0 is the admin queue, 1.. are I/O queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId(pub u16);

impl QueueId {
    /// The admin queue, QID 0.
    pub const ADMIN: QueueId = QueueId(0);
    /// True for the admin queue (QID 0).
    pub fn is_admin(self) -> bool {
        self.0 == 0
    }
}

/// Controller Identifier (CNTLID), assigned by the target at admin Connect (dynamic model).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ControllerId(pub u16);

impl ControllerId {
    /// The value a host puts in Connect data to ask for a dynamically allocated controller.
    pub const DYNAMIC: ControllerId = ControllerId(0xFFFF);
    /// Lowest controller id allocated (Linux: NVME_CNTLID_MIN).
    pub const MIN: u16 = 1;
    /// Highest controller id allocated (Linux: NVME_CNTLID_MAX; FFF0h and above are reserved,
    /// FFFFh is [`Self::DYNAMIC`]).
    pub const MAX: u16 = 0xFFEF;
}

/// Namespace Identifier. 0 is invalid for most commands; 0xFFFFFFFF means "all namespaces".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespaceId(pub u32);

impl NamespaceId {
    /// NSID FFFFFFFFh: all namespaces (Flush, Get Log Page, Get/Set Features, ...).
    pub const BROADCAST: NamespaceId = NamespaceId(0xFFFF_FFFF);
    /// True for a value that can name one namespace (1..=0xFFFFFFFE).
    pub fn is_valid_single(self) -> bool {
        self.0 != 0 && self.0 != 0xFFFF_FFFF
    }
}

/// A 0's-based count as found on the wire (SQSIZE, NUMD, NLB...). Use [`ZeroBased::count`] to get
/// the real number; no raw arithmetic on wire values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZeroBased<T>(pub T);

impl ZeroBased<u16> {
    /// The real count (wire value + 1, 1..=65536).
    pub fn count(self) -> u32 {
        u32::from(self.0) + 1
    }
}

impl ZeroBased<u32> {
    /// The real count (wire value + 1, 1..=2^32).
    pub fn count(self) -> u64 {
        u64::from(self.0) + 1
    }
}
