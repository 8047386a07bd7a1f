"""What every workload here shares: ``--fix`` (the planted problem fixed), ``--steps``,
and one intra-op thread (the machine is shared; the advice must not depend on cores)."""

from __future__ import annotations

import argparse

import torch


def workload_args() -> argparse.Namespace:
    """The parsed ``--fix`` / ``--steps`` (default 40), after setting one torch thread."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--fix", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)
    return args
