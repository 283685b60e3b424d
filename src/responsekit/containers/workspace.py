"""A container's workspace seen from the host: files read and written without leaving it.

Code inside the sandbox owns the workspace and may plant symlinks anywhere (`ln -s /etc/passwd x`),
so the host never resolves a name by path: it walks it one component at a time from a descriptor
of the workspace, each step opened with `O_NOFOLLOW` (openat(2), "O_NOFOLLOW"), and a symlink
anywhere on the way is refused as `BadPath`, never followed.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .runtime import WORKSPACE, BadPath, Entry

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def parts(path: str) -> list[str]:
    """The components of a file name inside the workspace: `/mnt/data/a/b` or `a/b`, never `..`,
    never another absolute path, never empty."""
    if "\0" in path:
        raise BadPath("a file name cannot hold a NUL byte")
    if path.startswith("/"):
        if path != WORKSPACE and not path.startswith(WORKSPACE + "/"):
            raise BadPath(f"{path!r} is outside {WORKSPACE}")
        path = path[len(WORKSPACE) :]
    names = [name for name in path.split("/") if name not in ("", ".")]
    if not names:
        raise BadPath(f"{path!r} names no file")
    if ".." in names:
        raise BadPath(f"{path!r} leaves {WORKSPACE}")
    return names


@contextmanager
def _folder(root: Path, names: list[str], *, create: bool, uid: int | None = None) -> Iterator[int]:
    """A descriptor of the folder `names` under `root`, walked without following a symlink."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in names:
            if create:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                    if uid is not None:
                        os.chown(name, uid, uid, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise BadPath(f"{name!r} is not a folder of the workspace") from None
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def write(root: Path, path: str, data: bytes, *, uid: int) -> None:
    """Write a file (its folders made as needed), owned by the sandbox's `uid` so code can change it."""
    *folders, name = parts(path)
    with _folder(root, folders, create=True, uid=uid) as fd:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            out = os.open(name, flags, 0o644, dir_fd=fd)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.EISDIR):
                raise BadPath(f"{path!r} is not a file of the workspace") from None
            raise
        with os.fdopen(out, "wb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise BadPath(f"{path!r} is not a regular file")
            file.write(data)
            os.fchown(file.fileno(), uid, uid)


def read(root: Path, path: str) -> bytes | None:
    """A regular file's bytes, None when there is none by that name; a symlink is refused."""
    *folders, name = parts(path)
    try:
        with _folder(root, folders, create=False) as fd:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            handle = os.open(name, flags, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise BadPath(f"{path!r} is a symlink") from None
        raise
    with os.fdopen(handle, "rb") as file:
        # A FIFO or a device planted by code would block or read the host's: regular files only.
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise BadPath(f"{path!r} is not a regular file")
        return file.read()


def delete(root: Path, path: str) -> bool:
    """Remove a file (a symlink itself, never what it points at); False when there was none."""
    *folders, name = parts(path)
    try:
        with _folder(root, folders, create=False) as fd:
            if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                raise BadPath(f"{path!r} is a folder")
            os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    return True


def entries(root: Path) -> list[Entry]:
    """Every regular file under the workspace, with its size; symlinks are skipped, not followed."""
    found: list[Entry] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        inside = Path(folder).relative_to(root)
        for name in files:
            info = os.stat(os.path.join(folder, name), follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                found.append(Entry(f"{WORKSPACE}/{(inside / name).as_posix()}", info.st_size))
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
    return sorted(found, key=lambda entry: entry.path)


def size(root: Path) -> int:
    """The bytes the workspace's regular files hold."""
    total = 0
    for folder, _, files in os.walk(root, followlinks=False):
        for name in files:
            try:
                info = os.stat(os.path.join(folder, name), follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total
