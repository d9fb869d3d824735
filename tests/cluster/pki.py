"""Certificates and keys of the test cluster, as kubeadm lays them out (one CA, one key each).

ECDSA P-256 throughout (the API server, the controllers and the kubelet accept it), so a cold
start spends milliseconds here. Identities are the ones Kubernetes' RBAC bootstrap policy names:
``system:kube-controller-manager``, ``system:kube-scheduler``, ``system:node:<name>`` in
``system:nodes``, and an administrator in ``system:masters``.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=2)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


class PKI:
    """A CA in ``folder`` that signs serving and client certificates into the same folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(_name("kubegpu-test-cluster-ca"))
            .issuer_name(_name("kubegpu-test-cluster-ca"))
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca = Pair(folder / "ca.crt", folder / "ca.key")
        self.ca.cert.write_bytes(self._ca_cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self.ca.key, self._ca_key)

    def issue(
        self,
        stem: str,
        common_name: str,
        organization: str | None = None,
        *,
        server: bool = False,
        client: bool = False,
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        pair = Pair(self.folder / f"{stem}.crt", self.folder / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, key)
        return pair

    def service_account_keys(self) -> Pair:
        """The key pair the API server signs service-account tokens with (sa.pub, sa.key)."""
        key = ec.generate_private_key(ec.SECP256R1())
        pair = Pair(self.folder / "sa.pub", self.folder / "sa.key")
        pair.cert.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        _write_key(pair.key, key)
        return pair
