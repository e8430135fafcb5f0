"""A package index as pip sees one: a PEP 503 "simple" repository of the built
distributions, served over HTTP on 127.0.0.1 by the standard library's server.

``write`` lays out ``<root>/simple/<normalized name>/index.html`` (PEP 503: one anchor
per file, its sha256 in the URL fragment, ``data-requires-python`` from the file's
metadata as PEP 503 allows) and the files under ``<root>/files/``; ``serve`` serves
``root`` until the context ends.
"""

from __future__ import annotations

import hashlib
import html
import re
import shutil
import tarfile
import threading
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from email.parser import Parser
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def normalize(name: str) -> str:
    """PEP 503's normalized project name (``hami_core`` -> ``hami-core``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def metadata(dist: Path) -> dict[str, str]:
    """Name and Requires-Python of a wheel (``*.dist-info/METADATA``) or an sdist
    (``PKG-INFO`` at its top)."""
    if dist.name.endswith(".whl"):
        with zipfile.ZipFile(dist) as zf:
            (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
            text = zf.read(meta).decode()
    else:
        with tarfile.open(dist) as tf:
            top = tf.getnames()[0].split("/")[0]
            member = tf.extractfile(f"{top}/PKG-INFO")
            assert member is not None, dist
            text = member.read().decode()
    msg = Parser().parsestr(text)
    return {"name": msg["Name"], "requires_python": msg.get("Requires-Python") or ""}


def write(dists: Iterable[Path], root: Path) -> dict[str, list[str]]:
    """Copy ``dists`` under ``root/files`` and write the simple index for them.

    Returns ``{normalized project name: [file names]}``."""
    files = root / "files"
    files.mkdir(parents=True)
    projects: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for dist in dists:
        shutil.copy2(dist, files / dist.name)
        meta = metadata(dist)
        digest = hashlib.sha256(dist.read_bytes()).hexdigest()
        projects[normalize(meta["name"])].append((dist.name, digest, meta["requires_python"]))
    simple = root / "simple"
    for name, entries in projects.items():
        page = simple / name
        page.mkdir(parents=True)
        links = "".join(
            f'<a href="../../files/{html.escape(f)}#sha256={d}"'
            + (f' data-requires-python="{html.escape(rp)}"' if rp else "")
            + f">{html.escape(f)}</a>\n"
            for f, d, rp in sorted(entries)
        )
        (page / "index.html").write_text(
            f"<!DOCTYPE html>\n<html><body>\n<h1>Links for {name}</h1>\n{links}</body></html>\n"
        )
    (simple / "index.html").write_text(
        "<!DOCTYPE html>\n<html><body>\n"
        + "".join(f'<a href="{n}/">{n}</a>\n' for n in sorted(projects))
        + "</body></html>\n"
    )
    return {n: sorted(f for f, _, _ in e) for n, e in projects.items()}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 (a free port); yields the index URL
    (``http://127.0.0.1:<port>/simple/``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
