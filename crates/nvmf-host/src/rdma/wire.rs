//! TEMPORARY stand-in for `nvmf_rdma::wire` until that crate is on main (same names and
//! signatures); replaced by a re-export at the merge.

/// Largest length of a keyed SGL data block (24 bits).
pub const KEYED_LEN_MAX: u32 = (1 << 24) - 1;

/// Set SGL1 of `sqe` to a keyed data block: address u64 @24, length u24 @32, key u32 @35,
/// type byte @39 = 4h << 4 | subtype (0h address, Fh invalidate key).
pub fn set_keyed_sgl(sqe: &mut nvme_spec::Sqe, addr: u64, len: u32, key: u32, invalidate: bool) {
    let b = &mut sqe.0;
    b[24..32].copy_from_slice(&addr.to_le_bytes());
    b[32..35].copy_from_slice(&len.min(KEYED_LEN_MAX).to_le_bytes()[..3]);
    b[35..39].copy_from_slice(&key.to_le_bytes());
    b[39] = if invalidate { 0x4F } else { 0x40 };
}
