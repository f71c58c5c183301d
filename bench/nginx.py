"""Through nginx: requests per second and latency with each limiter of the Lua package, with
nginx alone, a bare PING on a pooled connection, and the EVAL fixed window that Kong and
APISIX run, by wrk.

One nginx worker, one server with the module and one wrk thread share the machine; every
request is admitted (limits far above the load), keys spread over 10,000 callers, but for
the quota routes, which limit one hot key (a global limit, what a quota is for). The added
latency is a route's percentile less nginx alone's. Where the time goes: the CPU seconds
nginx, the server and wrk each used during the run, and, counted by callgrind in a single
nginx process, the instructions the worker spends per request on each route (the same for
the same build whatever the machine does). A second pass runs two workers. Run by
bench/run.py (make bench), or alone:

    python3 bench/nginx.py [path/to/libredis_ratelimit.so]
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATION = 8  # seconds per route
CONNECTIONS = 32
KEYS = 10_000

# The script of APISIX's limit-count over Redis (Kong's is the same INCR with EXPIRE on the
# first hit): a fixed window from the first request, one EVAL a request.
EVAL_SCRIPT = """
local ttl = redis.call('ttl', KEYS[1])
if ttl < 0 then
    redis.call('set', KEYS[1], ARGV[1] - 1, 'EX', ARGV[2])
    return {ARGV[1] - 1, ARGV[2]}
end
return {redis.call('incrby', KEYS[1], -1), ttl}
"""

# The quota routes' batch, and the hot key they limit.
QUOTA_BATCH = 100

ROUTES = {
    "nginx alone": ("/alone", ""),
    "req (CL.THROTTLE)": ("/req", """
        local delay, err = LIMIT_REQ:incoming(ngx.var.arg_k, true)
        if not delay then return ngx.exit(err == "rejected" and 429 or 500) end
    """),
    "req, its HTTP fields noted and set (the default)": ("/req_fields", """
        local delay, err = LIMIT_REQ_FIELDS:incoming(ngx.var.arg_k, true)
        if not delay then return ngx.exit(err == "rejected" and 429 or 500) end
        FIELDS.set()
    """),
    "count (RL.WINDOW ... ANCHORED)": ("/count", """
        local delay, err = LIMIT_COUNT:incoming(ngx.var.arg_k, true)
        if not delay then return ngx.exit(err == "rejected" and 429 or 500) end
    """),
    "combine (req and count, one RL.ALL)": ("/combine", """
        local key = ngx.var.arg_k
        local delay, err = require("resty.ratelimit_module.traffic").combine(
            { LIMIT_REQ, LIMIT_COUNT }, { "{" .. key .. "}:req", "{" .. key .. "}:count" }, {})
        if not delay then return ngx.exit(err == "rejected" and 429 or 500) end
    """),
    f"count, quota of {QUOTA_BATCH} (one hot key)": ("/count_quota", """
        local delay, err = QUOTA_COUNT:incoming("global")
        if not delay then return ngx.exit(err == "rejected" and 429 or 500) end
    """),
    f"req, quota of {QUOTA_BATCH} (one hot key)": ("/req_quota", """
        local delay, err = QUOTA_REQ:incoming("global")
        if not delay then return ngx.exit(err == "rejected" and 429 or 500) end
    """),
    "PING on a pooled connection (the round trip alone)": ("/ping", """
        local red = REDIS_LIB:new()
        red:set_timeout(1000)
        local ok = red:connect("127.0.0.1", REDIS.port)
        if not ok or not red:ping() then return ngx.exit(500) end
        red:set_keepalive(60000, 100)
    """),
    "EVAL fixed window (Kong, APISIX)": ("/eval", """
        local red = REDIS_LIB:new()
        red:set_timeout(1000)
        local ok, err = red:connect("127.0.0.1", REDIS.port)
        if not ok then return ngx.exit(500) end
        local res
        res, err = red:eval(EVAL_SCRIPT, 1, "eval:" .. ngx.var.arg_k, 1000000000, 60)
        if not res then return ngx.exit(500) end
        red:set_keepalive(60000, 100)
        if res[1] < 0 then return ngx.exit(429) end
    """),
}


# Routes of the second pass, with two workers.
TWO_WORKER_ROUTES = ("nginx alone", "req (CL.THROTTLE)",
                     "PING on a pooled connection (the round trip alone)",
                     "EVAL fixed window (Kong, APISIX)", f"count, quota of {QUOTA_BATCH} (one hot key)",
                     f"req, quota of {QUOTA_BATCH} (one hot key)")


def nginx_config(prefix: Path, port: int, redis_port: int, workers: int = 1,
                 single_process: bool = False) -> str:
    locations = "\n".join(
        f"""        location = {path} {{
            access_by_lua_block {{ {body} }}
            content_by_lua_block {{ ngx.say("ok") }}
        }}""" if body else f"""        location = {path} {{
            content_by_lua_block {{ ngx.say("ok") }}
        }}"""
        for path, body in ROUTES.values())
    script = EVAL_SCRIPT.replace("\n", "\\n")
    return f"""
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes {workers};
{"master_process off;" if single_process else ""}
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp;
    lua_package_path "{ROOT}/clients/lua/lib/?.lua;/usr/share/lua/5.1/?.lua;;";
    lua_shared_dict ratelimit_quota 1m;
    init_by_lua_block {{
        -- As the PING and EVAL routes, the limiters' routes set no HTTP fields: they note
        -- none (fields = false); one route keeps the default and sets them.
        REDIS = {{ host = "127.0.0.1", port = {redis_port}, timeout = 1000, fields = false }}
        local with_fields = {{ host = "127.0.0.1", port = {redis_port}, timeout = 1000,
            prefix = "fields:" }}
        FIELDS = require("resty.ratelimit_module.fields")
        LIMIT_REQ = assert(require("resty.ratelimit_module.req").new(REDIS, 1000000, 1000))
        LIMIT_REQ_FIELDS = assert(require("resty.ratelimit_module.req").new(with_fields, 1000000, 1000))
        LIMIT_COUNT = assert(require("resty.ratelimit_module.count").new(REDIS, 1000000000, 60))
        local quota = require("resty.ratelimit_module.quota")
        local options = {{ dict = "ratelimit_quota", batch = {QUOTA_BATCH}, hold = 1 }}
        QUOTA_COUNT = assert(quota.new(assert(require("resty.ratelimit_module.count").new(
            {{ host = "127.0.0.1", port = {redis_port}, timeout = 1000, fields = false,
               prefix = "quota-count:" }}, 1000000000, 60)), options))
        QUOTA_REQ = assert(quota.new(assert(require("resty.ratelimit_module.req").new(
            {{ host = "127.0.0.1", port = {redis_port}, timeout = 1000, fields = false,
               prefix = "quota-req:" }}, 100000000, 100000)), options))
        local found, lib = pcall(require, "resty.redis")
        REDIS_LIB = found and lib or require("nginx.redis")
        EVAL_SCRIPT = "{script}"
    }}
    server {{
        listen 127.0.0.1:{port};
{locations}
    }}
}}
"""


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pids: list[int]) -> float:
    """User and system time of `pids` so far."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(stat[1]) == pid:
                found.append(int(entry.name))
    return found


def millis(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def wrk(url: str, seconds: int, script: Path) -> tuple[subprocess.Popen, callable]:
    process = subprocess.Popen(
        ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency", "-s", str(script), url],
        stdout=subprocess.PIPE, text=True)

    def result() -> dict:
        out, _ = process.communicate()
        found = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}
        for name in ("50", "99"):
            found[f"p{name}"] = millis(re.search(rf"\s{name}%\s+(\S+)", out).group(1))
        non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        found["errors"] = int(non_2xx.group(1)) if non_2xx else 0
        return found
    return process, result


def start_server(module: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--loadmodule", str(module)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for(ports: list[int], log: Path) -> None:
    import socket
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            for port in ports:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit("nginx or the server did not start:\n" + (log.read_text() if log.exists() else ""))


def stop(nginx: subprocess.Popen, server: subprocess.Popen, work: Path) -> None:
    """Stops nginx and the server, and removes their directory."""
    for process in (nginx, server):
        process.terminate()
    for process in (nginx, server):
        process.wait()
    shutil.rmtree(work, ignore_errors=True)


def run_pass(module: Path, workers: int, routes: list[str]) -> list:
    """wrk on each of `routes` through an nginx of `workers` workers: a row per route."""
    work = Path(tempfile.mkdtemp(prefix="ratelimit-bench-nginx-"))
    (work / "tmp").mkdir()
    redis_port, port = free_port(), free_port()
    server = start_server(module, redis_port)
    (work / "nginx.conf").write_text(nginx_config(work, port, redis_port, workers))
    nginx = subprocess.Popen(["nginx", "-p", str(work), "-c", "nginx.conf", "-g", "daemon off;"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    script = work / "keys.lua"
    script.write_text(
        f'request = function() return wrk.format(nil, wrk.path .. "?k=" .. math.random({KEYS})) end\n')
    rows = []
    try:
        wait_for([port, redis_port], work / "error.log")
        nginx_pids = children(nginx.pid)
        for name in routes:
            path = ROUTES[name][0]
            url = f"http://127.0.0.1:{port}{path}"
            warm, result = wrk(url, 1, script)
            result()
            before = {who: cpu_seconds(pids) for who, pids in
                      (("nginx", nginx_pids), ("server", [server.pid]))}
            calls_before = server_calls(redis_port)
            process, result = wrk(url, DURATION, script)
            wrk_cpu = 0.0
            while process.poll() is None:
                wrk_cpu = cpu_seconds([process.pid]) or wrk_cpu
                time.sleep(0.2)
            figures = result()
            figures["cpu"] = {who: (cpu_seconds(pids) - before[who]) / DURATION for who, pids in
                              (("nginx", nginx_pids), ("server", [server.pid]))}
            figures["cpu"]["wrk"] = wrk_cpu / DURATION
            # The INFO call itself is one of them.
            figures["calls"] = (server_calls(redis_port) - calls_before - 1) / (
                figures["rps"] * DURATION)
            rows.append((name, figures))
            print(f"  {workers} worker(s), {name}: {figures['rps']:.0f} requests/s, "
                  f"p50 {figures['p50']:.2f} ms, p99 {figures['p99']:.2f} ms", flush=True)
            if figures["errors"]:
                sys.exit(f"{name}: {figures['errors']} responses not 2xx:\n"
                         + (work / "error.log").read_text()[-3000:])
    finally:
        stop(nginx, server, work)
    return rows


# Requests per route under callgrind: warm ones first (JIT traces, the connection pool), then
# the counted ones.
CALLGRIND_WARM, CALLGRIND_COUNTED = 3_000, 2_000


def worker_instructions(module: Path) -> dict | None:
    """Instructions a single nginx process spends per request on each route, by callgrind:
    the requests are sent one after another on one keep-alive connection, and counted from
    zeroed counters to a dump after the last."""
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        print("  skipped the instruction counts: no valgrind")
        return None
    import http.client
    work = Path(tempfile.mkdtemp(prefix="ratelimit-bench-nginx-cg-"))
    (work / "tmp").mkdir()
    redis_port, port = free_port(), free_port()
    server = start_server(module, redis_port)
    (work / "nginx.conf").write_text(nginx_config(work, port, redis_port, 1, single_process=True))
    out = work / "callgrind.out"
    nginx = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
         "nginx", "-p", str(work), "-c", "nginx.conf", "-g", "daemon off;"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counts = {}
    try:
        wait_for([port, redis_port], work / "error.log")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

        def send(path: str, count: int) -> None:
            for i in range(count):
                connection.request("GET", f"{path}?k={i % KEYS}")
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    sys.exit(f"{path}: {response.status}\n" + (work / "error.log").read_text()[-3000:])

        for name, (path, _) in ROUTES.items():
            send(path, CALLGRIND_WARM)
            subprocess.run(["callgrind_control", "-z", str(nginx.pid)], capture_output=True, check=True)
            send(path, CALLGRIND_COUNTED)
            subprocess.run(["callgrind_control", "-d", str(nginx.pid)], capture_output=True, check=True)
            dumps = sorted(work.glob("callgrind.out.*"), key=lambda dump: dump.stat().st_mtime)
            total = next(int(line.split()[1]) for line in dumps[-1].read_text().splitlines()
                         if line.startswith(("summary:", "totals:")))
            counts[name] = total / CALLGRIND_COUNTED
            print(f"  {name}: {counts[name]:,.0f} instructions a request in the worker", flush=True)
    finally:
        stop(nginx, server, work)
    return counts


def server_calls(port: int) -> int:
    """Every command the server has run (INFO commandstats)."""
    info = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"],
                          capture_output=True, text=True, check=True).stdout
    return sum(int(match) for match in re.findall(r"calls=(\d+)", info))


def checkout_of(module: Path) -> Path | None:
    """The checkout a build sits in (`<tree>/target/release/libredis_ratelimit.so`), when it
    has this bench."""
    tree = module.parents[2] if len(module.parents) > 2 else None
    return tree if tree and (tree / "bench/nginx.py").is_file() else None


def baseline_instructions(name: str, module: Path) -> dict | None:
    """The worker's instructions a request with baseline `name`'s own Lua package, routes and
    nginx configuration (its checkout's bench/nginx.py, run on its module)."""
    tree = checkout_of(module)
    if tree is None:
        print(f"  {name}: not in a checkout, its Lua package not measured")
        return None
    print(f"  {name}'s Lua package:", flush=True)
    code = ("import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "import nginx; print(json.dumps(nginx.worker_instructions(Path(sys.argv[2]))))")
    run = subprocess.run([sys.executable, "-c", code, str(tree / "bench"), str(module)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(f"  {name}: failed\n{run.stderr[-2000:]}")
        return None
    import json
    return json.loads(run.stdout.strip().splitlines()[-1])


def measure_nginx(module: Path, baselines: list[tuple[str, Path]] = ()) -> dict | None:
    for tool in ("nginx", "wrk"):
        if not shutil.which(tool):
            print(f"  skipped: no {tool} (make deps-bench installs it)")
            return None
    rows = run_pass(module, 1, list(ROUTES))
    two = run_pass(module, 2, list(TWO_WORKER_ROUTES))
    instructions = worker_instructions(module)
    earlier = {name: baseline_instructions(name, path) for name, path in baselines}
    return {"rows": rows, "two_workers": two, "instructions": instructions,
            "baselines": {name: counts for name, counts in earlier.items() if counts},
            "cores": os.cpu_count()}


def nginx_section(result) -> list[str]:
    if not result:
        return []

    def table(rows) -> list[str]:
        alone = rows[0][1]
        ping = dict(rows).get("PING on a pooled connection (the round trip alone)")
        lines = [
            "| Route | Requests/s | Of nginx alone | Of PING | p50 ms (added) | p99 ms (added) "
            "| Server calls a request | CPU nginx | CPU server | CPU wrk |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, row in rows:
            cpu = row["cpu"]
            p50_added, p99_added = ("", "") if row is alone else (
                f" ({row['p50'] - alone['p50']:+.2f})", f" ({row['p99'] - alone['p99']:+.2f})")
            of_ping = f"{row['rps'] / ping['rps']:.0%}" if ping else ""
            lines.append(
                f"| {name} | {row['rps']:,.0f} | {row['rps'] / alone['rps']:.0%} | {of_ping} | "
                f"{row['p50']:.2f}{p50_added} | {row['p99']:.2f}{p99_added} | "
                f"{row['calls']:.3f} | {cpu['nginx']:.2f} | {cpu['server']:.2f} | {cpu['wrk']:.2f} |")
        return lines

    lines = [
        "## Through nginx",
        "",
        f"wrk (one thread, {CONNECTIONS} connections, {DURATION} s a route, keys spread over "
        f"{KEYS:,} callers; the quota routes limit one hot key, a global limit) against nginx "
        f"with the Lua package, and the server, on the same {result['cores']} cores "
        "([bench/nginx.py](bench/nginx.py)). Every request is admitted; each limited one is one "
        "call on a pooled connection, but on the quota routes, which take a batch of "
        f"{QUOTA_BATCH} units per call into a shared dict. As the PING and EVAL routes, the "
        "limiters' routes note no HTTP fields (`fields = false`), but one, which sets them. "
        "Added latency is the route's less nginx alone's. CPU is each process' share of a core "
        "during the run: where the time goes.",
        "",
        "One worker:",
        "",
        *table(result["rows"]),
        "",
        "Two workers:",
        "",
        *table(result["two_workers"]),
        "",
    ]
    counts = result.get("instructions")
    baselines = result.get("baselines", {})
    if counts:
        ping = counts.get("PING on a pooled connection (the round trip alone)")
        lines += [
            "Instructions the nginx worker spends a request, counted by callgrind in a single "
            f"nginx process ({CALLGRIND_COUNTED:,} requests one after another on one connection, "
            f"after {CALLGRIND_WARM:,} to warm up): what a route costs the worker, the same for "
            "the same build whatever else the machine does. With one worker saturated, requests "
            "per second go as its inverse.",
            "",
            "| Route | Instructions a request | PING's over the route's "
            + "".join(f"| {name}'s package, change " for name in baselines) + "|",
            "|---|---:|---:|" + "---:|" * len(baselines),
        ]
        for name, count in counts.items():
            ratio = f"{ping / count:.0%}" if ping else ""
            changes = "".join(
                f"| {earlier[name]:,.0f}, {100 * (count / earlier[name] - 1):+.1f}% "
                if earlier.get(name) else "| n/a (new) " for earlier in baselines.values())
            lines.append(f"| {name} | {count:,.0f} | {ratio} {changes}|")
        lines.append("")
    return lines


if __name__ == "__main__":
    module = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "target/release/libredis_ratelimit.so")
    print("\n".join(nginx_section(measure_nginx(module.resolve()))))
