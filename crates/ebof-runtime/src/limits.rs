//! Admission of new connections: a cap on connections in total and per source address.
//!
//! Checked once per accepted socket on the accepting reactor; an admitted connection carries an
//! [`Admitted`] ticket that gives its place back when the connection is dropped, on whichever
//! reactor that happens. Nothing here is touched on the I/O path.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Connection caps (0 = no cap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnCaps {
    /// Connections open at once, all sources together.
    pub total: usize,
    /// Connections open at once from one source IP address.
    pub per_address: usize,
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The target-wide cap is reached; the number of connections open.
    Total(usize),
    /// The per-source-address cap is reached; the number open from that address.
    PerAddress(usize),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Total(n) => write!(f, "{n} connections open (target.max_connections)"),
            Refused::PerAddress(n) => write!(
                f,
                "{n} connections open from this address (target.max_connections_per_address)"
            ),
        }
    }
}

/// The counts behind [`ConnCaps`].
#[derive(Debug)]
pub struct Admission {
    caps: ConnCaps,
    open: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_address: HashMap<IpAddr, usize>,
}

/// A place taken by one open connection; given back on drop.
#[derive(Debug)]
pub struct Admitted {
    from: Arc<Admission>,
    addr: IpAddr,
}

impl Admission {
    /// Admission control under `caps`, with no connection admitted yet.
    pub fn new(caps: ConnCaps) -> Arc<Admission> {
        Arc::new(Admission {
            caps,
            open: Mutex::new(Counts::default()),
        })
    }

    /// Take a place for a connection from `addr`, or say which cap is full.
    pub fn admit(self: &Arc<Self>, addr: IpAddr) -> Result<Admitted, Refused> {
        let mut c = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if self.caps.total > 0 && c.total >= self.caps.total {
            return Err(Refused::Total(c.total));
        }
        let n = c.per_address.get(&addr).copied().unwrap_or(0);
        if self.caps.per_address > 0 && n >= self.caps.per_address {
            return Err(Refused::PerAddress(n));
        }
        c.total += 1;
        c.per_address.insert(addr, n + 1);
        Ok(Admitted {
            from: self.clone(),
            addr,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().map_or(0, |c| c.total)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut c = self.from.open.lock().unwrap_or_else(|p| p.into_inner());
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_address.get_mut(&self.addr) {
            *n -= 1;
            if *n == 0 {
                c.per_address.remove(&self.addr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_total_and_per_address_and_give_places_back() {
        let a = Admission::new(ConnCaps {
            total: 3,
            per_address: 2,
        });
        let x: IpAddr = "10.0.0.1".parse().unwrap();
        let y: IpAddr = "10.0.0.2".parse().unwrap();
        let t1 = a.admit(x).unwrap();
        let _t2 = a.admit(x).unwrap();
        assert_eq!(a.admit(x).unwrap_err(), Refused::PerAddress(2));
        let _t3 = a.admit(y).unwrap();
        assert_eq!(a.admit(y).unwrap_err(), Refused::Total(3));
        drop(t1);
        assert_eq!(a.open(), 2);
        let _t4 = a.admit(x).unwrap();
        assert_eq!(a.open(), 3);
    }

    #[test]
    fn zero_means_no_cap() {
        let a = Admission::new(ConnCaps {
            total: 0,
            per_address: 0,
        });
        let x: IpAddr = "::1".parse().unwrap();
        let held: Vec<_> = (0..1000).map(|_| a.admit(x).unwrap()).collect();
        assert_eq!(a.open(), 1000);
        drop(held);
        assert_eq!(a.open(), 0);
    }
}
