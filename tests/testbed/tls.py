"""A throw-away certificate authority and the certificates it signs: serving pairs for TLS between the test
bed's stand-in API server and the admission webhook, and the test cluster's (testbed.cluster) serving and
client certificates, whose subject names the Kubernetes user and groups. Keys are EC P-256: quick to make,
and what a cluster issuer would typically hand out."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class ServingFiles:
    cert_file: Path
    key_file: Path


class TestCA:
    """A CA whose certificate (`ca_file`) a client trusts; `issue` writes a serving pair it signs."""

    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, name: str = "nri-podlevel test CA") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = directory / "ca.crt"
        self.ca_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, common_name: str, *, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
              stem: str = "tls") -> ServingFiles:
        """A serving certificate for `hosts` (IP addresses and DNS names) in `<stem>.crt` / `<stem>.key`,
        written key first and each file replaced whole, as a rotating Secret volume would."""
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        return self._issue(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]), stem,
                           ExtendedKeyUsageOID.SERVER_AUTH, names)

    def issue_client(self, user: str, groups: tuple[str, ...] = (), *, stem: str) -> ServingFiles:
        """A client certificate as the API server reads one: the common name is the user, each
        organization a group."""
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
        subject.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
        return self._issue(x509.Name(subject), stem, ExtendedKeyUsageOID.CLIENT_AUTH, [])

    def _issue(self, subject: x509.Name, stem: str, usage: x509.ObjectIdentifier,
               names: list[x509.GeneralName]) -> ServingFiles:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        files = ServingFiles(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        _replace(files.key_file, key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        _replace(files.cert_file, cert.public_bytes(serialization.Encoding.PEM))
        return files


def _replace(path: Path, content: bytes) -> None:
    staging = path.with_suffix(path.suffix + ".new")
    staging.write_bytes(content)
    staging.replace(path)
