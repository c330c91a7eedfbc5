"""webhook.x509: the serving certificate's notAfter, read from its PEM file as the `cryptography` library
reads it, for a UTCTime and a GeneralizedTime validity; a file without a certificate is refused by name."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from podlevel.webhook.x509 import CertificateError, not_after
from testbed.tls import TestCA


def self_signed(path: Path, until: datetime.datetime) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "webhook")])
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC))
                   .not_valid_after(until).sign(key, hashes.SHA256()))
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path


def test_a_serving_certificate_expires_when_cryptography_says(tmp_path: Path) -> None:
    serving = TestCA(tmp_path).issue("nri-podlevel-webhook.nri-podlevel.svc")
    expected = x509.load_pem_x509_certificate(serving.cert_file.read_bytes()).not_valid_after_utc
    assert not_after(serving.cert_file) == expected.timestamp()


@pytest.mark.parametrize("until", [datetime.datetime(2049, 12, 31, 23, 59, 59, tzinfo=datetime.UTC),
                                   datetime.datetime(2050, 1, 1, 0, 0, 1, tzinfo=datetime.UTC)],
                         ids=["UTCTime", "GeneralizedTime"])
def test_both_time_encodings(tmp_path: Path, until: datetime.datetime) -> None:
    assert not_after(self_signed(tmp_path / "tls.crt", until)) == until.timestamp()


def test_a_file_without_a_certificate_is_refused_by_name(tmp_path: Path) -> None:
    key = tmp_path / "tls.key"
    key.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with pytest.raises(CertificateError, match="no PEM certificate"):
        not_after(key)
    broken = tmp_path / "broken.crt"
    broken.write_text("-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n")
    with pytest.raises(CertificateError, match=r"not an X\.509 certificate"):
        not_after(broken)
