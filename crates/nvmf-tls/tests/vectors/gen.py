#!/usr/bin/env python3
"""Independent known-answer values for crates/nvmf-tls/tests/psk_vectors.rs.

Uses only the Python standard library (hmac, hashlib, base64). HKDF (RFC 5869) and CRC-32
(IEEE 802.3, reflected, polynomial 0xEDB88320) are written out here by hand so that nothing
is shared with the Rust implementation (hkdf / crc32fast crates).

The derivations follow libnvme src/nvme/linux.c (derive_retained_key{,_compat},
derive_psk_digest, derive_tls_key{,_compat}) and Linux drivers/nvme/common/auth.c
(nvme_auth_generate_digest); see the nvmf-tls `psk` module doc for the rules.

Run: python3 gen.py   (prints `name = value` lines; the Rust test embeds them)
"""
import base64
import hashlib
import hmac

HASHES = {1: hashlib.sha256, 2: hashlib.sha384}


def hkdf_extract(h, salt, ikm):
    if not salt:
        salt = b"\x00" * h().digest_size
    return hmac.new(salt, ikm, h).digest()


def hkdf_expand(h, prk, info, length):
    out, t, i = b"", b"", 1
    while len(out) < length:
        t = hmac.new(prk, t + info + bytes([i]), h).digest()
        out += t
        i += 1
    return out[:length]


def hkdf(h, ikm, info, length):
    return hkdf_expand(h, hkdf_extract(h, b"", ikm), info, length)


def crc32(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def info(variant, length, label, context):
    label = b"tls13 " + label
    if variant == "compat":
        return length.to_bytes(2, "little") + label + context
    return (length.to_bytes(2, "big") + bytes([len(label)]) + label
            + bytes([len(context)]) + context)


def interchange(hh, key):
    raw = key + crc32(key).to_bytes(4, "little")
    return "NVMeTLSkey-1:%02x:%s:" % (hh, base64.b64encode(raw).decode())


def cipher_hash(hh, key):
    if hh:
        return hh
    return {32: 1, 48: 2}[len(key)]


def retained(variant, hh, key, hostnqn):
    if hh == 0:
        return key
    return hkdf(HASHES[hh], key, info(variant, len(key), b"HostNQN", hostnqn.encode()), len(key))


def digest(hid, ret, hostnqn, subnqn):
    msg = (hostnqn + " " + subnqn + " NVMe-over-Fabrics").encode()
    return base64.b64encode(hmac.new(ret, msg, HASHES[hid]).digest()).decode()


def tls_psk(variant, hid, ret, context):
    n = HASHES[hid]().digest_size
    return hkdf(HASHES[hid], ret, info(variant, n, b"nvme-tls-psk", context.encode()), n)


K32 = bytes.fromhex("5512DBB6737D0106F65975B773DFB011FFC344BCF442E2DD6D8BC4870B5D5B03")
K48 = K32 + bytes.fromhex("FFC344BCF442E2DD6D8BC4870B5D5B03")

NQN_PAIRS = {
    "t": ("nqn.psk-test-host", "nqn.psk-test-subsys"),
    "l": ("nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
          "nqn.2024-01.io.ebof:disk1"),
}
CASES = [("k01", 1, K32), ("k02", 2, K48), ("k00", 0, K32), ("k00l", 0, K48)]


def main():
    # Sanity check of the hand-written primitives against RFC 5869 test case 1.
    okm = hkdf_expand(hashlib.sha256,
                      hkdf_extract(hashlib.sha256, bytes(range(13)), b"\x0b" * 22),
                      bytes(range(0xF0, 0xFA)), 42)
    assert okm.hex().startswith("3cb25f25faacd57a90434f64d0362f2a"), okm.hex()
    assert crc32(b"123456789") == 0xCBF43926

    for name, hh, key in CASES:
        print("%s.interchange = %s" % (name, interchange(hh, key)))
        hid = cipher_hash(hh, key)
        for pname, (host, sub) in NQN_PAIRS.items():
            for variant in ("compat", "rfc"):
                p = "%s.%s.%s" % (name, pname, variant)
                ret = retained(variant, hh, key, host)
                print("%s.retained = %s" % (p, ret.hex()))
                dig = digest(hid, ret, host, sub)
                print("%s.digest = %s" % (p, dig))
                id0 = "NVMe0R%02d %s %s" % (hid, host, sub)
                print("%s.id0 = %s" % (p, id0))
                print("%s.psk0 = %s" % (p, tls_psk(variant, hid, ret, id0).hex()))
                id1 = "NVMe1R%02d %s %s %s" % (hid, host, sub, dig)
                print("%s.id1 = %s" % (p, id1))
                ctx1 = "%02d %s" % (hid, dig)
                print("%s.psk1 = %s" % (p, tls_psk(variant, hid, ret, ctx1).hex()))


if __name__ == "__main__":
    main()
