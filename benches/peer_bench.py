#!/usr/bin/env python3
"""Peer bench: stepline against Rotel (PyPI `rotel`), both in front of one Rotel blackhole sink.

The same load generator (`examples/loadgen`) drives each server in turn over OTLP; the bench
measures from the outside (`/proc/<pid>`) what each server spent: spans/s, spans per server
CPU-second, peak RSS. Modes (see examples/README.md, "peer bench"):

  matrix   plain/agent spans x one 20-span run per request / 500-span requests (x gRPC/HTTP):
           one table with both servers and the stepline/Rotel ratios, plus a JSON file.
  latency  per server and load: the maximum (closed loop), then an open loop at half of it
           (`loadgen --rate`): p50/p99 of the acknowledgement latency (issue 15, goal 4a).
  soak     one load for N minutes against both servers at once, RSS (and stepline's cache
           gauges from /metrics) sampled every few seconds, then an idle period; RSS over time
           and the slope of the last half of the load.
  smoke    all three with 2-second loads (tests/peer_bench.rs).

Everything lives in a temporary directory; every process the bench starts is stopped on exit
(and on SIGINT/SIGTERM; the servers also get SIGKILL if the bench itself dies). Rotel is
installed into ~/.cache/stepline/venv-rotel from benches/rotel-requirements.txt when missing;
if that fails the bench exits with status 77 (skip). Standard library only.
"""

import argparse
import atexit
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "rotel-requirements.txt")
EXIT_SKIP = 77
CLK_TCK = os.sysconf("SC_CLK_TCK")
KINDS = {
    "plain": ["--plain-spans"],
    "agent": ["--conventions", "pydantic-ai"],
}
LATENCY_GOAL_MS = 20.0


class Skip(Exception):
    """The bench cannot run here (Rotel cannot be installed)."""


# ------------------------------------------------------------------------------------------
# Processes
# ------------------------------------------------------------------------------------------

_children = []
_started_pids = []


def _die_with_parent():
    """Runs in the child before exec: SIGKILL when the bench process goes away."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def spawn(argv, log_path, env=None):
    """Starts a process (its own session, output to `log_path`) that is stopped at exit."""
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    log.close()
    _children.append(proc)
    _started_pids.append(proc.pid)
    return proc


def stop(proc, grace=10.0):
    """SIGTERM, then SIGKILL after `grace` seconds; only processes this bench started."""
    if proc.poll() is None:
        try:
            proc.terminate()
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        except ProcessLookupError:
            pass
    if proc in _children:
        _children.remove(proc)


def stop_all():
    for proc in list(_children):
        stop(proc, grace=5.0)


def _on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def proc_stat(pid):
    """CPU seconds (user + system), VmRSS and VmHWM in kB of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    mem = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            mem[key] = int(value.split()[0])
    return {"cpu_s": cpu, "rss_kb": mem.get("VmRSS", 0), "hwm_kb": mem.get("VmHWM", 0)}


def wait_port(addr, proc, log_path, timeout=30.0):
    """Waits until `addr` accepts TCP connections (or fails if `proc` exited)."""
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited ({proc.returncode}):\n{tail(log_path)}")
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{addr} did not open within {timeout} s:\n{tail(log_path)}")


def http_get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode("utf-8", "replace")


def tail(path, lines=20):
    try:
        with open(path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")
    except OSError:
        return ""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------
# Rotel
# ------------------------------------------------------------------------------------------


def pinned_rotel():
    """(name, version) pins of the requirements file."""
    pins = {}
    with open(REQUIREMENTS) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                pins[name.strip().lower()] = version.strip()
    return pins


def find_agent(venv):
    for root, _dirs, files in os.walk(os.path.join(venv, "lib")):
        if root.endswith(os.path.join("site-packages", "rotel")) and "rotel-agent" in files:
            return os.path.join(root, "rotel-agent")
    return None


def ensure_rotel():
    """Path of rotel-agent: $ROTEL, else the pinned PyPI package in the venv (installed here)."""
    if os.environ.get("ROTEL"):
        return os.environ["ROTEL"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    venv = os.path.join(cache, "stepline", "venv-rotel")
    version = pinned_rotel().get("rotel")
    python = os.path.join(venv, "bin", "python")

    def installed():
        agent = find_agent(venv)
        if agent is None or not os.access(agent, os.X_OK):
            return None
        sp = os.path.dirname(os.path.dirname(agent))
        if version and not os.path.isdir(os.path.join(sp, f"rotel-{version}.dist-info")):
            return None
        return agent

    agent = installed()
    if agent:
        return agent
    print(f"installing rotel=={version} into {venv}", file=sys.stderr, flush=True)
    try:
        if not os.access(python, os.X_OK):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True,
                           stdout=subprocess.DEVNULL, timeout=300)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "-r", REQUIREMENTS], check=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as e:
        raise Skip(f"rotel cannot be installed into {venv}: {e}") from e
    agent = installed()
    if not agent:
        raise Skip(f"rotel-agent not found in {venv} after installing")
    return agent


# ------------------------------------------------------------------------------------------
# The bench
# ------------------------------------------------------------------------------------------


class Bench:
    """The sink, the servers under test and the load generator, in one temporary directory."""

    def __init__(self, args):
        self.args = args
        target = args.target_dir
        self.stepline_bin = args.stepline or os.path.join(target, "release", "stepline")
        self.loadgen_bin = args.loadgen or os.path.join(target, "release", "examples", "loadgen")
        for path in (self.stepline_bin, self.loadgen_bin):
            if not os.access(path, os.X_OK):
                raise SystemExit(f"{path} is missing: cargo build --release --bin stepline "
                                 "--example loadgen (same CARGO_TARGET_DIR)")
        self.rotel = ensure_rotel()
        self.dir = tempfile.mkdtemp(prefix="stepline-peer-bench-")
        if args.free_ports:
            port = lambda _base: free_port()  # noqa: E731
        else:
            port = lambda base: base + args.port_offset  # noqa: E731
        self.ports = {
            "sink_grpc": port(24317), "sink_http": port(24318),
            "rotel_grpc": port(14317), "rotel_http": port(14318),
            "stepline_grpc": port(34317), "stepline_http": port(34318),
            "stepline_api": port(34320),
        }
        self.serial = 0
        self.sink = self.start_rotel("sink", "sink_grpc", "sink_http",
                                     ["--exporter", "blackhole"])

    def cleanup(self):
        stop_all()
        if self.args.keep:
            print(f"kept {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def addr(self, name):
        return f"127.0.0.1:{self.ports[name]}"

    def start_rotel(self, name, grpc, http, exporter_args):
        self.serial += 1
        base = os.path.join(self.dir, f"{name}-{self.serial}")
        argv = [self.rotel, "start",
                "--otlp-grpc-endpoint", self.addr(grpc),
                "--otlp-http-endpoint", self.addr(http),
                "--otlp-grpc-max-recv-msg-size-mib", "64",
                "--pid-file", base + ".pid", "--log-file", base + ".log", *exporter_args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROTEL_")}
        proc = spawn(argv, base + ".out", env=env)
        wait_port(self.addr(grpc), proc, base + ".out")
        return proc

    def start_server(self, server):
        """A fresh instance of `server` ("rotel" or "stepline"), ready for load."""
        if server == "rotel":
            return self.start_rotel("rotel", "rotel_grpc", "rotel_http", [
                "--exporter", "otlp",
                "--otlp-exporter-endpoint", f"http://{self.addr('sink_grpc')}",
                "--otlp-exporter-protocol", "grpc",
                # Rotel gzips by default; stepline's exporter here sends uncompressed.
                "--otlp-exporter-compression", "none"])
        self.serial += 1
        base = os.path.join(self.dir, f"stepline-{self.serial}")
        # Rotel's exporter batches by default (8192 spans or 200 ms, whichever first): stepline's
        # exporter gets the same batching keys unless --no-exporter-batch.
        batching = "" if self.args.no_exporter_batch else (
            "\n    sending_queue: { batch: { sizer: items, min_size: 8192, flush_timeout: 200ms } }")
        config = f"""receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: {self.addr('stepline_grpc')} }}
      http: {{ endpoint: {self.addr('stepline_http')} }}
processors:
  stepline: {{}}
exporters:
  otlp/sink:
    endpoint: http://{self.addr('sink_grpc')}
    compression: none{batching}
extensions:
  stepline_storage: {{ directory: {base}-data, sync: {str(not self.args.no_sync).lower()} }}
  stepline_api: {{ endpoint: {self.addr('stepline_api')} }}
service:
  extensions: [stepline_storage, stepline_api]
  pipelines:
    traces: {{ receivers: [otlp], processors: [stepline], exporters: [otlp/sink] }}
"""
        with open(base + ".yaml", "w") as f:
            f.write(config)
        proc = spawn([self.stepline_bin, "--config", base + ".yaml"], base + ".log")
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"stepline exited ({proc.returncode}):\n{tail(base + '.log')}")
            try:
                if http_get(f"http://{self.addr('stepline_api')}/healthz", 1.0)[0] == 200:
                    return proc
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"stepline not healthy after 60 s:\n{tail(base + '.log')}")
            time.sleep(0.1)

    def loadgen(self, server, kind, batch, seconds, transport, extra=(), seed=7):
        """Runs loadgen against `server` with `seed`; returns its JSON summary."""
        self.serial += 1
        out = os.path.join(self.dir, f"loadgen-{self.serial}.out")
        argv = [self.loadgen_bin, "--transport", transport,
                f"--{transport}", self.addr(f"{server}_{transport}"),
                *KINDS[kind], "--duration", str(seconds), "--runs", "10000000",
                "--seed", str(seed), "--concurrency", str(self.args.concurrency),
                "--batch-spans", str(batch), *extra]
        if server == "stepline":
            argv += ["--api", self.addr("stepline_api")]
        proc = spawn(argv, out)
        try:
            proc.wait(timeout=seconds + 600)
        finally:
            stop(proc)
        summary = None
        with open(out, "rb") as f:
            for line in f.read().decode("utf-8", "replace").splitlines():
                if line.startswith("{"):
                    try:
                        summary = json.loads(line)
                    except ValueError:
                        pass
        if summary is None:
            raise RuntimeError(f"loadgen against {server} printed no summary "
                               f"(exit {proc.returncode}):\n{tail(out, 30)}")
        return summary

    def settle(self, proc, limit=30.0):
        """Waits until `proc` is (nearly) idle: the work it still does after the last answer
        (batching, forwarding) counts for it. Returns the seconds waited."""
        started = time.monotonic()
        last = proc_stat(proc.pid)
        quiet = 0
        while last and time.monotonic() - started < limit:
            time.sleep(0.5)
            now = proc_stat(proc.pid)
            if now is None:
                break
            quiet = quiet + 1 if now["cpu_s"] - last["cpu_s"] <= 0.02 else 0
            last = now
            if quiet >= 2:
                break
        return round(time.monotonic() - started, 1)

    def stepline_metrics(self):
        """Selected samples of stepline's /metrics: caches, outbox, forwarded spans."""
        try:
            _, text = http_get(f"http://{self.addr('stepline_api')}/metrics")
        except OSError:
            return {}
        picked = {}
        for line in text.splitlines():
            if line.startswith("#") or " " not in line:
                continue
            name, _, value = line.rpartition(" ")
            if ("cache" in name or "outbox_entries" in name or "exporter_sent_spans" in name
                    or "exporter_queue_size" in name or name in MEMORY_GAUGES
                    or name in WAIT_COUNTERS):
                try:
                    picked[name] = float(value)
                except ValueError:
                    pass
        return picked

    def measure(self, server, kind, batch, seconds, transport, proc=None, extra=()):
        """One load against `server` (a fresh instance unless `proc` is given)."""
        fresh = proc is None
        if fresh:
            proc = self.start_server(server)
        before = proc_stat(proc.pid)
        # A server that took a load already gets new runs: the same seed would send the same
        # trace and span ids again (with new timestamps), and every span would replace a stored
        # fact (its run derived again from what is stored) instead of adding a run.
        seed = 7 if fresh else 7 + self.serial
        summary = self.loadgen(server, kind, batch, seconds, transport, extra, seed=seed)
        settle_s = self.settle(proc)
        after = proc_stat(proc.pid)
        if before is None or after is None:
            raise RuntimeError(f"{server} died during the load")
        phase = summary["transports"][0]
        cpu = after["cpu_s"] - before["cpu_s"]
        result = {
            "server": server, "kind": kind, "batch_spans": batch, "transport": transport,
            "spans": phase["spans"], "failed_requests": phase["failed_requests"],
            "failures": phase["failures"],
            "elapsed_s": phase["elapsed_s"], "spans_per_s": phase["spans_per_s"],
            "latency_ms": phase["latency_ms"], "open_loop": phase.get("open_loop"),
            "server_cpu_s": round(cpu, 2),
            "spans_per_cpu_s": round(phase["spans"] / max(cpu, 0.01)),
            "peak_rss_mb": round(after["hwm_kb"] / 1024, 1),
            "rss_mb": round(after["rss_kb"] / 1024, 1),
            "settle_s": settle_s,
        }
        if server == "stepline":
            # Forwarding is part of the work: wait (bounded) until the exporter's queue is empty.
            deadline = time.monotonic() + 30
            metrics = self.stepline_metrics()
            while sum_of(metrics, "exporter_queue_size") > 0 and time.monotonic() < deadline:
                time.sleep(0.5)
                metrics = self.stepline_metrics()
            result["metrics"] = metrics
            result["forwarded_spans"] = int(sum_of(metrics, "exporter_sent_spans"))
        if fresh:
            stop(proc)
        return result


# ------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------


def sum_of(metrics, part):
    """Sum of the samples whose name contains `part`."""
    return sum(v for k, v in metrics.items() if part in k)


def load_name(kind, batch, transport):
    shape = "20-span runs" if batch == 0 else f"{batch}-span reqs"
    return f"{kind} {shape} {transport}"


def ratio(a, b):
    return round(a / b, 2) if b else None


def fmt_ratio(x):
    return "-" if x is None else f"{x:.2f}"


def print_table(headers, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(  # noqa: E731
        str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    print(line(headers))
    print(line(["-" * w for w in widths]))
    for row in rows:
        print(line(row))
    sys.stdout.flush()


def machine():
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    return {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpus": os.cpu_count(), "loadavg_at_start": load}


def write_json(args, mode, data):
    path = args.json
    if not path:
        folder = os.path.join(args.target_dir, "peer-bench")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{mode}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json")
    data["started_pids"] = list(_started_pids)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
    print(f"JSON summary: {path}", flush=True)


# ------------------------------------------------------------------------------------------
# Modes
# ------------------------------------------------------------------------------------------


def cells(args):
    return [(k, b, t) for k in args.kinds for b in args.shapes for t in args.transports]


def run_matrix(bench, args):
    rows, results = [], []
    for kind, batch, transport in cells(args):
        pair = {}
        for server in ("rotel", "stepline"):
            r = bench.measure(server, kind, batch, args.seconds, transport)
            print(f"  {load_name(kind, batch, transport)}: {server} {r['spans_per_s']:.0f} spans/s, "
                  f"{r['spans_per_cpu_s']} per CPU-s, peak RSS {r['peak_rss_mb']} MB, "
                  f"{r['spans']} spans acknowledged, {r['failed_requests']} failed", flush=True)
            pair[server] = r
        ro, sl = pair["rotel"], pair["stepline"]
        cell = {"kind": kind, "batch_spans": batch, "transport": transport,
                "rotel": ro, "stepline": sl,
                "ratio": {"spans_per_s": ratio(sl["spans_per_s"], ro["spans_per_s"]),
                          "spans_per_cpu_s": ratio(sl["spans_per_cpu_s"], ro["spans_per_cpu_s"]),
                          "peak_rss": ratio(sl["peak_rss_mb"], ro["peak_rss_mb"])}}
        results.append(cell)
        rows.append([load_name(kind, batch, transport),
                     f"{ro['spans_per_s']:.0f}", ro["spans_per_cpu_s"], ro["peak_rss_mb"],
                     f"{sl['spans_per_s']:.0f}", sl["spans_per_cpu_s"], sl["peak_rss_mb"],
                     fmt_ratio(cell["ratio"]["spans_per_s"]),
                     fmt_ratio(cell["ratio"]["spans_per_cpu_s"]),
                     fmt_ratio(cell["ratio"]["peak_rss"])])
    print()
    print_table(["load", "rotel spans/s", "rotel /CPU-s", "rotel RSS MB",
                 "stepline spans/s", "stepline /CPU-s", "stepline RSS MB",
                 "x spans/s", "x /CPU-s", "x RSS"], rows)
    return results


def run_latency(bench, args):
    rows, results = [], []
    for kind, batch, transport in cells(args):
        for server in args.servers:
            proc = bench.start_server(server)
            top = bench.measure(server, kind, batch, args.seconds, transport, proc=proc)
            rate = top["spans_per_s"] * args.fraction
            if rate <= 0:
                stop(proc)
                raise RuntimeError(f"{server} acknowledged no spans under {kind} load")
            half = bench.measure(server, kind, batch, args.seconds, transport, proc=proc,
                                 extra=["--rate", f"{rate:.1f}"])
            stop(proc)
            lat, lag = half["latency_ms"], (half["open_loop"] or {}).get("schedule_lag_ms", {})
            goal = lat["p99"] <= LATENCY_GOAL_MS if server == "stepline" else None
            results.append({"server": server, "kind": kind, "batch_spans": batch,
                            "transport": transport, "max": top, "open_loop": half,
                            "fraction": args.fraction, "p99_within_goal": goal})
            rows.append([f"{server} {load_name(kind, batch, transport)}",
                         f"{top['spans_per_s']:.0f}", f"{top['latency_ms']['p99']:.2f}",
                         f"{rate:.0f}", f"{half['spans_per_s']:.0f}",
                         f"{lat['p50']:.2f}", f"{lat['p99']:.2f}", f"{lat['max']:.2f}",
                         f"{lag.get('p99', 0):.2f}", half["failed_requests"],
                         "-" if goal is None else ("yes" if goal else "NO")])
            print(f"  {rows[-1][0]}: max {rows[-1][1]} spans/s; at {rows[-1][3]} spans/s "
                  f"p50 {rows[-1][5]} ms, p99 {rows[-1][6]} ms", flush=True)
    print()
    print_table(["server load", "max spans/s", "max p99 ms", "offered/s", "acked/s",
                 "p50 ms", "p99 ms", "max ms", "lag p99 ms", "failed",
                 f"p99<={LATENCY_GOAL_MS:.0f}ms"], rows)
    return results


# What holds stepline's memory, printed by the soak beside the caches (short name: gauge).
MEMORY_GAUGES = {
    "stepline_rocksdb_memtable_bytes": "memtables_MB",
    "stepline_rocksdb_block_cache_bytes": "block_cache_MB",
    "stepline_malloc_in_use_bytes": "malloc_in_use_MB",
    "stepline_receiver_bytes_in_process": "in_process_MB",
    "stepline_process_resident_anon_bytes": "anon_MB",
    "stepline_process_resident_file_bytes": "file_MB",
}

# Writes that waited at RocksDB's memtable budget, printed by the soak after the gauges.
WAIT_COUNTERS = {
    "stepline_rocksdb_memtable_budget_waits_total": "budget_waits",
    "stepline_rocksdb_memtable_budget_wait_seconds_total": "budget_wait_s",
}


def short_gauge(name):
    """`stepline_cache_bytes{cache="chain"}` -> `chain_MB`; `stepline_outbox_entries`."""
    if name in MEMORY_GAUGES:
        return MEMORY_GAUGES[name]
    if name in WAIT_COUNTERS:
        return WAIT_COUNTERS[name]
    if "cache=\"" in name:
        return name.split("cache=\"", 1)[1].split("\"", 1)[0] + "_MB"
    return "outbox_entries"


def gauge_unit(name):
    return 1.0 if "entries" in name or name in WAIT_COUNTERS else 1e6


def slope_per_min(points):
    """Least-squares slope of (seconds, MB) points, in MB per minute."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    var = sum((p[0] - mx) ** 2 for p in points)
    if var == 0:
        return 0.0
    return sum((p[0] - mx) * (p[1] - my) for p in points) / var * 60.0


def run_soak(bench, args):
    servers = args.servers
    procs = {s: bench.start_server(s) for s in servers}
    kind, batch, transport = args.kinds[0], args.shapes[0], args.transports[0]
    extra = ["--rate", str(args.rate)] if args.rate else []
    load_s = args.seconds
    print(f"soak: {load_name(kind, batch, transport)} for {load_s:.0f} s against "
          f"{', '.join(servers)} at once, then {args.idle:.0f} s idle; a sample every "
          f"{args.interval:.0f} s", flush=True)
    loads = {}
    for s in servers:
        bench.serial += 1
        out = os.path.join(bench.dir, f"soak-loadgen-{s}.out")
        argv = [bench.loadgen_bin, "--transport", transport, f"--{transport}",
                bench.addr(f"{s}_{transport}"), *KINDS[kind], "--duration", str(load_s),
                "--runs", "10000000", "--concurrency", str(args.concurrency),
                "--batch-spans", str(batch), "--time-limit", str(int(load_s) + 600), *extra]
        loads[s] = (spawn(argv, out), out)
    started = time.monotonic()
    samples = []
    headers = ["t_s", "phase"] + [f"{s} RSS MB" for s in servers]
    gauges = []
    loading = True
    idle_from = None
    while True:
        t = time.monotonic() - started
        if loading and all(p.poll() is not None for p, _ in loads.values()):
            loading = False
            idle_from = t
        if not loading and t - idle_from >= args.idle:
            break
        sample = {"t_s": round(t, 1), "phase": "load" if loading else "idle"}
        for s, proc in procs.items():
            st = proc_stat(proc.pid)
            if st is None:
                raise RuntimeError(f"{s} died during the soak")
            sample[f"{s}_rss_mb"] = round(st["rss_kb"] / 1024, 1)
            sample[f"{s}_cpu_s"] = round(st["cpu_s"], 2)
        if "stepline" in procs:
            metrics = bench.stepline_metrics()
            sample["stepline_metrics"] = metrics
            if not gauges:
                gauges = sorted(k for k in metrics if k.startswith("stepline_cache_bytes{")
                                or k.startswith("stepline_outbox_entries"))
                gauges += [k for k in MEMORY_GAUGES if k in metrics]
                gauges += [k for k in WAIT_COUNTERS if k in metrics]
        samples.append(sample)
        row = [sample["t_s"], sample["phase"]] + [sample[f"{s}_rss_mb"] for s in servers]
        shown = " ".join(f"{short_gauge(g)}={sample['stepline_metrics'].get(g, 0) / gauge_unit(g):.1f}"
                         for g in gauges)
        print("  " + "  ".join(str(c) for c in row) + ("  " + shown if shown else ""), flush=True)
        time.sleep(args.interval)
    summaries = {}
    for s, (proc, out) in loads.items():
        summary = None
        with open(out, "rb") as f:
            for line in f.read().decode("utf-8", "replace").splitlines():
                if line.startswith("{"):
                    try:
                        summary = json.loads(line)
                    except ValueError:
                        pass
        if summary is None:
            raise RuntimeError(f"soak loadgen against {s} printed no summary:\n{tail(out, 30)}")
        summaries[s] = summary
    result = {"kind": kind, "batch_spans": batch, "transport": transport,
              "load_s": load_s, "idle_s": args.idle, "interval_s": args.interval,
              "rate": args.rate, "samples": samples, "servers": {}}
    rows = []
    for s in servers:
        load_pts = [(x["t_s"], x[f"{s}_rss_mb"]) for x in samples if x["phase"] == "load"]
        idle_pts = [(x["t_s"], x[f"{s}_rss_mb"]) for x in samples if x["phase"] == "idle"]
        second_half = [p for p in load_pts if p[0] >= (idle_from or load_s) / 2]
        slope = slope_per_min(second_half)
        end_load = load_pts[-1][1] if load_pts else 0.0
        mean_half = sum(p[1] for p in second_half) / len(second_half) if second_half else 0.0
        half_minutes = (second_half[-1][0] - second_half[0][0]) / 60 if len(second_half) > 1 else 0
        projected = slope * half_minutes
        # Grew: over the last half of the load RSS rose by more than 5% (and 8 MB).
        grew = projected > max(0.05 * mean_half, 8.0)
        phase = summaries[s]["transports"][0]
        st = proc_stat(procs[s].pid)
        info = {"spans": phase["spans"], "spans_per_s": phase["spans_per_s"],
                "failed_requests": phase["failed_requests"],
                "rss_first_mb": load_pts[0][1] if load_pts else None,
                "rss_end_of_load_mb": end_load,
                "rss_end_of_idle_mb": idle_pts[-1][1] if idle_pts else None,
                "peak_rss_mb": round(st["hwm_kb"] / 1024, 1) if st else None,
                "slope_last_half_mb_per_min": round(slope, 2),
                "growth_last_half_mb": round(projected, 1), "grew": grew}
        result["servers"][s] = info
        rows.append([s, info["spans"], f"{info['spans_per_s']:.0f}", info["rss_first_mb"],
                     end_load, info["rss_end_of_idle_mb"], info["peak_rss_mb"],
                     f"{slope:+.2f}", "yes" if grew else "no"])
    print()
    print_table(["server", "spans", "spans/s", "first RSS MB", "end-of-load MB", "end-of-idle MB",
                 "peak MB", "MB/min last half", "grew"], rows)
    for s in servers:
        stop(procs[s])
    return result


# ------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------


def csv(kind):
    return lambda text: [kind(x) for x in text.split(",") if x]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["matrix", "latency", "soak", "smoke"])
    p.add_argument("--seconds", type=float, help="load per measurement (matrix/latency default "
                   "15; soak default 600 = 10 minutes)")
    p.add_argument("--minutes", type=float, help="soak: length of the load in minutes")
    p.add_argument("--kinds", type=csv(str), default=None,
                   help="plain,agent (soak: the first one; default agent)")
    p.add_argument("--shapes", type=csv(int), default=None,
                   help="spans per request, 0 = one 20-span run per request (default 0,500; "
                        "latency 0; soak 0)")
    p.add_argument("--transports", type=csv(str), default=["grpc"], help="grpc,http")
    p.add_argument("--servers", type=csv(str), default=None,
                   help="latency/soak: stepline,rotel (default both)")
    p.add_argument("--fraction", type=float, default=0.5,
                   help="latency: the open loop's share of the maximum (default 0.5)")
    p.add_argument("--rate", type=float, default=None,
                   help="soak: open loop at this many spans/s per server (default closed loop)")
    p.add_argument("--interval", type=float, default=None, help="soak: seconds between samples (5)")
    p.add_argument("--idle", type=float, default=None, help="soak: idle seconds after the load (60)")
    p.add_argument("--concurrency", type=int, default=int(os.environ.get("CONC", "4")))
    p.add_argument("--port-offset", type=int, default=int(os.environ.get("PORT_OFFSET", "0")),
                   help="added to the ports 14317/14318 (Rotel), 24317/24318 (sink), "
                        "34317/34318/34320 (stepline); default $PORT_OFFSET or 0")
    p.add_argument("--free-ports", action="store_true", help="pick free ports instead")
    p.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "stepline", "target"))
    p.add_argument("--stepline", help="stepline binary (default TARGET/release/stepline)")
    p.add_argument("--loadgen", help="loadgen binary (default TARGET/release/examples/loadgen)")
    p.add_argument("--no-sync", action="store_true", help="stepline without fsync")
    p.add_argument("--no-exporter-batch", action="store_true",
                   help="stepline's exporter sends each received request as one request (Rotel batches"
                        " 8192 spans / 200 ms either way)")
    p.add_argument("--json", help="JSON summary file (default TARGET/peer-bench/MODE-TIME.json)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    for k in args.kinds or []:
        if k not in KINDS:
            p.error(f"--kinds: {k} is not one of {', '.join(KINDS)}")
    for t in args.transports:
        if t not in ("grpc", "http"):
            p.error(f"--transports: {t} is not grpc or http")
    for s in args.servers or []:
        if s not in ("stepline", "rotel"):
            p.error(f"--servers: {s} is not stepline or rotel")
    return args


def main(argv):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    atexit.register(stop_all)
    try:
        bench = Bench(args)
    except Skip as e:
        print(f"SKIP: {e}", flush=True)
        return EXIT_SKIP
    atexit.register(bench.cleanup)
    out = {"mode": args.mode, "machine": machine(), "port_offset": args.port_offset,
           "concurrency": args.concurrency, "sync": not args.no_sync,
           "exporter_batch": not args.no_exporter_batch,
           "rotel": bench.rotel, "stepline": bench.stepline_bin}
    print(f"peer bench {args.mode}: load average {out['machine']['loadavg_at_start']}, "
          f"{out['machine']['cpus']} CPUs, rotel {bench.rotel}", flush=True)
    mode = args.mode
    if mode == "smoke":
        args.seconds = args.seconds or 2
        args.kinds = args.kinds or ["plain"]
        args.shapes = args.shapes or [0]
        out["matrix"] = run_matrix(bench, args)
        args.servers = args.servers or ["stepline", "rotel"]
        out["latency"] = run_latency(bench, args)
        args.kinds, args.seconds = ["agent"], 4
        args.interval, args.idle = 1.0, 2.0
        out["soak"] = run_soak(bench, args)
    elif mode == "matrix":
        args.seconds = args.seconds or 15
        args.kinds = args.kinds or ["plain", "agent"]
        args.shapes = args.shapes if args.shapes is not None else [0, 500]
        out["matrix"] = run_matrix(bench, args)
    elif mode == "latency":
        args.seconds = args.seconds or 15
        args.kinds = args.kinds or ["plain", "agent"]
        args.shapes = args.shapes if args.shapes is not None else [0]
        args.servers = args.servers or ["stepline", "rotel"]
        out["latency"] = run_latency(bench, args)
    else:
        args.seconds = args.minutes * 60 if args.minutes else (args.seconds or 600)
        args.kinds = args.kinds or ["agent"]
        args.shapes = args.shapes if args.shapes is not None else [0]
        args.servers = args.servers or ["stepline", "rotel"]
        args.interval = args.interval or 5.0
        args.idle = 60.0 if args.idle is None else args.idle
        out["soak"] = run_soak(bench, args)
    write_json(args, mode, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
