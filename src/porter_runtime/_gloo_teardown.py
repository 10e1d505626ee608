"""Who destroys a Gloo process group: its own Python object, at exit, never DDP's Reducer.

torch's Gloo backend joins its worker threads only in its destructor (unlike NCCL, whose
``shutdown()`` in ``destroy_process_group`` stops its threads). After
``destroy_process_group()`` the last owner of the group can be the C++ Reducer of a DDP
model; when the model is freed (``main()`` returns), the Reducer's binding runs that
destructor holding the GIL, and it joins the workers. A worker may be freeing a finished
collective at that moment: a barrier keeps the works before it alive (weakly), so freeing
the barrier frees the last ``all_reduce``, whose tensor Python owns, and that needs the
GIL. Both wait forever (the worker is slower to let go of the barrier when CPUs are busy).

The Python ``ProcessGroup`` object releases the GIL while it destroys the group, so the
runtime holds one reference to each Gloo default group it created, and drops them at exit
while the interpreter is still whole. The group's threads and sockets stay until then.

Code written for NCCL often never calls ``destroy_process_group()`` (NCCL only warns).
A Gloo group left registered is then destroyed by C++ static destructors after the
interpreter is gone, with its threads still running: "terminate called without an
active exception", SIGABRT, in about one exit in three (llama's example scripts). So at
exit the runtime destroys the default group it created, if the program left it. A group a
library made (accelerate's, for Hugging Face's Trainer) is adopted at exit the same way
where the runtime was asked to (``release_gloo_at_exit``: TrainingArguments off CUDA).
"""
from __future__ import annotations

import atexit
from typing import Any

_kept: list[Any] = []
_adopting = False


def keep_until_exit(group: Any) -> None:
    """Hold ``group`` (a ``torch.distributed`` ProcessGroup, or None) until exit."""
    if group is None:
        return
    if not _kept:
        atexit.register(release)
    _kept.append(group)


def release() -> None:
    """Destroy the default group if the program left it and it is one the runtime made,
    then drop the held groups; a group nothing else holds is destroyed here, GIL released."""
    try:
        import torch.distributed as dist

        if dist.is_initialized() and any(group is dist.group.WORLD for group in _kept):
            dist.destroy_process_group()
    except Exception:  # at exit, never a new error: the old end is still there
        pass
    _kept.clear()


def release_gloo_at_exit() -> None:
    """At exit, destroy the default group if it is a Gloo group that the program left,
    whoever made it (as ``release`` does for the runtime's own). Registered once."""
    global _adopting
    if _adopting:
        return
    _adopting = True
    atexit.register(_adopt_and_release)


def _adopt_and_release() -> None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo":
            world = dist.group.WORLD
            if not any(group is world for group in _kept):
                _kept.append(world)
    except Exception:  # at exit, never a new error
        return
    release()
