"""The served advice equals the CLI's after the server's warm-up (which computes the
common views on a profile of its own)."""

from __future__ import annotations

from pathlib import Path

from aiprof.advise import advise_json
from aiprof.analysis import Query, run
from aiprof.importers import import_paths
from aiprof.store import open_profile
from aiprof.web.library import WARM_VIEWS, Activity, Library, _cache_key, warm_up
from aiprof.web.routes import advice_for


def test_advice_after_warm_up_equals_the_cli(shared_data: Path, tmp_path: Path) -> None:
    # A trace without counters: the warm-up's views used to run on a cursor that could
    # not see the served profile's empty tables, and their shared memo cost the served
    # advice its top item (kernels.host_wait: "no device streams").
    out, _ = import_paths([shared_data / "kineto" / "A100-nccl-parser" / "nccl_data.json.gz"], tmp_path / "a.aiprof")
    with open_profile(out) as prof:
        cli = [(a["rule"], a["gain_pct"]) for a in advise_json(prof)["advice"]]
    lib = Library([tmp_path])
    try:
        warm_up(lib)
        e = lib.get(lib.scan()[0].id)
        assert e.profile is not None
        served = [(a["rule"], a["gain_pct"]) for a in advice_for(e.profile)["advice"]]
        # The views the warm-up's own process computed are kept, and are what a request
        # would compute; the timeline's events are indexed too.
        assert e.timeline is not None and e.timeline.events_indexed
        with open_profile(out) as prof:
            for view in WARM_VIEWS:
                kept = e.cache[_cache_key(view, {})]
                assert kept.table.equals(run(prof, view, Query()).table), view
    finally:
        lib.close()
    assert cli and cli[0][0] == "kernels.host_wait"
    assert served == cli


def test_the_warm_up_waits_for_a_quiet_moment() -> None:
    a = Activity()
    assert not a.wait_quiet(0.3, most_s=0.05)  # the server has just started
    assert a.wait_quiet(0.05, most_s=5)
    with a.request():
        assert a.in_flight == 1
        assert not a.wait_quiet(0.0, most_s=0.05)  # a request is in flight
    assert a.in_flight == 0
    assert not a.wait_quiet(0.3, most_s=0.05)  # one has just ended
    assert a.wait_quiet(0.05, most_s=5)
