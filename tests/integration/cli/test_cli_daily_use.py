"""The CLI's sentences for daily use (issue 28 item 8): a start hint with the socket given, a
directory or file passed as the socket named as such, ``rm`` of several runs, ``history
--limit 0``, ``replay --mode dump`` wrapped under its indent, ``serve --help`` for every
flag, and ``migrate`` without one finished bar per run or a flag it lacks."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

import journald_client as jc

from journald.program import build_parser
from tests.daemon import JOURNALD, Daemon
from tests.integration.cli.test_cli import UNREACHABLE, cli
from tests.integration.view_runs import FP


def test_the_start_hint_names_the_socket_given_and_a_directory_or_file_is_named(
    tmp_path: Path,
) -> None:
    nobody = tmp_path / "nobody.sock"
    res = cli(None, "ls", socket=nobody)
    assert res.returncode == UNREACHABLE
    assert f"start it with `journald serve --socket {nobody}`" in res.stderr

    res = cli(None, "ls", socket=tmp_path)
    assert res.returncode == UNREACHABLE
    assert f"{tmp_path} is a directory, not the daemon's socket" in res.stderr
    assert f"--socket {tmp_path / 'journald.sock'}" in res.stderr
    assert "refused" not in res.stderr

    plain = tmp_path / "notes.txt"
    plain.write_text("hello")
    res = cli(None, "ls", socket=plain)
    assert res.returncode == UNREACHABLE
    assert f"{plain} is a regular file, not the daemon's socket" in res.stderr
    assert "refused" not in res.stderr


def test_rm_deletes_several_runs_and_names_each_missing_one(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as jd:
        for run_id in ("rm-a", "rm-b"):
            jd.start(run_id, FP, "x").close()
        res = cli(daemon, "rm", "rm-a", "rm-b")
        assert res.returncode == 0, res.stderr
        assert "deleted run rm-a" in res.stderr
        assert "deleted run rm-b" in res.stderr
        assert not {"rm-a", "rm-b"} & {r.run_id for r in jd.list()}
        res = cli(daemon, "rm", "rm-a", "rm-c")
        assert res.returncode == 4
        assert "run rm-c does not exist" in res.stderr
        assert "usage:" not in res.stderr


def test_history_limit_zero_prints_only_the_count(daemon: Daemon) -> None:
    with jc.connect(str(daemon.socket)) as jd, jd.start("counted", FP, "one") as run:
        run.assistant("two", stop_reason="end_turn")
    res = cli(daemon, "history", "counted", "--limit", "0")
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert "2 messages (--limit 0 prints only the count)" in res.stderr
    assert "0..0" not in res.stderr


def test_replay_dump_wraps_long_lines_under_their_indent(daemon: Daemon) -> None:
    words = " ".join(f"word{i}" for i in range(60))
    with jc.connect(str(daemon.socket)) as jd, jd.start("wordy", FP, words) as run:
        run.assistant(words, stop_reason="end_turn")
    res = cli(daemon, "replay", "wordy", "--mode", "dump", "--width", "60")
    assert res.returncode == 0, res.stderr
    body = [ln for ln in res.stdout.splitlines() if "word" in ln]
    assert len(body) > 4
    assert all(len(ln) <= 60 for ln in body)
    assert all(ln.startswith("  ") for ln in body)  # never back at column 0
    assert " ".join(" ".join(ln.split()) for ln in body).count("word59") == 2


def test_serve_help_explains_every_flag() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = sub.choices["serve"]
    bare = [
        a.option_strings[-1]
        for a in serve._actions
        if a.option_strings and not a.help and a.help != argparse.SUPPRESS
    ]
    assert bare == []


def test_migrate_keeps_no_finished_bar_per_run(tmp_path: Path) -> None:
    src = tmp_path / "src"
    with Daemon(tmp_path, "file", data_dir=src) as d, jc.connect(str(d.socket)) as jd:
        for i in range(6):
            with jd.start(f"copy-me-{i}", FP, "x") as run:
                run.assistant("y", stop_reason="end_turn")
    env = {**os.environ, "COLUMNS": "100"}
    proc = subprocess.run(
        [*JOURNALD, "migrate", "--from", f"file:{src}", "--to", f"file:{tmp_path / 'dst'}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "migrated 6 run(s)" in proc.stderr
    assert not any(f"copy-me-{i}" in proc.stderr for i in range(6)), proc.stderr
