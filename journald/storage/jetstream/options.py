"""How journald connects to NATS: one ``NatsOptions`` from the command line (or a caller) to
``JetStreamStore.connect`` (credentials, TLS, the writer's name, monitoring endpoints).

Secrets never come from flags (a flag is visible in ``ps``): the password is read from
``$JOURNALD_NATS_PASSWORD`` and a token from ``$JOURNALD_NATS_TOKEN`` (``from_env``).
``check`` refuses a combination that cannot work (a key without its certificate, a ``.creds``
file without both of its sections, an unreadable file) with ``NatsOptionsError`` before any
connection is tried: nats-py would otherwise fail late, or (a ``.creds`` file without a JWT
section) read it forever.
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from journald.storage.jetstream.config import Cli

PASSWORD_ENV = "JOURNALD_NATS_PASSWORD"
TOKEN_ENV = "JOURNALD_NATS_TOKEN"
CREDS_SECTIONS = ("BEGIN NATS USER JWT", "BEGIN USER NKEY SEED")


class NatsOptionsError(ValueError):
    """NATS connection options that cannot work; the message says which and what to do."""


def default_writer_name() -> str:
    return f"journald {socket.gethostname()} pid {os.getpid()}"


@dataclass(frozen=True, slots=True)
class NatsOptions:
    creds_path: str | None = None
    """A ``.creds`` file (user JWT and nkey seed) for decentralised (operator) auth."""
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    tls_ca_path: str | None = None
    """CA bundle that verifies the server (else the system trust store, for ``tls://``)."""
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    writer: str | None = None
    """This store's name on every record it writes (header ``Journald-Writer``) and as its
    NATS connection name: a stale writer's ``locked`` names it. Default ``default_writer_name``."""
    monitor_urls: tuple[str, ...] = ()
    """nats-server monitoring endpoints (``http://host:8222``) read at start-up to check that
    every server fsyncs each write (``/varz``)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **fields: Any) -> NatsOptions:
        """Options from ``fields`` (flags) plus the secrets in the environment."""
        env = os.environ if env is None else env
        if fields.get("user") and PASSWORD_ENV in env:
            fields.setdefault("password", env[PASSWORD_ENV])
        if env.get(TOKEN_ENV):
            fields.setdefault("token", env[TOKEN_ENV])
        for key in ("creds_path", "tls_ca_path", "tls_cert_path", "tls_key_path"):
            if fields.get(key):
                fields[key] = os.path.abspath(fields[key])
        return cls(**fields)

    @property
    def writer_name(self) -> str:
        return self.writer or default_writer_name()

    def check(self) -> None:
        """Refuse options that cannot work, before any connection is tried."""
        if self.user and self.password is None:
            raise NatsOptionsError(
                f"--nats-user {self.user} is set but ${PASSWORD_ENV} is not; export the "
                "password in that variable (never on the command line)"
            )
        given = [n for n, v in (("a token", self.token), ("a user", self.user)) if v]
        if self.creds_path:
            given.append("a .creds file")
        if len(given) > 1:
            raise NatsOptionsError(
                f"NATS credentials conflict: {' and '.join(given)} are both set; give exactly "
                f"one (--nats-creds, --nats-user with ${PASSWORD_ENV}, or ${TOKEN_ENV})"
            )
        if bool(self.tls_cert_path) != bool(self.tls_key_path):
            raise NatsOptionsError(
                "--nats-tls-cert and --nats-tls-key go together (the client certificate and "
                "its private key for mutual TLS); give both or neither"
            )
        for flag, path in (
            ("--nats-creds", self.creds_path),
            ("--nats-tls-ca", self.tls_ca_path),
            ("--nats-tls-cert", self.tls_cert_path),
            ("--nats-tls-key", self.tls_key_path),
        ):
            if path is not None:
                _readable(flag, path)
        if self.creds_path:
            with open(self.creds_path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            missing = [s for s in CREDS_SECTIONS if s not in text]
            if missing:
                raise NatsOptionsError(
                    f"--nats-creds {self.creds_path} is not a NATS .creds file (no "
                    f"{' / '.join(missing)} section); generate one with `nsc generate creds` "
                    "or `nats auth user credential`"
                )
        for url in self.monitor_urls:
            if not url.startswith(("http://", "https://")):
                raise NatsOptionsError(
                    f"--nats-monitor-url {url!r} is not an http(s) URL; give the server's "
                    "monitoring endpoint, e.g. http://127.0.0.1:8222"
                )
        self.tls_context()  # the files load and belong together

    def tls_context(self) -> ssl.SSLContext | None:
        if not (self.tls_ca_path or self.tls_cert_path):
            return None
        try:
            ctx = ssl.create_default_context(cafile=self.tls_ca_path)
            if self.tls_cert_path:
                ctx.load_cert_chain(self.tls_cert_path, self.tls_key_path)
        except (ssl.SSLError, OSError) as exc:
            raise NatsOptionsError(
                f"cannot load the NATS TLS files (--nats-tls-ca {self.tls_ca_path}, "
                f"--nats-tls-cert {self.tls_cert_path}, --nats-tls-key {self.tls_key_path}): "
                f"{exc}; give PEM files (the key unencrypted) that belong together"
            ) from None
        return ctx

    def connect_kwargs(self) -> dict[str, Any]:
        """The ``nats.connect`` options these stand for (after ``check``)."""
        self.check()
        opts: dict[str, Any] = {"name": self.writer_name}
        if self.creds_path:
            opts["user_credentials"] = self.creds_path
        if self.user:
            opts["user"] = self.user
            opts["password"] = self.password or ""
        if self.token:
            opts["token"] = self.token
        ctx = self.tls_context()
        if ctx is not None:
            opts["tls"] = ctx
        return opts

    def cli(self, url: str) -> Cli:
        """The same connection as shell flags, for printed fixes (secrets stay in the
        environment: natscli reads ``$NATS_PASSWORD``/``$NATS_TOKEN``)."""
        natscli: list[str] = []
        journald: list[str] = []
        for ours, theirs, value in (
            ("--nats-creds", "--creds", self.creds_path),
            ("--nats-user", "--user", self.user),
            ("--nats-tls-ca", "--tlsca", self.tls_ca_path),
            ("--nats-tls-cert", "--tlscert", self.tls_cert_path),
            ("--nats-tls-key", "--tlskey", self.tls_key_path),
        ):
            if value:
                natscli += [theirs, value]
                journald += [ours, value]
        secrets = [
            f"${env} for the {what}"
            for env, what, given in (
                ("NATS_PASSWORD", "password", self.user),
                ("NATS_TOKEN", "token", self.token),
            )
            if given
        ]
        note = f"(the nats CLI reads {' and '.join(secrets)})" if secrets else ""
        return Cli(url, tuple(natscli), tuple(journald), note)


def _readable(flag: str, path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise NatsOptionsError(
            f"{flag} {path}: {exc.strerror or exc}; give a readable file"
        ) from None
