"""The REST API's request and response models (pydantic): the OpenAPI document at
``/api/v1/openapi.json`` and the UI's TypeScript types (``ui/src/lib/api-types.ts``)
are generated from them.

Responses are written with orjson straight from the analysers' rows; the models
describe them (``tests/test_serve.py`` validates real answers against them), they do
not re-validate every answer on the hot path. Times are int64 ns on the profile's
time axis unless a name or a column's unit says otherwise.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorResponse(Model):
    error: str = Field(description="one line for the user")
    status: int
    detail: list[dict[str, Any]] | None = Field(None, description="the fields a 422 names (location, message)")


class ProfileSummary(Model):
    id: str
    name: str
    status: Literal["ok", "broken"]
    error: str | None = None


class ProfilesResponse(Model):
    profiles: list[ProfileSummary]


class ViewInfo(Model):
    name: str
    title: str
    description: str = Field(description="what the view shows and its columns")
    default_sort: list[str]
    units: dict[str, str]


class Column(Model):
    name: str
    type: str
    unit: str | None = None


class ViewResult(Model):
    view: str
    columns: list[Column]
    rows: list[dict[str, Any]]
    total: int = Field(description="rows matching the filters, before paging")
    offset: int
    limit: int | None
    query: dict[str, Any] | None = None
    profile: str | None = None
    deferred: bool = False
    """A view a big profile leaves to be asked for, not computed yet: no rows; ask again
    with ``compute=true``."""
    reason: str | None = None
    """Why the view is deferred, and how to have it."""


class ProfileMeta(Model):
    id: str
    name: str
    aiprof_version: str | None = None
    schema_version: int | None = None
    time_origin_ns: int | None = None
    span_ns: list[int] = Field(description="[first, last] ns the timeline covers")
    ranks: list[int]
    world_size: int | None = None
    hosts: list[Any]
    devices: list[dict[str, Any]]
    devices_used: list[dict[str, Any]] = Field(
        default_factory=list, description="devices with work, counters or allocations: rank, type, index, name"
    )
    sources: list[dict[str, Any]]
    tables: dict[str, int]
    warnings: list[Any]
    steps: list[dict[str, Any]]
    steps_error: str | None = None
    from_index: bool = Field(
        default=False,
        description="span_ns, steps and devices_used come from a job folder's cluster index (its steps "
        "then hold rank, step, start_us, duration_us), not from the events",
    )


class TrackInfo(Model):
    track: int = Field(description="dense id, used by the timeline routes")
    rank: int
    pid: int
    tid: int
    device_type: str
    device: int | None = None
    is_device: bool
    name: str
    process_name: str | None = None
    thread_name: str | None = None
    events: int
    max_depth: int


class TracksResponse(Model):
    span_ns: list[int] = Field(description="[t0, t1] of every event, samples and counters included (ns)")
    shown_ns: list[int] = Field(
        description="[t0, t1] of what the listed tracks draw, and the samples, counters and memory (ns): the "
        "timeline's first view and the default window; narrower than span_ns where tracks are left out "
        "(Kineto's placeholder span and markers)"
    )
    tracks: list[TrackInfo]


class WindowItems(Model):
    """Columnar: item i is (track[i], depth[i], ts[i], dur[i], names[name[i]], kind[i], n[i])."""

    track: list[int]
    depth: list[int]
    ts: list[int]
    dur: list[int]
    name: list[int] = Field(description="index into names")
    kind: list[str]
    n: list[int] = Field(description="events merged into the item; 1 = one event")


class Flows(Model):
    from_track: list[int]
    from_depth: list[int]
    from_ts: list[int]
    to_track: list[int]
    to_depth: list[int]
    to_ts: list[int]


class WindowResponse(Model):
    t0: int
    t1: int
    bucket_ns: int
    items: WindowItems
    names: list[str]
    flows: Flows = Field(description="launch -> device work arrows")
    flows_truncated: bool


class KindTotal(Model):
    kind: str
    events: int
    time_ns: int


class NameTotal(Model):
    kind: str
    name: str
    events: int
    time_ns: int


class SummaryResponse(Model):
    t0: int
    t1: int
    events: int
    by_kind: list[KindTotal]
    top: list[NameTotal]


class EventsResponse(Model):
    events: list[dict[str, Any]] = Field(description="full event rows, each with 'linked' (events of its correlation)")


class SearchMatch(Model):
    track: int
    depth: int
    ts: int
    dur: int
    name: str
    kind: str


class SearchResponse(Model):
    q: str
    regex: bool
    total: int = Field(description="events whose name matches")
    names: int = Field(description="distinct names that match")
    matches: list[SearchMatch] = Field(description="the first matches in the order asked")
    truncated: bool


class CounterMetric(Model):
    rank: int
    device_type: str
    device: int | None = None
    metric: str
    unit: str | None = None
    samples: int
    min: float | None = None
    max: float | None = None


class CounterMetrics(Model):
    metrics: list[CounterMetric]


class CounterSeries(Model):
    metric: str
    t0: int
    t1: int
    bucket_ns: int
    ts: list[int]
    min: list[float | None]
    max: list[float | None]
    mean: list[float | None]
    last: list[float | None]


class MemoryDevice(Model):
    rank: int
    device_type: str
    device: int | None = None
    ts: list[int]
    allocated: list[int]
    reserved: list[int | None]


class MemoryPeak(Model):
    rank: int
    device_type: str
    device: int | None = None
    peak_ts: int
    peak_bytes: int
    peak_reserved: int | None = None
    events: int


class MemorySeries(Model):
    t0: int
    t1: int
    bucket_ns: int
    series: list[MemoryDevice]
    peaks: list[MemoryPeak]


class Verdict(Model):
    """One per-step figure of B against A, as in ``aiprof diff --format json``'s verdicts."""

    figure: str = Field(description="step_time_us, a steps-view column (communication_us, energy_j...), kernel:GLOB")
    unit: str
    a_n: int
    b_n: int
    a_median: float | None = Field(description="the median step's figure; a phase (Python samples): its mean per step")
    b_median: float | None
    change_pct: float | None = Field(
        description="of the median (of the mean run median with the run-level test; of the mean step with too few "
        "steps; of the sampled mean for a phase)"
    )
    ci_low_pct: float | None = Field(
        description="95% bootstrap interval of the median change (a phase: Clopper-Pearson, of the rate ratio)"
    )
    ci_high_pct: float | None
    p_value: float | None = Field(description="Mann-Whitney U, two-sided (a phase: exact Poisson test on its samples)")
    verdict: str = Field(
        description="slower, faster, no significant change, too few steps, too few samples (a phase); higher/lower (J, W)"
    )
    a_total: float | None
    b_total: float | None
    test: str | None = Field(
        description="mann-whitney on steps, or t on run medians (a baseline of 3 runs or more), or for a phase "
        "'poisson on samples (its samples in A and B of all the samples in A and B)'; None: too few steps"
    )


class GateResult(Model):
    rule: str
    figure: str
    failed: bool
    detail: str


class DiffSide(Model):
    path: str = Field(description="the profile id")
    runs: int
    steps: int = Field(description="steps kept (after outliers)")
    outliers: int = Field(description="outlier steps left out")
    devices: list[str]
    partial: list[str] = Field(
        default_factory=list, description="why each partial profile of this side was cut short (one per profile)"
    )


class RelatedProfile(Model):
    id: str
    ranks: int = Field(description="ranks the profile holds")
    differences: list[str]


class RelatedResponse(Model):
    a: str
    ranks: int
    profiles: list[RelatedProfile]


class CompareResponse(Model):
    view: Literal["kernels", "operators"]
    a: str
    b: str
    steps: dict[str, Any]
    rows: list[dict[str, Any]] = Field(description="name, a_us, b_us, delta_us, delta_pct, a_count, b_count, status")
    total: int
    query: dict[str, Any]
    verdicts: list[Verdict] = Field(description="per-step figures with their statistical verdict (aiprof diff)")
    note: str | None = Field(
        description="why a figure was not tested, if so: too few steps (the mean step compared only), "
        "or too few steps that did not wait for a CPU (the steady step)"
    )
    too_few_steps: bool = Field(description="a side has too few steps for the statistical test (note says so)")
    differences: list[str] = Field(description="how B's job differs from A's (world size, devices, model)")
    gate: list[GateResult] = Field(description="one result per fail_if rule, in the given order")
    failed: bool = Field(description="a fail_if rule failed")
    not_measured: dict[str, list[str]] = Field(
        description="figures not compared because a run did not measure them: a (A only), b (B only), both"
    )
    phase_rule: str | None = Field(description="how the phases of the Python samples were compared, where they were")
    sides: dict[str, DiffSide] = Field(description="a and b: steps kept, outliers left out, devices")


class ClusterJob(Model):
    from_index: bool = Field(description="read from OUT/cluster (aiprof import of many ranks), else computed")
    ranks: list[int]
    world_size: int | None
    failed: list[dict[str, Any]] = Field(description="rank, path, error of the ranks the import skipped")
    mixed: bool = Field(description="ranks of different jobs imported with --allow-mixed")
    warnings: list[str]
    tables: dict[str, int] = Field(description="rows of the index tables (steps, collectives, ranks)")


class ClusterResponse(Model):
    profile: str
    job: ClusterJob
    views: dict[str, ViewResult] = Field(
        description="stragglers, collectives, links, exposed_comm: the first rows of each in its default order "
        "(page one with /profiles/{pid}/views/{view})"
    )


class AdviceItem(Model):
    """One item of ``aiprof advise --format json`` (advise.base.Advice.to_json)."""

    rule: str
    title: str
    area: str
    severity: Literal["info", "low", "medium", "high"]
    gain_pct: float = Field(description="expected gain, % of the profiled step time")
    raw_gain_pct: float
    gain_us: float
    estimate_us: float
    cause: str | None
    cause_us: float
    summary: str
    evidence: dict[str, Any] = Field(description="the numbers that fired the rule; a key's suffix names its unit")
    fix: str
    snippets: dict[str, str] = Field(description="code for the fix: pytorch, mindspore, the vendor's")
    thresholds: dict[str, float]
    also: list[dict[str, Any]]


class NotJudged(Model):
    """Rules that could not judge for lack of one datum (advise.not_judged)."""

    missing: str = Field(description="what the profile lacks, as the rules say it (NotEnoughData's reason)")
    rules: list[str] = Field(description="the ids of the rules it kept from judging")


class AdviceResponse(Model):
    """``advise_json``'s document (what ``aiprof advise --format json`` prints), and
    whether the proposer is installed."""

    available: bool
    advice: list[AdviceItem]
    reason: str | None = None
    deferred: bool = False
    """A big profile's advice, not computed yet: ask again with ``compute=true``."""
    total_us: float | None = None
    causes: dict[str, float] | None = None
    gain_sum_pct: float | None = None
    gain_of: str | None = Field(
        None, description='what the gains are shares of: "step time", or "profiled time" where no steps were found'
    )
    warnings: list[str] = []
    not_judged: list[NotJudged] = Field(
        [],
        description="the rules that could not judge for lack of data, one entry per missing datum, as aiprof "
        "advise --format json lists them (a rule that did not fire is silent only where it had the data)",
    )


class SqlBody(BaseModel):
    """A read-only query over the profile's tables (POST /sql)."""

    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=100_000, description="one SELECT (DuckDB dialect)")
    max_rows: int = Field(1000, ge=1, le=10000, description="most rows returned")
    timeout_s: float = Field(10.0, gt=0, le=60, description="the query is stopped after this many seconds")


class SqlColumn(Model):
    name: str
    type: str


class SqlResponse(Model):
    columns: list[SqlColumn]
    rows: list[dict[str, Any]]
    total: int = Field(description="rows returned (at most max_rows)")
    truncated: bool = Field(description="the query had more rows than max_rows")
    elapsed_ms: float
    max_rows: int
    timeout_s: float


class SqlTable(Model):
    name: str
    rows: int
    columns: list[SqlColumn]


class SqlSchema(Model):
    tables: list[SqlTable]
    max_rows: int
    timeout_s: float


class SampleFrame(Model):
    name: str
    file: str


class SampleThread(Model):
    key: str = Field(description="'rank:pid:tid'")
    rank: int
    pid: int
    tid: int
    name: str | None = None
    samples: int


class SampleRows(Model):
    """Columnar: row i is (threads[thread[i]], stacks[stack[i]], samples[i], weight_ns[i])."""

    thread: list[int]
    stack: list[int]
    samples: list[int]
    weight_ns: list[int]


class SamplesResponse(Model):
    frames: list[SampleFrame] = Field(description="functions (name, file)")
    stacks: list[list[int]] = Field(description="root-first lists of indexes into frames")
    threads: list[SampleThread]
    rows: SampleRows
    interval_ns: int = Field(description="the sampling interval (median gap between a thread's samples)")
    total_samples: int
    frames_used: int


class SampleWindowRows(Model):
    """Columnar: the last sample of each pixel of each thread."""

    thread: list[int]
    ts: list[int]
    stack: list[int]
    n: list[int] = Field(description="samples in the pixel")


class SampleWindowResponse(Model):
    frames: list[SampleFrame]
    stacks: list[list[int]]
    threads: list[SampleThread]
    rows: SampleWindowRows
    bucket_ns: int
    interval_ns: int


class QueryBody(BaseModel):
    """The common query as JSON (POST /views/{view})."""

    model_config = ConfigDict(extra="forbid")
    filters: list[str | dict[str, Any]] = Field(default_factory=list)
    sort: list[str | dict[str, Any]] | str = Field(default_factory=list)
    limit: int | None = Field(None, ge=0)
    offset: int = Field(0, ge=0)
    params: dict[str, Any] = Field(default_factory=dict)
    compute: bool = Field(False, description="compute a view a big profile leaves to be asked for")


class WindowBody(BaseModel):
    """A timeline window as JSON (POST /timeline, /timeline/summary, series)."""

    model_config = ConfigDict(extra="forbid")
    t0: int | None = None
    t1: int | None = None
    width: int = Field(1000, ge=1, le=20000)
    tracks: list[int] | str | None = None
    max_items: int = Field(5000, ge=1, le=100000)
    metric: str | None = None
    rank: int | None = None
    device: int | None = None
