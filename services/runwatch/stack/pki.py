"""The secured stack's certificates: a local CA and the broker's certificate.

Generated on first use under ``<state>/secure/tls`` (``runwatch stack up
--secure``) with Python's ``cryptography``; the private keys are written with
mode 0600 and never leave the state directory. The broker certificate names
``localhost`` and the stack's host so that clients verify the hostname
(librdkafka does by default); it also serves as the broker's client
certificate on the mutual-TLS controller listener.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

#: Subject common name of the broker certificate; its principal is ``User:CN=<this>``.
BROKER_CN = "runwatch-broker"
CA_CN = "runwatch local CA"
_VALID_DAYS = 825


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the generated TLS material lives.

    Attributes:
        ca_cert: The CA certificate (PEM), what clients trust (``KAFKA_SSL_CA_LOCATION``).
        ca_key: The CA private key (PEM, 0600).
        broker_pem: The broker's key and certificate chain in one PEM file (0600),
            the broker's keystore.
    """

    ca_cert: Path
    ca_key: Path
    broker_pem: Path

    @classmethod
    def under(cls, folder: Path) -> TlsFiles:
        """Return the file layout under a folder."""
        return cls(folder / "ca.pem", folder / "ca.key", folder / "broker.pem")

    def exist(self) -> bool:
        """Whether every file is there."""
        return all(p.is_file() for p in (self.ca_cert, self.ca_key, self.broker_pem))


def write_private(path: Path, data: bytes) -> None:
    """Write a file readable by its owner only (mode 0600, also when it existed).

    Args:
        path: The file.
        data: Its content.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(path, 0o600)


def ensure_tls(folder: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """Generate the CA and the broker certificate unless they exist.

    Args:
        folder: Where to keep them (``<state>/secure/tls``).
        hosts: Names and addresses the broker certificate is valid for.

    Returns:
        The files.
    """
    files = TlsFiles.under(folder)
    if files.exist():
        return files
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=_VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_CN)])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in dict.fromkeys((*hosts, "localhost")):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, BROKER_CN)]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pkcs8 = serialization.PrivateFormat.PKCS8
    plain = serialization.NoEncryption()
    pem = serialization.Encoding.PEM
    write_private(files.ca_key, ca_key.private_bytes(pem, pkcs8, plain))
    write_private(files.broker_pem, key.private_bytes(pem, pkcs8, plain)
                  + cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    files.ca_cert.write_bytes(ca_cert.public_bytes(pem))  # public: what clients trust
    return files
