"""When the webhook's serving certificate expires: `notAfter` of the first certificate of a PEM file.

The stdlib's `ssl` loads a certificate chain into a context but does not say when the server's own
certificate expires, and the image carries no X.509 library; the few DER steps from the certificate to its
validity are walked here (RFC 5280: Certificate -> tbsCertificate -> [version], serialNumber, signature,
issuer, validity -> notBefore, notAfter).
"""

from __future__ import annotations

import base64
import calendar
import re
from pathlib import Path
from typing import Final

_PEM: Final = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.DOTALL)
_SEQUENCE: Final = 0x30
_EXPLICIT_VERSION: Final = 0xA0
_UTC_TIME: Final = 0x17
_GENERALIZED_TIME: Final = 0x18


class CertificateError(ValueError):
    """The file holds no certificate this reader can take apart."""


def not_after(pem_file: Path) -> float:
    """The first certificate's `notAfter`, as seconds since the epoch. Raises OSError or CertificateError."""
    found = _PEM.search(pem_file.read_bytes())
    if found is None:
        raise CertificateError(f"{pem_file}: no PEM certificate")
    try:
        der = base64.b64decode(b"".join(found.group(1).split()), validate=True)
        certificate, _ = _element(der, 0, _SEQUENCE)
        tbs, _ = _element(der, certificate, _SEQUENCE)
        position = tbs
        if der[position] == _EXPLICIT_VERSION:
            position = _skip(der, position)
        for _ in range(3):  # serialNumber, signature, issuer
            position = _skip(der, position)
        validity, _ = _element(der, position, _SEQUENCE)
        after = _skip(der, validity)  # notBefore
        tag = der[after]
        start, end = _element(der, after, tag)
        return _time(tag, der[start:end].decode("ascii"))
    except (IndexError, ValueError, UnicodeDecodeError) as err:
        raise CertificateError(f"{pem_file}: not an X.509 certificate this reader takes apart ({err})") \
            from None


def _element(der: bytes, position: int, tag: int) -> tuple[int, int]:
    """Where the content of the element at `position`, of `tag`, starts and ends."""
    if der[position] != tag:
        raise ValueError(f"tag {der[position]:#x} at {position}, expected {tag:#x}")
    length = der[position + 1]
    start = position + 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(der[start:start + count], "big")
        start += count
    return start, start + length


def _skip(der: bytes, position: int) -> int:
    """The position after the element at `position`, whatever its tag."""
    return _element(der, position, der[position])[1]


def _time(tag: int, text: str) -> float:
    """UTCTime (`YYMMDDHHMMSSZ`, years 1950-2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`)."""
    if not text.endswith("Z"):
        raise ValueError(f"time {text!r} is not in UTC")
    if tag == _UTC_TIME:
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    elif tag != _GENERALIZED_TIME:
        raise ValueError(f"tag {tag:#x} is no time")
    fields = (int(text[0:4]), int(text[4:6]), int(text[6:8]), int(text[8:10]), int(text[10:12]),
              int(text[12:14]))
    return float(calendar.timegm(fields))
