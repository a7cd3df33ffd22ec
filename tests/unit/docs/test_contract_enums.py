"""The proto's enums are the closed sets every part of journald agrees on.

``ErrorCode`` lists every machine code and, in each value's comment, its gRPC status;
``RunStatus`` lists the words ``List`` returns; ``Durability`` and ``CheckpointTrigger`` name
the words the daemon keeps internally. A word is the value name without the enum's prefix,
in lower case (docs/protocol.md#enum-words). These tests read the generated Python
descriptor and the Go and TypeScript sources as text, so one pytest run checks all three
clients against the contract.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypeVar

import pytest
from journald_client import errors as client_errors
from journald_client.codec import TERMINAL_REASONS
from journald_client.pb import journal_pb2 as pb

from journald.core import errors as daemon_errors
from journald.core.checkpoints import TRIGGERS
from journald.core.schema import schema_document
from journald.server.checkpoint_service import TRIGGER_PB
from journald.server.runs import DURABILITY
from journald.storage.info import status_of
from tests.builders import JournalBuilder, terminal_payload

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[3]
PROTO = ROOT / "proto" / "journald" / "v1" / "journal.proto"
GO_ERRORS = ROOT / "clients" / "go" / "errors.go"
TS_ERRORS = ROOT / "clients" / "ts" / "src" / "errors.ts"
GRPC_STATUSES = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
}


def prefix_of(enum: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum).upper() + "_"


def words(enum: str) -> dict[str, int]:
    """Word -> number for every value of ``enum`` but the zero one."""
    desc = pb.DESCRIPTOR.enum_types_by_name[enum]
    prefix = prefix_of(enum)
    out: dict[str, int] = {}
    for v in desc.values:
        assert v.name.startswith(prefix), f"{v.name} lacks the prefix {prefix}"
        if v.number == 0:
            assert v.name == prefix + "UNSPECIFIED"
            continue
        out[v.name.removeprefix(prefix).lower()] = v.number
    return out


def proto_statuses() -> dict[str, str]:
    """Code word -> the gRPC status named by its value's comment in the proto."""
    text = PROTO.read_text(encoding="utf-8")
    out: dict[str, str] = {}
    for m in re.finditer(
        r"// gRPC ([A-Z_]+): [^\n]*\n(?:\s*//[^\n]*\n)*\s*ERROR_CODE_(\w+) =", text
    ):
        assert m.group(1) in GRPC_STATUSES, m.group(0)
        out[m.group(2).lower()] = m.group(1)
    return out


def go_table() -> dict[str, str]:
    """Go: code word -> gRPC status of its sentinel, for every sentinel Sentinels registers."""
    text = GO_ERRORS.read_text(encoding="utf-8")
    consts = dict(re.findall(r"^\s+(Code\w+)\s+= \"(\w+)\"$", text, re.MULTILINE))
    sentinels = {
        name: (consts[const], re.sub(r"(?<!^)(?=[A-Z])", "_", status).upper())
        for name, const, status in re.findall(
            r"^\s+(Err\w+)\s+= &Error\{Code: (Code\w+), Status: codes\.(\w+)\}$",
            text,
            re.MULTILINE,
        )
    }
    registered = re.search(r"range \[\]\*Error\{(.*?)\}", text, re.DOTALL)
    assert registered is not None, "the Sentinels registration loop was not found"
    names = re.findall(r"Err\w+", registered.group(1))
    assert sorted(names) == sorted(sentinels), "a sentinel is declared but not registered"
    assert len(consts) == len(sentinels), "a Code constant has no sentinel"
    return dict(sentinels.values())


def ts_table() -> set[str]:
    text = TS_ERRORS.read_text(encoding="utf-8")
    block = re.search(r"ERRORS_BY_CODE[^=]*= \{(.*?)\};", text, re.DOTALL)
    assert block is not None, "ERRORS_BY_CODE was not found in errors.ts"
    classes = set(re.findall(r"export class (\w+) extends", text))
    entries = re.findall(r"^\s+(\w+): (\w+),$", block.group(1), re.MULTILINE)
    assert {cls for _, cls in entries} <= classes
    return {code for code, _ in entries}


CODES = words("ErrorCode")


def test_every_error_code_value_names_its_grpc_status() -> None:
    assert set(proto_statuses()) == set(CODES)


def test_the_daemon_error_tree_is_the_enum_with_the_statuses_the_proto_names() -> None:
    daemon = {code: cls.grpc_status for code, cls in daemon_errors.ERRORS_BY_CODE.items()}
    daemon[daemon_errors.JournaldError.code] = daemon_errors.JournaldError.grpc_status
    assert daemon == proto_statuses()


def test_error_classes_have_distinct_codes_in_the_daemon_and_the_python_client() -> None:
    for module in (daemon_errors, client_errors):
        base = module.JournaldError
        leaves = [c for c in _all_subclasses(base) if "code" in c.__dict__]
        codes = [c.code for c in leaves]
        assert len(codes) == len(set(codes)), f"{module.__name__}: a code has two classes"
        assert base.code not in codes


def _all_subclasses(cls: type[T]) -> list[type[T]]:
    out: list[type[T]] = []
    for sub in cls.__subclasses__():
        out += [sub, *_all_subclasses(sub)]
    return out


def test_the_python_client_maps_exactly_the_enum_codes() -> None:
    table = set(client_errors.ERRORS_BY_CODE) | {client_errors.JournaldError.code}
    assert table == set(CODES)


def test_the_go_client_has_one_sentinel_per_enum_code_with_its_status() -> None:
    assert go_table() == proto_statuses()


def test_the_typescript_client_maps_exactly_the_enum_codes() -> None:
    assert ts_table() == set(CODES)


def test_run_status_words_are_open_held_corrupted_and_the_terminal_reasons() -> None:
    schema_reasons = schema_document()["$defs"]["terminal"]["properties"]["reason"]["enum"]
    assert set(TERMINAL_REASONS) == set(schema_reasons)
    assert set(words("RunStatus")) == {"open", "held", "corrupted", *schema_reasons}


@pytest.mark.parametrize("reason", [None, *TERMINAL_REASONS])
def test_the_status_a_listing_derives_from_the_last_record_is_a_run_status_word(
    reason: str | None,
) -> None:
    run = JournalBuilder("r1")
    run.turn(["toolu_1"])
    if reason is not None:
        run.add("terminal", terminal_payload(reason))
    assert status_of(run.records[-1]) in words("RunStatus")


def test_durability_words_map_to_their_enum_values_by_the_naming_rule() -> None:
    assert {w: DURABILITY[w] for w in DURABILITY} == words("Durability")


def test_checkpoint_trigger_words_map_to_their_enum_values_by_the_naming_rule() -> None:
    assert set(TRIGGERS) == set(words("CheckpointTrigger"))
    assert words("CheckpointTrigger") == TRIGGER_PB


def test_the_protocol_page_lists_every_error_code_with_its_status() -> None:
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| `([A-Z_]+)` \|", text, re.MULTILINE))
    assert rows == proto_statuses()
