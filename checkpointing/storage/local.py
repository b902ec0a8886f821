"""Local-filesystem storage: the embedded default.

Create-once is a hard link of a fully written temp file (``link`` fails if the name exists),
so no reader ever sees a partial document. Compare-and-swap holds an exclusive ``flock`` on
a per-key lock file while it compares the etag and renames a temp file over the object.
Both work across threads and processes on one host.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

from checkpointing.errors import NotFound, PreconditionFailed, StorageError
from checkpointing.storage.base import ObjectInfo, Storage

_TMP_DIR = ".ckpt-tmp"
_LOCK_DIR = ".ckpt-locks"


def _etag(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _file_etag(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class LocalStorage(Storage):
    """Storage rooted at a local directory."""

    def __init__(self, root: str | os.PathLike[str]):
        super().__init__()
        self.root = Path(root).resolve()
        if self.root.exists() and not self.root.is_dir():
            raise StorageError(f"cannot use local storage at {self.root}: not a directory")

    def _work_dir(self, name: str) -> Path:
        """The root's directory ``name`` (temporary files, locks), made when a write first
        needs it: reading, listing and opening create nothing, so a table only read (an
        upstream table input) needs no write access and gains no directory."""
        path = self.root / name
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot write to local storage at {self.root}: "
                               f"{exc.strerror}") from None
        return path

    # -- paths -----------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        if key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/")):
            raise StorageError(f"refusing unsafe key {key!r}")
        return self.root / key

    def _tmp(self, data: bytes) -> str:
        fd, tmp = tempfile.mkstemp(dir=self._work_dir(_TMP_DIR))
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            os.unlink(tmp)
            raise
        return tmp

    # -- reads -----------------------------------------------------------------------
    def read(self, key: str) -> tuple[bytes, str]:
        self.stats.add("GET")
        try:
            data = self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"not found: {self.uri(key)}") from None
        except IsADirectoryError:
            raise NotFound(f"not found: {self.uri(key)} is a directory") from None
        return data, _etag(data)

    def read_start(self, key: str, nbytes: int) -> bytes:
        self.stats.add("GET")
        try:
            with self._path(key).open("rb") as f:
                return f.read(nbytes)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFound(f"not found: {self.uri(key)}") from None

    def _stat(self, key: str) -> tuple[Path, os.stat_result]:
        """The file of ``key`` and its ``stat`` (one HEAD); NotFound for none or a folder."""
        self.stats.add("HEAD")
        path = self._path(key)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"not found: {self.uri(key)}") from None
        if not stat.S_ISREG(st.st_mode):
            raise NotFound(f"not found: {self.uri(key)} is a directory")
        return path, st

    def head(self, key: str) -> ObjectInfo:
        path, st = self._stat(key)
        return ObjectInfo(key, st.st_size, _file_etag(path), st.st_mtime)

    def stamp(self, key: str) -> tuple[int, str]:
        """Size, modification time and inode from one ``stat``, as rsync's quick check
        compares: every write here renames or links a new file into place (a new inode,
        a new mtime), so a file with the recorded stamp holds the bytes it held then. The
        etag of :meth:`head` is an md5 of the bytes: reading them is what this avoids."""
        _, st = self._stat(key)
        return st.st_size, f"stat:{st.st_mtime_ns}:{st.st_ino}"

    # -- writes ----------------------------------------------------------------------
    def create(self, key: str, data: bytes) -> str:
        self.stats.add("PUT")
        path = self._path(key)
        tmp = self._tmp(data)
        try:
            _into_dir(path, lambda: os.link(tmp, path))
        except FileExistsError:
            raise PreconditionFailed(f"already exists: {self.uri(key)}") from None
        finally:
            os.unlink(tmp)
        return _etag(data)

    def replace(self, key: str, data: bytes, expected_etag: str) -> str:
        self.stats.add("PUT")
        path = self._path(key)
        with self._key_lock(key):
            try:
                current = _etag(path.read_bytes())
            except FileNotFoundError:
                raise PreconditionFailed(f"does not exist: {self.uri(key)}") from None
            if current != expected_etag:
                raise PreconditionFailed(f"changed since read: {self.uri(key)}")
            tmp = self._tmp(data)
            os.replace(tmp, path)
        return _etag(data)

    def write(self, key: str, data: bytes) -> str:
        self.stats.add("PUT")
        path = self._path(key)
        tmp = self._tmp(data)
        try:
            _into_dir(path, lambda: os.replace(tmp, path))
        except BaseException:
            _unlink_quietly(tmp)
            raise
        return _etag(data)

    def upload_file(self, key: str, path: str) -> ObjectInfo:
        self.stats.add("PUT")
        dest = self._path(key)
        fd, tmp = tempfile.mkstemp(dir=self._work_dir(_TMP_DIR))
        os.close(fd)
        try:
            shutil.copyfile(path, tmp)
            _into_dir(dest, lambda: os.replace(tmp, dest))
        except BaseException:  # a failed copy (source gone, disk full) leaves no temp file
            _unlink_quietly(tmp)
            raise
        st = dest.stat()
        return ObjectInfo(key, st.st_size, _file_etag(dest), st.st_mtime)

    def download_file(self, key: str, path: str) -> None:
        self.stats.add("GET")
        src = self._path(key)
        if not src.is_file():
            raise NotFound(f"not found: {self.uri(key)}")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, path)

    def delete(self, key: str) -> None:
        self.stats.add("DELETE")
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        # Prune empty parent directories so that listings stay small.
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    # -- listing ---------------------------------------------------------------------
    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        self.stats.add("LIST")
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root / base_dir if base_dir else self.root
        if not start.is_dir():
            return iter(())
        keys = []
        for dirpath, dirnames, filenames in os.walk(start):
            rel = os.path.relpath(dirpath, self.root)
            if rel == ".":
                dirnames[:] = [d for d in dirnames if d not in (_TMP_DIR, _LOCK_DIR)]
                rel = ""
            for name in filenames:
                key = f"{rel}/{name}" if rel else name
                if key.startswith(prefix) and (start_after is None or key > start_after):
                    keys.append(key)
        keys.sort()
        return self._infos(keys)

    def _infos(self, keys: Sequence[str]) -> Iterator[ObjectInfo]:
        for key in keys:
            path = self.root / key
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # deleted while listing
            yield ObjectInfo(key, st.st_size, "", st.st_mtime)

    def list_dirs(self, prefix: str, start_after: str | None = None) -> Iterator[str]:
        self.stats.add("LIST")
        path = self.root / prefix.rstrip("/") if prefix else self.root
        try:
            names = sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return iter(())
        out = []
        for name in names:
            if not prefix and name in (_TMP_DIR, _LOCK_DIR):
                continue
            full = f"{prefix}{name}/"
            if (path / name).is_dir() and (start_after is None or full > start_after):
                out.append(full)
        return iter(out)

    # -- misc ------------------------------------------------------------------------
    def uri(self, key: str) -> str:
        return "file://" + quote(str(self.root / key) if key else str(self.root) + "/")

    def key_for_uri(self, uri: str) -> str | None:
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            return None
        path = Path(unquote(parsed.path))
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return None

    def _key_lock(self, key: str) -> _FileLock:
        return _FileLock(self._work_dir(_LOCK_DIR) / hashlib.sha256(key.encode()).hexdigest())


class _FileLock:
    """An exclusive flock on a lock file; blocks until acquired."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = -1

    def __enter__(self) -> _FileLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX)
                return self
            except OSError as exc:  # pragma: no cover - EINTR only
                if exc.errno != errno.EINTR:
                    raise

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _into_dir(path: Path, place: Callable[[], object], tries: int = 20) -> None:
    """Create ``path``'s directory and run ``place`` (a link or rename into it).

    ``delete`` prunes directories it empties, so a concurrent delete in the same directory
    (``shared/<hh>/``, an epoch's task directory) can remove it between our ``mkdir`` and
    the link: that shows as FileNotFoundError, and creating the directory again is the fix.
    """
    for attempt in range(tries):
        try:
            # pathlib's mkdir(exist_ok=True) itself raises when a concurrent delete
            # removes the directory between its mkdir and its is_dir check: retried too.
            os.makedirs(path.parent, exist_ok=True)
        except (FileExistsError, FileNotFoundError):
            if attempt == tries - 1:
                raise
            continue
        try:
            place()
            return
        except FileNotFoundError:
            if attempt == tries - 1:
                raise


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
