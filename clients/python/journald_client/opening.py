"""What ``start`` / ``open`` / ``resume`` ask the daemon for, written once for the four
places that open runs: ``Client``, ``AsyncClient``, ``LeaseSet`` and ``AsyncLeaseSet``.

They differ only in how a lease is then held (an ``Open`` stream per run, or one ``Leases``
stream for many) and whether they await. So the public methods and their arguments live here,
in ``Opener`` (sync) and ``AsyncOpener`` (asyncio), the way ``journald_client.retry`` serves
both transports; each builds an ``Opening`` (the run's ``OpenParams`` and ``OpenRequest``, free
of I/O) and hands it to the class's ``_opened``, which takes the lease its own way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from journald_proto import journal_pb2 as pb

from journald_client import codec
from journald_client.codec import OpenParams
from journald_client.fingerprint import Fingerprint

if TYPE_CHECKING:
    from journald_client.aio import AsyncRun
    from journald_client.client import Run


@dataclass(frozen=True, slots=True)
class Opening:
    """One open asked for: the params a writer keeps for reconnects, the request, and
    whether the ``Run`` reports ``created`` (``start`` and ``open``; a ``resume`` does not)."""

    params: OpenParams
    request: pb.OpenRequest
    fresh: bool


def asked(
    writer: str,
    run_id: str,
    fingerprint: Fingerprint,
    *,
    create: bool | None,
    prompt: str | Sequence[Mapping[str, Any]] = (),
    interactive: bool,
    labels: Mapping[str, str] | None = None,
    force: bool = False,
    name: str | None,
) -> Opening:
    """The open of a ``start`` (``create`` True), an ``open`` (None) or a ``resume`` (False);
    ``writer`` is the client's name, declared unless ``name`` is given."""
    params = OpenParams(run_id, fingerprint, interactive, force, name or writer)
    req = codec.open_request(params, create=create, prompt=prompt, labels=labels)
    return Opening(params, req, fresh=create is not False)


class Opener(ABC):
    """``start`` / ``open`` / ``resume`` of ``Client`` and ``LeaseSet``."""

    @property
    @abstractmethod
    def _writer_name(self) -> str:
        """The name a run's writer declares unless ``name`` is given."""

    @abstractmethod
    def _opened(self, opening: Opening) -> Run:
        """Take the lease ``opening`` asks for (retrying as the client does) and its ``Run``."""

    def start(
        self,
        run_id: str,
        fingerprint: Fingerprint,
        prompt: str | Sequence[Mapping[str, Any]],
        *,
        interactive: bool = False,
        labels: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> Run:
        """Create a run (``session_exists`` if it exists) and hold its writer lease. A daemon
        that is restarting is waited for (``reconnect_timeout``); a create whose reply was
        lost is recognised on the retry and resumed, not refused."""
        return self._opened(
            asked(
                self._writer_name,
                run_id,
                fingerprint,
                create=True,
                prompt=prompt,
                interactive=interactive,
                labels=labels,
                name=name,
            )
        )

    def open(
        self,
        run_id: str,
        fingerprint: Fingerprint,
        prompt: str | Sequence[Mapping[str, Any]] = (),
        *,
        interactive: bool = False,
        labels: Mapping[str, str] | None = None,
        force: bool = False,
        name: str | None = None,
    ) -> Run:
        """Resume the run through the resume gates, or create it (with ``prompt`` and
        ``labels``) when it does not exist; ``Run.created`` says which. The way to open a
        run idempotently: a retry after a lost reply resumes what the first attempt made."""
        return self._opened(
            asked(
                self._writer_name,
                run_id,
                fingerprint,
                create=None,
                prompt=prompt,
                interactive=interactive,
                labels=labels,
                force=force,
                name=name,
            )
        )

    def resume(
        self,
        run_id: str,
        fingerprint: Fingerprint,
        *,
        interactive: bool = False,
        force: bool = False,
        name: str | None = None,
    ) -> Run:
        """Re-open an existing run through the resume gates and hold its writer lease (a
        daemon that is restarting is waited for, up to ``reconnect_timeout``)."""
        return self._opened(
            asked(
                self._writer_name,
                run_id,
                fingerprint,
                create=False,
                interactive=interactive,
                force=force,
                name=name,
            )
        )


class AsyncOpener(ABC):
    """``start`` / ``open`` / ``resume`` of ``AsyncClient`` and ``AsyncLeaseSet``."""

    @property
    @abstractmethod
    def _writer_name(self) -> str:
        """The name a run's writer declares unless ``name`` is given."""

    @abstractmethod
    async def _opened(self, opening: Opening) -> AsyncRun:
        """Take the lease ``opening`` asks for (retrying as the client does) and its run."""

    async def start(
        self,
        run_id: str,
        fingerprint: Fingerprint,
        prompt: str | Sequence[Mapping[str, Any]],
        *,
        interactive: bool = False,
        labels: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> AsyncRun:
        """Create a run (``session_exists`` if it exists) and hold its writer lease; waits
        for a restarting daemon and resumes a create whose reply was lost."""
        return await self._opened(
            asked(
                self._writer_name,
                run_id,
                fingerprint,
                create=True,
                prompt=prompt,
                interactive=interactive,
                labels=labels,
                name=name,
            )
        )

    async def open(
        self,
        run_id: str,
        fingerprint: Fingerprint,
        prompt: str | Sequence[Mapping[str, Any]] = (),
        *,
        interactive: bool = False,
        labels: Mapping[str, str] | None = None,
        force: bool = False,
        name: str | None = None,
    ) -> AsyncRun:
        """Resume the run, or create it when it does not exist (see ``Client.open``)."""
        return await self._opened(
            asked(
                self._writer_name,
                run_id,
                fingerprint,
                create=None,
                prompt=prompt,
                interactive=interactive,
                labels=labels,
                force=force,
                name=name,
            )
        )

    async def resume(
        self,
        run_id: str,
        fingerprint: Fingerprint,
        *,
        interactive: bool = False,
        force: bool = False,
        name: str | None = None,
    ) -> AsyncRun:
        """Re-open an existing run through the resume gates and hold its writer lease (a
        restarting daemon is waited for, up to ``reconnect_timeout``)."""
        return await self._opened(
            asked(
                self._writer_name,
                run_id,
                fingerprint,
                create=False,
                interactive=interactive,
                force=force,
                name=name,
            )
        )
