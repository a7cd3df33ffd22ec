"""Attachments: binary tool output stored once per run by SHA-256, referenced from records,
kept by checkpoints and forks, inlined by export and verified by import."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import grpc
import pytest
from journald_client.pb import journal_pb2 as pb

from journald.core.checkpoints import verify_export
from journald.core.errors import CheckpointImportInvalid
from journald.core.records import canonical_json, sha256_hex
from journald.core.schema import validate_payload
from tests.builders import TS, text
from tests.daemon import Daemon
from tests.integration.rpc import Lease, blocks, error_of, stub, until_unlocked

PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(3000) + bytes(range(256))


def rehash(data: bytes, edit: Any) -> bytes:
    """Apply ``edit`` to an export's body and recompute every hash (a careful forger)."""
    obj = json.loads(data)
    body = obj["body"]
    edit(body)
    body["meta_sha256"] = sha256_hex(canonical_json(body["meta"]))
    obj["sha256"] = sha256_hex(canonical_json(body))
    return canonical_json(obj)


def test_attachments_are_stored_once_referenced_and_travel_with_checkpoints(
    tmp_path: Path,
) -> None:
    with Daemon(tmp_path, "file") as d:
        s = stub(d.target)
        lease = Lease(s, "att-src")
        put = s.PutAttachment(
            pb.PutAttachmentRequest(
                run_id="att-src", data=PNG, media_type="image/png", name="a.png"
            )
        )
        assert put.sha256 == hashlib.sha256(PNG).hexdigest()
        assert put.existed is False
        again = s.PutAttachment(
            pb.PutAttachmentRequest(run_id="att-src", data=PNG, media_type="image/png")
        )
        assert again.existed is True
        path = d.data_dir / "sessions" / "att-src" / "attachments" / put.sha256
        assert path.read_bytes() == PNG
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        block = json.loads(put.block_json)
        assert block == {
            "type": "attachment",
            "sha256": put.sha256,
            "media_type": "image/png",
            "size": len(PNG),
            "name": "a.png",
        }
        lease.append(lease.assistant("shot"))
        lease.append(
            pb.Record(
                seq=lease.next_seq(),
                ts=TS,
                tool_result=pb.ToolResultPayload(
                    tool_use_id="shot", content_json=blocks(text("screenshot"), block)
                ),
            )
        )
        lease.append(lease.assistant())
        stored = [r.record.canonical for r in s.Load(pb.LoadRequest(run_id="att-src"))]
        assert not any(base64.b64encode(PNG[:60]) in raw for raw in stored)  # referenced
        got = s.GetAttachment(pb.GetAttachmentRequest(run_id="att-src", sha256=put.sha256))
        assert got.data == PNG

        mark = s.Checkpoint(pb.CheckpointRequest(run_id="att-src")).checkpoint
        expected = s.Fold(pb.FoldRequest(run_id="att-src")).state.messages
        lease.close()
        data = until_unlocked(
            lambda: s.ExportCheckpoint(
                pb.ExportCheckpointRequest(run_id="att-src", checkpoint_id=mark.checkpoint_id)
            )
        ).data
        body = json.loads(data)["body"]
        assert [a["sha256"] for a in body["attachments"]] == [put.sha256]
        assert base64.b64decode(body["attachments"][0]["data_base64"]) == PNG

        # import into another run: the bytes come along, the conversation restores
        dst = Lease(s, "att-dst", prompt="elsewhere")
        missing = pb.GetAttachmentRequest(run_id="att-dst", sha256=put.sha256)
        with pytest.raises(grpc.RpcError) as info:
            s.GetAttachment(missing)
        assert error_of(info.value).code == "attachment_not_found"
        cp = s.ImportCheckpoint(pb.ImportCheckpointRequest(run_id="att-dst", data=data)).checkpoint
        assert s.GetAttachment(missing).data == PNG
        s.Restore(
            pb.RestoreRequest(
                run_id="att-dst", checkpoint_id=cp.checkpoint_id, lease_id=dst.lease.lease_id
            )
        )
        assert s.Fold(pb.FoldRequest(run_id="att-dst")).state.messages == expected
        dst.close()

        # a fork holds what its conversation references
        fork = s.Fork(pb.ForkRequest(run_id="att-src", new_run_id="att-fork"))
        assert fork.state.messages == expected
        got = s.GetAttachment(pb.GetAttachmentRequest(run_id="att-fork", sha256=put.sha256))
        assert got.data == PNG

        # a forger who re-hashes everything still cannot swap, drop or add attachment bytes
        other = b"not the screenshot"

        def swap(b: dict[str, Any]) -> None:
            b["attachments"][0]["data_base64"] = base64.b64encode(other).decode()
            b["attachments"][0]["size"] = len(other)

        def drop(b: dict[str, Any]) -> None:
            b["attachments"] = []

        def extra(b: dict[str, Any]) -> None:
            b["attachments"].append(
                {
                    "sha256": sha256_hex(other),
                    "size": len(other),
                    "data_base64": base64.b64encode(other).decode(),
                }
            )
            b["attachments"].sort(key=lambda a: a["sha256"])

        before = [
            c.checkpoint_id
            for c in s.ListCheckpoints(pb.ListCheckpointsRequest(run_id="att-dst")).checkpoints
        ]
        for edit in (swap, drop, extra):
            bad = rehash(data, edit)
            with pytest.raises(CheckpointImportInvalid):
                verify_export(bad, validate_payload)
            with pytest.raises(grpc.RpcError) as info:
                s.ImportCheckpoint(pb.ImportCheckpointRequest(run_id="att-dst", data=bad))
            assert error_of(info.value).code == "checkpoint_import_invalid"
        after = [
            c.checkpoint_id
            for c in s.ListCheckpoints(pb.ListCheckpointsRequest(run_id="att-dst")).checkpoints
        ]
        assert after == before
        assert not (
            d.data_dir / "sessions" / "att-dst" / "attachments" / sha256_hex(other)
        ).exists()
