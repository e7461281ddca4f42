"""The public key of a Nostr private key: the identity a Buzz bot has on its relay.

Upstream's Buzz adapter (hermes-agent 0.20+) locks ``<relay URL>:<public key>`` once the relay has
told it who the key belongs to, so two profiles driving one identity are a conflict even when one
writes the key as ``nsec1…`` and the other as hex. hermesd derives the same public key from the
profile's key itself: BIP-340's x-only public key, ``x(d·G)`` on secp256k1, with the key given as 64
hex digits or as a bech32 ``nsec`` (BIP-173), the two forms upstream accepts. Written from the
specifications; pure Python, about a millisecond a key.
"""

from __future__ import annotations

import functools

_P = 2**256 - 2**32 - 977  # the field's prime
_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141  # the group's order
_G = (0x79BE667EF9DCBBAC55A06295CE870B07029BFCDB2DCE28D959F2815B16F81798,
      0x483ADA7726A3C4655DA4FBFC0E1108A8FD17B448A68554199C47D08FFB10D4B8)
_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_GEN = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)

_Jacobian = tuple[int, int, int]  # (X, Y, Z) with x = X/Z², y = Y/Z³; Z = 0 is the point at infinity


def _double(p: _Jacobian) -> _Jacobian:
    x, y, z = p
    if z == 0 or y == 0:
        return (0, 1, 0)
    ysq = y * y % _P
    s = 4 * x * ysq % _P
    m = 3 * x * x % _P  # the curve's a is 0
    nx = (m * m - 2 * s) % _P
    return nx, (m * (s - nx) - 8 * ysq * ysq) % _P, 2 * y * z % _P


def _add(p: _Jacobian, q: _Jacobian) -> _Jacobian:
    if p[2] == 0:
        return q
    if q[2] == 0:
        return p
    z1z1, z2z2 = p[2] * p[2] % _P, q[2] * q[2] % _P
    u1, u2 = p[0] * z2z2 % _P, q[0] * z1z1 % _P
    s1, s2 = p[1] * q[2] * z2z2 % _P, q[1] * p[2] * z1z1 % _P
    if u1 == u2:
        return _double(p) if s1 == s2 else (0, 1, 0)
    h, r = (u2 - u1) % _P, (s2 - s1) % _P
    hh = h * h % _P
    hhh = h * hh % _P
    v = u1 * hh % _P
    nx = (r * r - hhh - 2 * v) % _P
    return nx, (r * (v - nx) - s1 * hhh) % _P, h * p[2] * q[2] % _P


def _bech32_data(text: str) -> list[int] | None:
    """The 5-bit data of a valid bech32 string with human-readable part ``nsec``, checksum removed."""
    if text.lower() != text and text.upper() != text:
        return None
    text = text.lower()
    hrp, sep, body = text.rpartition("1")
    if not sep or hrp != "nsec" or len(body) < 6 or any(c not in _CHARSET for c in body):
        return None
    values = [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp] + [_CHARSET.index(c) for c in body]
    check = 1
    for v in values:
        top = check >> 25
        check = (check & 0x1FFFFFF) << 5 ^ v
        for i, g in enumerate(_GEN):
            if top >> i & 1:
                check ^= g
    return [_CHARSET.index(c) for c in body[:-6]] if check == 1 else None


def _secret(text: str) -> int | None:
    """The secret scalar of a key written as ``nsec1…`` or 64 hex digits, or None when it is no key."""
    raw = text.strip()
    if raw.lower().startswith("nsec1"):
        data = _bech32_data(raw)
        if data is None:
            return None
        acc = bits = 0
        out = bytearray()
        for v in data:
            acc, bits = acc << 5 | v, bits + 5
            if bits >= 8:
                bits -= 8
                out.append(acc >> bits & 0xFF)
        if (bits and acc & ((1 << bits) - 1)) or len(out) != 32:
            return None
        key = int.from_bytes(out, "big")
    else:
        try:
            blob = bytes.fromhex(raw)
        except ValueError:
            return None
        if len(blob) != 32:
            return None
        key = int.from_bytes(blob, "big")
    return key if 1 <= key < _N else None


@functools.lru_cache(maxsize=256)
def public_key(private_key: str) -> str | None:
    """The x-only public key (64 lowercase hex digits) of ``private_key``, or None when it is no valid key."""
    d = _secret(private_key)
    if d is None:
        return None
    result: _Jacobian = (0, 1, 0)
    addend: _Jacobian = (_G[0], _G[1], 1)
    while d:
        if d & 1:
            result = _add(result, addend)
        addend = _double(addend)
        d >>= 1
    x, _y, z = result
    zinv = pow(z, _P - 2, _P)
    return (x * zinv * zinv % _P).to_bytes(32, "big").hex()
