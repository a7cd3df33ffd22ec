"""Credentials and TLS material for tests of a nats-server that requires them.

Everything is generated in the test's own directory, offline:

- ``token_config`` / ``password_config``: the ``authorization`` block of a server that
  requires a token, or a user and password.
- ``OperatorSetup``: decentralised (JWT) auth. An operator, a system account and an
  application account with JetStream enabled, each an nkey made with the ``nkeys`` package
  (the one nats-py signs its connect nonce with) and a JWT signed here; a user of the
  application account written as a ``.creds`` file; the server config preloads the account
  JWTs into its memory resolver.
- ``TlsFiles``: a self-signed CA, a server certificate for 127.0.0.1 and a client certificate,
  made with ``cryptography``; ``tls_config`` is the server's ``tls`` block (``verify`` asks
  for a client certificate).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys


def token_config(token: str) -> list[str]:
    return ["authorization {", f'  token: "{token}"', "}"]


def password_config(user: str, password: str) -> list[str]:
    return ["authorization {", f'  user: "{user}"', f'  password: "{password}"', "}"]


# --- JWT (decentralised) auth -------------------------------------------------------------


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class Key:
    """An nkey pair of one role (operator, account or user)."""

    def __init__(self, prefix: int) -> None:
        self.seed = nkeys.encode_seed(os.urandom(32), prefix)
        self.pair = nkeys.from_seed(bytearray(self.seed))
        self.public = self.pair.public_key.decode()


def sign_jwt(issuer: Key, subject: str, name: str, nats_claims: dict[str, Any]) -> str:
    """A NATS JWT (``alg: ed25519-nkey``) for ``subject``, signed by ``issuer``."""
    claims: dict[str, Any] = {
        "jti": "",
        "iat": int(time.time()),
        "iss": issuer.public,
        "name": name,
        "sub": subject,
        "nats": {**nats_claims, "version": 2},
    }
    digest = hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    head = _b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64url(json.dumps(claims).encode())
    signature = issuer.pair.sign(f"{head}.{body}".encode())
    return f"{head}.{body}.{_b64url(signature)}"


UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1}


class OperatorSetup:
    """An operator with a system account and one JetStream-enabled account ``APP``."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.operator = Key(nkeys.PREFIX_BYTE_OPERATOR)
        self.system = Key(nkeys.PREFIX_BYTE_ACCOUNT)
        self.account = Key(nkeys.PREFIX_BYTE_ACCOUNT)
        self.user = Key(nkeys.PREFIX_BYTE_USER)
        limits = {**UNLIMITED, "wildcards": True, "conn": -1, "leaf": -1}
        self.operator_jwt = sign_jwt(
            self.operator,
            self.operator.public,
            "test-operator",
            {"type": "operator", "system_account": self.system.public},
        )
        self.system_jwt = sign_jwt(
            self.operator, self.system.public, "SYS", {"type": "account", "limits": limits}
        )
        js = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
        self.account_jwt = sign_jwt(
            self.operator,
            self.account.public,
            "APP",
            {"type": "account", "limits": {**limits, **js}},
        )
        user_jwt = sign_jwt(
            self.account,
            self.user.public,
            "journald",
            {"type": "user", "pub": {}, "sub": {}, **UNLIMITED},
        )
        self.operator_path = workdir / "operator.jwt"
        self.operator_path.write_text(self.operator_jwt)
        self.creds_path = workdir / "journald.creds"
        self.creds_path.write_text(
            "-----BEGIN NATS USER JWT-----\n"
            f"{user_jwt}\n"
            "------END NATS USER JWT------\n\n"
            "-----BEGIN USER NKEY SEED-----\n"
            f"{self.user.seed.decode()}\n"
            "------END USER NKEY SEED------\n"
        )
        self.creds_path.chmod(0o600)

    def server_config(self) -> list[str]:
        return [
            f'operator: "{self.operator_path}"',
            f'system_account: "{self.system.public}"',
            "resolver: MEMORY",
            "resolver_preload: {",
            f'  {self.system.public}: "{self.system_jwt}"',
            f'  {self.account.public}: "{self.account_jwt}"',
            "}",
        ]


# --- TLS ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def server_config(self, verify_clients: bool) -> list[str]:
        return [
            "tls {",
            f'  cert_file: "{self.server_cert}"',
            f'  key_file: "{self.server_key}"',
            f'  ca_file: "{self.ca}"',
            f"  verify: {'true' if verify_clients else 'false'}",
            "  timeout: 5",
            "}",
        ]


def make_tls(workdir: Path) -> TlsFiles:
    """A CA and two certificates it signed: the server's (for 127.0.0.1) and a client's."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    workdir.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        path.chmod(0o600)
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name("journald test CA"))
        .issuer_name(name("journald test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
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
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, usage: x509.ObjectIdentifier) -> tuple[x509.Certificate, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if usage == ExtendedKeyUsageOID.SERVER_AUTH:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
        return builder.sign(ca_key, hashes.SHA256()), key

    pem = serialization.Encoding.PEM
    (workdir / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
    server_cert, server_key = leaf("127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH)
    client_cert, client_key = leaf("journald", ExtendedKeyUsageOID.CLIENT_AUTH)
    (workdir / "server.pem").write_bytes(server_cert.public_bytes(pem))
    (workdir / "client.pem").write_bytes(client_cert.public_bytes(pem))
    return TlsFiles(
        ca=workdir / "ca.pem",
        server_cert=workdir / "server.pem",
        server_key=write_key(server_key, workdir / "server-key.pem"),
        client_cert=workdir / "client.pem",
        client_key=write_key(client_key, workdir / "client-key.pem"),
    )
