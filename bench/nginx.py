"""Through nginx: requests per second and latency with each limiter of the Lua package, with
nginx alone, and with the EVAL fixed window that Kong and APISIX run, by wrk.

One nginx worker, one server with the module and one wrk thread share the machine; every
request is admitted (limits far above the load), keys spread over 10,000 callers. The
added latency is a route's percentile less nginx alone's. Where the time goes: the CPU
seconds nginx, the server and wrk each used during the run. Run by bench/run.py (make
bench), or alone:

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

ROUTES = {
    "nginx alone": ("/alone", ""),
    "req (CL.THROTTLE ... DELAY)": ("/req", """
        local delay, err = LIMIT_REQ:incoming(ngx.var.arg_k, true)
        if not delay then return ngx.exit(err == "rejected" and 429 or 500) end
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


def nginx_config(prefix: Path, port: int, redis_port: int) -> str:
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
worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp;
    lua_package_path "{ROOT}/clients/lua/lib/?.lua;/usr/share/lua/5.1/?.lua;;";
    init_by_lua_block {{
        REDIS = {{ host = "127.0.0.1", port = {redis_port}, timeout = 1000 }}
        LIMIT_REQ = assert(require("resty.ratelimit_module.req").new(REDIS, 1000000, 1000))
        LIMIT_COUNT = assert(require("resty.ratelimit_module.count").new(REDIS, 1000000000, 60))
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


def measure_nginx(module: Path) -> dict | None:
    for tool in ("nginx", "wrk"):
        if not shutil.which(tool):
            print(f"  skipped: no {tool} (make deps-bench installs it)")
            return None
    work = Path(tempfile.mkdtemp(prefix="ratelimit-bench-nginx-"))
    (work / "tmp").mkdir()
    redis_port, port = free_port(), free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--loadmodule", str(module)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (work / "nginx.conf").write_text(nginx_config(work, port, redis_port))
    nginx = subprocess.Popen(["nginx", "-p", str(work), "-c", "nginx.conf", "-g", "daemon off;"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    script = work / "keys.lua"
    script.write_text(
        f'request = function() return wrk.format(nil, wrk.path .. "?k=" .. math.random({KEYS})) end\n')
    rows = []
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                import socket
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                socket.create_connection(("127.0.0.1", redis_port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            sys.exit("nginx or the server did not start:\n" + (work / "error.log").read_text())
        workers = children(nginx.pid)
        for name, (path, _) in ROUTES.items():
            url = f"http://127.0.0.1:{port}{path}"
            warm, result = wrk(url, 1, script)
            result()
            before = {who: cpu_seconds(pids) for who, pids in
                      (("nginx", workers), ("server", [server.pid]))}
            process, result = wrk(url, DURATION, script)
            wrk_cpu = 0.0
            while process.poll() is None:
                wrk_cpu = cpu_seconds([process.pid]) or wrk_cpu
                time.sleep(0.2)
            figures = result()
            figures["cpu"] = {who: (cpu_seconds(pids) - before[who]) / DURATION for who, pids in
                              (("nginx", workers), ("server", [server.pid]))}
            figures["cpu"]["wrk"] = wrk_cpu / DURATION
            rows.append((name, figures))
            print(f"  {name}: {figures['rps']:.0f} requests/s, p50 {figures['p50']:.2f} ms, "
                  f"p99 {figures['p99']:.2f} ms", flush=True)
            if figures["errors"]:
                sys.exit(f"{name}: {figures['errors']} responses not 2xx:\n"
                         + (work / "error.log").read_text()[-3000:])
    finally:
        nginx.terminate()
        server.terminate()
        nginx.wait()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    return {"rows": rows, "cores": os.cpu_count()}


def nginx_section(result) -> list[str]:
    if not result:
        return []
    alone = result["rows"][0][1]
    lines = [
        "## Through nginx",
        "",
        f"wrk (one thread, {CONNECTIONS} connections, {DURATION} s a route, keys spread over "
        f"{KEYS:,} callers) against one nginx worker with the Lua package, and the server, on "
        f"the same {result['cores']} cores ([bench/nginx.py](bench/nginx.py)). Every request "
        "is admitted; each limited one is one call on a pooled connection. Added latency is "
        "the route's less nginx alone's. CPU is each process' share of a core during the run: "
        "where the time goes.",
        "",
        "| Route | Requests/s | Of nginx alone | p50 ms (added) | p99 ms (added) | CPU nginx | CPU server | CPU wrk |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in result["rows"]:
        cpu = row["cpu"]
        p50_added, p99_added = ("", "") if row is alone else (
            f" (+{row['p50'] - alone['p50']:.2f})", f" (+{row['p99'] - alone['p99']:.2f})")
        lines.append(
            f"| {name} | {row['rps']:,.0f} | {row['rps'] / alone['rps']:.0%} | "
            f"{row['p50']:.2f}{p50_added} | {row['p99']:.2f}{p99_added} | "
            f"{cpu['nginx']:.2f} | {cpu['server']:.2f} | {cpu['wrk']:.2f} |")
    lines.append("")
    return lines


if __name__ == "__main__":
    module = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "target/release/libredis_ratelimit.so")
    print("\n".join(nginx_section(measure_nginx(module.resolve()))))
