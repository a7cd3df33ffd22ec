"""The systemd units in deploy/systemd/: parsed here (sections, keys, and the ExecStart command
line parsed by journald's own argument parser), and verified with ``systemd-analyze verify``
where that tool is installed (it is skipped, not failed, on a machine without systemd; the
parse checks always run). For verification the ExecStart binary is pointed at this
checkout's ``journald`` script, since systemd refuses a unit whose command does not exist.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from journald.program import build_parser

ROOT = Path(__file__).resolve().parents[3]
USER_UNIT = ROOT / "deploy" / "systemd" / "user" / "journald.service"
SYSTEM_UNIT = ROOT / "deploy" / "systemd" / "system" / "journald.service"
SYSUSERS = ROOT / "deploy" / "systemd" / "system" / "journald.sysusers"
NETWORK_DROPIN = (
    ROOT / "deploy" / "systemd" / "system" / "journald.service.d" / "network.conf.example"
)

Unit = dict[str, dict[str, list[str]]]


def parse_unit(path: Path) -> Unit:
    """A systemd unit as {section: {key: [values in order]}} (keys may repeat)."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    for n, raw in enumerate(path.read_text("utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        assert not line.endswith("\\"), f"{path.name}:{n}: keep each setting on one line"
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"{path.name}:{n}: setting outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}:{n}: not a key=value line: {line!r}"
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


def one(unit: Unit, section: str, key: str) -> str:
    values = unit[section][key]
    assert len(values) == 1, f"[{section}] {key} is set {len(values)} times"
    return values[0]


def serve_args(exec_start: str) -> list[str]:
    argv = shlex.split(exec_start)
    assert Path(argv[0]).name == "journald", argv
    assert argv[1] == "serve", argv
    return argv[1:]


def test_the_user_unit_serves_on_the_runtime_dir_socket_with_data_in_the_state_dir() -> None:
    unit = parse_unit(USER_UNIT)
    assert set(unit) == {"Unit", "Service", "Install"}
    assert one(unit, "Unit", "Description")
    args = build_parser().parse_args(serve_args(one(unit, "Service", "ExecStart")))
    assert str(args.socket) == "%t/journald/journald.sock"
    assert str(args.data_dir) == "%S/journald"
    assert one(unit, "Service", "RuntimeDirectory") == "journald"
    assert one(unit, "Service", "StateDirectory") == "journald"
    assert one(unit, "Service", "RuntimeDirectoryMode") == "0700"
    assert one(unit, "Service", "KillSignal") == "SIGTERM"
    assert one(unit, "Install", "WantedBy") == "default.target"


def test_the_system_unit_is_hardened_and_names_socket_and_data_dir_explicitly() -> None:
    unit = parse_unit(SYSTEM_UNIT)
    service = unit["Service"]
    args = build_parser().parse_args(serve_args(one(unit, "Service", "ExecStart")))
    assert str(args.socket) == "/run/journald/journald.sock"
    assert str(args.data_dir) == "/var/lib/journald"
    assert args.socket_group == "journald"
    assert one(unit, "Service", "RuntimeDirectory") == Path(str(args.socket)).parent.name
    assert f"/var/lib/{one(unit, 'Service', 'StateDirectory')}" == str(args.data_dir)
    assert one(unit, "Service", "User") not in ("", "root")
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "RestrictAddressFamilies": "AF_UNIX",
        "RestrictSUIDSGID": "yes",
        "CapabilityBoundingSet": "",
        "UMask": "0077",
        "StateDirectoryMode": "0700",
    }
    assert {k: one(unit, "Service", k) for k in expected} == expected
    assert "ReadWritePaths" not in service  # StateDirectory/RuntimeDirectory are enough
    assert one(unit, "Install", "WantedBy") == "multi-user.target"


@pytest.mark.parametrize("path", [USER_UNIT, SYSTEM_UNIT], ids=["user", "system"])
def test_a_refused_start_is_not_retried_but_an_unreachable_nats_is(path: Path) -> None:
    from journald.server.startup import EXIT_BACKEND_UNREACHABLE, EXIT_CONFIG, EXIT_HELD

    unit = parse_unit(path)
    assert one(unit, "Service", "Restart") == "on-failure"
    prevented = one(unit, "Service", "RestartPreventExitStatus").split()
    assert sorted(prevented) == sorted([str(EXIT_CONFIG), str(EXIT_HELD)])
    assert str(EXIT_BACKEND_UNREACHABLE) not in prevented


def test_the_network_drop_in_only_widens_the_address_families() -> None:
    unit = parse_unit(NETWORK_DROPIN)
    families = one(unit, "Service", "RestrictAddressFamilies").split()
    assert families == ["AF_UNIX", "AF_INET", "AF_INET6"]


def test_the_sysusers_entry_creates_the_service_user() -> None:
    lines = [
        ln for ln in SYSUSERS.read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    fields = shlex.split(lines[0])
    assert fields[:2] == ["u", one(parse_unit(SYSTEM_UNIT), "Service", "User")]


def _with_local_binary(src: Path, dest: Path, binary: str) -> Path:
    text = src.read_text()
    for placeholder in ("%h/.local/bin/journald", "/usr/local/bin/journald"):
        text = text.replace(placeholder, binary)
    dest.write_text(text)
    return dest


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd is not installed")
@pytest.mark.parametrize(("unit", "user"), [(SYSTEM_UNIT, False), (USER_UNIT, True)])
def test_systemd_analyze_verifies_the_unit(unit: Path, user: bool, tmp_path: Path) -> None:
    binary = Path(sys.executable).parent / "journald"
    if not binary.exists():
        pytest.skip("no installed journald script to stand in for the ExecStart binary")
    copy = _with_local_binary(unit, tmp_path / "journald.service", str(binary))
    cmd = ["systemd-analyze", *(["--user"] if user else []), "verify", str(copy)]
    env = {"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(tmp_path), "HOME": str(tmp_path)}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert res.returncode == 0, res.stderr + res.stdout
    # verify exits 0 on unknown keys and unparsable values, printing "…, ignoring": any line
    # naming the unit is such a complaint
    complaints = [ln for ln in (res.stderr + res.stdout).splitlines() if copy.name in ln]
    assert complaints == []
