"""The notebook's advice (``_aiprof.advise()`` and the ``%%aiprof`` summary) says which
rules could not judge for lack of data, per missing datum, as ``aiprof advise`` does:
on a telemetry-only capture (nvidia-smi dmon, no rule can fire) and on the V100 trace
(advice, but no Python samples, DataLoader spans, collectives...). No kernel needed:
the HTML and text are the handle's."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from aiprof.importers import import_paths
from aiprof.notebook.handle import ProfileHandle
from aiprof.notebook.inline import summary_html, summary_text
from test_cli import advise_doc

DMON = "nvidia-smi/dmon_pcut_8gpu_gnosia93_slurm-on-aws.txt"
V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
SAMPLES = (
    "no Python stack samples in the profile (an imported trace has none; aiprof record takes them unless --no-python)"
)
PYTHON_RULES = "python.data_loading, python.sync, python.logging, python.optimizer, python.preprocessing"


@pytest.fixture(scope="module")
def profiles(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nj")
    return {
        name: import_paths([shared_data / rel], root / f"{name}.aiprof")[0]
        for name, rel in (("dmon", DMON), ("v100", V100))
    }


def _text(markup: str) -> str:
    """The HTML's text, one space between words (what the reader sees)."""
    import re

    blocks = re.sub(r"</?(div|p|li|ul|pre|table|tr|td|th)\b[^>]*>", " ", markup)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", blocks)).split())


def test_advice_without_items_lists_the_rules_that_could_not_judge(profiles: dict[str, Path]) -> None:
    cli = advise_doc(profiles["dmon"])
    assert cli["advice"] == [] and len(cli["not_judged"]) >= 20
    h = ProfileHandle([profiles["dmon"]])
    try:
        items = h.advise()
        assert list(items) == [] and items.not_judged == cli["not_judged"]
        page = items._repr_html_()
        text = _text(page)
        n = sum(len(g["rules"]) for g in cli["not_judged"])
        assert "No advice: no rule fired on the data this profile holds." in text
        assert "No advice: no rule fired." not in text
        assert f"Not judged · {n} rules could not judge for lack of data:" in text
        assert page.count("<li>") == len(cli["not_judged"])
        for g in cli["not_judged"]:
            assert f"{g['missing']}: {', '.join(g['rules'])}" in text
        assert f"{SAMPLES}: {PYTHON_RULES}" in text  # the CLI's first line, word for word
        # The summary a %%aiprof cell shows: the same list under "Top advice".
        summary = _text(summary_html(h))
        top = summary[summary.index("Top advice") :]
        assert top.startswith(
            f"Top advice No advice: no rule fired on the data this profile holds. Not judged · {n} rules"
        )
        assert f"{SAMPLES}: {PYTHON_RULES}" in top
        assert (
            f"no advice: no rule fired on the data this profile holds; {n} rules could not judge for lack of data"
            in summary_text(h)
        )
    finally:
        h.close()


def test_advice_with_items_still_says_what_was_not_judged(profiles: dict[str, Path]) -> None:
    cli = advise_doc(profiles["v100"])
    rules = [a["rule"] for a in cli["advice"]]
    assert "precision.amp" in rules  # no Tensor Core kernels in this fp32 run
    groups = {g["missing"]: g["rules"] for g in cli["not_judged"]}
    assert groups[SAMPLES] == PYTHON_RULES.split(", ")
    assert groups["no allocator events (profile with profile_memory=True)"] == [
        "memory.peak_high",
        "memory.underused",
        "memory.fragmentation",
    ]
    n = sum(len(r) for r in groups.values())
    h = ProfileHandle([profiles["v100"]])
    try:
        items = h.advise()
        assert [a.rule for a in items] == rules and items.not_judged == cli["not_judged"]
        text = _text(items._repr_html_())
        # After the advice, the list.
        assert text.index("No Tensor Core kernels") < text.index(f"Not judged · {n} rules could not judge")
        for missing, ids in groups.items():
            assert f"{missing}: {', '.join(ids)}" in text
        # The cell's summary shows the top advice and counts them, pointing at the list.
        summary = _text(summary_html(h))
        assert f"{n} rules could not judge for lack of data (_aiprof.advise() lists them)." in summary
        assert SAMPLES not in summary
        assert f"  {n} rules could not judge for lack of data (_aiprof.advise() lists them)" in summary_text(h)
    finally:
        h.close()
