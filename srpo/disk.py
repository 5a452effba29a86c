"""A full disk as one clear error naming the file being written, never a writer's own riddle.

Each library reports a full disk its own way: torch.save writing to a path raises
"unexpected pos 799680 vs 799568", safetensors "I/O error: No space left on device (os error 28)",
Python an OSError with errno ENOSPC. `writing(path)` turns all of them into a `DiskFullError`
carrying the path, and `atomic_write_text` is the write-temp-then-rename of small text files that
never leaves its temporary file behind. An exceeded quota (EDQUOT) counts as a full disk: the
remedy is the same.

No file is written through a symbolic link. A link planted at a path srpo creates, truncates or
appends to (a run's lock, its metrics log, a temporary file) would make the write land on the
link's target, a file outside the run (run as root: any system file). Every such open goes
through `open_no_follow` (O_NOFOLLOW: the kernel refuses a link at the last component) and a
link there is `SymlinkRefused`, one line naming the path. Renaming a finished temporary file
over a link replaces the link itself, never its target, so the rename of an atomic write needs
no check; its temporary file is opened without following links like every other file.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

FULL_ERRNOS = tuple(code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if code is not None)


class SymlinkRefused(ValueError):
    """A symbolic link where srpo would write a file (or a directory of a run): refused, since
    writing through it would change a file outside the run. A ValueError: the CLI answers it in
    one line (exit status 2), like any other refused input."""

    def __init__(self, path: str | Path, what: str = "a file"):
        self.path = Path(path)
        try:
            target = f" (to {os.readlink(self.path)})"
        except OSError:
            target = ""
        super().__init__(
            f"{self.path} is a symbolic link{target} where srpo writes {what}: srpo never writes "
            f"through a link (it would change a file outside the run); remove the link or choose "
            f"another output_dir"
        )

    def __reduce__(self):
        return (SymlinkRefused, (self.path,))


def refuse_symlink(path: str | Path, what: str = "a file") -> None:
    """Raise SymlinkRefused if `path` itself is a symbolic link (dangling or not)."""
    if os.path.islink(path):
        raise SymlinkRefused(path, what)


def no_follow_opener(path: str | Path, flags: int, mode: int = 0o666) -> int:
    """os.open(path, flags | O_NOFOLLOW): as `open(..., opener=no_follow_opener)`. A link at
    `path` raises SymlinkRefused (nothing is opened, its target is untouched)."""
    try:
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), mode)
    except OSError:
        # ELOOP on Linux; EMLINK / EFTYPE on some BSDs. Whatever the errno, a link at the path is the reason.
        if os.path.islink(path):
            raise SymlinkRefused(path) from None
        raise


def open_no_follow(path: str | Path, mode: str = "rb", **kwargs: Any) -> IO[Any]:
    """The built-in `open`, refusing a symbolic link at `path` (SymlinkRefused) instead of
    opening its target: for every file srpo creates, truncates or appends to."""
    return open(path, mode, opener=no_follow_opener, **kwargs)


class DiskFullError(OSError):
    """No space (or quota) left while writing `path`. `hint` says what is intact and what to do;
    the layer that knows (a run's checkpoints, the CLI) fills it in with `with_hint`."""

    def __init__(self, path: str | Path, code: int = errno.ENOSPC, hint: str = ""):
        super().__init__(code, os.strerror(code), str(path))
        self.path = Path(path)
        self.hint = hint

    def __str__(self) -> str:
        text = f"the disk is full ({self.strerror}) while writing {self.path}"
        return f"{text}; {self.hint}" if self.hint else text

    def __reduce__(self):  # OSError's own pickling would call __init__ with its args tuple
        return (DiskFullError, (self.path, self.errno, self.hint))

    def with_hint(self, hint: str, path: str | Path | None = None) -> DiskFullError:
        """The same error with what-to-do added (and the file renamed, e.g. from a temp dir)."""
        new = DiskFullError(self.path if path is None else path, self.errno, hint)
        new.__cause__ = self.__cause__
        return new


def error_chain(error: BaseException | None) -> Iterator[BaseException]:
    """`error`, then the errors it was raised from or during (__cause__, else __context__)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def disk_full_errno(error: BaseException | None) -> int | None:
    """ENOSPC / EDQUOT if `error` or any error it was raised from or during is a full disk.

    Follows __cause__ and __context__: torch.save writing to a file object raises a RuntimeError
    ("unexpected pos ...") during the OSError its failed write raised. safetensors (Rust) puts
    the OS error only in its message, as "(os error 28)".
    """
    for e in error_chain(error):
        if isinstance(e, DiskFullError):
            return e.errno
        if isinstance(e, OSError) and e.errno in FULL_ERRNOS:
            return e.errno
        text = str(e)
        for code in FULL_ERRNOS:
            if f"(os error {code})" in text or os.strerror(code) in text:
                return code
    return None


def as_disk_full(error: BaseException, where: str | Path) -> DiskFullError | None:
    """`error` as a DiskFullError (None if it is no full disk): itself, or one naming the first
    file an OSError of its chain names, else `where` (for writers srpo does not wrap)."""
    code = disk_full_errno(error)
    if code is None:
        return None
    if isinstance(error, DiskFullError):
        return error
    named = next((e.filename for e in error_chain(error) if isinstance(e, OSError) and e.filename), None)
    return DiskFullError(named or where, code)


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Inside, whatever a full disk makes any writer raise becomes DiskFullError(path)."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as e:
        code = disk_full_errno(e)
        if code is None:
            raise
        raise DiskFullError(path, code) from e


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `path` whole or not at all: a temp sibling, fsynced, renamed over it. On any
    failure the temp file is removed and the old `path` (if any) is untouched; a full disk
    raises DiskFullError(path)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """atomic_write_text for bytes (e.g. a study's compressed archive of records)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with writing(path):
            with open_no_follow(tmp, "wb") as f:  # a link planted at the temp name is refused
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
