//! The I/O shell of a TCP queue: the socket (and TLS session), the ICReq/ICResp exchange, and
//! non-blocking bulk reads and vectored writes between the socket and the engine's buffers.

use std::net::SocketAddr;

use nvmf_tcp::{Digests, HostConn, HostEvent};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::slots::Slots;
use super::txbuf::{SPLICE_LOST, TX_IOV_MAX, TxBuf};
use crate::config::LinkParams;
use crate::error::{HostError, Result};

/// A `read` is issued only with at least this much space free (bulk reads, never a few bytes at
/// a time); when less is left, the partial PDU at the head moves to the front.
const RX_READ_WINDOW: usize = 64 * 1024;
/// The receive buffer holds at least two of the largest PDUs and at least this much, so the
/// partial-PDU move above happens about once per this many bytes received, not once per PDU.
const RX_MIN_BUF: usize = 1 << 20;

fn tls_err(e: nvmf_tls::TlsError) -> HostError {
    HostError::Tls(e.to_string())
}

/// The socket and the receive buffer (the transmit buffer is the engine's).
pub(super) struct Link {
    pub(super) stream: TcpStream,
    /// TLS session (records in and out of `stream`), when the queue uses TLS.
    pub(super) tls: Option<Box<nvmf_tls::TlsClient>>,
    /// TLS: the session may hold decrypted bytes the receive buffer had no room for.
    pub(super) tls_more: bool,
    pub(super) rx: Vec<u8>,
    pub(super) rx_head: usize,
    pub(super) rx_tail: usize,
    pub(super) peer: SocketAddr,
    pub(super) maxh2cdata: u32,
    /// Busy polling: read with a raw non-blocking `recv`, not through tokio's readiness cache
    /// (which only learns of new data when the runtime next polls epoll, i.e. at a yield).
    pub(super) raw_reads: bool,
    /// The socket's `SO_RCVLOWAT` as we last set it (1: the kernel's default).
    rcvlowat: usize,
}

impl Link {
    /// TCP connect, TLS handshake (if `tls`: identity and PSK), ICReq → ICResp through `conn`.
    pub(super) async fn open(
        p: &LinkParams,
        conn: &mut HostConn,
        tls: Option<(Vec<u8>, nvmf_tls::psk::TlsPsk)>,
    ) -> Result<Link> {
        let stream = tokio::time::timeout(p.connect_timeout, TcpStream::connect(p.addr))
            .await
            .map_err(|_| HostError::Timeout("TCP connect"))??;
        stream.set_nodelay(true)?;
        let tls = match tls {
            None => None,
            Some((identity, psk)) => {
                let cfg = nvmf_tls::TlsClientConfig::new().map_err(tls_err)?;
                Some(Box::new(
                    nvmf_tls::TlsClient::new(&cfg, &identity, psk).map_err(tls_err)?,
                ))
            }
        };
        let mut link = Link {
            stream,
            tls,
            tls_more: false,
            rx: Vec::new(),
            rx_head: 0,
            rx_tail: 0,
            peer: p.addr,
            maxh2cdata: 0,
            raw_reads: false,
            rcvlowat: 1,
        };
        if link.tls.is_some() {
            tokio::time::timeout(p.connect_timeout, link.tls_handshake())
                .await
                .map_err(|_| HostError::Timeout("TLS handshake"))??;
        }
        tokio::time::timeout(p.connect_timeout, link.initialize(conn, p.digests))
            .await
            .map_err(|_| HostError::Timeout("ICReq/ICResp exchange"))??;
        Ok(link)
    }

    /// Send ClientHello, read until the handshake is done.
    async fn tls_handshake(&mut self) -> Result<()> {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let Some(t) = self.tls.as_mut() else {
                return Ok(());
            };
            let out = t.take_cipher();
            if !out.is_empty() {
                self.stream.write_all(&out).await?;
            }
            let Some(t) = self.tls.as_mut() else {
                return Ok(());
            };
            if t.handshake_done() {
                return Ok(());
            }
            let n = self.stream.read(&mut buf).await?;
            if n == 0 {
                return Err(HostError::Tls(
                    "the target closed the connection during the TLS handshake (no TLS on this \
                     port, or no key for this host and subsystem?)"
                        .into(),
                ));
            }
            t.feed(&buf[..n]).map_err(tls_err)?;
        }
    }

    /// Send `data` (through TLS when on), waiting for the socket.
    async fn send_all(&mut self, data: &[u8]) -> Result<()> {
        match self.tls.as_mut() {
            None => self.stream.write_all(data).await?,
            Some(t) => {
                t.write_plain(&[data]).map_err(tls_err)?;
                let out = t.take_cipher();
                self.stream.write_all(&out).await?;
            }
        }
        Ok(())
    }

    /// Receive some bytes (decrypted when TLS is on), waiting for the socket. 0: closed.
    async fn recv_some(&mut self, buf: &mut [u8]) -> Result<usize> {
        if self.tls.is_none() {
            return Ok(self.stream.read(buf).await?);
        }
        let mut cipher = vec![0u8; 16 * 1024];
        loop {
            let Some(t) = self.tls.as_mut() else {
                return Ok(0);
            };
            let n = t.read_plain(buf).map_err(tls_err)?;
            if n > 0 {
                return Ok(n);
            }
            if t.peer_closed() {
                // close_notify: nothing more comes (the session discards what follows).
                return Ok(0);
            }
            if t.read_paused() {
                // Records without plaintext were opened up to the session's budget: send its
                // KeyUpdate answers, then go on with what is buffered.
                let out = t.take_cipher();
                self.stream.write_all(&out).await?;
                continue;
            }
            let k = self.stream.read(&mut cipher).await?;
            if k == 0 {
                return Ok(0);
            }
            let Some(t) = self.tls.as_mut() else {
                return Ok(0);
            };
            t.feed(&cipher[..k]).map_err(tls_err)?;
        }
    }

    async fn initialize(&mut self, conn: &mut HostConn, want: Digests) -> Result<()> {
        let mut icreq = Vec::new();
        conn.encode_icreq(&mut icreq);
        self.send_all(&icreq).await?;
        // ICResp is 128 bytes; nothing else may arrive before our first capsule.
        let mut buf = vec![0u8; 4096];
        let mut have = 0;
        let (digests, maxh2cdata, used) = loop {
            let n = self.recv_some(&mut buf[have..]).await?;
            if n == 0 {
                return Err(if self.tls.is_none() {
                    HostError::Negotiation(
                        "the target closed the connection without answering the ICReq (a port \
                         that requires TLS? try --tls --tls-key)"
                            .into(),
                    )
                } else {
                    HostError::Disconnected
                });
            }
            have += n;
            match conn.decode_one(&buf[..have])? {
                None if have < buf.len() => continue,
                None => {
                    return Err(HostError::UnexpectedPdu {
                        reason: "oversized ICResp",
                        cid: 0,
                    });
                }
                Some((
                    HostEvent::Established {
                        digests,
                        maxh2cdata,
                        ..
                    },
                    used,
                )) => break (digests, maxh2cdata, used),
                Some((HostEvent::TermReq { fes, fei }, _)) => {
                    return Err(HostError::TermReq { fes, fei });
                }
                Some(_) => {
                    return Err(HostError::UnexpectedPdu {
                        reason: "expected ICResp",
                        cid: 0,
                    });
                }
            }
        };
        if digests != want {
            return Err(HostError::Negotiation(format!(
                "asked for header digest {} / data digest {}, controller granted {} / {}",
                want.hdgst, want.ddgst, digests.hdgst, digests.ddgst
            )));
        }
        self.maxh2cdata = maxh2cdata;
        self.rx = vec![0u8; (2 * conn.max_pdu_len()).max(RX_MIN_BUF) + RX_READ_WINDOW];
        let rest = &buf[used..have];
        self.rx[..rest.len()].copy_from_slice(rest);
        self.rx_tail = rest.len();
        Ok(())
    }

    /// Output waiting: in the engine's transmit buffer, or encrypted in the TLS session.
    pub(super) fn tx_pending(&self, tx: &TxBuf) -> bool {
        tx.pending()
            || self
                .tls
                .as_ref()
                .is_some_and(|t| !t.pending_cipher().is_empty())
    }

    /// TLS: encrypt the pending output (one batch; slot data straight into the records), then
    /// send what the socket takes.
    fn try_write_tls(&mut self, tx: &mut TxBuf, st: &mut Slots) -> Result<usize> {
        let Some(t) = self.tls.as_mut() else {
            return Ok(0);
        };
        let mut n = 0;
        while tx.pending() {
            let mut pieces = [&[][..]; TX_IOV_MAX];
            let k = tx.slices(&st.slots, &mut pieces).ok_or(SPLICE_LOST)?;
            let len: usize = pieces[..k].iter().map(|p| p.len()).sum();
            if len == 0 {
                return Err(SPLICE_LOST);
            }
            t.write_plain(&pieces[..k]).map_err(tls_err)?;
            n += len;
            tx.advance(len, st);
        }
        loop {
            let p = t.pending_cipher();
            if p.is_empty() {
                break;
            }
            match self.stream.try_write(p) {
                Ok(k) => {
                    t.consume_cipher(k);
                    n = n.max(1);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(n)
    }

    /// TLS: decrypted bytes the session holds, then ciphertext from the socket.
    fn try_read_tls(&mut self) -> Result<(usize, bool)> {
        let Some(t) = self.tls.as_mut() else {
            return Ok((0, true));
        };
        let mut got = 0;
        let mut fed = false;
        let mut recvs = 0;
        loop {
            let space = &mut self.rx[self.rx_tail..];
            if space.is_empty() {
                self.tls_more = true;
                return Ok((got, false));
            }
            let n = t.read_plain(space).map_err(tls_err)?;
            if n > 0 {
                self.rx_tail += n;
                got += n;
                continue;
            }
            if t.peer_closed() {
                // The target's close_notify: what came before it is handed over first; the
                // session discards anything after it, and the queue ends.
                if got > 0 {
                    return Ok((got, true));
                }
                return Err(HostError::Disconnected);
            }
            if t.read_paused() {
                // The session bounded its work (records without plaintext, KeyUpdate answers
                // not yet sent): come back without waiting for the socket, after sending.
                self.tls_more = true;
                return Ok((got, false));
            }
            if fed {
                break;
            }
            if recvs == 0 && self.raw_reads && self.rcvlowat > 1 && !readable(&self.stream) {
                // Waiting for the rest of a large PDU's records (see the plain path).
                break;
            }
            recvs += 1;
            // Ciphertext goes straight into the session's buffer, where its records are
            // opened in place.
            let space = t.cipher_space();
            let room = space.len();
            let r = if self.raw_reads {
                recv_nonblocking(&self.stream, space)
            } else {
                self.stream.try_read(space)
            };
            match r {
                Ok(0) => return Err(HostError::Disconnected),
                Ok(k) => {
                    t.cipher_filled(k).map_err(tls_err)?;
                    fed = k < room;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        self.tls_more = false;
        if got == 0 && recvs > 0 && self.rcvlowat > 1 {
            // Ciphertext came without a whole record: the low mark, reckoned before, may
            // now ask for more than the PDU's rest; the next decode sets it again.
            self.set_rcvlowat(1);
        }
        Ok((got, true))
    }

    /// Make room at the end of the receive buffer: start over when it is empty, move the
    /// partial PDU to the front when less than a read window is left.
    fn compact_rx(&mut self) {
        if self.rx_head == self.rx_tail {
            self.rx_head = 0;
            self.rx_tail = 0;
        } else if self.rx.len() - self.rx_tail < RX_READ_WINDOW {
            self.rx.copy_within(self.rx_head..self.rx_tail, 0);
            self.rx_tail -= self.rx_head;
            self.rx_head = 0;
        }
    }

    /// Write as much of the pending output as the socket takes now (one `writev`). Returns
    /// bytes written.
    pub(super) fn try_write(&mut self, tx: &mut TxBuf, st: &mut Slots) -> Result<usize> {
        if self.tls.is_some() {
            return self.try_write_tls(tx, st);
        }
        if !tx.pending() {
            return Ok(0);
        }
        let mut pieces = [&[][..]; TX_IOV_MAX];
        let k = tx.slices(&st.slots, &mut pieces).ok_or(SPLICE_LOST)?;
        let mut iov = [std::io::IoSlice::new(&[]); TX_IOV_MAX];
        for (v, p) in iov.iter_mut().zip(&pieces[..k]) {
            *v = std::io::IoSlice::new(p);
        }
        match self.stream.try_write_vectored(&iov[..k]) {
            Ok(n) => {
                tx.advance(n, st);
                Ok(n)
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Read whatever the socket has into the receive buffer. Returns bytes read, and whether
    /// the socket was drained (the read came back shorter than the space offered).
    pub(super) fn try_read(&mut self) -> Result<(usize, bool)> {
        self.compact_rx();
        if self.tls.is_some() {
            return self.try_read_tls();
        }
        let space = self.rx.len() - self.rx_tail;
        let r = if self.raw_reads && self.rcvlowat > 1 && !readable(&self.stream) {
            // Waiting for the rest of a large PDU: `poll` tells without the socket lock that
            // `recv` takes (which the sender's softirq needs to queue the data).
            Err(std::io::ErrorKind::WouldBlock.into())
        } else if self.raw_reads {
            recv_nonblocking(&self.stream, &mut self.rx[self.rx_tail..])
        } else {
            self.stream.try_read(&mut self.rx[self.rx_tail..])
        };
        match r {
            Ok(0) => Err(HostError::Disconnected),
            Ok(n) => {
                self.rx_tail += n;
                Ok((n, n < space))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok((0, true)),
            Err(e) => Err(e.into()),
        }
    }
}

/// A partial PDU at least this much short of whole sets `SO_RCVLOWAT`; smaller ones (4 KiB
/// I/O) cost no syscall more.
const LOWAT_MIN: usize = 32 * 1024;
/// The most `SO_RCVLOWAT` asks for (the kernel caps it by the receive buffer too).
const LOWAT_MAX: usize = 256 * 1024;

impl Link {
    /// When the PDU at the head of the receive buffer (`plen` bytes, as the decoder validated
    /// its header: [`nvmf_tcp::HostConn::awaiting_pdu_len`]) is far from whole, make the
    /// socket report readable (epoll, `poll`) only once the rest of it has arrived, so that a
    /// 128 KiB C2HData is read with one `recv`, not one per segment batch; back to the default
    /// otherwise. Under TLS, what the session holds (ciphertext not yet opened, plaintext not
    /// yet read) counts as received: the rest is then a lower bound on the ciphertext still to
    /// come (every record carries its plaintext and more), so the mark never asks for bytes
    /// that will not arrive. A failed `setsockopt` only costs the optimisation.
    pub(super) fn expect_rest_of_pdu(&mut self, plen: Option<usize>) {
        let held = self.tls.as_ref().map_or(0, |t| t.buffered_cipher());
        let have = self.rx_tail - self.rx_head + held;
        let need = plen.map_or(0, |p| p.saturating_sub(have));
        let want = if need >= LOWAT_MIN {
            need.min(LOWAT_MAX)
        } else {
            1
        };
        self.set_rcvlowat(want);
    }

    fn set_rcvlowat(&mut self, want: usize) {
        if want == self.rcvlowat {
            return;
        }
        self.rcvlowat = match set_rcvlowat(&self.stream, want) {
            Ok(()) => want,
            Err(e) => {
                tracing::debug!(error = %e, "SO_RCVLOWAT not set");
                1
            }
        };
    }
}

/// `setsockopt(SO_RCVLOWAT)`.
fn set_rcvlowat(stream: &TcpStream, bytes: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the option value is a valid c_int of the size given; the descriptor belongs to
    // `stream`, which is borrowed for the duration of the call.
    let r = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether the socket has data to read (`poll` with no wait; honours `SO_RCVLOWAT`).
fn readable(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the duration of the call; the descriptor belongs to
    // `stream`, which is borrowed.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    // An error or a hang-up counts as readable: the `recv` that follows reports it.
    n != 0
}

/// One `recv(MSG_DONTWAIT)` on the socket, bypassing tokio's readiness cache.
fn recv_nonblocking(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    if buf.is_empty() {
        return Err(std::io::ErrorKind::WouldBlock.into());
    }
    // SAFETY: `buf` is a valid, writable slice for its whole length; the descriptor belongs to
    // `stream`, which is borrowed for the duration of the call.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_tcp::HostConnConfig;
    use std::time::Duration;

    /// The target's side of a TLS queue (our server session, PSK of 9s): accept on `l`, do
    /// the handshake, read the ICReq and answer it. Returns the socket and the session.
    fn tls_target_ready(l: std::net::TcpListener) -> (std::net::TcpStream, nvmf_tls::TlsServer) {
        use std::io::{Read, Write};
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let key = nvmf_tls::psk::TlsPsk::new(nvmf_tls::psk::PskHash::Sha256, &[9; 32]);
        let key = key.unwrap();
        let cfg = nvmf_tls::TlsServerConfig::new(move |_: &[u8]| Some(key.clone())).unwrap();
        let mut tls = nvmf_tls::TlsServer::new(&cfg).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut plain = Vec::new();
        while plain.len() < 128 {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "host went away during the handshake");
            tls.feed(&buf[..n]).unwrap();
            s.write_all(&tls.take_cipher()).unwrap();
            tls.read_plain_into(&mut plain).unwrap();
        }
        let mut resp = Vec::new();
        nvmf_tcp::pdu::encode_ic_resp(
            &mut resp,
            &nvmf_tcp::pdu::IcResp {
                pfv: 0,
                cpda: 0,
                digests: Digests::NONE,
                maxh2cdata: 131072,
            },
        );
        tls.write_plain(&[&resp]).unwrap();
        s.write_all(&tls.take_cipher()).unwrap();
        (s, tls)
    }

    /// The host's side of a TLS queue to `addr` (PSK of 9s), through the ICResp.
    async fn tls_link(addr: SocketAddr) -> Link {
        let p = LinkParams {
            addr,
            digests: Digests::NONE,
            max_c2h_data: 128 * 1024,
            connect_timeout: Duration::from_secs(10),
            tls: None,
        };
        let key = nvmf_tls::psk::TlsPsk::new(nvmf_tls::psk::PskHash::Sha256, &[9; 32]).unwrap();
        let mut conn = HostConn::new(HostConnConfig {
            digests: p.digests,
            hpda: 0,
            maxr2t: 0,
            max_c2h_data: p.max_c2h_data,
        });
        Link::open(&p, &mut conn, Some((b"NVMe0R01 h s".to_vec(), key)))
            .await
            .unwrap()
    }

    /// A TLS target (our server session on a thread) that answers the ICReq, then sends
    /// close_notify and keeps writing until the host goes (at most `junk` bytes).
    fn closing_tls_target(junk: usize) -> (SocketAddr, std::thread::JoinHandle<()>) {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, mut tls) = tls_target_ready(l);
            tls.close_notify().unwrap();
            s.write_all(&tls.take_cipher()).unwrap();
            // Data after close_notify (records that look real), until the host closes.
            let chunk = vec![0x17u8; 256 * 1024];
            let mut sent = 0;
            while sent < junk && s.write_all(&chunk).is_ok() {
                sent += chunk.len();
            }
            // Then hold the connection open until the host ends it.
            let mut buf = vec![0u8; 64 * 1024];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        });
        (addr, t)
    }

    fn rcvlowat(s: &TcpStream) -> i32 {
        use std::os::fd::AsRawFd;
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are valid for the call; the descriptor is `s`'s.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        v
    }

    /// A large PDU only partly received: the socket says readable (and busy polling reads)
    /// only once the rest is there, then back to the default; small PDUs never change it.
    #[tokio::test(flavor = "current_thread")]
    async fn a_partial_large_pdu_is_read_whole() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut peer, _) = l.accept().unwrap();
        let mut link = Link {
            stream,
            tls: None,
            tls_more: false,
            rx: vec![0u8; RX_MIN_BUF + RX_READ_WINDOW],
            rx_head: 0,
            rx_tail: 0,
            peer: addr,
            maxh2cdata: 0,
            raw_reads: true,
            rcvlowat: 1,
        };
        // The first 8 bytes of a 4 KiB C2HData: too small to bother.
        link.rx_tail = 8;
        link.expect_rest_of_pdu(Some(24 + 4096));
        assert_eq!((link.rcvlowat, rcvlowat(&link.stream)), (1, 1));

        // A 128 KiB one.
        let plen = 24 + 131_072;
        link.expect_rest_of_pdu(Some(plen));
        let need = plen - 8;
        assert_eq!(link.rcvlowat, need);
        assert_eq!(rcvlowat(&link.stream), need as i32);

        peer.write_all(&vec![1u8; 1000]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            link.try_read().unwrap().0,
            0,
            "read before the PDU was whole"
        );

        peer.write_all(&vec![2u8; need - 1000]).unwrap();
        let mut polls = 0;
        while link.rx_tail < plen {
            link.try_read().unwrap();
            polls += 1;
            assert!(polls < 1000, "the rest never became readable");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(link.rx_tail, plen);

        // Consumed: back to the default.
        link.rx_head = link.rx_tail;
        link.expect_rest_of_pdu(None);
        assert_eq!((link.rcvlowat, rcvlowat(&link.stream)), (1, 1));
    }

    /// Under TLS too, a large PDU only partly received is read once its rest has arrived,
    /// whole and as sent, and the mark goes back to the default when the PDU is whole.
    #[tokio::test(flavor = "current_thread")]
    async fn a_partial_large_pdu_is_read_whole_over_tls() {
        use std::io::Write;
        use std::sync::mpsc;
        let plen = 24 + 131_072;
        let pdu: Vec<u8> = (0..plen).map(|i| (i % 251) as u8).collect();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (go_tx, go_rx) = mpsc::channel::<usize>();
        let sent = pdu.clone();
        let target = std::thread::spawn(move || {
            let (mut s, mut tls) = tls_target_ready(l);
            // The PDU in the pieces the test asks for, each as its own records.
            let mut at = 0;
            while let Ok(end) = go_rx.recv() {
                tls.write_plain(&[&sent[at..end]]).unwrap();
                s.write_all(&tls.take_cipher()).unwrap();
                at = end;
            }
        });
        let mut link = tls_link(addr).await;
        link.raw_reads = true;
        let read_until = |link: &mut Link, n: usize| {
            let mut polls = 0;
            while link.rx_tail - link.rx_head < n {
                link.try_read().unwrap();
                polls += 1;
                assert!(polls < 2000, "{n} bytes never became readable");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        // The PDU's first 1,000 bytes: the mark asks for the rest.
        go_tx.send(1000).unwrap();
        read_until(&mut link, 1000);
        link.expect_rest_of_pdu(Some(plen));
        assert_eq!(link.rcvlowat, plen - 1000);
        assert_eq!(rcvlowat(&link.stream), (plen - 1000) as i32);

        // Four records more, not the rest: nothing is read.
        go_tx.send(1000 + 4 * 16384).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            link.try_read().unwrap().0,
            0,
            "read before the PDU was whole"
        );

        // The rest: all of it is read, as sent.
        go_tx.send(plen).unwrap();
        read_until(&mut link, plen);
        assert_eq!(&link.rx[link.rx_head..link.rx_tail], &pdu[..]);
        link.rx_head = link.rx_tail;
        link.expect_rest_of_pdu(None);
        assert_eq!((link.rcvlowat, rcvlowat(&link.stream)), (1, 1));
        drop(go_tx);
        drop(link);
        target.join().unwrap();
    }

    /// T2, host side: after the target's close_notify the queue ends (Disconnected) and the
    /// session does not buffer what the target keeps sending.
    #[tokio::test(flavor = "current_thread")]
    async fn close_notify_from_the_target_ends_the_tls_queue() {
        let (addr, target) = closing_tls_target(64 << 20);
        let mut link = tls_link(addr).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let err = loop {
            assert!(
                std::time::Instant::now() < deadline,
                "the queue did not end"
            );
            match link.try_read() {
                Ok(_) => {
                    let buffered = link.tls.as_ref().map_or(0, |t| t.buffered_cipher());
                    assert!(
                        buffered < 1 << 20,
                        "{buffered} bytes buffered after close_notify"
                    );
                    tokio::time::timeout(Duration::from_millis(100), link.stream.readable())
                        .await
                        .ok();
                }
                Err(e) => break e,
            }
        };
        assert!(matches!(err, HostError::Disconnected), "{err}");
        let buffered = link.tls.as_ref().map_or(0, |t| t.buffered_cipher());
        assert!(
            buffered < 1 << 20,
            "{buffered} bytes buffered after close_notify"
        );
        drop(link);
        target.join().unwrap();
    }
}
