"""A profile handle: what ``%%aiprof`` leaves in ``_aiprof`` and :func:`aiprof.last`.

Every method is the library call behind a CLI verb, so the rows are the CLI's:
``report`` is ``aiprof report --view``, ``advise`` is ``aiprof advise``, ``sql`` is
``aiprof sql``, ``timechart`` is ``aiprof timechart``, ``html`` is ``aiprof report
--html``, ``serve`` is ``aiprof serve``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis import Query, run, views
from ..errors import AiprofError
from ..store import Profile, find_profiles, open_profile
from .table import Table

if TYPE_CHECKING:
    from ..advise import Advice
    from .kernel_server import KernelServer

_last: ProfileHandle | None = None


def last() -> ProfileHandle:
    """The profile of the last ``%%aiprof`` cell or ``%aiprof`` line in this kernel."""
    if _last is None:
        raise AiprofError("no profile yet: run a cell under %%aiprof, or open one with %aiprof PROFILE")
    return _last


def set_last(handle: ProfileHandle) -> None:
    global _last
    _last = handle


class AdviceList(list["Advice"]):
    """Advice items, ranked by expected gain; displays as HTML in a notebook, with the
    rules that could not judge for lack of data (``not_judged``, as ``aiprof advise
    --format json`` lists them: ``{"missing": reason, "rules": [ids]}`` per missing datum)."""

    def __init__(
        self,
        items: Iterable[Advice] = (),
        not_judged: list[dict[str, Any]] | None = None,
        gain_of: str = "step time",
    ) -> None:
        super().__init__(items)
        self.not_judged: list[dict[str, Any]] = list(not_judged or [])
        #: What the gains are shares of (``advise.gain_of``).
        self.gain_of = gain_of

    def to_json(self) -> list[dict[str, Any]]:
        return [a.to_json() for a in self]

    def _repr_html_(self) -> str:
        from .inline import advice_html

        return advice_html(self.to_json(), len(self), self.not_judged, gain_of=self.gain_of)


class ProfileHandle:
    """One profile (or a folder of them), opened for analysis in the kernel."""

    def __init__(
        self,
        paths: list[Path],
        *,
        keep: tempfile.TemporaryDirectory[str] | None = None,
        label: str | None = None,
        notes: list[str] | None = None,
    ) -> None:
        self.paths = list(paths)
        self.label = label or ", ".join(p.name for p in self.paths)
        self.notes = list(notes or [])
        """What the recording or the import warned about (shown with the profile's own warnings)."""
        self._keep = keep  # a trace's imported profile lives as long as this handle
        self._profile: Profile | None = None

    @property
    def path(self) -> Path:
        """The profile folder (the first, when several were opened)."""
        return self.paths[0]

    @property
    def profile(self) -> Profile:
        """The opened :class:`~aiprof.store.Profile` (DuckDB over its tables)."""
        if self._profile is None:
            self._profile = open_profile(*self.paths)
        return self._profile

    def close(self) -> None:
        if self._profile is not None:
            self._profile.close()
            self._profile = None

    # -- the verbs ---------------------------------------------------------------------

    def report(
        self,
        view: str = "overview",
        filter: str | list[str] | tuple[str, ...] | None = None,
        sort: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        group_by: str = "name",
    ) -> Table:
        """The rows of ``view`` (``aiprof report --view VIEW``): ``filter`` is one
        ``COL=V``-style expression or a list of them, ``sort`` is ``-COL[,COL]``."""
        filters = [filter] if isinstance(filter, str) else list(filter or [])
        q = Query.parse(filters, sort, limit, offset)
        res = run(self.profile, view, q, {"group_by": group_by})
        return Table(res.table, title=views()[view].title, total=res.total, units=res.units)

    def advise(self, min_severity: str = "low") -> AdviceList:
        """Optimization advice with evidence, ranked by expected gain (``aiprof advise``);
        its ``not_judged`` lists the rules that could not judge for lack of data."""
        from ..advise import VERDICTS, advise, gain_of, not_judged
        from ..advise.base import Context

        ctx = Context(self.profile)
        items = advise(self.profile, min_severity=min_severity, ctx=ctx)
        return AdviceList(items, not_judged(ctx.cache.get(VERDICTS) or []), gain_of(self.profile, ctx))

    def sql(self, query: str) -> Table:
        """QUERY over the tables events, counters, memory, samples, frames, tracks,
        kernel_metrics (``aiprof sql``, DuckDB's dialect)."""
        return Table(self.profile.sql(query), title="sql")

    def timechart(self, path: str | os.PathLike[str]) -> Path:
        """Write the profile as Chrome Trace JSON (``.json`` or ``.json.gz``) for Perfetto."""
        from ..export.chrome_trace import write_chrome_trace

        out = Path(path)
        write_chrome_trace(self.profile, out)
        return out

    def html(self, path: str | os.PathLike[str]) -> Path:
        """Write the one-file HTML report (``aiprof report --html``): the web UI with the
        views embedded, opened from disk with no server."""
        from ..render.html import write_report

        return write_report(self.profile, path)

    def serve(self) -> KernelServer:
        """The web UI and REST API of this profile, served by the kernel on 127.0.0.1
        (``aiprof serve``); displays as the timeline in a frame. Stopped with the kernel."""
        from .kernel_server import serve

        return serve(self.paths)

    def show(self, timeline: bool = True) -> None:
        """Display the overview, the top advice and the top functions (and the timeline)."""
        from .inline import display_profile

        display_profile(self, timeline=timeline)

    def __repr__(self) -> str:
        from .inline import summary_text

        return summary_text(self)

    def _repr_html_(self) -> str:
        from .inline import summary_html

        return summary_html(self)


def open_handle(paths: list[Path]) -> ProfileHandle:
    """A handle on profiles, folders of profiles, or trace files (imported, as the CLI
    does, into a temporary folder that lives as long as the handle)."""
    if not paths:
        raise AiprofError("give a profile, a folder of profiles, or a trace file")
    folders: list[Path] = []
    notes: list[str] = []
    keep: tempfile.TemporaryDirectory[str] | None = None
    for i, p in enumerate(paths):
        if not p.exists():
            raise AiprofError(f"{p}: no such file or folder")
        if find_profiles(p):
            folders.append(p)
            continue
        from ..importers import import_paths, trace_inputs

        if keep is None:
            keep = tempfile.TemporaryDirectory(prefix="aiprof-nb-")
        for j, f in enumerate(trace_inputs(p)):
            stem = f.name.split(".")[0] or "trace"
            out, ctx = import_paths([f], Path(keep.name) / f"{stem}-{i}-{j}.aiprof")
            notes.extend(f"warning: {w}" for w in ctx.warnings)
            folders.append(out)
    label = ", ".join(p.name for p in paths)
    h = ProfileHandle(folders, keep=keep, label=label, notes=notes)
    h.profile  # noqa: B018 - open now, so a bad profile is an error here, not at display
    return h
