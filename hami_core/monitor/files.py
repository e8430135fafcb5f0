"""Reading files that tenants write, safely (PROTOCOL.md §6-7: anything a pod's author
writes is untrusted).

A container's directory is writable from inside the container, so its files may be
symlinks (to a host file), FIFOs (an ``open`` that never returns), huge or truncated.
Every open goes through ``openat`` relative to a directory descriptor opened without
following links, with ``O_NOFOLLOW | O_NONBLOCK``; only a regular file of exactly the
expected size is read, with ``pread`` (no seek, no mapping a file that may shrink).
"""

from __future__ import annotations

import os
import stat

from hami_core.errors import InvalidInputError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class UntrustedFileError(InvalidInputError):
    """A tenant-written file is not what it must be.

    Attributes:
        reason: a short word for counters: ``symlink``, ``not-regular``, ``size``,
            ``unreadable``, ``short-read``.
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def open_directory(path: str, *, dir_fd: int | None = None, where: str = "") -> int:
    """Open a directory without following a symlink at its last component.

    Args:
        path: the directory, relative to ``dir_fd`` when given.
        where: the path to name in messages (default ``path``).
    Returns: a descriptor (close it with ``os.close``).
    Raises:
        FileNotFoundError: it does not exist.
        UntrustedFileError: ``symlink`` when it is a link, ``not-regular`` when it is
            not a directory, ``unreadable`` for other OS errors.
    """
    shown = where or path
    try:
        return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except NotADirectoryError:
        # O_DIRECTORY | O_NOFOLLOW on a link to a directory fails with ENOTDIR, like a
        # plain file: tell the two apart for the counter.
        try:
            is_link = stat.S_ISLNK(os.lstat(path, dir_fd=dir_fd).st_mode)
        except OSError:
            is_link = False
        if is_link:
            raise UntrustedFileError(f"{shown}: a symbolic link, not followed", "symlink") from None
        raise UntrustedFileError(f"{shown}: not a directory", "not-regular") from None
    except OSError as exc:
        raise _classify(shown, exc) from None


def read_tenant_file(
    name: str, size: int | tuple[int, ...], *, dir_fd: int, where: str = ""
) -> bytes:
    """Read a whole tenant-written file of exactly ``size`` bytes (or of one of them).

    Args:
        name: file name inside ``dir_fd`` (no ``/``).
        size: the exact size required, bytes; a tuple: any one of these sizes.
        dir_fd: descriptor of the directory holding it (``open_directory``).
        where: the directory's path, for messages.
    Returns: the file's bytes (one of the accepted sizes).
    Raises:
        FileNotFoundError: there is no such file (not an error: not every container
            writes every file).
        UntrustedFileError: a symlink, not a regular file (FIFO, device, directory), a
            size other than ``size``, unreadable, or shorter when read.
    """
    path = f"{where.rstrip('/')}/{name}" if where else name
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _classify(path, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFileError(f"{path}: not a regular file", "not-regular")
        sizes = size if isinstance(size, tuple) else (size,)
        if st.st_size not in sizes:
            wanted = " or ".join(str(n) for n in sizes)
            raise UntrustedFileError(
                f"{path}: {st.st_size} bytes, expected exactly {wanted}", "size"
            )
        size = st.st_size
        chunks = []
        done = 0
        while done < size:
            chunk = os.pread(fd, size - done, done)
            if not chunk:
                raise UntrustedFileError(f"{path}: shrank to {done} bytes while read", "short-read")
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise UntrustedFileError(f"{path}: {exc.strerror or exc}", "unreadable") from None
    finally:
        os.close(fd)


def cap_tenant_file(name: str, max_bytes: int, *, dir_fd: int) -> int:
    """Truncate a tenant-writable file grown past ``max_bytes`` back to it.

    The container's region file is its only writable host path (the device plugin
    creates and sizes it, ``ContainerAllocation.shared_files``), but a write past its
    end still takes the node's disk: the monitor cuts it back on every scan, so a tenant
    holds at most what it can write between two scans.

    Args:
        name: file name inside ``dir_fd``.
        max_bytes: the largest size a writer that follows the format makes, bytes.
    Returns: bytes cut off (0 when it was within ``max_bytes``, absent, a link or not
        a regular file: those are the reader's to report).
    Raises:
        OSError: the file cannot be opened for writing or truncated.
    """
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return 0
    if not stat.S_ISREG(st.st_mode) or st.st_size <= max_bytes:
        return 0
    try:
        fd = os.open(
            name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except FileNotFoundError:
        return 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size <= max_bytes:
            return 0
        os.ftruncate(fd, max_bytes)
        return st.st_size - max_bytes
    finally:
        os.close(fd)


def _classify(path: str, exc: OSError) -> UntrustedFileError:
    import errno

    if exc.errno == errno.ELOOP:
        return UntrustedFileError(f"{path}: a symbolic link, not followed", "symlink")
    if exc.errno == errno.ENOTDIR:
        return UntrustedFileError(f"{path}: not a directory", "not-regular")
    return UntrustedFileError(f"{path}: {exc.strerror or exc}", "unreadable")
