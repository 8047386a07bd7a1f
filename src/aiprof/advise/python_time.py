"""Advice from the Python samples alone (default ``aiprof record``, no torch.profiler):
which phase of the step (analysis/phases.py) costs most, and the line that costs most in it."""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass, field
from typing import Any

from .base import Context, NotEnoughData, Outcome, make, rule, stack_frames
from .steps import OFF_THE_GIL_PT, innermost_user, off_the_gil, runner_in_steps

#: tb-profiler's DataLoader threshold, applied to the sampled data-loading phase.
DATA_LOADING_SHARE = 0.05
#: tb-profiler flags host syncs per step; from samples: .item()/.cpu()/.tolist() time.
SYNC_SHARE = 0.03
#: msprof-analyze's "host-bound" floor for time outside compute: logging/printing.
LOGGING_SHARE = 0.03
#: Optimizer time above this share of the step (PyTorch's foreach/fused optimizers).
OPTIMIZER_SHARE = 0.15
#: User Python in the step outside the framework's calls (per-sample preprocessing,
#: Python loops over tensors): no peer tool has this rule; tb-profiler's 5% floor for one
#: cause of step time, doubled, since the loop's own bookkeeping is Python of this kind too.
PREPROCESS_SHARE = 0.10

#: The user's Python outside the framework's calls waits (off the CPU) rather than
#: computes where the step's thread was provably off the CPU (neither running nor waiting
#: for a CPU) for at least this share of that phase's time in the steps the recorder
#: measured; a blocking call on its hot line or under it says so too, unless the steps'
#: CPU time shows that the phase ran on a CPU for more than this share of its time.
WAIT_SHARE = 0.5
#: Fewest samples of the step threads inside the steps for a phase's share to be judged:
#: a crashed run's one sample read "the optimizer step takes 100% of the step" (high).
#: At 20 a share's 95% interval is still some ±15 points (the evidence gives the samples).
MIN_STEP_SAMPLES = 20
#: A line that calls something that blocks (a C call has no frame of its own): a sleep,
#: a wait for an event or a condition, a queue's or a future's get, a socket's receive,
#: a file's read, a select.
_BLOCKING_LINE = re.compile(
    r"(\bsleep|\.wait\w*|\.get|\.recv\w*|\.read\w*|\bselect|\.acquire|\.accept|\.result|\.communicate|\burlopen|"
    r"\binput|\.poll)\s*\("
)
#: Standard-library modules whose frames, under the user's line, wait: threads, locks,
#: queues, selectors, sockets, processes, futures, HTTP.
_BLOCKING_FILE = re.compile(
    r"/(threading|queue|selectors|socket|ssl|subprocess)\.py$|/multiprocessing/|/asyncio/|/concurrent/futures/|"
    r"/urllib/request\.py$|/http/client\.py$"
)

#: A batched collate function under a name that reads as the user's own: the per-item
#: transform written once over the batch dimension (the fix of per-item Python in the Dataset).
_COLLATE_DEF = (
    "def your_batched_collate(items):  # __getitem__ returns the raw item; the transform runs once per batch\n"
    "    x, y = torch.utils.data.default_collate(items)\n"
    "    return your_transform(x), y  # e.g. (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-6)\n"
)

_FIXES = {
    "data_loading": (
        "Take the per-sample work out of the training process's critical path: DataLoader workers "
        "(num_workers>0, persistent_workers=True) where cores are free, and vectorise per-item Python "
        "transforms over the batch (a collate_fn or a batched transform).",
        _COLLATE_DEF + "loader = DataLoader(ds, batch_size=B, num_workers=2, persistent_workers=True, "
        "collate_fn=your_batched_collate)",
    ),
    "sync": (
        "Read values back from the device less often: accumulate on the device and call .item() / .cpu() "
        "every N steps, not every step.",
        "running += loss.detach()\nif step % 50 == 0:\n    print(running.item() / 50); running.zero_()",
    ),
    "logging": (
        "Log less often (every N steps) and format lazily; printing every step stalls the loop.",
        "if step % 50 == 0:\n    log.info('step %d loss %.4f', step, loss.item())",
    ),
    "other_python": (
        "Vectorise the Python work in the training loop: a loop over a tensor's elements or rows in Python "
        "costs an interpreter round trip per element; one whole-tensor operation does the same work in one "
        "call. Where the code prepares the batch's inputs, it can also go into the Dataset or a batched "
        "collate_fn.",
        "# a Python loop over a tensor's elements, e.g. sum(float(v) * float(v) for v in g.flatten()):\n"
        "sq_norm = torch.linalg.vector_norm(g) ** 2  # one op over the whole tensor\n"
        "# a loop over a batch's rows: one op over the batch dimension\n"
        "x = (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-6)",
    ),
    "optimizer": (
        "Use the foreach or fused implementation of the optimizer (one kernel over all parameters).",
        "opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)  # fused=True on CUDA",
    ),
}

#: A line that saves a checkpoint or the model's state: serialising and writing it is
#: neither vectorisable Python nor a wait to overlap inside the step.
_SAVE_LINE = re.compile(
    r"(\btorch\.save|\.save_pretrained|\bsave_checkpoint|\bsave_model|\bpickle\.dumps?|\b(np|numpy)\.savez?\w*|"
    r"\bdcp\.save|\bcheckpoint\.save|\bsafetensors\.\w*save\w*|\bsave_file)\s*\("
)
#: The fix where the step's costliest user line saves a checkpoint.
_SAVE_FIX = (
    "Save less often, or in the background: the steps wait while the checkpoint is serialised and written. Copy "
    "the state to host memory at the step boundary and write it from a thread or another process "
    "(torch.distributed.checkpoint.async_save does both), and keep every Nth checkpoint only if that is all "
    "the run needs."
)
_SAVE_PT = (
    "import copy, threading\n"
    "if step % SAVE_EVERY == 0:  # less often\n"
    "    state = copy.deepcopy({'model': model.state_dict(), 'opt': opt.state_dict()})  # on the CPU here\n"
    "    threading.Thread(target=torch.save, args=(state, path), daemon=True).start()  # written beside the steps\n"
    "# on a GPU, or distributed: torch.distributed.checkpoint.async_save(state_dict, checkpoint_id=path)"
)

#: The fix of user Python that waits off the CPU: overlap the wait or remove it.
_WAIT_FIX = (
    "Overlap the wait with the step's work, or remove it: vectorising cannot help, the time is spent waiting "
    "off the CPU, not computing. A sleep in the loop adds its whole time to every step: remove it (or throttle "
    "elsewhere). A wait for a queue, a lock, a socket or a file: start it ahead of the step, in a background "
    "thread or in the DataLoader's workers (which prefetch batches), so that what the step needs is there when "
    "it asks; where the loop only checks for something, poll without blocking (a timeout of 0)."
)
_WAIT_PT = (
    "# time.sleep(...) in the loop: remove it; it adds its whole time to every step\n"
    "# a blocking read (queue, socket, file, lock): start the next one before the step, in a thread\n"
    "from concurrent.futures import ThreadPoolExecutor\n"
    "pool = ThreadPoolExecutor(max_workers=1)\n"
    "pending = pool.submit(your_blocking_read)  # e.g. q.get, sock.recv, f.read\n"
    "for step in range(num_steps):\n"
    "    item = pending.result()  # started during the previous step: little or no wait left\n"
    "    pending = pool.submit(your_blocking_read)\n"
    "    train_step(item)"
)

#: The loading's own Python made cheaper, where DataLoader workers cannot gain (no idle
#: CPU for them): the fix of python.data_loading and the input rules then.
VECTORISE_FIX = (
    "Make the per-item work cheaper rather than parallel: the host had no idle CPU for DataLoader workers "
    "to use, so they would only share the same cores. Vectorise the per-item Python transform over the "
    "batch (a batched collate_fn or transform: one tensor operation per batch instead of a Python loop "
    "per item and element), or precompute it once before training."
)
VECTORISE_PT = _COLLATE_DEF + "loader = DataLoader(ds, batch_size=B, collate_fn=your_batched_collate)"

#: The fix where the loader's workers wait rather than compute (:func:`waiting_workers`).
WAITING_WORKERS_FIX = (
    "The DataLoader's workers wait (on files, the network, a sleep) more than they compute: raise num_workers "
    "past the core count (waiting workers do not need a core each) and prefetch_factor, or make each item's "
    "wait cheaper: read in bulk, cache what is read every epoch, or fetch asynchronously."
)
WAITING_WORKERS_PT = "loader = DataLoader(ds, batch_size=B, num_workers=16, prefetch_factor=4, persistent_workers=True)"

#: python.sync on a profile without an accelerator: ``.item()`` / ``float()`` read host
#: memory and wait for no device; what costs is a read per element.
_HOST_READS = (
    "Reading tensor values into Python, one at a time (.item(), float(), .tolist()) (Python samples)",
    "Read tensors whole, not element by element: compute with tensor operations and convert the result "
    "once (one float() of a reduction, one .tolist() where Python needs every value); read logged "
    "metrics every N steps.",
    "total = float(g.pow(2).sum())  # one read, not float(v) for each element of g\n"
    "values = t.tolist()  # where Python needs every value: one call",
)


def per_rank(ctx: Context, phase: str) -> dict[int, tuple[float, float]]:
    """Rank -> (its step time, the phase's time in it), µs, over all its steps."""
    out: dict[int, tuple[float, float]] = {}
    for r in ctx.rows("phases") or []:
        if r["step"] is not None:
            continue
        t, mine = out.get(int(r["rank"]), (0.0, 0.0))
        v = float(r["time_us"] or 0.0)
        out[int(r["rank"])] = (t + v, mine + (v if r["phase"] == phase else 0.0))
    return out


def no_samples(ctx: Context) -> NotEnoughData:
    """Why the Python-sample rules have nothing to judge: no samples at all, or samples
    that all fall outside the steps (a sampler that stopped early: ``aiprof record``
    killed, its profile made by ``aiprof recover`` from what the job wrote)."""
    got = (
        ctx.profile.con.execute("SELECT count(*), max(ts) FROM samples").fetchall()
        if ctx.profile.tables.get("samples")
        else [(0, None)]
    )
    n, last = int(got[0][0] or 0), got[0][1]
    if not n:
        return NotEnoughData(
            "no Python stack samples in the profile (an imported trace has none; aiprof record takes them unless "
            "--no-python)"
        )
    steps = [r for r in ctx.rows("steps") or [] if r.get("step") is not None]
    starts = [float(r["start_us"]) for r in steps]
    end = max((float(r["start_us"]) + float(r["duration_us"] or 0.0) for r in steps), default=0.0)
    # Stopped early: the steps went on for many sampling intervals after the last sample
    # (short steps after the last sample are only too short to be sampled).
    if starts and last is not None and float(last) / 1000.0 < min(starts) and end - float(last) / 1000.0 > 100_000.0:
        return NotEnoughData(
            f"the profile's {n} Python stack samples all come before the first step (the last at "
            f"{float(last) / 1e9:.2f} s, the first step at {min(starts) / 1e6:.2f} s): the sampler stopped early, "
            "as when aiprof record is killed and aiprof recover makes the profile"
        )
    return too_few_samples()


def too_few_samples() -> NotEnoughData:
    """Why a phase's share is not judged on the samples the steps hold."""
    return NotEnoughData(
        f"fewer than {MIN_STEP_SAMPLES} Python samples of the steps' threads in the steps, too few for a phase's "
        "share (record longer, or with a higher --rate)"
    )


def _phase(ctx: Context, phase: str) -> tuple[float, float, float, dict[str, Any] | None] | NotEnoughData:
    """(phase share of the step time over all ranks, its time in µs, samples, the
    costliest line) or why not."""
    rows = ctx.rows("phases")
    if not rows:
        return no_samples(ctx)
    ranks = per_rank(ctx, phase)
    total = sum(t for t, _ in ranks.values())
    if total <= 0:
        return no_samples(ctx)
    mine = sum(m for _, m in ranks.values())
    inside = sum(int(r["samples"] or 0) for r in rows if r["step"] is None)
    if inside < MIN_STEP_SAMPLES:
        return too_few_samples()
    samples = sum(int(r["samples"] or 0) for r in rows if r["step"] is None and r["phase"] == phase)
    hot = [r for r in ctx.rows("phase_hotspots") or [] if r["phase"] == phase]
    top = max(hot, key=lambda r: r["samples"]) if hot else None
    return mine / total, mine, float(samples), top


def under_loader(ctx: Context) -> set[tuple[int, str, str, int]]:
    """(rank, function, file, line) of the user's frames that run under the DataLoader
    (a ``torch/utils/data/`` frame above them: the Dataset's ``__getitem__``, its
    transforms, a ``collate_fn``): per-item work, as opposed to the training loop's own
    code. From the profile's stack frames (phase_hotspots names a sample's innermost
    frame of the user's code; this says whether the loader called it)."""

    def find() -> set[tuple[int, str, str, int]]:
        from ..analysis.common import fetch
        from ..analysis.phases import is_user_code

        if not ctx.profile.tables.get("frames"):
            return set()
        ranks = fetch(ctx.profile, "SELECT DISTINCT rank FROM frames")["rank"].tolist()
        nodes = {(int(r), f): node for r in ranks for f, node in stack_frames(ctx, int(r)).items()}
        memo: dict[tuple[int, int], bool] = {}

        def loader_here_or_above(key: tuple[int, int]) -> bool:
            """Whether the frame ``key`` or one of its callers is the DataLoader's."""
            chain: list[tuple[int, int]] = []
            k = key
            while k in nodes and k not in memo and len(chain) < 4096:
                chain.append(k)
                k = (k[0], nodes[k][0])
            seen = memo.get(k, False)
            for c in reversed(chain):  # from the outermost down
                seen = seen or "/torch/utils/data/" in nodes[c][2].replace("\\", "/")
                memo[c] = seen
            return memo.get(key, seen)

        def below(key: tuple[int, int]) -> bool:
            parent = (key[0], nodes[key][0])
            return parent in nodes and loader_here_or_above(parent)

        out: set[tuple[int, str, str, int]] = set()
        for key, (_, fn, fl, ln) in nodes.items():
            if is_user_code(fl) and below(key):
                out.add((key[0], fn, fl, ln))
        return out

    found: set[tuple[int, str, str, int]] = ctx.profile.memo("advise:under_loader", find)
    return found


def per_item_us(ctx: Context, phases: tuple[str, ...]) -> dict[int, float]:
    """Rank -> sampled time (µs) of ``phases`` spent in the user's own code that the
    DataLoader calls (:func:`under_loader`): what vectorising the per-item work can
    remove at most."""
    mine = under_loader(ctx)
    out: dict[int, float] = {}
    for r in ctx.rows("phase_hotspots") or []:
        if r["phase"] in phases and (int(r["rank"]), str(r["function"]), str(r["file"]), int(r["line"])) in mine:
            out[int(r["rank"])] = out.get(int(r["rank"]), 0.0) + float(r["time_us"] or 0.0)
    return out


#: DataLoader workers that used less than this share of one core (%, all together) while
#: the steps waited for them wait rather than compute (:func:`loader_overlap_us`).
WAITING_WORKERS_PCT = 50.0


def waiting_workers(row: dict[str, Any]) -> bool:
    """Whether a ``loader_cpu`` row's loader has workers that wait rather than compute."""
    kids = row.get("children_cpu_pct")
    return int(row.get("worker_samples") or 0) > 0 and kids is not None and float(kids) < WAITING_WORKERS_PCT


def loader_overlap_us(ctx: Context, per: dict[int, tuple[float, float]]) -> tuple[float, int | None]:
    """What loader workers can save of (step time, loading time) per rank (µs), and the
    workers that assumes (the host's cores; None when the cores were not recorded).

    The loading L of a step T either runs in the main process or, where the loader
    has workers (``loader_cpu``: samples under the multi-process iterator), waits for
    them. Workers add CPU only where the host has it idle: the job ran at p cores
    during the steps (``proc_cpu``) and the host's cores were sys busy (``sys_cpu``,
    the job's own use included), so with workers the job can use at most
    min(C, p + (1 - sys) C) cores; they take no CPU from the other processes (an A/B
    on a host whose cores were all busy gained nothing).

    - Run in the main process: with W = C workers the steps' CPU work, T p, still
      has to run: a step takes max(R, T p / those cores), R = T - L. On an idle host
      (p = 1, sys = 1 / C) that is max(R, T / C): on one core, no saving; on busy
      cores (sys = 100%), none either.
    - Waiting for workers already there: more workers add only the idle cores, so the
      saving is at most T (1 - sys); except where the workers hardly used the CPU
      while the step waited for them (``children_cpu``: under
      :data:`WAITING_WORKERS_PCT` of a core): they wait (on files, the network, a
      sleep) rather than compute, and more of them overlap their waits whatever the
      host's idle CPU: the saving is the wait, L (a new user's loader sleeping 50 ms an
      item ran 66% faster with 8 workers than with 2 on a busy 2-core host, where the
      idle-CPU bound had promised 11.8%).

    Worker start-up and the batches' transfer between processes are not counted
    (persistent workers start once)."""
    cores = ctx.cores()
    if not cores:
        return sum(m for _, m in per.values()), None
    cpu = {int(r["rank"]): r for r in ctx.rows("loader_cpu") or []}
    saved = 0.0
    for rank, (t, load) in per.items():
        c = cores.get(rank, min(cores.values()))
        row = cpu.get(rank, {})
        # A loader with workers: the rest of its time in the main process is the
        # iterator's own work, which more workers do not move either.
        waiting = load if int(row.get("worker_samples") or 0) > 0 else 0.0
        p = min(max(float(row.get("proc_cpu_pct") or 100.0) / 100.0, 1e-3), 1.0)
        busy = row.get("sys_cpu_pct")
        host = min(max(float(busy) / 100.0, p / c), 1.0) if busy is not None else p / c
        job_cores = min(float(c), p + (1.0 - host) * c)
        after = max(t - (load - waiting), t * p / job_cores)
        more = waiting if waiting_workers(row) else min(waiting, t * (1.0 - host))
        saved += min(max(t - after, 0.0) + more, load)
    return saved, min(cores.values())


@dataclass
class LoaderPlan:
    """What a data-loading fix can save, from the recorded CPU (:func:`loader_plan`)."""

    estimate_us: float
    """What the proposed fix saves at most (µs)."""
    cores: int | None
    """The host's cores (None: not recorded, and the estimate is the loading's whole time)."""
    workers_us: float
    """What DataLoader workers would save (µs), bounded by the idle CPU."""
    vectorise: bool
    """The fix is to make the per-item work cheaper: workers cannot gain enough."""
    per_item_us: float
    """The user's per-item Python under the DataLoader (µs)."""
    cpu: dict[str, Any]
    """The first rank's ``loader_cpu`` row (empty where none)."""

    def note(self) -> str:
        """What the recorded CPU says of the fix (a sentence or two, with a leading space)."""
        if self.cores is None:
            return ""
        out = ""
        if self.cpu.get("worker_samples"):
            if waiting_workers(self.cpu):
                out += (
                    f" The loader already has workers, and they used {float(self.cpu['children_cpu_pct']):.0f}% of a "
                    "core while the steps waited for them: they wait (files, network, sleep) rather than compute, "
                    "so more of them overlap their waits whatever the host's idle CPU."
                )
            else:
                out += " The loader already has workers; more can use only the host's idle cores."
        if self.cpu.get("sys_cpu_pct") is not None:
            out += (
                f" During the steps the job used {self.cpu['proc_cpu_pct'] or 0:.0f}% of a core and the host's "
                f"cores were {self.cpu['sys_cpu_pct']:.0f}% busy (rank {self.cpu['rank']})."
            )
        if self.vectorise:
            return out + (
                f" Workers can use only the idle CPU: with {self.cores} of them on {self.cores} cores, at most "
                f"{self.workers_us / 1000:,.1f} ms saved over the profile. The per-item Python the DataLoader runs "
                f"(the Dataset's code) takes {self.per_item_us / 1000:,.1f} ms: make it cheaper instead."
            )
        if self.cpu.get("worker_samples"):
            return out + f" More workers: at most {self.workers_us / 1000:,.1f} ms saved over the profile."
        return out + (
            f" With {self.cores} DataLoader workers on {self.cores} cores, loading runs beside the rest of the "
            f"step: at most {self.workers_us / 1000:,.1f} ms saved over the profile."
        )

    def evidence(self) -> dict[str, Any]:
        if self.cores is None:
            return {}
        out: dict[str, Any] = {"cores": self.cores, "overlap_us": self.workers_us}
        if self.cpu.get("sys_cpu_pct") is not None:
            out |= {"proc_cpu_pct": self.cpu["proc_cpu_pct"], "sys_cpu_pct": self.cpu["sys_cpu_pct"]}
        if self.vectorise:
            out["per_item_us"] = self.per_item_us
        return out


def loader_plan(
    ctx: Context, per: dict[int, tuple[float, float]], threshold_us: float, phases: tuple[str, ...]
) -> LoaderPlan | None:
    """The data-loading fix that fits the recorded CPU, for (step time, loading time)
    per rank: workers where they save more than ``threshold_us`` (:func:`loader_overlap_us`);
    else, where the loading runs in the main process, making its per-item Python
    cheaper (vectorised over the batch), estimated at that Python's sampled time
    (``phases``' samples in the user's code under the DataLoader) when it is above
    ``threshold_us``; else None: nothing the fix can gain (a loader that already has
    workers on busy cores, the rule's own fix applied). Where the host's cores were not
    recorded, workers, estimated at the whole loading time."""
    workers, cores = loader_overlap_us(ctx, per)
    cpu = (ctx.rows("loader_cpu") or [{}])[0]
    if cores is None or workers > threshold_us:
        return LoaderPlan(workers, cores, workers, False, 0.0, cpu)
    if any(int(r.get("worker_samples") or 0) for r in ctx.rows("loader_cpu") or []):
        return None
    item = sum(per_item_us(ctx, phases).values())
    if item <= threshold_us:
        return None
    return LoaderPlan(item, cores, workers, True, item, cpu)


@dataclass
class Wait:
    """Whether a phase's hot line waits off the CPU (:func:`waits_off_cpu`), and why."""

    waits: bool
    call: str | None = None
    """The blocking call its source line makes (the line's text), where it makes one."""
    below: str | None = None
    """The standard-library function that most of the line's samples wait in, where they do."""
    below_pct: float = 0.0
    """The share of the line's samples that wait in a call (%)."""
    off_us: float | None = None
    """Least time of the phase the step's thread was off the CPU (neither running nor
    waiting for a CPU), over the steps the recorder measured (None: none measured)."""
    phase_us: float = 0.0
    """The phase's time in those steps."""
    cpu_us: float = 0.0
    """The step thread's CPU time in those steps."""
    wall_us: float = 0.0
    """Their wall time."""
    reasons: list[str] = field(default_factory=list)
    """What says it waits: 'line', 'stack', 'cpu'."""

    def said(self) -> str:
        """Why the line waits (a clause), from what says so."""
        parts = []
        if self.call:
            parts.append(f"the line calls `{self.call}`")
        if self.below:
            parts.append(f"{self.below_pct:.0f}% of its samples wait in {self.below}")
        elif "stack" in self.reasons and not self.call:
            parts.append(f"{self.below_pct:.0f}% of its samples wait in a call")
        if self.off_us is not None and self.phase_us > 0:
            parts.append(
                f"the step's thread ran on a CPU {self.cpu_us / 1000:,.0f} ms of the measured steps' "
                f"{self.wall_us / 1000:,.0f} ms, and was off the CPU for at least {self.off_us / 1000:,.0f} ms of "
                f"the {self.phase_us / 1000:,.0f} ms of this user Python in them"
            )
        return "; ".join(parts)


def _line_text(top: dict[str, Any]) -> str:
    """The source text of a phase_hotspots row's line (empty where the file is gone)."""
    return linecache.getline(str(top["file"]), int(top["line"])).strip() if int(top["line"] or 0) > 0 else ""


def waits_off_cpu(ctx: Context, phase: str, top: dict[str, Any]) -> Wait:
    """Whether ``phase``'s hot line ``top`` (a phase_hotspots row) waits off the CPU
    rather than computes. Three witnesses:

    - its source line calls something that blocks (:data:`_BLOCKING_LINE`);
    - most of the step thread's samples whose innermost frame of the user's code is
      that line wait below it, in a standard-library call (:data:`_BLOCKING_FILE`),
      or on an innermost line that blocks;
    - the steps' own figures (the step thread's CPU time and run-queue wait, where the
      recorder measured them): in each step the thread was off the CPU for its wall
      time less the two; at least that less the time of the step's other phases was
      this phase's. At least :data:`WAIT_SHARE` of the phase's time there: it waits.

    Where the figures show the thread on a CPU (or waiting for one) for more than
    :data:`WAIT_SHARE` of the phase's time, the phase computes whatever its line says
    (``d.get(k)`` calls no queue)."""
    out = Wait(False)
    text = _line_text(top)
    if _BLOCKING_LINE.search(text):
        out.call, out.reasons = text, ["line"]
    below, out.below_pct = _waits_below(
        ctx, int(top["rank"]), (str(top["function"]), str(top["file"]), int(top["line"]))
    )
    if out.below_pct >= 100.0 * WAIT_SHARE:
        out.below = below
        out.reasons.append("stack")
    off = _off_cpu(ctx, phase)
    if off is not None:
        out.off_us, upper, out.phase_us, out.cpu_us, out.wall_us = off
        if out.phase_us > 0 and upper < WAIT_SHARE * out.phase_us:
            return Wait(False)  # the thread was on a CPU through most of the phase: it computes
        if out.phase_us > 0 and out.off_us >= WAIT_SHARE * out.phase_us:
            out.reasons.append("cpu")
    out.waits = bool(out.reasons)
    return out


def _waits_below(ctx: Context, rank: int, where: tuple[str, str, int]) -> tuple[str | None, float]:
    """(the standard-library function most of them wait in, % of them that wait) of the
    step thread's samples whose innermost frame of the user's code is ``where``."""
    from ..analysis.common import fetch

    if not ctx.profile.tables.get("samples") or not ctx.profile.tables.get("frames"):
        return None, 0.0
    got = fetch(
        ctx.profile,
        "SELECT stack_id, count(*) AS n FROM samples WHERE rank = ? AND (tid IN (SELECT DISTINCT tid FROM events "
        "WHERE kind = 'step' AND rank = ?) OR NOT EXISTS (SELECT 1 FROM events WHERE kind = 'step' AND rank = ?)) "
        "GROUP BY stack_id",
        [rank, rank, rank],
    )
    frames = stack_frames(ctx, rank)
    total, waiting = 0, 0
    funcs: dict[str, int] = {}
    for st, n in zip(got["stack_id"].tolist(), got["n"].tolist(), strict=True):
        if innermost_user(frames, int(st)) != where:
            continue
        total += int(n)
        waits, func = _blocking_frame(frames, int(st))
        if waits:
            waiting += int(n)
        if func is not None:
            funcs[func] = funcs.get(func, 0) + int(n)
    if not total:
        return None, 0.0
    best = max(funcs.items(), key=lambda kv: kv[1])[0] if funcs else None
    return best, 100.0 * waiting / total


def _blocking_frame(frames: dict[int, tuple[int, str, str, int]], leaf: int) -> tuple[bool, str | None]:
    """Whether the stack ending at ``leaf`` waits in a call below the innermost frame of
    the user's code: a standard-library frame that waits (:data:`_BLOCKING_FILE`), or an
    innermost line that blocks (:data:`_BLOCKING_LINE`); and the library function it waits
    in (``function`` (file), the outermost such frame), None where that is the user's own line."""
    from ..analysis.phases import is_user_code

    if leaf not in frames:
        return False, None
    _, fn, fl, ln = frames[leaf]
    waits = bool(_BLOCKING_LINE.search(linecache.getline(fl, ln) if ln > 0 else ""))
    found = f"`{fn}` ({_base(fl)}:{ln})" if waits and not is_user_code(fl) else None
    node, guard = leaf, 0
    while node in frames and guard < 512:
        parent, fn, fl, _ = frames[node]
        if is_user_code(fl):
            break
        if _BLOCKING_FILE.search(fl.replace("\\", "/")):
            waits, found = True, f"`{fn}` ({_base(fl)})"
        node, guard = parent, guard + 1
    return waits, found


def _base(file: str) -> str:
    return file.replace("\\", "/").rsplit("/", 1)[-1]


def _off_cpu(ctx: Context, phase: str) -> tuple[float, float, float, float, float] | None:
    """Over the steps the recorder measured (the step thread's CPU time and run-queue
    wait) that have Python samples: (least time of ``phase`` the thread was off the CPU,
    most such time, the phase's time, the thread's CPU time, the steps' wall time), µs;
    None where no step was measured."""
    from ..analysis.steady import per_step

    measured = per_step(ctx.profile)
    if not measured:
        return None
    per: dict[tuple[int, int], dict[str, float]] = {}
    for r in ctx.rows("phases") or []:
        if r["step"] is not None:
            per.setdefault((int(r["rank"]), int(r["step"])), {})[str(r["phase"])] = float(r["time_us"] or 0.0)
    least = most = mine = cpu = wall = 0.0
    for r in ctx.rows("steps") or []:
        if r.get("step") is None or r.get("outlier"):
            continue
        key = (int(r["rank"]), int(r["step"]))
        if key not in measured or key not in per or not sum(per[key].values()):
            continue
        dur = float(r["duration_us"])
        c, q = measured[key]
        off = max(dur - c - q, 0.0)
        ph = per[key].get(phase, 0.0)
        least += max(off - (dur - ph), 0.0)
        most += min(off, ph)
        mine, cpu, wall = mine + ph, cpu + c, wall + dur
    return (least, most, mine, cpu, wall) if wall > 0 else None


def _advise(ctx: Context, rule_id: str, phase: str, threshold: float, what: str) -> Outcome:
    got = _phase(ctx, phase)
    if isinstance(got, NotEnoughData):
        return got
    s, mine_us, samples, top = got
    if s <= threshold:
        return None
    where = f" The line that costs most: {top['function']} ({top['file']}:{top['line']})." if top else ""
    evidence: dict[str, Any] = {f"{phase}_pct": 100 * s, "samples": int(samples)}
    if top:
        evidence |= {"function": top["function"], "file": top["file"], "line": top["line"]}
        evidence["line_pct_of_phase"] = top["phase_pct"]
    fix, snippet = _FIXES[phase]
    title = None
    # The phase's own time: what removing it from the loop saves at most.
    estimate = mine_us
    if phase == "data_loading":
        # Workers move the loading off the main process, not off the CPU.
        plan = loader_plan(ctx, per_rank(ctx, phase), threshold * ctx.total_us(), (phase,))
        if plan is None:
            # The loading is already overlapped (workers) or the cores are busy and the
            # Dataset's own Python is small: the fix would not gain what the threshold asks for.
            return None
        estimate = plan.estimate_us
        evidence |= plan.evidence()
        where += plan.note()
        if plan.vectorise:
            fix, snippet = VECTORISE_FIX, VECTORISE_PT
        elif waiting_workers(plan.cpu):
            fix, snippet = WAITING_WORKERS_FIX, WAITING_WORKERS_PT
        elif plan.cores is not None:
            snippet = snippet.replace("num_workers=2", f"num_workers={plan.cores}")
    elif phase == "other_python" and top and _SAVE_LINE.search(text := _line_text(top)):
        # A checkpoint in the loop: the serialising and the write are its cost.
        title = "The step saves a checkpoint (Python samples)"
        fix, snippet = _SAVE_FIX, _SAVE_PT
        where += f" That line saves state ({text}): the steps wait while it is serialised and written."
    elif phase == "other_python" and top and (wait := waits_off_cpu(ctx, phase, top)).waits:
        # A sleep, a lock, a queue, a socket, a file: the step waits there; vectorising cannot help.
        title = "The step waits off the CPU in the user's code (Python samples)"
        fix, snippet = _WAIT_FIX, _WAIT_PT
        # Off the CPU in no blocking call while the job's other thread ran Python: the GIL.
        holder = runner_in_steps(ctx, int(top["rank"])) if wait.reasons == ["cpu"] else None
        if holder is None:
            where += f" The step waits there, off the CPU: {wait.said()}."
        else:
            title = "The step's thread waits for the GIL while the job's other thread runs Python (Python samples)"
            where += (
                f" The step's thread is off the CPU there, its stack in no blocking call: {wait.said()}. Meanwhile "
                f"the job's thread {holder.name} ran {holder.where()} (running Python in {holder.samples} samples "
                f"in the steps, the step's thread has {holder.mine}): a thread running Python holds the GIL, which "
                "the step's thread waits for."
            )
            fix, snippet = off_the_gil(holder), OFF_THE_GIL_PT
            evidence |= {"thread": holder.name, "thread_function": holder.function, "thread_file": holder.file}
            evidence |= {"thread_line": holder.line, "thread_samples": holder.samples}
        evidence |= {"waits": wait.reasons}
        if wait.call:
            evidence["call"] = wait.call
        if wait.below:
            evidence |= {"waits_in": wait.below, "waiting_pct": wait.below_pct}
        if wait.off_us is not None:
            evidence |= {"off_cpu_us": wait.off_us, "measured_phase_us": wait.phase_us}
    elif phase == "other_python" and top:
        where += " It runs in the training loop itself, not in code the DataLoader calls."
    elif phase == "sync" and not ctx.device_types():
        # No accelerator: .item() / float() read host memory and wait for no device.
        title, fix, snippet = _HOST_READS
        what = "Reading tensor values into Python (.item(), float(), .tolist())"
        where += (
            " The profile has no accelerator, so these reads wait for no device: each is a Python call, and a "
            "loop of them over a tensor's elements adds up."
        )
    found = make(
        f"{what} takes {100 * s:.1f}% of the step time (threshold {100 * threshold:.0f}%, from Python samples).{where}",
        evidence,
        estimate,
        fix,
        pytorch=snippet,
    )
    found.title = title
    return found


@rule(
    "python.data_loading",
    "The training loop waits for its data (Python samples)",
    anchor="tb-profiler",
    cause="python_data_loading",
    thresholds={"data_loading_share": DATA_LOADING_SHARE},
)
def data_loading(ctx: Context) -> Outcome:
    return _advise(ctx, "python.data_loading", "data_loading", DATA_LOADING_SHARE, "Data loading")


@rule(
    "python.sync",
    "Host-device syncs in the loop: .item() / .cpu() / .tolist() (Python samples)",
    anchor="tb-profiler",
    cause="python_sync",
    thresholds={"sync_share": SYNC_SHARE},
)
def sync(ctx: Context) -> Outcome:
    return _advise(ctx, "python.sync", "sync", SYNC_SHARE, "Reading values back (.item(), .cpu(), .tolist())")


@rule(
    "python.logging",
    "Logging and printing in the loop (Python samples)",
    anchor="msprof-analyze",
    cause="python_logging",
    thresholds={"logging_share": LOGGING_SHARE},
)
def logging_time(ctx: Context) -> Outcome:
    return _advise(ctx, "python.logging", "logging", LOGGING_SHARE, "Logging and printing")


@rule(
    "python.optimizer",
    "The optimizer step is a large share of the step (Python samples)",
    anchor="PyTorch performance tuning guide",
    cause="python_optimizer",
    thresholds={"optimizer_share": OPTIMIZER_SHARE},
)
def optimizer(ctx: Context) -> Outcome:
    return _advise(ctx, "python.optimizer", "optimizer", OPTIMIZER_SHARE, "The optimizer step")


@rule(
    "python.preprocessing",
    "User Python in the step outside the framework's calls (Python samples)",
    anchor="tb-profiler",
    cause="python_preprocessing",
    thresholds={"preprocess_share": PREPROCESS_SHARE},
)
def preprocessing(ctx: Context) -> Outcome:
    return _advise(
        ctx,
        "python.preprocessing",
        "other_python",
        PREPROCESS_SHARE,
        "User Python outside forward, backward, the optimizer and the data loader",
    )
