"""The replay renderers are pure functions of the folded state: escape stripping, middle
elision, and the three renderings of the CLI golden run (tests/golden/cli_replay.jsonl)."""

from __future__ import annotations

from pathlib import Path

import pytest
from journald_client import RunState
from journald_client import codec as client_codec

from journald.cli import replay
from journald.core import records
from journald.core.fold import fold
from journald.server.convert import state_to_pb

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "cli_replay.jsonl"


@pytest.fixture(scope="module")
def state() -> RunState:
    lines = GOLDEN.read_bytes().split(b"\n")[:-1]
    folded = fold([records.decode(line) for line in lines])
    # the same conversion the daemon and the client make on the way to the CLI
    return client_codec.state_from_pb(state_to_pb(folded))


def texts(lines: list[replay.Line]) -> list[str]:
    return [line.text for line in lines]


# --- untrusted text --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[1;31mred\x1b[0m plain", "red plain"),
        ("\x1b]0;evil title\x07after", "after"),
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x9b2Jcleared", "cleared"),
        ("\x1bPq#0;2;0;0;0\x1b\\sixel gone", "sixel gone"),
        ("bell\x07 back\x08space", "bell backspace"),
        ("a lone escape\x1b", "a lone escape"),
        ("10%\r50%\r100%", "100%"),
        ("dos line\r\nnext", "dos line\nnext"),
        ("tab\there", "tab here"),
        ("user\u202egnp.exe", "usergnp.exe"),
    ],
)
def test_clean_strips_terminal_escapes_and_control_characters(raw: str, shown: str) -> None:
    assert replay.clean(raw) == shown


def test_clean_keeps_newlines_and_ordinary_unicode() -> None:
    assert replay.clean("naïve\n日本語 ✓") == "naïve\n日本語 ✓"


def test_one_line_collapses_whitespace_and_strips_escapes() -> None:
    assert replay.one_line('{\n  "cmd": "\x1b[31mls\x1b[0m"\n}') == '{ "cmd": "ls" }'


# --- elision ---------------------------------------------------------------------------


def test_elide_middle_leaves_text_that_fits_untouched() -> None:
    assert replay.elide_middle("short", 5) == "short"


def test_elide_middle_keeps_head_and_tail_within_the_width() -> None:
    text = "/".join(f"dir{i}" for i in range(40)) + "/file.toml"
    out = replay.elide_middle(text, 30)
    assert replay.cell_width(out) == 30
    assert out.startswith("dir0/dir1/")
    assert out.endswith("/file.toml")
    assert out.count(replay.ELLIPSIS) == 1


def test_elide_middle_counts_wide_characters_as_two_cells() -> None:
    out = replay.elide_middle("漢字" * 20, 11)
    assert 9 <= replay.cell_width(out) <= 11  # a wide character is never split
    assert out == "漢字" + replay.ELLIPSIS + "漢字"


def test_elide_middle_degrades_to_an_ellipsis_on_tiny_widths() -> None:
    assert replay.elide_middle("abcdef", 1) == replay.ELLIPSIS
    assert replay.elide_middle("abcdef", 0) == ""


def test_elide_end_cuts_at_the_width_with_an_ellipsis() -> None:
    assert replay.elide_end("abcdefghij", 5) == "abcd…"
    assert replay.elide_end("abc", 5) == "abc"


# --- the renderings --------------------------------------------------------------------


def test_narration_shows_assistant_text_and_calls_but_never_tool_output(
    state: RunState,
) -> None:
    out = "\n".join(texts(replay.narrate(state, 80)))
    assert "I'll look first." in out
    assert '-> bash {"cmd":"ls build"}' in out
    assert "keep me" not in out
    assert "obj" not in out
    assert "Permission denied" not in out
    assert "sudo, then verify" not in out  # thinking is not narrated


def test_every_rendering_handles_the_pending_turn_after_the_committed_messages(
    state: RunState,
) -> None:
    for mode in replay.MODES:
        lines = texts(replay.render(state, mode, 80))
        note = next(i for i, t in enumerate(lines) if "pending turn (iteration 4" in t)
        assert any("also clear the cache" in t for t in lines[:note]), mode
        assert any("sudo rm -rf build/cache" in t for t in lines[note:]), mode


def test_narration_marks_the_unanswered_call_of_the_pending_turn(state: RunState) -> None:
    lines = texts(replay.narrate(state, 80))
    assert any("sudo rm -rf" in t and "not answered yet" in t for t in lines)
    assert not any("build/keep/README" in t and "not answered" in t for t in lines)


def test_dump_shows_results_as_arrow_lines_and_hides_their_text_on_request(
    state: RunState,
) -> None:
    full = texts(replay.dump(state, 80))
    assert "  <- [t3] error: rm: build/cache: Permission denied" in full
    assert "  <- [t5] keep me" in full
    assert "  (no result yet for [t4])" in full
    hidden = texts(replay.dump(state, 80, show_output=False))
    assert "  <- [t1]" in hidden
    assert "  <- [t3] error" in hidden
    assert not any("Permission denied" in t or "keep me" in t for t in hidden)


def test_dump_shows_a_merged_follow_up_inside_the_user_message_with_the_results(
    state: RunState,
) -> None:
    lines = texts(replay.dump(state, 80))
    start = lines.index("#3 user")
    assert lines[start + 1].startswith("  <- [t1] ")
    assert "  also clear the cache" in lines[start : lines.index("#4 assistant")]


def test_transcript_pairs_each_call_with_its_result_across_the_run(state: RunState) -> None:
    lines = replay.transcript(state)
    for i, tl in enumerate(lines):
        if tl.kind == "call" and tl.tool_use_id != "t4":
            nxt = lines[i + 1]
            assert (nxt.kind, nxt.tool_use_id) == ("result", tl.tool_use_id)
    t3 = next(tl for tl in lines if tl.kind == "result" and tl.tool_use_id == "t3")
    assert t3.is_error
    assert t3.tool_name == "bash"
    # results answered out of order still sit under their own call
    t2 = next(i for i, tl in enumerate(lines) if tl.kind == "call" and tl.tool_use_id == "t2")
    assert lines[t2 + 1].text == "[build]\nout = 'build'"


def test_transcript_gives_an_unanswered_pending_call_no_result(state: RunState) -> None:
    lines = replay.transcript(state)
    assert [tl.tool_use_id for tl in lines if tl.kind == "result"] == ["t1", "t2", "t3", "t5"]
    t4 = next(tl for tl in lines if tl.kind == "call" and tl.tool_use_id == "t4")
    assert t4.message == -1


def test_no_rendering_lets_an_escape_sequence_through(state: RunState) -> None:
    for mode in replay.MODES:
        for line in replay.render(state, mode, 60):
            assert "\x1b" not in line.text
            assert "\x07" not in line.text
            assert "\r" not in line.text
    assert all("\x1b" not in tl.text for tl in replay.transcript(state))


@pytest.mark.parametrize("width", [40, 60, 100])
def test_tool_call_lines_fit_the_width_with_arguments_elided_in_the_middle(
    state: RunState, width: int
) -> None:
    for mode in replay.MODES:
        calls = [ln.text for ln in replay.render(state, mode, width) if ln.kind == "call"]
        assert calls, mode
        assert all(replay.cell_width(t) <= width for t in calls), (mode, calls)
        long = next(t for t in calls if "[t2]" in t or " read " in t)
        assert replay.ELLIPSIS in long, long
        assert long.endswith('"}'), long


def test_render_refuses_an_unknown_mode(state: RunState) -> None:
    with pytest.raises(ValueError, match="unknown replay mode"):
        replay.render(state, "fancy")
