"""The one place the file backend turns an OS error into a journald error
(docs/design.md#disk-faults).

Every blocking call of the file store, its journals and its checkpoint and attachment stores
runs through ``disk_error`` when it fails, so a client sees one of three codes, each saying
what to do, never ``internal``:

* ``storage_full``: ``ENOSPC`` (no space, or no inodes left), ``EDQUOT``; free space and retry;
* ``store_corrupted``: the file system reports the data bad (``EUCLEAN``, ``EBADMSG``), or a
  run's file is not the kind of file it must be (``EISDIR``, ``ENOTDIR`` below an existing
  data directory); restore or recover the run;
* ``backend_unavailable``: anything else, which waiting or the operator can fix: a read-only
  file system (``EROFS``), permissions (``EACCES``, ``EPERM``), an I/O error the data is not
  known bad for (``EIO``), a descriptor limit (``EMFILE``, ``ENFILE``), and the data
  directory itself gone (``ENOENT`` of it: deleted or unmounted under the daemon).

The clients retry ``backend_unavailable`` (Python: in place and on open), so an agent waits
out a disk the operator is fixing instead of failing at once.
"""

from __future__ import annotations

import errno
import os
import resource

from journald.core.errors import BackendUnavailable, JournaldError, StorageFull, StoreCorrupted

FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
BAD_DATA = frozenset({errno.EUCLEAN, errno.EBADMSG})
WRONG_KIND = frozenset({errno.EISDIR, errno.ENOTDIR})
GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ESTALE})


def fds_exhausted(exc: OSError, run_id: str) -> BackendUnavailable | None:
    """The error an open that ran out of file descriptors answers (None for any other
    error): which limit was reached and how to get under it."""
    if exc.errno == errno.EMFILE:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        what = f"its limit of {soft} open files (RLIMIT_NOFILE; hard limit {hard})"
        fix = "raise the daemon's limit (LimitNOFILE= in its systemd unit, or `ulimit -n`"
        fix += " before `journald serve`) and restart it"
    elif exc.errno == errno.ENFILE:
        soft = -1
        what = "the system's limit of open files (fs.file-max)"
        fix = "raise fs.file-max or stop what else holds files on this host"
    else:
        return None
    return BackendUnavailable(
        f"run {run_id}: cannot open the run: the daemon has reached {what}; every open "
        f"lease holds two. Nothing was opened or changed. End leases that are idle, or {fix}",
        metadata={
            "run_id": run_id,
            "errno": errno.errorcode[exc.errno],
            **({"limit": str(soft)} if soft >= 0 else {}),
        },
    )


def errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "EIO")


def data_dir_gone(root: str) -> bool:
    """Whether ``root`` (the data directory's runs, or a checkpoint root) no longer exists."""
    return not os.path.isdir(root)


def vanished(root: str, run_id: str = "", path: str = "") -> BackendUnavailable:
    """The error of every call once the data directory is gone (deleted, moved or unmounted
    while the daemon ran): nothing is written into files nobody can reach."""
    where = f"run {run_id}: " if run_id else ""
    return BackendUnavailable(
        f"{where}the data directory {os.path.dirname(root) or root} is gone (deleted, moved or "
        "unmounted while the daemon ran); nothing was written or acknowledged. Restore it (or "
        "mount it again) and restart the daemon",
        metadata={
            "run_id": run_id,
            "errno": "ENOENT",
            "path": path or root,
            "data_dir": os.path.dirname(root) or root,
        },
    )


def disk_error(
    exc: OSError,
    *,
    root: str,
    run_id: str = "",
    path: str = "",
    action: str = "",
    retry: str = "",
    seq: int = 0,
) -> JournaldError:
    """The journald error for ``exc`` met while doing ``action`` (``"writing X"``, ``"listing
    the runs"``) on ``path``; ``root`` is the directory whose absence means the data directory
    is gone; ``retry`` what to retry once the disk is fixed (default: the call)."""
    limit = fds_exhausted(exc, run_id or "?")
    if limit is not None:
        return limit
    name = errno_name(exc)
    where = path or str(exc.filename or root)
    meta: dict[str, object] = {"errno": name, "path": where}
    if run_id:
        meta["run_id"] = run_id
    if seq:
        meta["seq"] = seq
    subject = f"run {run_id}: " if run_id else ""
    action = action or f"accessing {where}"
    retry = retry or "the call"
    if exc.errno in FULL:
        what = "quota is used up" if exc.errno == errno.EDQUOT else "disk is full (space or inodes)"
        return StorageFull(
            f"{subject}{action} failed: the {what} ({name}); nothing was written. Free space "
            f"(or inodes) on the disk holding {where}, then retry {retry}",
            metadata=meta,
        )
    if exc.errno in GONE and data_dir_gone(root):
        return vanished(root, run_id, where)
    if exc.errno in BAD_DATA or exc.errno in WRONG_KIND:
        return StoreCorrupted(
            f"{subject}{action} failed: the file system reports {where} damaged or not the "
            f"file it should be ({name}: {exc.strerror}); nothing was changed. Restore the "
            f"run from a backup, or move the damage out with `journald recover {run_id}`",
            metadata={**meta, "file": where, "reason": name},
        )
    hint = {
        errno.EROFS: "the file system is read-only: remount it read-write",
        errno.EACCES: "the daemon may not use it: fix its owner or mode",
        errno.EPERM: "the daemon may not use it: fix its owner, mode or attributes",
    }.get(exc.errno or 0, "check the disk (dmesg)")
    return BackendUnavailable(
        f"{subject}{action} failed ({name}: {exc.strerror}); nothing was acknowledged. "
        f"{hint[0].upper()}{hint[1:]}, then retry {retry}",
        metadata=meta,
    )


def storage_error(
    exc: OSError, run_id: str, where: str, seq: int, retry: str = "", *, root: str
) -> JournaldError:
    """``disk_error`` of a write of ``where`` (``retry``: what to retry once the disk is
    fixed; the append at ``seq`` by default)."""
    return disk_error(
        exc,
        root=root,
        run_id=run_id,
        path=where,
        action=f"writing {where}",
        retry=retry or f"the append at seq {seq}",
        seq=seq,
    )
