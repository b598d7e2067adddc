//! CRC32C (Castagnoli) digests: seed 0xFFFFFFFF, final XOR 0xFFFFFFFF, stored little-endian
//! (NVMe/TCP 1.0 3.6.2.3). The `crc32c` crate uses SSE4.2 / ARMv8 CRC instructions when present.

/// Digest of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continue a digest over more bytes (for data spread over several buffers).
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}
