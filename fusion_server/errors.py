"""Exceptions the server raises; the client passes them to the user unchanged."""

from __future__ import annotations

import traceback


class FusionError(RuntimeError):
    """Base class of the server's errors."""


class ReentrancyError(FusionError):
    """Code running under the server lock (a custom launch, a fuser) called the client."""


class TensorFailedError(FusionError):
    """The block that computes this tensor failed; `__cause__` holds why.

    A value that failed because an input did carries the first failure (`root`) and the
    ids of the tensors from it to here (`path`): its message names the root failure and
    the chain in one line, and its cause is the root's (one traceback, not one per link).
    """

    def __init__(self, message: str, root: TensorFailedError | None = None, path: tuple[int, ...] = ()):
        super().__init__(message)
        self.root = root
        self.path = path


def after_failed_input(what: str, failed_id: int, failed: BaseException | None) -> TensorFailedError:
    """The error of `what` (a block, or a kernel) not run because tensor `failed_id`
    failed with `failed`: it names the root failure and the chain of tensors to it."""
    root = getattr(failed, "root", None) or failed
    path = (*getattr(failed, "path", ()), failed_id)
    shown = [str(t) for t in reversed(path)]
    if len(shown) > 6:
        shown = [*shown[:3], f"... {len(shown) - 5} more ...", *shown[-2:]]
    err = TensorFailedError(f"{what} not run: an input failed (through tensors {' <- '.join(shown)}); "
                            f"the first failure: {root}", root if isinstance(root, TensorFailedError) else None,
                            path)
    err.__cause__ = root.__cause__ if isinstance(root, TensorFailedError) and root.__cause__ else root
    return err


class DeviceMemoryError(FusionError, MemoryError):
    """The device could not allocate a buffer even after the pool was emptied."""


class DeviceError(FusionError):
    """No usable OpenCL device, or a device that lacks what was asked (e.g. float64)."""


class DroppedTensorError(FusionError):
    """An id that the server no longer knows: the tensor was dropped or belongs elsewhere.
    `tid`: that id, where the server raised it."""

    tid: int | None = None


def kept(exc: BaseException | None) -> BaseException | None:
    """`exc`, fit to be kept as a failed value's cause for as long as the value lives.

    A traceback's frames reach, through each frame's caller, the whole stack that was
    running when it was raised, and every tensor that stack held: kept, they would keep
    those tensors (and their buffers) alive. So the traceback is written into a note on
    the exception (shown when it is printed) and dropped, down the chain of causes. An
    exception still being raised (an interrupt, an exit) is copied, not changed."""
    if exc is None:
        return None
    if not isinstance(exc, Exception):
        try:
            copy = type(exc)(*exc.args)
        except Exception:  # noqa: BLE001 (an exception type that cannot be rebuilt)
            return None
        return copy
    seen = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        tb = link.__traceback__
        if tb is not None:
            where = "".join(traceback.format_tb(tb)).rstrip()
            if hasattr(link, "add_note"):
                link.add_note(f"(raised at)\n{where}")
            else:
                link.fusion_traceback = where
            link.__traceback__ = None
        nxt = link.__cause__ or link.__context__
        if nxt is not None and not isinstance(nxt, Exception):
            nxt = kept(nxt)  # a copy: the original may still be on its way up
        link.__cause__, link.__context__ = nxt, None
        link = nxt
    return exc
