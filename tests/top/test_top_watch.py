"""``hami top --watch`` as a person uses it: in a real terminal (tmux: send-keys,
capture-pane), through a pipe and with ``TERM=dumb`` (``kubectl exec`` without ``-t``),
and the namespace filter."""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.errors import HamiError
from hami_core.top.watch import CLEAR_BELOW, HOME, watch

REPO = Path(__file__).resolve().parents[2]
STAMP = re.compile(r"hami top  (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC")


def _hami(*args: str) -> list[str]:
    return [sys.executable, "-m", "hami_core", *args]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_frames_are_drawn_in_place_on_a_terminal_and_stacked_elsewhere():
    texts = iter(["A\nB\n", "C\n"])
    tty = _Tty()
    n = watch(
        lambda: next(texts), 1, out=tty, frames=2, sleep=lambda s: None, environ={"TERM": "xterm"}
    )
    assert n == 2
    drawn = tty.getvalue()
    # each frame starts at the top-left corner and clears what the last one left below
    assert drawn.count(HOME) == 2 and drawn.count(CLEAR_BELOW) == 2
    assert "\x1b[2J" in drawn.split(HOME, 1)[0]  # the screen is cleared once, at the start
    assert drawn.endswith("\x1b[?25h\n")  # the cursor is given back

    texts = iter(["A\nB\n", "C\n"])
    pipe = io.StringIO()
    watch(
        lambda: next(texts), 1, out=pipe, frames=2, sleep=lambda s: None, environ={"TERM": "xterm"}
    )
    plain = pipe.getvalue()
    assert "\x1b" not in plain
    assert plain.count("--- hami top ") == 2 and "A\nB\n" in plain and "C\n" in plain

    dumb = _Tty()
    watch(lambda: "X\n", 1, out=dumb, frames=1, sleep=lambda s: None, environ={"TERM": "dumb"})
    assert "\x1b" not in dumb.getvalue()


def test_a_frame_that_fails_shows_its_error_and_the_watch_goes_on():
    calls = iter([HamiError("API server unreachable: connection refused"), "back\n"])

    def frame() -> str:
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item

    out = io.StringIO()
    assert watch(frame, 1, out=out, frames=2, sleep=lambda s: None, environ={}) == 2
    text = out.getvalue()
    assert "error: API server unreachable: connection refused" in text
    assert text.index("error:") < text.index("back")


def test_a_bad_interval_is_named():
    with pytest.raises(ValueError, match="--watch must be a positive"):
        watch(lambda: "", 0)
    result = CliRunner().invoke(cli, ["top", "--example", "--watch", "0"])
    assert result.exit_code == 2 and "--watch" in result.output


def test_the_namespace_filter_lists_only_its_pods_and_their_devices():
    result = CliRunner().invoke(cli, ["top", "--example", "-n", "ml-team", "-o", "wide"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("gpu-")]
    device_rows = [r for r in rows if "ml-team/" in r]
    assert len(device_rows) == 2
    other = CliRunner().invoke(cli, ["top", "--example", "-n", "nobody"])
    assert other.exit_code == 0
    assert "0 devices" in other.output


def test_through_a_pipe_frames_follow_each_other_and_ctrl_c_ends_cleanly():
    env = {**os.environ, "TERM": "dumb", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        _hami("top", "--example", "--watch", "0.3"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while sum(line.startswith("--- hami top ") for line in seen) < 3:
        assert time.monotonic() < deadline, "".join(seen)
        seen.append(proc.stdout.readline())
    proc.send_signal(signal.SIGINT)  # mid-watch, as a person's Ctrl-C
    rest = proc.stdout.read()  # what readline buffered too (communicate reads the fd)
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.wait(timeout=30)
    out = "".join(seen) + rest
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "\x1b" not in out
    assert out.count("--- hami top ") >= 2, out
    assert out.count("gpu-a100-01  0") == out.count("--- hami top ")


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None and os.geteuid() == 0:  # a fresh machine: Debian's
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "tmux"],
            capture_output=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            timeout=600,
            check=False,
        )
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (apt-get install tmux)", pytrace=False)
    name = f"hami-top-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True, check=False)


def _pane(name: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True, check=True
    ).stdout


def _until(predicate, what: str, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_in_a_real_terminal_it_redraws_in_place_and_q_quits(tmux: str, tmp_path: Path):
    done = tmp_path / "done"
    command = " ".join(_hami("top", "--example", "--watch", "1"))
    script = (
        f"cd {REPO}; PYTHONPATH={REPO} {command}; echo exit=$? > {done}; "
        f"stty -a >> {done}; sleep 60"
    )
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", tmux, "-x", "220", "-y", "40", "sh", "-c", script],
        check=True,
    )

    def whole_frame():  # a capture may fall between the header and the rows
        pane = _pane(tmux)
        return "compute 80/1000% allocated" in pane and STAMP.search(pane)

    first = _until(whole_frame, "the first frame")
    assert "ml-team/stable-diffusion" in _pane(tmux)
    # a later frame replaces the first: a new time, and still one header on the screen
    later = _until(
        lambda: (m := whole_frame()) and m.group(1) != first.group(1) and m,
        "a second frame",
    )
    assert later
    pane = _until(lambda: whole_frame() and _pane(tmux), "a whole frame")
    assert len(STAMP.findall(pane)) == 1, pane
    assert pane.count("NODE         GPU  TYPE") == 1
    subprocess.run(["tmux", "send-keys", "-t", tmux, "q"], check=True)
    report = _until(
        lambda: done.exists() and "exit=" in done.read_text() and done.read_text(), "q to quit"
    )
    assert report.startswith("exit=0"), report
    # the terminal's line mode and echo are given back
    assert re.search(r"(?<!-)icanon", report) and re.search(r"(?<!-)echo\b", report), report


def test_wide_in_a_real_terminal_keeps_redrawing_with_an_unreachable_monitor(
    tmux: str, tmp_path: Path
):
    """``-o wide --watch`` with a monitor nobody answers at: every frame has the pod table
    with n/a and the reason, the watch goes on, q quits with status 0."""
    done = tmp_path / "done"
    dead = "http://127.0.0.1:1/metrics"
    command = " ".join(_hami("top", "--example", "-o", "wide", "--monitor", dead, "--watch", "1"))
    script = f"cd {REPO}; PYTHONPATH={REPO} {command}; echo exit=$? > {done}; sleep 60"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", tmux, "-x", "400", "-y", "50", "sh", "-c", script],
        check=True,
    )

    def whole_frame():
        pane = _pane(tmux)
        return "compute 80/1000% allocated" in pane and STAMP.search(pane)

    first = _until(whole_frame, "the first frame")
    _until(lambda: (m := whole_frame()) and m.group(1) != first.group(1), "a second frame")
    pane = _until(lambda: whole_frame() and _pane(tmux), "a whole frame")
    assert pane.count("POD ") == 1 and "MEMORY USED/LIMIT" in pane
    assert "n/a of 20000 MiB" in pane and f"usage: n/a from monitor {dead}: " in pane
    subprocess.run(["tmux", "send-keys", "-t", tmux, "q"], check=True)
    report = _until(lambda: done.exists() and done.read_text(), "q to quit")
    assert report.startswith("exit=0"), report
