"""Steps of unmodified scripts recorded by ``aiprof record``: one per iteration, found
without markers, with and without an optimizer (record.step_finder)."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.record.step_finder import find_steps
from aiprof.store import open_profile
from record_support import record_run

PY = sys.executable

LOOP = """
import torch
torch.set_num_threads(1)
m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
MODE = {mode!r}
opt = torch.optim.SGD(m.parameters(), lr=0.01) if MODE == "optimizer" else None
x = torch.randn(16, 32); y = torch.randn(16, 1)
for i in range(200):
    loss = ((m(x) - y) ** 2).mean()
    if opt:
        opt.zero_grad()
    else:
        m.zero_grad()
    loss.backward()
    if opt:
        opt.step()
    else:
        with torch.no_grad():
            for p in m.parameters():
                p -= 0.01 * p.grad
"""

LOADER = """
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.set_num_threads(1)
m = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
data = DataLoader(TensorDataset(torch.randn(400, 8), torch.randn(400, 1)), batch_size=8)
def evaluate():
    with torch.no_grad():
        return sum(float(((m(x) - y) ** 2).mean()) for x, y in data)
for epoch in range(2):
    for x, y in data:
        opt.zero_grad()
        ((m(x) - y) ** 2).mean().backward()
        opt.step()
    evaluate()
"""


def record(tmp_path: Path, name: str, body: str, *extra: str) -> Path:
    return record_run(tmp_path, body, *extra, name=name, out=name)[0] / "rank0.aiprof"


def steps_of(path: Path) -> list[tuple[int, int, int]]:
    with open_profile(path) as p:
        return [
            tuple(r)
            for r in p.con.execute("select step, ts, dur from events where kind = 'step' order by ts").fetchall()
        ]


def how(path: Path) -> dict[str, Any]:
    m: dict[str, Any] = json.loads((path / "profile.json").read_text())
    return dict(m["record"]["steps"])


@pytest.mark.parametrize(("mode", "rule"), [("optimizer", "optimizer"), ("manual", "backward")])
def test_200_iterations_are_200_steps(tmp_path: Path, mode: str, rule: str) -> None:
    pytest.importorskip("torch")
    path = record(tmp_path, mode, LOOP.format(mode=mode))
    st = steps_of(path)
    assert [s for s, _, _ in st] == list(range(200))
    # Contiguous, in order, none empty: each iteration is one step.
    assert all(b[1] == a[1] + a[2] for a, b in itertools.pairwise(st))
    assert all(d > 0 for _, _, d in st)
    h = how(path)
    assert h["rule"] == rule and h["loop"].endswith(":8 (<module>)"), h
    with open_profile(path) as p:
        (before,) = p.con.execute(
            "select count(*) from events where name = 'aiprof: before the first step' and ts + dur <= ?", [st[0][1]]
        ).fetchone()
    assert before == 1, "the time before the first iteration is startup, not a step"


def test_a_dataloader_loop_over_two_epochs_with_an_eval_pass(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    path = record(tmp_path, "loader", LOADER)
    st = steps_of(path)
    assert len(st) == 100, "2 epochs of 50 batches"
    with open_profile(path) as p:
        (first_sample,) = p.con.execute("select min(ts) from samples").fetchone()
    assert st[0][1] > first_sample


def test_find_steps_rules_on_marks() -> None:
    # Explicit marks win over anchors; optimizer anchors over backward ones; a
    # DataLoader __next__ between two anchors starts the iteration.
    marks = {
        "steps": [],
        "anchors": [
            ("dataloader_next", 100, 110, 7),
            ("backward", 150, 160, 7),
            ("optimizer", 170, 170, 7),
            ("dataloader_next", 200, 210, 7),
            ("backward", 250, 260, 7),
            ("optimizer", 270, 270, 7),
        ],
        "loop": None,
    }
    found = find_steps(marks, 0, whole_process=True)
    assert found.how["rule"] == "optimizer"
    assert found.steps == [(100, 200, 0, 7), (200, 300, 1, 7)]
    assert found.startup == (0, 100, 7)
    no_opt = {**marks, "anchors": [a for a in marks["anchors"] if a[0] != "optimizer"]}
    assert find_steps(no_opt, 0, whole_process=False).steps == [(100, 200, 0, 7), (200, 300, 1, 7)]
    marked = {**marks, "steps": [(0, 180, 0, 7), (180, 280, 1, 7)], "auto": False}
    found = find_steps(marked, 0, whole_process=True)
    assert found.how["rule"] == "marked" and found.steps == [(100, 180, 0, 7), (180, 280, 1, 7)]
    assert find_steps({"steps": [], "anchors": []}, 0, whole_process=True).how["rule"] == "none"
