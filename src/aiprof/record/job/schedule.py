"""``schedule(wait, warmup, active, repeat, skip_first)``: torch.profiler's semantics.

After ``skip_first`` steps the profiler cycles: ``wait`` steps idle, ``warmup`` steps
collecting but discarding, ``active`` steps recording (the last one of each window
is RECORD_AND_SAVE), ``repeat`` times (0 = until the end).
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class ProfilerAction(enum.Enum):
    """What the profiler does during a step; the names are torch.profiler's."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3

    @property
    def recording(self) -> bool:
        """True in an active window (data of this step is kept)."""
        return self in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


Schedule = Callable[[int], ProfilerAction]


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0) -> Schedule:
    """A step -> :class:`ProfilerAction` function with torch.profiler.schedule's rules."""
    for name, v in (("wait", wait), ("warmup", warmup), ("repeat", repeat), ("skip_first", skip_first)):
        if v < 0:
            raise ValueError(f"schedule: {name} must be >= 0, got {v}")
    if active < 1:
        raise ValueError(f"schedule: active must be >= 1, got {active}")
    cycle = wait + warmup + active

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        pos = step % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if pos < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    # More than one active window: torch.profiler keeps the events of each only with acc_events.
    action.repeats = repeat != 1  # type: ignore[attr-defined]
    action.__qualname__ = (
        f"schedule(wait={wait}, warmup={warmup}, active={active}, repeat={repeat}, skip_first={skip_first})"
    )
    return action


def parse_schedule(text: str) -> Schedule:
    """``"wait,warmup,active[,repeat[,skip_first]]"`` (the CLI's --schedule) -> a schedule."""
    try:
        parts = [int(p) for p in text.split(",")]
    except ValueError:
        raise ValueError(f"--schedule wants integers wait,warmup,active[,repeat[,skip_first]], got {text!r}") from None
    if not 3 <= len(parts) <= 5:
        raise ValueError(f"--schedule wants 3 to 5 numbers (wait,warmup,active[,repeat[,skip_first]]), got {text!r}")
    keys = ("wait", "warmup", "active", "repeat", "skip_first")
    return schedule(**dict(zip(keys, parts, strict=False)))
