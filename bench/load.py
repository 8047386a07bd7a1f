"""The server under load: ``python bench/load.py [--clients 50] [--seconds 10] [PROFILE]``.

Starts ``aiprof serve`` on a loopback port (a real server in its own process), waits
for its warm-up, then runs the read endpoints a user's pages call (profile list and
metadata, views with sorts and pages, timeline windows at several zooms, with and
without a track filter, their summaries, tracks, search, counters, memory, samples,
advice) from one client and then from ``--clients`` clients at once, each on a
keep-alive connection, for ``--seconds`` each. Prints per run: requests, requests/s,
p50/p95/p99 latency, and the 5xx count; then the named peers' ratios:

- '1 client': the p99 of many clients against the p50 of one (1.0 would be perfect
  parallelism; a server answering one request at a time gives about the client count);
- 'static files': the same answers (the bytes our server gave, one file each) served by
  a plain static-file server (Python's ThreadingHTTPServer, keep-alive) to the same
  number of clients: the floor of HTTP and JSON transfer on this machine, with no
  query work at all;
- ``--peer-src DIR``: the same profile served from another source tree
  (``/work/main/src``: before a change), and the ratio of the two p99s;
- ``--computed``: this tree with ``--keep-answers 0``, every answer computed by its
  route (after the first round the mix is otherwise answered from kept bytes,
  web/answers.py): how far the queries themselves run in parallel.

PROFILE defaults to the V100 rank-0 Kineto trace of ../shared/data, imported first
(188k events). Bounded: loopback only, a fixed duration, a client count of at most 200.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DEFAULT_TRACE = DATA / "kineto" / "V100" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
MAX_CLIENTS = 200
#: Issue 19's goal for the read endpoints at 50 clients.
GOAL_P99_MS = 200.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(conn: http.client.HTTPConnection, path: str) -> tuple[int, bytes]:
    conn.request("GET", path)
    r = conn.getresponse()
    return r.status, r.read()


def paths(conn: http.client.HTTPConnection) -> list[str]:
    """The read requests of one round, built from what the server says it has."""
    st, body = get(conn, "/api/v1/profiles")
    pid = json.loads(body)["profiles"][0]["id"]
    p = f"/api/v1/profiles/{pid}"
    st, body = get(conn, p + "/timeline/summary?width=800")
    summary = json.loads(body) if st == 200 else {}
    t0, t1 = summary.get("t0"), summary.get("t1")
    wins: list[str] = []
    if isinstance(t0, int) and isinstance(t1, int):
        span = t1 - t0
        # Zoom levels a user steps through: a tenth, a hundredth, a thousandth of the span.
        wins = [f"&t0={t0 + span // 3}&t1={t0 + span // 3 + span // d}" for d in (10, 100, 1000)]
    win = wins[0] if wins else ""
    return [
        "/api/v1/profiles",
        p,
        p + "/views/overview",
        p + "/views/steps?limit=50",
        p + "/views/kernels?limit=50",
        p + "/views/kernels?limit=50&offset=50&sort=-count",
        p + "/views/operators?limit=50&sort=name",
        p + "/views/memory?limit=20",
        p + "/tracks",
        p + "/timeline?width=1000",
        *(p + "/timeline?width=1000" + w for w in wins),
        p + "/timeline?width=800&tracks=0,1,2" + win,
        p + "/timeline/summary?width=800",
        p + "/timeline/summary?width=800" + win,
        p + "/timeline/search?q=gemm&order=-dur&limit=50",
        p + "/memory/series?width=800",
        p + "/counters",
        p + "/samples/window?width=800",
        p + "/advice",
    ]


def client(port: int, todo: list[str], start: int, until: float, out: list[tuple[float, int, str]]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    i = start
    while time.perf_counter() < until:
        path = todo[i % len(todo)]
        i += 1
        t = time.perf_counter()
        try:
            st, _ = get(conn, path)
        except (OSError, http.client.HTTPException):
            st = 599
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        out.append((time.perf_counter() - t, st, path))
    conn.close()


def load(port: int, todo: list[str], clients: int, seconds: float) -> list[tuple[float, int, str]]:
    results: list[list[tuple[float, int, str]]] = [[] for _ in range(clients)]
    until = time.perf_counter() + seconds
    threads = [threading.Thread(target=client, args=(port, todo, k, until, results[k])) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for rs in results for r in rs]


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[max(0, min(98, round(q) - 1))]


def report(label: str, rs: list[tuple[float, int, str]], seconds: float) -> dict[str, float]:
    lat = [r[0] * 1000 for r in rs]
    fails = sum(1 for r in rs if r[1] >= 500)
    other = sum(1 for r in rs if 400 <= r[1] < 500)
    f = {"n": len(rs), "rps": len(rs) / seconds, "p50": pct(lat, 50), "p95": pct(lat, 95), "p99": pct(lat, 99)}
    f["5xx"] = fails
    print(
        f"  {label:<28} {f['n']:>6} req  {f['rps']:>7.1f} req/s  p50 {f['p50']:>7.1f} ms  "
        f"p95 {f['p95']:>7.1f} ms  p99 {f['p99']:>7.1f} ms  5xx {fails}  4xx {other}"
    )
    return f


def slowest(rs: list[tuple[float, int, str]]) -> None:
    by: dict[str, list[float]] = {}
    for lat, _, path in rs:
        by.setdefault(path.split("/profiles/", 1)[-1].split("/", 1)[-1], []).append(lat * 1000)
    top = sorted(by.items(), key=lambda kv: -pct(kv[1], 99))[:4]
    print("    slowest p99: " + ", ".join(f"{k} {pct(v, 99):.0f} ms" for k, v in top))


def serve(src: Path, profile: Path, port: int, extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(
        [sys.executable, "-m", "aiprof", "serve", "--host", "127.0.0.1", "--port", str(port), *extra, str(profile)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


STATIC_SERVER = """
import functools, sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
class H(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without this, each answer on a kept-alive
    # connection waits for the client's delayed ACK (about 40 ms), as aiprof serve's would.
    disable_nagle_algorithm = True
    def log_message(self, *a):
        pass
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), functools.partial(H, directory=sys.argv[2])).serve_forever()
"""


def static_peer(answers: list[bytes], args: argparse.Namespace) -> dict[str, float]:
    """The peer 'static files': ``answers`` as files behind a plain static-file server."""
    with tempfile.TemporaryDirectory(prefix="aiprof-load-static-") as d:
        todo = []
        for i, body in enumerate(answers):
            (Path(d) / f"{i}.json").write_bytes(body)
            todo.append(f"/{i}.json")
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-c", STATIC_SERVER, str(port), d])
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    get(conn, todo[0])
                    conn.close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise SystemExit("static files: the server did not start") from None
                    time.sleep(0.2)
            many = load(port, todo, args.clients, args.seconds)
            return report(f"static files, {args.clients} clients", many, args.seconds)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def run_one(
    name: str,
    src: Path,
    profile: Path,
    args: argparse.Namespace,
    answers: list[bytes] | None = None,
    extra: tuple[str, ...] = (),
) -> dict[str, dict[str, float]]:
    port = free_port()
    proc = serve(src, profile, port, extra)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                todo = paths(conn)
                break
            except (OSError, http.client.HTTPException, KeyError, ValueError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"{name}: the server did not start") from None
                time.sleep(0.3)
        t = time.perf_counter()
        for p in todo:  # every answer computed once (the warm-up may still run)
            _, body = get(conn, p)
            if answers is not None:
                answers.append(body)
        conn.close()
        print(
            f"{name} (src {src}{' ' + ' '.join(extra) if extra else ''}): first round {time.perf_counter() - t:.2f} s"
        )
        one = load(port, todo, 1, args.seconds)
        many = load(port, todo, args.clients, args.seconds)
        figs = {
            "one": report("1 client", one, args.seconds),
            "many": report(f"{args.clients} clients", many, args.seconds),
        }
        slowest(many)
        return figs
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", nargs="?", help="a profile or trace (default: the V100 rank-0 trace, imported)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--peer-src", type=Path, help="another source tree to serve the same profile from")
    ap.add_argument(
        "--computed",
        action="store_true",
        help="also run this tree with --keep-answers 0 (every answer computed: the queries' own concurrency)",
    )
    args = ap.parse_args()
    if not 1 <= args.clients <= MAX_CLIENTS:
        print(f"--clients must be 1..{MAX_CLIENTS}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="aiprof-load-") as d:
        profile = Path(args.profile) if args.profile else None
        if profile is None or not profile.name.endswith(".aiprof"):
            src = profile or DEFAULT_TRACE
            profile = Path(d) / "load.aiprof"
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
            subprocess.run(
                [sys.executable, "-m", "aiprof", "import", str(src), "-o", str(profile)], env=env, check=True
            )
        print(f"load: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, {args.seconds:.0f} s per run")
        answers: list[bytes] = []
        ours = run_one("this tree", ROOT / "src", profile, args, answers)
        many = ours["many"]
        print(
            f"ours, {args.clients} clients: p50 {many['p50']:.1f} ms, p99 {many['p99']:.1f} ms "
            f"(goal: p99 <= {GOAL_P99_MS:.0f} ms on a quiet machine)"
        )
        ratio = many["p99"] / ours["one"]["p50"]
        print(f"peer '1 client': p99 of {args.clients} clients / p50 of 1 client = {ratio:.1f}x")
        static = static_peer(answers, args)
        print(
            f"peer 'static files' (the same {len(answers)} answers, {sum(map(len, answers)) / 1e6:.1f} MB, "
            f"from a static-file server): our p99 / its p99 = {many['p99'] / static['p99']:.2f}x, "
            f"our p50 / its p50 = {many['p50'] / static['p50']:.2f}x"
        )
        if args.computed:
            comp = run_one("this tree, nothing kept", ROOT / "src", profile, args, extra=("--keep-answers", "0"))
            print(
                f"peer 'nothing kept' (every answer computed): its p99 / ours = "
                f"{comp['many']['p99'] / many['p99']:.2f}x, its req/s / ours = {comp['many']['rps'] / many['rps']:.2f}x"
            )
        if args.peer_src is not None:
            peer = run_one("peer", args.peer_src, profile, args)
            print(
                f"peer '{args.peer_src}': its p99 / ours = {peer['many']['p99'] / ours['many']['p99']:.2f}x, "
                f"its req/s / ours = {peer['many']['rps'] / ours['many']['rps']:.2f}x"
            )
    return 1 if ours["one"]["5xx"] or ours["many"]["5xx"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
