"""``hami top --watch``: redraw the view every N seconds, as ``watch`` and ``top`` do.

On a terminal that understands ANSI cursor control (a tty whose ``TERM`` is set and not
``dumb``) each frame is drawn over the last from the top-left corner, every line
cleared to its end and the rest of the screen below it cleared: nothing is erased
before the new frame is there, so the view does not flicker. Anywhere else (a pipe,
``TERM=dumb``, ``kubectl exec`` without ``-t``) frames are printed one after another,
each under a plain header line, with no escape sequence at all.

``q`` (on a terminal) or Ctrl-C ends the loop; the terminal's mode and cursor are given
back either way. A frame that cannot be built (the API server unreachable for a moment)
shows its error and the loop goes on: a live view must outlast a blip.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

from hami_core.errors import HamiError

#: Home the cursor; clear to the end of the line; clear below the cursor.
HOME, CLEAR_EOL, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"
HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"


def ansi_capable(out: TextIO, environ: dict[str, str] | None = None) -> bool:
    """Whether ``out`` is a terminal that takes cursor control (``TERM`` set, not dumb)."""
    env = os.environ if environ is None else environ
    term = env.get("TERM", "")
    try:
        tty = out.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty and term not in ("", "dumb", "unknown")


def frame_text(frame: Callable[[], str]) -> str:
    """One frame, or the error that kept it from being built (the loop goes on)."""
    try:
        return frame()
    except HamiError as exc:
        return f"error: {exc}\n"
    except OSError as exc:
        return f"error: {exc}\n"


def draw(out: TextIO, text: str, *, ansi: bool, stamp: str) -> None:
    """Write one frame: over the last one (``ansi``) or below it under a header."""
    header = f"hami top  {stamp}  (q or Ctrl-C to quit)" if ansi else f"--- hami top {stamp}"
    lines = [header, "", *text.rstrip("\n").split("\n")]
    if ansi:
        out.write(HOME + "".join(line + CLEAR_EOL + "\n" for line in lines) + CLEAR_BELOW)
    else:
        out.write("\n".join(lines) + "\n\n")
    out.flush()


@contextlib.contextmanager
def _keys(inp: TextIO | None) -> Iterator[int | None]:
    """cbreak mode on a terminal ``inp`` (single key presses, no echo), restored on exit;
    yields the descriptor to poll, or None (no terminal: only Ctrl-C ends the loop)."""
    if inp is None:
        yield None
        return
    try:
        fd = inp.fileno()
        tty_in = os.isatty(fd)
    except (AttributeError, ValueError, OSError):
        yield None
        return
    if not tty_in:
        yield None
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _wait_for_quit(fd: int | None, seconds: float, quit_: threading.Event) -> bool:
    """Wait ``seconds``; True when ``q`` was pressed or Ctrl-C came meanwhile."""
    if fd is None:
        return quit_.wait(seconds)
    deadline = time.monotonic() + seconds
    while not quit_.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], min(left, 0.1))
        if ready:
            data = os.read(fd, 64)
            if b"q" in data or b"Q" in data or not data:
                return True
    return True


@contextlib.contextmanager
def _ctrl_c(quit_: threading.Event) -> Iterator[None]:
    """Ctrl-C sets ``quit_`` instead of raising, so it never cuts a frame in half (a
    frame is written whole, then the loop ends). Only the main thread can take signals;
    elsewhere KeyboardInterrupt is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: quit_.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def watch(
    frame: Callable[[], str],
    interval_s: float,
    *,
    out: TextIO | None = None,
    inp: TextIO | None = None,
    frames: int | None = None,
    sleep: Callable[[float], None] | None = None,
    environ: dict[str, str] | None = None,
) -> int:
    """Draw ``frame()`` every ``interval_s`` seconds until ``q``, Ctrl-C or ``frames``.

    Args:
        frame: builds the text of one frame (the table, or JSON).
        interval_s: seconds between frames (> 0).
        out / inp: the terminal (default stdout / stdin).
        frames: stop after this many (tests; None = until told to quit).
        sleep: how to wait between frames when given (tests); default: until the
            interval passes, ``q`` is pressed or Ctrl-C comes.
        environ: the environment to read ``TERM`` from (default ``os.environ``).

    Returns:
        The number of frames drawn.

    Raises:
        ValueError: ``interval_s`` is not positive.
    """
    if not interval_s > 0:
        raise ValueError(f"--watch must be a positive number of seconds, not {interval_s!r}")
    out = out or sys.stdout
    ansi = ansi_capable(out, environ)
    quit_ = threading.Event()
    drawn = 0
    if ansi:
        out.write(HIDE_CURSOR + "\x1b[2J")
    try:
        with _ctrl_c(quit_), _keys(inp if inp is not None else (sys.stdin if ansi else None)) as fd:
            while not quit_.is_set():
                stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
                draw(out, frame_text(frame), ansi=ansi, stamp=stamp)
                drawn += 1
                if frames is not None and drawn >= frames:
                    break
                if sleep is not None:
                    sleep(interval_s)
                elif _wait_for_quit(fd, interval_s, quit_):
                    break
    except KeyboardInterrupt:  # raised where no handler could be set (not the main thread)
        pass
    finally:
        if ansi:
            out.write(SHOW_CURSOR + "\n")
            out.flush()
    return drawn


__all__ = ["ansi_capable", "draw", "frame_text", "watch"]
