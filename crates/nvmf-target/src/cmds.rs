//! Compare, Verify and Copy (NVM Command Set 1.0 sections 3.2.1, 3.2.2, 3.3.4), and the
//! execution of a fused Compare-and-Write: validation into an [`IoRequest`], and execution
//! against the backend (inline for RAM, on the runtime's worker pool for file and block, as
//! [`crate::execute_io`] does for every operation the io_uring engine does not run itself).

use crate::error::CmdError;
use crate::io::{IoOp, IoRequest, NsRef, backend_status, failed, failed_as, lba_range};
use crate::model::Namespace;
use nvme_spec::opcode::io;
use nvme_spec::{Sqe, Status};
use std::sync::Arc;

/// Largest single Copy source range, bytes (MSSRL = this / block size).
pub const COPY_RANGE_MAX_BYTES: u32 = 1 << 20;
/// Largest Copy in total, bytes (MCL = this / block size). A Copy on a RAM namespace runs on the
/// reactor: 8 MiB is a few milliseconds of memcpy at most.
pub const COPY_MAX_BYTES: u32 = 8 << 20;
/// Maximum Source Range Count, 0's based: 128 ranges.
pub const COPY_MSRC: u8 = 127;
/// Size of a source range descriptor, format 0.
const COPY_DESC_LEN: u32 = 32;
/// Copy CDW12 bits 11:8: Descriptor Format.
const COPY_DESFMT_SHIFT: u32 = 8;
/// Copy CDW12 bit 30 (as Read/Write): Force Unit Access.
const FUA: u32 = 1 << 30;

/// Largest Verify, bytes; Identify Controller (NVM) VSL advertises it.
pub const VERIFY_MAX_BYTES: u64 = 8 << 20;
/// VSL: log2 of [`VERIFY_MAX_BYTES`] in 4 KiB (CAP.MPSMIN) units.
pub const VSL: u8 = (VERIFY_MAX_BYTES / 4096).trailing_zeros() as u8;
/// Chunk in which a Verify reads a backend that is not memory.
const VERIFY_CHUNK: u64 = 1 << 20;

/// The Copy limits of `ns` for Identify Namespace: (MSSRL, MCL, MSRC), in its logical blocks.
pub fn copy_limits(ns: &Namespace) -> (u16, u32, u8) {
    let bs = ns.block_size.max(1);
    let mssrl = u16::try_from(COPY_RANGE_MAX_BYTES / bs).unwrap_or(u16::MAX);
    (mssrl, COPY_MAX_BYTES / bs, COPY_MSRC)
}

/// Host data of a Copy (its source range descriptors), checked before any data moves: the
/// format (only 0), the range count against MSRC, and the transfer length (at least NR + 1
/// descriptors, at most 256 of them, as Dataset Management).
pub(crate) fn copy_host_data_len(sqe: &Sqe) -> Result<u32, CmdError> {
    let cdw12 = sqe.cdw12();
    if (cdw12 >> COPY_DESFMT_SHIFT) & 0xF != 0 {
        return Err(CmdError::at(Status::INVALID_FIELD, 48));
    }
    let nr = cdw12 & 0xFF;
    if nr > u32::from(COPY_MSRC) {
        return Err(CmdError::at(Status::CMD_SIZE_LIMIT, 48));
    }
    let len = sqe.sgl_data_len();
    if len < (nr + 1) * COPY_DESC_LEN || len > 256 * COPY_DESC_LEN {
        return Err(CmdError::at(Status::SGL_INVALID_DATA, 32));
    }
    Ok(len)
}

/// One format-0 source range: (SLBA, number of blocks, 1-based).
fn source_range(d: &[u8]) -> (u64, u64) {
    let mut slba = [0u8; 8];
    slba.copy_from_slice(&d[8..16]);
    let nlb = u64::from(u16::from_le_bytes([d[16], d[17]])) + 1;
    (u64::from_le_bytes(slba), nlb)
}

/// Phase 2 of Compare, Verify and Copy: the request, fully validated (Copy: its descriptors,
/// now in `buf`, against the limits and the namespace).
pub(crate) fn prepare(
    ns: Arc<NsRef>,
    sqe: &Sqe,
    buf: &[u8],
    wce: bool,
) -> Result<IoRequest, CmdError> {
    let (op, offset, len) = match sqe.opcode() {
        io::COMPARE => {
            let (offset, len) = lba_range(&ns, sqe.slba(), u64::from(sqe.nlb()))?;
            (IoOp::Compare, offset, len)
        }
        io::VERIFY => {
            let (offset, len) = lba_range(&ns, sqe.slba(), u64::from(sqe.nlb()))?;
            if len > VERIFY_MAX_BYTES {
                return Err(CmdError::at(Status::INVALID_FIELD, 48));
            }
            (IoOp::Verify, offset, len)
        }
        _ => {
            let nr = (sqe.cdw12() & 0xFF) + 1;
            let (mssrl, mcl, _) = copy_limits(&ns);
            let mut total = 0u64;
            for d in buf.chunks_exact(COPY_DESC_LEN as usize).take(nr as usize) {
                let (slba, nlb) = source_range(d);
                if nlb > u64::from(mssrl) {
                    return Err(CmdError::at(Status::CMD_SIZE_LIMIT, 0xFFFF));
                }
                total += nlb;
                if total > u64::from(mcl) {
                    return Err(CmdError::at(Status::CMD_SIZE_LIMIT, 0xFFFF));
                }
                lba_range(&ns, slba, nlb).map_err(|_| CmdError::at(Status::LBA_RANGE, 0xFFFF))?;
            }
            let (offset, len) = lba_range(&ns, sqe.slba(), total)?;
            let fua = sqe.cdw12() & FUA != 0 || !wce;
            (IoOp::Copy { nr, fua }, offset, len)
        }
    };
    Ok(IoRequest {
        op,
        ns,
        offset,
        len,
    })
}

/// Run `req` on its backend. `buf` holds write data / DSM ranges, or receives read data.
pub fn execute_io(req: &IoRequest, buf: &mut Vec<u8>) -> Status {
    let b = &req.ns.backend;
    let res = match &req.op {
        IoOp::Read => {
            // Reuse the buffer's capacity; no allocation once it reached the working size.
            buf.resize(req.len as usize, 0);
            b.read(req.offset, buf)
        }
        IoOp::Write { fua } => match buf.get(..req.len as usize) {
            Some(data) => b
                .write(req.offset, data)
                .and_then(|()| if *fua { b.flush() } else { Ok(()) }),
            // Cannot happen for a command built by `prepare_io`; never a panic.
            None => return Status::INTERNAL,
        },
        IoOp::Flush => b.flush(),
        IoOp::FlushAll(s) => s.namespaces.iter().try_for_each(|n| n.backend.flush()),
        IoOp::WriteZeroes { deallocate, fua } => if *deallocate {
            b.deallocate(req.offset, req.len)
        } else {
            b.write_zeroes(req.offset, req.len)
        }
        .and_then(|()| if *fua { b.flush() } else { Ok(()) }),
        IoOp::Deallocate { nr } => {
            let bs = u64::from(req.ns.block_size);
            let nsze = req.ns.blocks();
            for r in buf.chunks_exact(16).take(*nr as usize) {
                let nlb = u64::from(u32::from_le_bytes([r[4], r[5], r[6], r[7]]));
                let slba =
                    u64::from_le_bytes([r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]]);
                if nlb == 0 {
                    continue;
                }
                match slba.checked_add(nlb) {
                    Some(end) if end <= nsze => {}
                    _ => return Status::LBA_RANGE,
                }
                if let Err(e) = b.deallocate(slba * bs, nlb * bs) {
                    return backend_status(&e, true);
                }
            }
            Ok(())
        }
        IoOp::Compare => return compare(req, buf),
        IoOp::Verify => return verify(req, buf),
        IoOp::Copy { nr, fua } => return copy(req, *nr, *fua, buf),
        IoOp::CompareWrite { fua } => return compare_and_write(req, *fua, buf),
    };
    match res {
        Ok(()) => Status::SUCCESS,
        Err(e) => failed(req, &e),
    }
}

/// True if `a` and `b` hold the same bytes.
fn same(a: &[u8], b: &[u8]) -> bool {
    a == b
}

/// Compare: `buf` holds the host's `req.len` bytes. The namespace's bytes are read behind them
/// (the slot buffer grows once to twice the transfer, then is reused).
pub(crate) fn compare(req: &IoRequest, buf: &mut Vec<u8>) -> Status {
    let len = req.len as usize;
    if buf.len() < len {
        return Status::DATA_XFER_ERROR;
    }
    buf.truncate(len);
    buf.resize(2 * len, 0);
    let res = req.ns.backend.read(req.offset, &mut buf[len..]);
    let equal = same(&buf[..len], &buf[len..]);
    buf.truncate(len);
    match res {
        Err(e) => failed_as(req, &e, false),
        Ok(()) if equal => Status::SUCCESS,
        Ok(()) => Status::COMPARE_FAILURE,
    }
}

/// Verify: the range can be read. Memory (RAM) always can; other backends are read in chunks
/// into the slot buffer, and the data is dropped.
pub(crate) fn verify(req: &IoRequest, buf: &mut Vec<u8>) -> Status {
    let b = &req.ns.backend;
    if usize::try_from(req.len)
        .ok()
        .and_then(|l| b.memory(req.offset, l))
        .is_some()
        || req.len == 0
    {
        return Status::SUCCESS;
    }
    let mut pos = 0u64;
    while pos < req.len {
        let n = (req.len - pos).min(VERIFY_CHUNK) as usize;
        buf.resize(n, 0);
        if let Err(e) = b.read(req.offset + pos, &mut buf[..n]) {
            return failed_as(req, &e, false);
        }
        pos += n as u64;
    }
    Status::SUCCESS
}

/// Copy: `buf` starts with the validated descriptors; the source data is gathered behind them
/// and written to the destination in one write (so overlapping source and destination ranges
/// copy the data as it was before the command).
pub(crate) fn copy(req: &IoRequest, nr: u32, fua: bool, buf: &mut Vec<u8>) -> Status {
    let b = &req.ns.backend;
    let bs = u64::from(req.ns.block_size);
    let descs = (nr * COPY_DESC_LEN) as usize;
    if buf.len() < descs {
        return Status::DATA_XFER_ERROR;
    }
    buf.truncate(descs);
    buf.resize(descs + req.len as usize, 0);
    let (head, data) = buf.split_at_mut(descs);
    let mut at = 0usize;
    for d in head.chunks_exact(COPY_DESC_LEN as usize) {
        let (slba, nlb) = source_range(d);
        let n = (nlb * bs) as usize;
        let Some(dst) = data.get_mut(at..at + n) else {
            return Status::INTERNAL;
        };
        if let Err(e) = b.read(slba * bs, dst) {
            return failed_as(req, &e, false);
        }
        at += n;
    }
    let res = b
        .write(req.offset, &data[..at])
        .and_then(|()| if fua { b.flush() } else { Ok(()) });
    buf.truncate(descs);
    match res {
        Ok(()) => Status::SUCCESS,
        Err(e) => failed_as(req, &e, true),
    }
}

/// Fused Compare-and-Write, run while the namespace gate is held: `buf` holds the Compare's
/// `len` bytes then the Write's. On success both commands succeed. A failure in the compare
/// phase (miscompare or read error) leaves `buf` empty: the Compare gets the status and the
/// Write is aborted ([`Status::ABORTED_FUSED_FAIL`]); a failure of the write leaves `buf` as
/// it was: the Compare succeeded and the Write gets the status.
pub(crate) fn compare_and_write(req: &IoRequest, fua: bool, buf: &mut Vec<u8>) -> Status {
    let b = &req.ns.backend;
    let len = req.len as usize;
    if buf.len() < 2 * len {
        buf.clear();
        return Status::DATA_XFER_ERROR;
    }
    buf.truncate(2 * len);
    buf.resize(3 * len, 0);
    let res = b.read(req.offset, &mut buf[2 * len..]);
    let equal = same(&buf[..len], &buf[2 * len..]);
    buf.truncate(2 * len);
    let status = match res {
        Err(e) => failed_as(req, &e, false),
        Ok(()) if equal => Status::SUCCESS,
        Ok(()) => Status::COMPARE_FAILURE,
    };
    if !status.is_success() {
        buf.clear();
        return status;
    }
    match b
        .write(req.offset, &buf[len..2 * len])
        .and_then(|()| if fua { b.flush() } else { Ok(()) })
    {
        Ok(()) => Status::SUCCESS,
        Err(e) => failed_as(req, &e, true),
    }
}
