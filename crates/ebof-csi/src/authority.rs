//! Any `:authority` a gRPC client sends on the CSI socket, made one that h2 accepts.
//!
//! h2 (under tonic and hyper) resets every request whose `:authority` is not an RFC 3986
//! `host[:port]`, and most gRPC clients send something else on a Unix socket: grpc-core ≥ 1.57
//! (Python, C++, Ruby) the percent-encoded socket path, grpc-java and grpcurl the path itself.
//! [`AuthorityFix`] sits between the accepted socket and h2 and rewrites the client's header
//! blocks on the way in: an `:authority` that h2 would refuse becomes `localhost` (what grpc-go
//! and Kubernetes send on a Unix socket); a valid one, or none, is left as it is. Nothing else
//! of the request changes; the server's direction is not touched (see
//! `docs/adr/0026-csi-any-authority.md`).
//!
//! How, at the HTTP/2 frame layer ([`Rewriter`]): the connection preface and every frame but
//! HEADERS and CONTINUATION pass through byte for byte. A header block (a HEADERS frame and its
//! CONTINUATION frames) is decoded with the client's HPACK state — one decoder per connection,
//! fed every block in order, so the client's dynamic table is mirrored exactly — and sent on
//! re-encoded as literals that never enter h2's dynamic table, so h2's decoder needs no state
//! in common with the client's encoder. Padding is dropped; priority and END_STREAM are kept.
//!
//! This is decoding of untrusted input: every length is checked against what was received,
//! a header block is bounded before and after decoding ([`MAX_BLOCK`], [`MAX_DECODED`]),
//! and nothing here panics. A stream that is not HTTP/2 (no preface) passes untouched, for h2
//! to refuse as before.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What an `:authority` h2 would refuse is replaced with.
pub const FALLBACK_AUTHORITY: &str = "localhost";
/// The HTTP/2 client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// The largest frame payload every HTTP/2 peer accepts (RFC 9113 §4.2), and h2's default
/// SETTINGS_MAX_FRAME_SIZE: larger HEADERS/CONTINUATION frames from the client are refused,
/// and the rewritten blocks are sent in frames of at most this.
pub const MAX_FRAME: usize = 16_384;
/// The HPACK dynamic table size the client's encoder may use: h2's SETTINGS_HEADER_TABLE_SIZE,
/// which tonic leaves at the protocol's default. A larger table size update is a decoding
/// error, as in h2.
pub const HEADER_TABLE_SIZE: usize = 4_096;
/// The most one header block may take on the wire (all its frames' fragments together).
pub const MAX_BLOCK: usize = 256 << 10;
/// The most one header block may take decoded (RFC 9113 §6.5.2's size: name, value and 32
/// per field); far above h2's own limit (16 KiB by default), which still answers below it.
pub const MAX_DECODED: usize = 256 << 10;

/// Why a client's byte stream was refused (the connection is then closed).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A HEADERS or CONTINUATION frame longer than [`MAX_FRAME`].
    #[error("a {kind} frame of {len} bytes (at most {MAX_FRAME})")]
    FrameTooLarge {
        /// HEADERS or CONTINUATION.
        kind: &'static str,
        /// Its payload length.
        len: usize,
    },
    /// A header block on stream 0.
    #[error("a header block on stream 0")]
    StreamZero,
    /// Padding or priority fields longer than the frame.
    #[error("a HEADERS frame shorter than its padding or priority fields")]
    BadPadding,
    /// A CONTINUATION frame with no header block open.
    #[error("a CONTINUATION frame with no header block open")]
    UnexpectedContinuation,
    /// Another frame while a header block waits for its CONTINUATION.
    #[error(
        "a frame of type {kind:#x} on stream {stream} inside the header block of stream {open}"
    )]
    ContinuationExpected {
        /// The frame's type.
        kind: u8,
        /// The frame's stream.
        stream: u32,
        /// The stream whose header block is open.
        open: u32,
    },
    /// A header block larger than [`MAX_BLOCK`] or, decoded, than [`MAX_DECODED`].
    #[error("a header block larger than {MAX_BLOCK} bytes, or {MAX_DECODED} decoded")]
    BlockTooLarge,
    /// The header block is not valid HPACK.
    #[error("HPACK: {0}")]
    Hpack(String),
}

/// Where the rewriter is in the client's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Inside the connection preface, this many bytes of it seen.
    Preface(usize),
    /// At a frame header.
    Frames,
    /// Inside a frame passed through, this many payload bytes to go.
    Payload(usize),
    /// Not HTTP/2 (no preface): everything passes.
    Passthrough,
}

/// A header block being collected: its HEADERS frame and CONTINUATION fragments so far.
struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

/// The client-to-server half of an HTTP/2 connection, header blocks rewritten (see the
/// module's documentation). Fed the bytes read from the client in any pieces; hands out the
/// bytes for h2.
pub struct Rewriter {
    state: State,
    decoder: loona_hpack::Decoder<'static>,
    input: Vec<u8>,
    output: Vec<u8>,
    sent: usize,
    block: Option<Block>,
    rewritten: u64,
    last_refused: Option<Vec<u8>>,
}

impl Default for Rewriter {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Rewriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rewriter")
            .field("state", &self.state)
            .field("buffered", &self.input.len())
            .field("pending", &self.pending().len())
            .field("rewritten", &self.rewritten)
            .finish()
    }
}

impl Rewriter {
    /// A rewriter at the start of a connection.
    pub fn new() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        Rewriter {
            state: State::Preface(0),
            decoder,
            input: Vec::new(),
            output: Vec::new(),
            sent: 0,
            block: None,
            rewritten: 0,
            last_refused: None,
        }
    }

    /// The bytes for h2 not yet taken by [`Rewriter::consume`].
    pub fn pending(&self) -> &[u8] {
        self.output.get(self.sent..).unwrap_or_default()
    }

    /// `n` bytes of [`Rewriter::pending`] were handed on.
    pub fn consume(&mut self, n: usize) {
        self.sent = self.sent.saturating_add(n).min(self.output.len());
        if self.sent == self.output.len() {
            self.output.clear();
            self.sent = 0;
        }
    }

    /// How many `:authority` values were replaced so far.
    pub fn rewritten(&self) -> u64 {
        self.rewritten
    }

    /// The last `:authority` replaced, as the client sent it.
    pub fn last_refused(&self) -> Option<&[u8]> {
        self.last_refused.as_deref()
    }

    /// Bytes read from the client, in order. What they complete is appended to
    /// [`Rewriter::pending`]; an incomplete frame waits for the next call. After an error the
    /// connection must be closed (the rewriter's state is then undefined).
    pub fn feed(&mut self, data: &[u8]) -> Result<(), Error> {
        self.input.extend_from_slice(data);
        let input = std::mem::take(&mut self.input);
        let result = self.process(&input);
        match result {
            Ok(used) => {
                self.input = input;
                self.input.drain(..used.min(self.input.len()));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Process what `input` holds; returns how many of its bytes were used.
    fn process(&mut self, input: &[u8]) -> Result<usize, Error> {
        let mut pos = 0;
        loop {
            let avail = input.get(pos..).unwrap_or_default();
            match self.state {
                State::Passthrough => {
                    self.output.extend_from_slice(avail);
                    return Ok(input.len());
                }
                State::Preface(seen) => {
                    let want = PREFACE.get(seen..).unwrap_or_default();
                    let n = avail.len().min(want.len());
                    if avail.get(..n) != want.get(..n) {
                        self.state = State::Passthrough;
                        continue;
                    }
                    self.output
                        .extend_from_slice(avail.get(..n).unwrap_or_default());
                    pos += n;
                    if seen + n < PREFACE.len() {
                        self.state = State::Preface(seen + n);
                        return Ok(pos);
                    }
                    self.state = State::Frames;
                }
                State::Payload(left) => {
                    let n = avail.len().min(left);
                    self.output
                        .extend_from_slice(avail.get(..n).unwrap_or_default());
                    pos += n;
                    if n < left {
                        self.state = State::Payload(left - n);
                        return Ok(pos);
                    }
                    self.state = State::Frames;
                }
                State::Frames => match self.frame(avail)? {
                    Some(used) => pos += used,
                    None => return Ok(pos),
                },
            }
        }
    }

    /// One frame at the start of `avail`: how many bytes it used, or `None` when more are
    /// needed.
    fn frame(&mut self, avail: &[u8]) -> Result<Option<usize>, Error> {
        let Some(head) = avail.get(..FRAME_HEADER_LEN) else {
            return Ok(None);
        };
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5] & 0x7f, head[6], head[7], head[8]]);
        if let Some(open) = &self.block
            && (kind != TYPE_CONTINUATION || stream != open.stream)
        {
            return Err(Error::ContinuationExpected {
                kind,
                stream,
                open: open.stream,
            });
        }
        if kind != TYPE_HEADERS && kind != TYPE_CONTINUATION {
            self.output.extend_from_slice(head);
            self.state = State::Payload(len);
            return Ok(Some(FRAME_HEADER_LEN));
        }
        if len > MAX_FRAME {
            let kind = if kind == TYPE_HEADERS {
                "HEADERS"
            } else {
                "CONTINUATION"
            };
            return Err(Error::FrameTooLarge { kind, len });
        }
        let Some(payload) = avail.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len) else {
            return Ok(None);
        };
        if kind == TYPE_HEADERS {
            self.headers(flags, stream, payload)?;
        } else {
            let Some(open) = self.block.as_mut() else {
                return Err(Error::UnexpectedContinuation);
            };
            if open.fragment.len() + payload.len() > MAX_BLOCK {
                return Err(Error::BlockTooLarge);
            }
            open.fragment.extend_from_slice(payload);
        }
        if flags & FLAG_END_HEADERS != 0
            && let Some(block) = self.block.take()
        {
            self.finish(block)?;
        }
        Ok(Some(FRAME_HEADER_LEN + len))
    }

    /// A HEADERS frame: opens a header block.
    fn headers(&mut self, flags: u8, stream: u32, payload: &[u8]) -> Result<(), Error> {
        if stream == 0 {
            return Err(Error::StreamZero);
        }
        let mut body = payload;
        if flags & FLAG_PADDED != 0 {
            let (&pad, rest) = body.split_first().ok_or(Error::BadPadding)?;
            let keep = rest
                .len()
                .checked_sub(usize::from(pad))
                .ok_or(Error::BadPadding)?;
            body = rest.get(..keep).ok_or(Error::BadPadding)?;
        }
        let mut priority = None;
        if flags & FLAG_PRIORITY != 0 {
            let fields = body.get(..5).ok_or(Error::BadPadding)?;
            let mut p = [0u8; 5];
            p.copy_from_slice(fields);
            priority = Some(p);
            body = body.get(5..).unwrap_or_default();
        }
        self.block = Some(Block {
            stream,
            end_stream: flags & FLAG_END_STREAM != 0,
            priority,
            fragment: body.to_vec(),
        });
        Ok(())
    }

    /// A complete header block: decode, rewrite `:authority`, re-encode, send.
    fn finish(&mut self, block: Block) -> Result<(), Error> {
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut size = 0usize;
        let mut over = false;
        self.decoder
            .decode_with_cb(&block.fragment, |name, value| {
                size = size.saturating_add(name.len() + value.len() + 32);
                if size > MAX_DECODED {
                    over = true;
                } else {
                    fields.push((name.into_owned(), value.into_owned()));
                }
            })
            .map_err(|e| Error::Hpack(e.to_string()))?;
        if over {
            return Err(Error::BlockTooLarge);
        }
        for (name, value) in &mut fields {
            if name.as_slice() == b":authority" && !acceptable(value) {
                self.rewritten += 1;
                self.last_refused = Some(std::mem::replace(
                    value,
                    FALLBACK_AUTHORITY.as_bytes().to_vec(),
                ));
            }
        }
        let mut encoded = Vec::with_capacity(size);
        for (name, value) in &fields {
            encode_literal(&mut encoded, name, value);
        }
        self.send_block(&block, &encoded);
        Ok(())
    }

    /// A header block as one HEADERS frame and as many CONTINUATION frames as it needs.
    fn send_block(&mut self, block: &Block, encoded: &[u8]) {
        let mut flags = if block.end_stream { FLAG_END_STREAM } else { 0 };
        let mut room = MAX_FRAME;
        if block.priority.is_some() {
            flags |= FLAG_PRIORITY;
            room -= 5;
        }
        let (first, mut rest) = encoded.split_at(encoded.len().min(room));
        if rest.is_empty() {
            flags |= FLAG_END_HEADERS;
        }
        let prio = block.priority.as_ref().map_or(&[][..], |p| &p[..]);
        self.put_frame(TYPE_HEADERS, flags, block.stream, &[prio, first]);
        while !rest.is_empty() {
            let (chunk, tail) = rest.split_at(rest.len().min(MAX_FRAME));
            rest = tail;
            let flags = if rest.is_empty() { FLAG_END_HEADERS } else { 0 };
            self.put_frame(TYPE_CONTINUATION, flags, block.stream, &[chunk]);
        }
    }

    fn put_frame(&mut self, kind: u8, flags: u8, stream: u32, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        // len ≤ MAX_FRAME < 2^24: the three low bytes hold it.
        let l = (len as u32).to_be_bytes();
        self.output
            .extend_from_slice(&[l[1], l[2], l[3], kind, flags]);
        self.output.extend_from_slice(&stream.to_be_bytes());
        for p in parts {
            self.output.extend_from_slice(p);
        }
    }
}

/// Would h2 take this `:authority`? (the very check h2 makes: `http`'s `Authority` parser)
pub fn acceptable(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// An HPACK "literal header field without indexing — new name" (RFC 7541 §6.2.2), strings
/// raw (no Huffman): decodable with no table state, and enters none.
fn encode_literal(dst: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    dst.push(0x00);
    encode_string(dst, name);
    encode_string(dst, value);
}

/// An HPACK string literal, not Huffman-coded: a 7-bit-prefix length, then the octets.
fn encode_string(dst: &mut Vec<u8>, s: &[u8]) {
    encode_integer(dst, s.len(), 7, 0x00);
    dst.extend_from_slice(s);
}

/// An HPACK integer (RFC 7541 §5.1) with an `n`-bit prefix; `high` holds the first octet's
/// other bits.
fn encode_integer(dst: &mut Vec<u8>, mut value: usize, n: u8, high: u8) {
    let max = (1usize << n) - 1;
    if value < max {
        dst.push(high | value as u8);
        return;
    }
    dst.push(high | max as u8);
    value -= max;
    while value >= 128 {
        dst.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    dst.push(value as u8);
}

/// An accepted connection whose client-to-server bytes pass through a [`Rewriter`]; the
/// other direction is the stream's own.
pub struct AuthorityFix<S> {
    inner: S,
    rw: Rewriter,
    eof: bool,
    logged: bool,
}

impl<S> AuthorityFix<S> {
    /// Wrap an accepted connection.
    pub fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            rw: Rewriter::new(),
            eof: false,
            logged: false,
        }
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    fn log_first_rewrite(&mut self) {
        if !self.logged && self.rw.rewritten() > 0 {
            self.logged = true;
            let sent = String::from_utf8_lossy(self.rw.last_refused().unwrap_or_default());
            tracing::debug!(
                authority = %sent,
                "a gRPC client sent an :authority h2 refuses; served as {FALLBACK_AUTHORITY}"
            );
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let pending = this.rw.pending();
            if !pending.is_empty() || buf.remaining() == 0 {
                let n = pending.len().min(buf.remaining());
                buf.put_slice(pending.get(..n).unwrap_or_default());
                this.rw.consume(n);
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut rb = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            if rb.filled().is_empty() {
                this.eof = true;
                continue;
            }
            if let Err(e) = this.rw.feed(rb.filled()) {
                tracing::debug!(error = %e, "gRPC connection closed: its header blocks cannot be read");
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
            this.log_first_rewrite();
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AuthorityFix<S>
{
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let l = (payload.len() as u32).to_be_bytes();
        let mut f = vec![l[1], l[2], l[3], kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// Split `out` (after the preface) into frames: (type, flags, stream, payload).
    fn frames(out: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut v = Vec::new();
        let mut rest = &out[PREFACE.len()..];
        while !rest.is_empty() {
            let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
            let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
            v.push((rest[3], rest[4], stream, rest[9..9 + len].to_vec()));
            rest = &rest[9 + len..];
        }
        v
    }

    fn decode(block: &[u8]) -> Vec<(String, String)> {
        loona_hpack::Decoder::new()
            .decode(block)
            .unwrap()
            .into_iter()
            .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect()
    }

    fn request(authority: Option<&str>) -> Vec<(&'static [u8], Vec<u8>)> {
        let mut h: Vec<(&'static [u8], Vec<u8>)> = vec![
            (b":method", b"POST".to_vec()),
            (b":scheme", b"http".to_vec()),
            (b":path", b"/csi.v1.Identity/Probe".to_vec()),
        ];
        if let Some(a) = authority {
            h.push((b":authority", a.as_bytes().to_vec()));
        }
        h.push((b"content-type", b"application/grpc".to_vec()));
        h.push((b"te", b"trailers".to_vec()));
        h
    }

    fn run(input: &[u8]) -> Vec<u8> {
        let mut rw = Rewriter::new();
        rw.feed(input).unwrap();
        rw.pending().to_vec()
    }

    #[test]
    fn the_socket_path_becomes_localhost_and_the_rest_stays() {
        for (sent, want) in [
            ("/run/csi/csi.sock", "localhost"),
            ("%2Frun%2Fcsi%2Fcsi.sock", "localhost"),
            ("", "localhost"),
            ("localhost", "localhost"),
            ("[::]:50051", "[::]:50051"),
            ("csi.sock", "csi.sock"),
        ] {
            let mut enc = loona_hpack::Encoder::new();
            let h = request(Some(sent));
            let block = enc.encode(h.iter().map(|(n, v)| (*n, v.as_slice())));
            let mut input = PREFACE.to_vec();
            input.extend(frame(0x4, 0, 0, b""));
            input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &block));
            input.extend(frame(0x0, FLAG_END_STREAM, 1, &[0, 0, 0, 0, 0]));
            let out = run(&input);
            assert!(out.starts_with(PREFACE));
            let f = frames(&out);
            assert_eq!(f.len(), 3, "{sent}");
            assert_eq!(f[0], (0x4, 0, 0, vec![]));
            assert_eq!(
                (f[1].0, f[1].1, f[1].2),
                (TYPE_HEADERS, FLAG_END_HEADERS, 1)
            );
            let got = decode(&f[1].3);
            assert_eq!(got[3], (":authority".into(), want.into()), "{sent}");
            assert_eq!(got.len(), 6);
            assert_eq!(got[2].1, "/csi.v1.Identity/Probe");
            assert_eq!(f[2], (0x0, FLAG_END_STREAM, 1, vec![0, 0, 0, 0, 0]));
        }
    }

    #[test]
    fn the_dynamic_table_is_followed_across_blocks_and_pieces() {
        // An encoder that indexes everything: the second request's authority is an index
        // into the client's dynamic table, which only a decoder fed the first block knows.
        let mut enc = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, b""));
        let mut sizes = Vec::new();
        for stream in [1u32, 3, 5] {
            let h = request(Some("/tmp/x.sock"));
            let block = enc.encode(h.iter().map(|(n, v)| (*n, v.as_slice())));
            sizes.push(block.len());
            input.extend(frame(
                TYPE_HEADERS,
                FLAG_END_HEADERS | FLAG_END_STREAM,
                stream,
                &block,
            ));
        }
        assert!(
            sizes[1] < sizes[0],
            "the second block uses the table: {sizes:?}"
        );
        // Fed one byte at a time: the same output as at once.
        let whole = run(&input);
        let mut rw = Rewriter::new();
        let mut bytewise = Vec::new();
        for b in &input {
            rw.feed(std::slice::from_ref(b)).unwrap();
            bytewise.extend_from_slice(rw.pending());
            let n = rw.pending().len();
            rw.consume(n);
        }
        assert_eq!(whole, bytewise);
        let f = frames(&whole);
        for (i, stream) in [1u32, 3, 5].into_iter().enumerate() {
            let (kind, flags, s, block) = &f[i + 1];
            assert_eq!((*kind, *flags, *s), (TYPE_HEADERS, 0x5, stream));
            assert_eq!(decode(block)[3].1, "localhost");
        }
    }

    #[test]
    fn continuation_padding_and_priority() {
        let mut enc = loona_hpack::Encoder::new();
        let mut h = request(Some("/a/very/long/socket/path.sock"));
        let big = vec![b'x'; 20_000];
        h.push((b"x-big", big.clone()));
        let block = enc.encode(h.iter().map(|(n, v)| (*n, v.as_slice())));
        let (a, b) = block.split_at(10);
        let mut headers = vec![3u8]; // pad length
        headers.extend_from_slice(&[0x80, 0, 0, 1, 200]); // exclusive dependency on 1, weight
        headers.extend_from_slice(a);
        headers.extend_from_slice(&[0, 0, 0]);
        let mut input = PREFACE.to_vec();
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_PADDED | FLAG_PRIORITY | FLAG_END_STREAM,
            7,
            &headers,
        ));
        for (i, chunk) in b.chunks(9000).enumerate() {
            let last = (i + 1) * 9000 >= b.len();
            input.extend(frame(
                TYPE_CONTINUATION,
                if last { FLAG_END_HEADERS } else { 0 },
                7,
                chunk,
            ));
        }
        let f = frames(&run(&input));
        assert_eq!(f[0].0, TYPE_HEADERS);
        assert_eq!(f[0].1, FLAG_PRIORITY | FLAG_END_STREAM);
        assert_eq!(&f[0].3[..5], &[0x80, 0, 0, 1, 200]);
        let mut block = f[0].3[5..].to_vec();
        for (i, (kind, flags, stream, payload)) in f[1..].iter().enumerate() {
            assert_eq!((*kind, *stream), (TYPE_CONTINUATION, 7));
            assert_eq!(
                *flags,
                if i + 2 == f.len() {
                    FLAG_END_HEADERS
                } else {
                    0
                }
            );
            assert!(payload.len() <= MAX_FRAME);
            block.extend_from_slice(payload);
        }
        let got = decode(&block);
        assert_eq!(got[3].1, "localhost");
        assert_eq!(got[6].1.as_bytes(), &big[..]);
    }

    #[test]
    fn what_is_not_http2_passes_and_broken_blocks_are_refused() {
        let http1 = b"GET / HTTP/1.1\r\nHost: /x.sock\r\n\r\n";
        assert_eq!(run(http1), http1.to_vec());
        let mut base = PREFACE.to_vec();
        base.extend(frame(0x4, 0, 0, b""));
        let cases: Vec<(Vec<u8>, Error)> = vec![
            (
                frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, b""),
                Error::UnexpectedContinuation,
            ),
            (
                frame(TYPE_HEADERS, FLAG_END_HEADERS, 0, b""),
                Error::StreamZero,
            ),
            (
                frame(TYPE_HEADERS, FLAG_PADDED | FLAG_END_HEADERS, 1, &[5, 1]),
                Error::BadPadding,
            ),
            (
                frame(TYPE_HEADERS, FLAG_PRIORITY | FLAG_END_HEADERS, 1, &[1, 2]),
                Error::BadPadding,
            ),
            (
                [frame(TYPE_HEADERS, 0, 1, b""), frame(0x0, 0, 1, b"")].concat(),
                Error::ContinuationExpected {
                    kind: 0,
                    stream: 1,
                    open: 1,
                },
            ),
            (
                frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &vec![0; MAX_FRAME + 1]),
                Error::FrameTooLarge {
                    kind: "HEADERS",
                    len: MAX_FRAME + 1,
                },
            ),
            // An index past both tables; a table size update above the limit.
            (
                frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &[0xff, 0x7f]),
                Error::Hpack(String::new()),
            ),
            (
                frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &[0x3f, 0xe2, 0x1f, 0x82]),
                Error::Hpack(String::new()),
            ),
        ];
        for (tail, want) in cases {
            let mut rw = Rewriter::new();
            let got = rw.feed(&[base.clone(), tail].concat()).unwrap_err();
            match (&got, &want) {
                (Error::Hpack(_), Error::Hpack(_)) => {}
                _ => assert_eq!(got, want),
            }
        }
    }

    #[test]
    fn a_block_that_expands_past_the_limit_is_refused() {
        // One 4 KiB table entry, referenced by a one-byte index again and again.
        let mut enc = loona_hpack::Encoder::new();
        let v = vec![b'a'; 4000];
        let first = enc.encode([(&b"x-a"[..], &v[..])]);
        let mut input = PREFACE.to_vec();
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &first));
        let mut block = Vec::new();
        for _ in 0..MAX_FRAME {
            block.push(0x80 | 62);
        }
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &block));
        let mut rw = Rewriter::new();
        assert_eq!(rw.feed(&input), Err(Error::BlockTooLarge));
    }

    #[test]
    fn integers_encode_as_rfc_7541_says() {
        let mut d = Vec::new();
        encode_integer(&mut d, 10, 5, 0);
        encode_integer(&mut d, 1337, 5, 0);
        encode_integer(&mut d, 127, 7, 0);
        assert_eq!(d, [10, 31, 154, 10, 127, 0]);
    }
}
