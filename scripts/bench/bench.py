#!/usr/bin/env python3
"""gatehouse benchmark driver (run by scripts/bench/run.sh, i.e. `make bench`).

Starts gatehouse, a Go net/http server and nginx on 127.0.0.1, each answering
"hello, world\n" (13 bytes), and measures them interleaved (A B C A B C ...).
`make bench` runs conns, parked, syscalls and real (--phases; about 20 minutes
on 2 cores); the others run when named:

  conns       (conns.py) gatehouse as shipped and tuned, net/http and nginx
              under scripts/bench/loadgen from --client-addrs source
              addresses: `Connection: close` at 64/256/1000 clients, new TLS
              handshakes at 64, keep-alive at 64/256/1000; ratios to net/http
              and nginx, the servers' and the load generator's CPU per request
  parked      (conns.py) RSS per parked connection after one request, 10 000
              held, baseline after a 200-request warm-up, whole process tree
  syscalls    (conns.py) system calls and context switches per
              `Connection: close` connection, supervisor and workers apart
              (perf stat at full speed; strace -c -f for the breakdown)
  throughput  (from one address) wrk -t2 -c{64,256,1000} -d{D}s --latency, keep-alive and
              Connection: close; requests/s, p50, p99
  real        real traffic (real.py): a page and its assets of 1 KB to 1 MB
              over plain and TLS, a proxied JSON API of 2 KB and 200 KB
              (loadgen from --client-addrs addresses, or wrk with
              --real-client wrk), and WebSocket echo over TLS; gatehouse as
              shipped (and with the access log off, --real-gatehouse) and
              tuned; requests/s, p99 and bytes/s
  realprofile where gatehouse as shipped spends its time on the real site
              mix and the 2 KB API (not run by default)
  reallevers  the site mix against gatehouse as shipped with one default
              changed at a time, the profile's levers (not run by default)
  idle        RSS per connection while 10 000 connections are held (before
              any request, and after one request each, the latter also
              against a warm baseline: taken after a first burst of as many
              connections was served and closed) and the CPU spent holding
              them for 10 s
  attack      a legitimate client's success rate and p50/p99 while
              slowhttptest holds 4000 slowloris connections and 10 000 idle
              connections are held, with a generous descriptor limit and
              with ulimit -n 1024
  distributed the distributed slow-client attacks of issue 11, each server in
              front of (or being) the same upstream, default configuration:
              slow heads (3000 connections from 50 addresses, one header
              line every 3 s) and slow bodies (40 connections from 5
              addresses, POST of 1 000 000 bytes at 2 KiB every 100 ms);
              a legitimate client's success rate and p50/p99 (3 s timeout)
  tls         HTTPS with one ECDSA P-256 certificate generated at bench time
              (openssl, into OUT/tls): new full handshakes per second
              (scripts/bench/handshake, no session resumption), keep-alive
              requests/s over TLS (wrk -c64 and -c256), and RSS per idle TLS
              connection after one request; gatehouse tuned and as shipped
  tlsprofile  where gatehouse's time goes over TLS: CPU seconds per process
              and perf of the supervisor and the workers, under wrk https
              keep-alive and under new handshakes
  ipc         the ipc package's hand-off benchmarks

With --gatehouse-before BIN the throughput phase also measures BIN (tuned
alike, as "gatehouse-before") in the same rotation, and charts.py reports
after/before: ratios of medians and the range of the per-round ratios.

Every load targets 127.0.0.x, is bounded in count and time and stops by
itself; every server started here is stopped when the driver exits.
Results go to OUT/results.json (and TSV tables); gatehouse/nginx logs to OUT/logs.
"""

import argparse
import atexit
import json
import os
import pwd
import re
import resource
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BODY = "hello, world\n"
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

PROCS = []  # every Popen we started, killed at exit

# The bench's certificate is self-signed: readiness checks and metrics
# fetches over HTTPS do not verify it.
INSECURE = ssl.create_default_context()
INSECURE.check_hostname = False
INSECURE.verify_mode = ssl.CERT_NONE


def log(*a):
    print("[bench %s]" % time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def kill_all():
    for p in PROCS:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.time() + 5
    for p in PROCS:
        while p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


atexit.register(kill_all)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
signal.signal(signal.SIGINT, lambda *a: sys.exit(130))


def spawn(argv, cwd=None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, nofile=None):
    """Start argv in its own process group, optionally under ulimit -n nofile."""
    if nofile:
        argv = ["/bin/sh", "-c", 'ulimit -n %d && exec "$@"' % nofile, "sh"] + list(argv)
    p = subprocess.Popen(argv, cwd=cwd, stdout=stdout, stderr=stderr, start_new_session=True)
    PROCS.append(p)
    return p


# ---------------------------------------------------------------- /proc


def children(pid):
    """Every descendant of pid: gatehouse started as root runs its workers
    under a spawner process, so they are the supervisor's grandchildren."""
    out = []
    for task in os.listdir("/proc/%d/task" % pid) if os.path.exists("/proc/%d/task" % pid) else []:
        try:
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            continue
        for k in kids:
            out += [k] + children(k)
    return out


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
        fields = s[s.rindex(")") + 2:].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError):
        return 0


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
        return s[s.rindex(")") + 2] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------- servers


class Server:
    name = ""

    def __init__(self, port, tmp, logdir, tls=None):
        self.port, self.tmp, self.logdir = port, tmp, logdir
        self.proc = None
        self.addr = "127.0.0.1:%d" % port
        self.starts = 0
        self.tls = tls  # (certificate path, key path) to serve HTTPS
        self.scheme = "https" if tls else "http"

    def argv(self, nofile):
        raise NotImplementedError

    def start(self, nofile, tag):
        self.starts += 1
        self.logfile = os.path.join(self.logdir, "%s-%s.log" % (self.name, tag))
        lf = open(self.logfile, "ab")
        argv, cwd = self.argv(nofile)
        self.proc = spawn(argv, cwd=cwd, stdout=lf, stderr=lf, nofile=nofile)
        lf.close()
        deadline = time.time() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited at start (status %s); see %s" % (self.name, self.proc.returncode, self.logfile))
            try:
                with urllib.request.urlopen("%s://%s%s" % (self.scheme, self.addr, self.probe_path), timeout=1,
                                            context=INSECURE if self.tls else None) as r:
                    if self.probe_ok(r.status, r.read()):
                        break
            except Exception:
                pass
            if time.time() > deadline:
                raise RuntimeError("%s does not answer on %s; see %s" % (self.name, self.addr, self.logfile))
            time.sleep(0.1)
        time.sleep(0.5)

    # the readiness probe: GET probe_path answered as probe_ok accepts
    probe_path = "/"

    def probe_ok(self, status, body):
        return status == 200 and body == BODY.encode()

    def main_pid(self):
        # the shell wrapper execs, so the Popen pid is the server itself
        return self.proc.pid

    def pids(self):
        """(main pid, [child pids]): supervisor and workers, master and workers."""
        pid = self.main_pid()
        return pid, children(pid)

    def rss(self):
        pid, kids = self.pids()
        return rss_kb(pid), sum(rss_kb(k) for k in kids)

    def cpu(self):
        pid, kids = self.pids()
        return cpu_ticks(pid) + sum(cpu_ticks(k) for k in kids)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None:
            return None
        p, self.proc = self.proc, None
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        return p.returncode


class Gatehouse(Server):
    def __init__(self, port, tmp, logdir, binary, count, concurrency, name="gatehouse", per_client=65535,
                 trusted_loopback=False, tls=None, threads=0, hot_window=""):
        super().__init__(port, tmp, logdir, tls)
        self.name, self.binary = name, os.path.abspath(binary)
        self.count, self.concurrency = count, concurrency
        self.threads, self.hot_window, self.trusted_loopback = threads, hot_window, trusted_loopback
        # per port: two instances may share a name (the tuned throughput
        # gatehouse reports as "gatehouse" beside the idle phase's)
        self.dir = os.path.join(tmp, "%s-%d" % (name, port))
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        workers = ""
        if count:
            workers = "workers {\n  count       = %d\n  concurrency = %d\n" % (count, concurrency)
            if threads:
                workers += "  threads     = %d\n" % threads
            if hot_window:
                workers += '  hot_window  = "%s"\n' % hot_window
            workers += "}\n"
        if trusted_loopback:
            # wrk's one address stands for many clients: no per-client
            # share, so hot connections are handed back only when the
            # pool is full (a share of a quarter of the pool would hand
            # them back whenever wrk holds more connections than that).
            workers += 'trusted_proxies = ["127.0.0.1/32"]\n'
        tls_block = metrics = ""
        if tls:
            tls_block = '  tls {\n    certificate "bench" {\n      cert = "%s"\n      key  = "%s"\n    }\n  }\n' % tls
            # the signature counter proves every measured handshake a full one
            metrics = 'route "/metrics" {\n  metrics {\n    allow = ["127.0.0.0/8"]\n  }\n}\n'
        with open(os.path.join(self.dir, "gatehouse.hcl"), "w") as f:
            f.write('''# generated by scripts/bench/bench.py
listener "http" {
  address = "%s"
%s}
%s%s
limits {
  first_byte_timeout         = "60s"
  keep_alive_idle_timeout    = "300s"
  max_queued_connections     = 20000
  keep_alive_max_connections = 20000
  # wrk and slowhttptest connect from one address (127.0.0.1): by default
  # let them all in (the default cap, 256, would refuse most of them)
  max_connections_per_client = %d
}
route "/" {
  respond {
    status       = 200
    body         = "hello, world\\n"
    content_type = "text/plain; charset=utf-8"
  }
}
log {
  level = "warn"
}
''' % (self.addr, tls_block, metrics, workers, per_client))

    def argv(self, nofile):
        return [self.binary, "-config", "gatehouse.hcl"], self.dir

    def describe(self):
        if not self.count:
            return "workers at their defaults (count=4 concurrency=16)"
        d = "workers count=%d concurrency=%d" % (self.count, self.concurrency)
        if self.threads:
            d += " threads=%d" % self.threads
        if self.hot_window:
            d += " hot_window=%s" % self.hot_window
        if self.trusted_loopback:
            d += ", 127.0.0.1 a trusted proxy"
        return d


class GatehouseProxy(Server):
    """gatehouse with its default configuration (limits, workers 4x16), proxying
    every request to upstream."""
    name = "gatehouse"

    def __init__(self, port, tmp, logdir, binary, upstream):
        super().__init__(port, tmp, logdir)
        self.binary = os.path.abspath(binary)
        self.dir = os.path.join(tmp, "gatehouse-proxy")
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        with open(os.path.join(self.dir, "gatehouse.hcl"), "w") as f:
            f.write('''# generated by scripts/bench/bench.py
listener "http" {
  address = "%s"
}
upstream "app" {
  addresses       = ["%s"]
  max_connections = 1024
}
route "/" {
  proxy {
    upstream = "app"
  }
}
log {
  level      = "warn"
  access_log = false
}
''' % (self.addr, upstream))

    def argv(self, nofile):
        return [self.binary, "-config", "gatehouse.hcl"], self.dir


class NetHTTP(Server):
    name = "nethttp"

    def __init__(self, port, tmp, logdir, binary, tls=None):
        super().__init__(port, tmp, logdir, tls)
        self.binary = binary

    def argv(self, nofile):
        if self.tls:
            return [self.binary, "-addr", self.addr, "-cert", self.tls[0], "-key", self.tls[1]], None
        return [self.binary, "-addr", self.addr], None


class Nginx(Server):
    name = "nginx"

    def __init__(self, port, tmp, logdir, generous_nofile, upstream=None, tls=None):
        super().__init__(port, tmp, logdir, tls)
        self.dir = os.path.join(tmp, "nginx-tls" if tls else "nginx" if upstream is None else "nginx-proxy")
        os.makedirs(self.dir, exist_ok=True)
        self.generous = generous_nofile
        # With an upstream, nginx proxies to it with its default request
        # buffering (proxy_request_buffering on), as gatehouse's proxy route.
        self.location = 'return 200 "hello, world\\n";'
        if upstream is not None:
            self.location = "proxy_pass http://%s;" % upstream

    def conf(self, nofile):
        path = os.path.join(self.dir, "nginx-%d.conf" % nofile)
        # Under a small `ulimit -n` nginx keeps what the shell gave it: no
        # worker_rlimit_nofile then (as root it would raise the limit itself).
        rlimit = "worker_rlimit_nofile %d;" % nofile if nofile >= self.generous else ""
        # TLS as gatehouse's: 1.2 and 1.3, ECDHE with AEAD suites for 1.2,
        # session tickets on (nginx's default), no session cache (its default)
        ssl_conf = ""
        if self.tls:
            ssl_conf = ("ssl_certificate %s;\n        ssl_certificate_key %s;\n        ssl_protocols TLSv1.2 TLSv1.3;\n"
                        "        ssl_ciphers ECDHE+AESGCM:ECDHE+CHACHA20;\n" % self.tls)
        with open(path, "w") as f:
            f.write('''# generated by scripts/bench/bench.py
daemon off;
master_process on;
worker_processes auto;
%(rlimit)s
pid %(d)s/nginx.pid;
error_log %(d)s/error.log warn;
events {
    worker_connections 20000;
}
http {
    access_log off;
    keepalive_timeout 300s;
    keepalive_requests 1000;
    client_header_timeout 30s;
    client_body_temp_path %(d)s/client_body;
    proxy_temp_path %(d)s/proxy;
    fastcgi_temp_path %(d)s/fastcgi;
    uwsgi_temp_path %(d)s/uwsgi;
    scgi_temp_path %(d)s/scgi;
    server {
        listen %(addr)s%(ssl_flag)s backlog=4096;
        %(ssl)sdefault_type text/plain;
        location / {
            %(location)s
        }
    }
}
''' % {"d": self.dir, "addr": self.addr, "rlimit": rlimit, "location": self.location,
                   "ssl_flag": " ssl" if self.tls else "", "ssl": ssl_conf})
        return path

    def argv(self, nofile):
        return ["nginx", "-p", self.dir, "-c", self.conf(nofile)], self.dir


# ---------------------------------------------------------------- wrk

UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def parse_dur(s):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", s)
    return float(m.group(1)) * UNIT[m.group(2)] if m else None


SIZE = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def wrk(addr, conns, duration, close, scheme="http", path="/", script=None):
    """wrk -t2 on path (or the requests of a Lua script); requests/s, p50,
    p99 and bytes/s of what it read."""
    argv = ["wrk", "-t2", "-c%d" % conns, "-d%ds" % duration, "--latency", "--timeout", "10s"]
    if close:
        argv += ["-H", "Connection: close"]
    if script:
        argv += ["-s", script]
    argv.append("%s://%s%s" % (scheme, addr, path))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60).stdout
    r = {"rps": None, "p50_ms": None, "p99_ms": None, "non2xx": 0, "socket_errors": {}, "requests": None,
         "bytes_per_s": None}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Requests/sec:"):
            r["rps"] = float(line.split()[1])
        elif line.startswith("50%"):
            r["p50_ms"] = parse_dur(line.split()[1])
        elif line.startswith("99%"):
            r["p99_ms"] = parse_dur(line.split()[1])
        elif line.startswith("Non-2xx"):
            r["non2xx"] = int(line.split()[-1])
        elif line.startswith("Socket errors:"):
            for k, v in re.findall(r"(\w+) (\d+)", line[len("Socket errors:"):]):
                r["socket_errors"][k] = int(v)
        elif line.startswith("Transfer/sec:"):
            m = re.match(r"([\d.]+)([KMGT]?B)$", line.split()[1])
            r["bytes_per_s"] = float(m.group(1)) * SIZE[m.group(2)] if m else None
        elif "requests in" in line:
            r["requests"] = int(line.split()[0])
    if r["rps"] is None:
        r["raw"] = out
    return r


# ---------------------------------------------------------------- phases


def med(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def phase_throughput(args, servers, res):
    out = res.setdefault("throughput", [])
    for s in servers:
        s.start(args.nofile, "throughput")
    try:
        for rnd in range(args.rounds):
            for close in (False, True):
                for c in args.conns:
                    order = servers[rnd % len(servers):] + servers[:rnd % len(servers)]
                    for s in order:
                        if close and getattr(s, "keepalive_only", False):
                            continue
                        pid, kids = s.pids()
                        m0, k0 = cpu_ticks(pid), sum(cpu_ticks(k) for k in kids)
                        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                        r = wrk(s.addr, c, args.duration, close)
                        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                        pid2, kids2 = s.pids()
                        if pid2 == pid:
                            r["server_main_cpu_s"] = (cpu_ticks(pid) - m0) / CLK
                            r["server_children_cpu_s"] = (sum(cpu_ticks(k) for k in kids2) - k0) / CLK if kids2 == kids else None
                        r["wrk_cpu_s"] = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
                        r.update(server=s.name, conns=c, close=close, round=rnd, alive=s.alive())
                        out.append(r)
                        log("throughput round %d %s c=%d %s: %s req/s p50 %s p99 %s non2xx %d errors %s" % (
                            rnd, "close" if close else "keep-alive", c, s.name, r["rps"], r["p50_ms"], r["p99_ms"],
                            r["non2xx"], r["socket_errors"] or "-"))
                        if not s.alive():
                            log("!! %s died; restarting it" % s.name)
                            s.start(args.nofile, "throughput")
                        time.sleep(1)
    finally:
        for s in servers:
            rc = s.stop()
            log("%s stopped (status %s)" % (s.name, rc))


def build_go(pkg, out):
    subprocess.run(["go", "build", "-o", out, pkg], cwd=ROOT, check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))
    return out


def start_idle(args, addr, n, request, hold, first=10, addrs=50, tls=False):
    argv = [args.idle_bin, "-addr", addr, "-n", str(n), "-addrs", str(addrs), "-first", str(first),
            "-hold", "%ds" % hold, "-open-timeout", "40s"]
    if request:
        argv.append("-request")
    if tls:
        argv.append("-tls")
    p = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = p.stdout.readline()  # blocks until every dial has finished (bounded by -open-timeout)
    try:
        ready = json.loads(line)
    except ValueError:
        ready = {"phase": "ready", "error": "no report: %r" % line}
    return p, ready


def finish_idle(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        out, _ = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
    for line in out.decode().splitlines():
        try:
            d = json.loads(line)
            if d.get("phase") == "done":
                return d
        except ValueError:
            pass
    return {}


def phase_idle(args, servers, res):
    out = res.setdefault("idle", [])
    n = args.idle_conns
    # warm: the baseline is taken after the same number of connections was
    # opened, served once and closed, and a quiet wait. What a first burst
    # leaves for good (code paged in, the runtime's own tables grown to the
    # burst) is then in the baseline, and the difference is what holding
    # the connections costs.
    for rnd in range(args.idle_rounds):
        for request, warm in ((False, False), (True, False), (True, True)):
            order = servers[rnd % len(servers):] + servers[:rnd % len(servers)]
            for s in order:
                s.start(args.nofile, "idle")
                try:
                    time.sleep(1)
                    if warm:
                        w, _ = start_idle(args, s.addr, n, True, hold=1)
                        w.wait(timeout=60)
                        time.sleep(args.idle_warm_quiet)
                    base_main, base_kids = s.rss()
                    p, ready = start_idle(args, s.addr, n, request, hold=120)
                    time.sleep(2)
                    t0 = s.cpu()
                    time.sleep(args.idle_cpu_seconds)
                    ticks = s.cpu() - t0
                    held_main, held_kids = s.rss()
                    done = finish_idle(p)
                    opened = ready.get("opened", 0) or 0
                    r = {
                        "server": s.name, "round": rnd, "after_request": request, "warm": warm, "wanted": n,
                        "opened": opened, "answered": ready.get("answered"), "still_open": done.get("still_open"),
                        "open_errors": ready.get("errors"),
                        "base_main_kb": base_main, "base_children_kb": base_kids,
                        "held_main_kb": held_main, "held_children_kb": held_kids,
                        "main_bytes_per_conn": (held_main - base_main) * 1024.0 / opened if opened else None,
                        "children_bytes_per_conn": (held_kids - base_kids) * 1024.0 / opened if opened else None,
                        "total_bytes_per_conn": (held_main + held_kids - base_main - base_kids) * 1024.0 / opened if opened else None,
                        "cpu_ms": ticks * 1000.0 / CLK, "cpu_seconds": args.idle_cpu_seconds,
                        "alive": s.alive(),
                    }
                    out.append(r)
                    log("idle round %d %s%s %s: opened %d still open %s; main %+d kB children %+d kB -> %.0f B/conn main, %.0f B/conn total; cpu %.0f ms in %ds" % (
                        rnd, "after-request" if request else "no-request", " (warm)" if warm else "", s.name, opened, r["still_open"],
                        held_main - base_main, held_kids - base_kids, r["main_bytes_per_conn"] or 0,
                        r["total_bytes_per_conn"] or 0, r["cpu_ms"], args.idle_cpu_seconds))
                finally:
                    s.stop()
                time.sleep(1)


def established(port):
    try:
        out = subprocess.run(["ss", "-Htn", "state", "established", "( dport = :%d )" % port],
                             capture_output=True, text=True, timeout=10).stdout
        return len(out.splitlines())
    except Exception:
        return None


def legit(args, addr, duration, src="127.0.0.3"):
    argv = [args.legit_bin, "-addr", addr, "-src", src, "-duration", "%ds" % duration,
            "-timeout", "3s", "-pause", "10ms"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60).stdout
    return json.loads(out)


def phase_attack(args, servers, res):
    out = res.setdefault("attack", [])
    for nofile in (args.nofile, 1024):
        for s in servers:
            s.start(nofile, "attack-nofile%d" % nofile)
            slow = idle = None
            try:
                time.sleep(1)
                base = legit(args, s.addr, args.attack_seconds)
                log("attack nofile=%d %s unloaded: %d/%d ok p50 %.2f p99 %.2f" % (
                    nofile, s.name, base["ok"], base["sent"], base["p50_ms"], base["p99_ms"]))
                idle, ready = start_idle(args, s.addr, args.idle_conns, True, hold=600, first=10, addrs=50)
                log("attack nofile=%d %s: idle connections opened %s of %d (answered %s) errors %s" % (
                    nofile, s.name, ready.get("opened"), args.idle_conns, ready.get("answered"), ready.get("errors")))
                dur = args.attack_seconds + 25
                slow_out = open(os.path.join(args.out, "logs", "slowhttptest-%s-%d.out" % (s.name, nofile)), "wb")
                slow = spawn(["timeout", "-k", "5", str(dur + 30), "slowhttptest", "-H", "-c", str(args.attack_conns),
                              "-r", "1000", "-i", "10", "-x", "24", "-p", "3", "-l", str(dur),
                              "-u", "http://%s/" % s.addr], stdout=slow_out, stderr=slow_out)
                slow_out.close()
                time.sleep(8)
                held_start = established(s.port)
                under = legit(args, s.addr, args.attack_seconds)
                held_end = established(s.port)
                rss_main, rss_kids = s.rss()
                r = {"server": s.name, "nofile": nofile, "unloaded": base, "attacked": under,
                     "idle_ready": ready, "client_side_established_at_start": held_start,
                     "client_side_established_at_end": held_end, "alive": s.alive(),
                     "rss_main_kb": rss_main, "rss_children_kb": rss_kids}
                out.append(r)
                log("attack nofile=%d %s attacked: %d/%d ok p50 %.2f p99 %.2f errors %s; established %s -> %s; alive %s" % (
                    nofile, s.name, under["ok"], under["sent"], under["p50_ms"], under["p99_ms"],
                    under.get("errors"), held_start, held_end, r["alive"]))
            finally:
                if slow is not None and slow.poll() is None:
                    os.killpg(slow.pid, signal.SIGTERM)
                    slow.wait()
                if idle is not None:
                    d = finish_idle(idle)
                    if out and out[-1]["server"] == s.name and out[-1]["nofile"] == nofile:
                        out[-1]["idle_done"] = d
                s.stop()
            time.sleep(2)


def phase_distributed(args, res, tmp, logdir, nethttp_bin):
    """Issue 11's attacks: distributed slow heads and slow bodies."""
    out = res.setdefault("distributed", [])
    up = NetHTTP(args.port_base + 5, tmp, logdir, nethttp_bin)
    up.name = "upstream"
    up.start(args.nofile, "distributed")
    attacks = {
        "slow heads": (["-mode", "heads", "-n", "3000", "-addrs", "50", "-every", "3s"], 10),
        "slow bodies": (["-mode", "bodies", "-n", "40", "-addrs", "5", "-length", "1000000",
                         "-piece", "2048", "-every", "100ms"], 5),
    }
    try:
        targets = [GatehouseProxy(args.port_base + 6, tmp, logdir, args.gatehouse, up.addr),
                   NetHTTP(args.port_base + 7, tmp, logdir, nethttp_bin),
                   Nginx(args.port_base + 8, tmp, logdir, args.nofile, upstream=up.addr)]
        targets = [s for s in targets if s.name in args.servers.split(",")]
        for name, (flags, warmup) in attacks.items():
            for s in targets:
                s.start(args.nofile, "distributed-" + name.replace(" ", "-"))
                atk = None
                try:
                    time.sleep(1)
                    base = legit(args, s.addr, args.distributed_seconds)
                    dur = warmup + args.distributed_seconds + 10
                    atk = spawn([args.slowattack_bin, "-addr", s.addr, "-duration", "%ds" % dur] + flags,
                                stdout=subprocess.PIPE)
                    time.sleep(warmup)
                    under = legit(args, s.addr, args.distributed_seconds)
                    r = {"server": s.name, "attack": name, "unloaded": base, "attacked": under,
                         "alive": s.alive(), "attacker": {}}
                    out.append(r)
                    log("distributed %s %s: unloaded %d/%d, attacked %d/%d ok p50 %.2f p99 %.2f errors %s; alive %s" % (
                        name, s.name, base["ok"], base["sent"], under["ok"], under["sent"],
                        under["p50_ms"], under["p99_ms"], under.get("errors"), r["alive"]))
                finally:
                    if atk is not None:
                        try:
                            line, _ = atk.communicate(timeout=args.distributed_seconds + warmup + 60)
                            if out and out[-1]["server"] == s.name and out[-1]["attack"] == name:
                                out[-1]["attacker"] = json.loads(line.decode().strip().splitlines()[-1])
                        except (subprocess.TimeoutExpired, ValueError, IndexError):
                            os.killpg(atk.pid, signal.SIGKILL)
                            atk.wait()
                    s.stop()
                time.sleep(2)
    finally:
        up.stop()


def phase_profile(args, gh, res):
    """Where gatehouse's time goes under wrk -c64 keep-alive: CPU seconds per
    process, and perf (cpu-clock, call graphs) of the supervisor and the workers."""
    prof = res.setdefault("profile", {})
    if not shutil.which("perf"):
        prof["error"] = "perf not installed"
        return
    gh.start(args.nofile, "profile")
    logdir = os.path.join(args.out, "logs")
    try:
        pid, kids = gh.pids()
        w = spawn(["wrk", "-t2", "-c64", "-d12s", "--latency", "http://%s/" % gh.addr], stdout=subprocess.PIPE)
        time.sleep(1)
        t0 = {p: cpu_ticks(p) for p in [pid] + kids}
        perfs = []
        for tag, target in (("supervisor", [pid]), ("workers", kids)):
            data = os.path.join(logdir, "perf-%s.data" % tag)
            perfs.append((tag, data, spawn(["perf", "record", "-e", "cpu-clock", "-F", "499", "-g",
                                            "-p", ",".join(str(x) for x in target), "-o", data, "--", "sleep", "8"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        for tag, data, p in perfs:
            p.wait(60)
        t1 = {p: cpu_ticks(p) for p in [pid] + kids}
        out, _ = w.communicate(timeout=60)
        prof["wrk"] = out.decode()
        prof["cpu_seconds_over_8s"] = {("supervisor" if p == pid else "worker %d" % p): (t1[p] - t0[p]) / CLK for p in t0}
        log("cpu seconds over 8 s under wrk -c64: %s" % prof["cpu_seconds_over_8s"])
    finally:
        gh.stop()
    # reported once gatehouse has stopped (see perf_reports)
    for tag, data, _ in perfs:
        rep = subprocess.run(["perf", "report", "-i", data, "--symfs=/", "--stdio", "--no-children", "-g", "none",
                              "--sort", "dso,symbol", "--percent-limit", "0.7"],
                             capture_output=True, text=True, timeout=300)
        txt = "\n".join(l for l in rep.stdout.splitlines() if l and not l.startswith("#"))
        with open(os.path.join(logdir, "perf-%s.txt" % tag), "w") as f:
            f.write(rep.stdout + rep.stderr)
        prof["perf_" + tag] = txt[:6000]
        log("perf %s top:\n%s" % (tag, "\n".join(txt.splitlines()[:15])))


# ---------------------------------------------------------------- TLS


def make_cert(out):
    """An ECDSA P-256 certificate and key for every server of the TLS phase,
    generated now into OUT/tls (results directories are not committed)."""
    d = os.path.join(out, "tls")
    os.makedirs(d, exist_ok=True)
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=bench",
                    "-addext", "subjectAltName=DNS:bench,IP:127.0.0.1"],
                   check=True, capture_output=True)
    os.chmod(d, 0o755)
    os.chmod(cert, 0o644)
    os.chmod(key, 0o600)
    if os.geteuid() == 0:
        # gatehouse started as root reads the key again as the account it
        # drops to (no `user` set: gatehouse, else nobody), and refuses to
        # start when that account cannot.
        for name in ("gatehouse", "nobody"):
            try:
                pw = pwd.getpwnam(name)
            except KeyError:
                continue
            os.chown(key, pw.pw_uid, pw.pw_gid)
            break
    return cert, key


def tls_signatures(s):
    """gatehouse_tls_signatures_total from gatehouse's /metrics route, or None."""
    try:
        with urllib.request.urlopen("https://%s/metrics" % s.addr, timeout=5, context=INSECURE) as r:
            txt = r.read().decode()
    except Exception:
        return None
    n = None
    for line in txt.splitlines():
        if line.startswith("gatehouse_tls_signatures_total"):
            n = (n or 0) + float(line.split()[-1])
    return n


def handshakes(args, s, duration):
    argv = [args.handshake_bin, "-addr", s.addr, "-c", str(args.tls_handshake_conns), "-d", "%ds" % duration]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60).stdout
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"handshakes_per_second": None, "raw": out}


def throughput_gatehouse(args, port, tmp, logdir, name="gatehouse", tls=None, binary=None):
    """gatehouse tuned for throughput: a pool that holds every connection the
    load opens, so that hot connections stay hot (hand-offs only when one
    waits), and wrk's one address standing for many clients. binary, when
    given, replaces --gatehouse (the before side of an A/B comparison)."""
    count, conc = (0, 0) if args.throughput_workers == "default" else (
        int(x) for x in args.throughput_workers.split("x"))
    return Gatehouse(port, tmp, logdir, binary or args.gatehouse, count, conc, name=name,
                     per_client=args.per_client_cap,
                     trusted_loopback=args.trusted_loopback, tls=tls, threads=args.threads,
                     hot_window=args.hot_window)


def tls_servers(args, tmp, logdir, nethttp_bin, cert):
    """The TLS phase's servers: gatehouse tuned, gatehouse as shipped, net/http, nginx."""
    names = args.servers.split(",")
    out = []
    if "gatehouse" in names:
        out.append(throughput_gatehouse(args, args.port_base + 10, tmp, logdir, name="gatehouse-tls", tls=cert))
        out.append(Gatehouse(args.port_base + 11, tmp, logdir, args.gatehouse, 0, 0, name="gatehouse-shipped-tls",
                             per_client=args.per_client_cap, tls=cert))
    if "nethttp" in names:
        n = NetHTTP(args.port_base + 12, tmp, logdir, nethttp_bin, tls=cert)
        n.name = "nethttp-tls"
        out.append(n)
    if "nginx" in names:
        n = Nginx(args.port_base + 13, tmp, logdir, args.nofile, tls=cert)
        n.name = "nginx-tls"
        out.append(n)
    return out


def loadavg():
    return open("/proc/loadavg").read().split()[0]


def phase_tls(args, res, tmp, logdir, nethttp_bin):
    """TLS rows, interleaved: per round, new handshakes, then wrk keep-alive
    over TLS at each of --tls-conns, every server in a rotated order; then
    RSS per idle TLS connection after one request (fresh servers)."""
    cert = make_cert(args.out)
    out = res.setdefault("tls", {})
    out["loadavg_start"] = open("/proc/loadavg").read().strip()
    out["certificate"] = {"type": "ECDSA P-256, self-signed, generated with openssl at bench time",
                          "path": os.path.relpath(cert[0], args.out)}
    out["handshake_client"] = ("scripts/bench/handshake: %d goroutines, each a fresh TCP connection, a full "
                               "handshake (no client session cache, X25519), one Connection: close GET, close"
                               % args.tls_handshake_conns)
    rows = out.setdefault("rows", [])
    servers = tls_servers(args, tmp, logdir, nethttp_bin, cert)
    for s in servers:
        s.start(args.nofile, "tls")
    try:
        for rnd in range(args.rounds):
            for kind in ["handshake"] + [c for c in args.tls_conns]:
                order = servers[rnd % len(servers):] + servers[:rnd % len(servers)]
                for s in order:
                    pid, kids = s.pids()
                    m0, k0 = cpu_ticks(pid), sum(cpu_ticks(k) for k in kids)
                    la = loadavg()
                    if kind == "handshake":
                        sig0 = tls_signatures(s) if s.name.startswith("gatehouse") else None
                        r = handshakes(args, s, args.duration)
                        if sig0 is not None:
                            sig1 = tls_signatures(s)
                            # one signature per full handshake, plus the metrics fetches' own
                            r["gatehouse_signatures"] = None if sig1 is None else sig1 - sig0 - 1
                        r.update(measure="handshake", rps=r.get("handshakes_per_second"), conns=args.tls_handshake_conns)
                    else:
                        r = wrk(s.addr, kind, args.duration, False, scheme="https")
                        r.update(measure="keep-alive", conns=kind)
                    pid2, kids2 = s.pids()
                    if pid2 == pid:
                        r["server_main_cpu_s"] = (cpu_ticks(pid) - m0) / CLK
                        r["server_children_cpu_s"] = (sum(cpu_ticks(k) for k in kids2) - k0) / CLK if kids2 == kids else None
                    r.update(server=s.name, round=rnd, alive=s.alive(), loadavg_before=la)
                    rows.append(r)
                    if kind == "handshake":
                        log("tls round %d handshakes %s: %s/s (%s done, %s resumed, %s failed %s; signatures %s) p50 %s p99 %s; load %s" % (
                            rnd, s.name, r.get("rps"), r.get("handshakes"), r.get("resumed"), r.get("failed"),
                            r.get("errors") or "", r.get("gatehouse_signatures", "-"), r.get("p50_ms"), r.get("p99_ms"), la))
                    else:
                        log("tls round %d keep-alive c=%d %s: %s req/s p50 %s p99 %s non2xx %d errors %s; load %s" % (
                            rnd, kind, s.name, r["rps"], r["p50_ms"], r["p99_ms"], r["non2xx"], r["socket_errors"] or "-", la))
                    if not s.alive():
                        log("!! %s died; restarting it" % s.name)
                        s.start(args.nofile, "tls")
                    time.sleep(1)
    finally:
        for s in servers:
            log("%s stopped (status %s)" % (s.name, s.stop()))
    idle = out.setdefault("idle", [])
    n = args.tls_idle_conns
    for rnd in range(args.tls_idle_rounds):
        order = servers[rnd % len(servers):] + servers[:rnd % len(servers)]
        for s in order:
            s.start(args.nofile, "tls-idle")
            try:
                time.sleep(1)
                base_main, base_kids = s.rss()
                la = loadavg()
                p, ready = start_idle(args, s.addr, n, True, hold=120, tls=True)
                time.sleep(2)
                t0 = s.cpu()
                time.sleep(args.tls_idle_cpu_seconds)
                ticks = s.cpu() - t0
                held_main, held_kids = s.rss()
                done = finish_idle(p)
                opened = ready.get("opened", 0) or 0
                still = done.get("still_open")
                # per connection the server still holds at the end: a server that
                # closed some meanwhile is not credited with their memory
                held = min(opened, still) if still is not None else opened
                r = {"server": s.name, "round": rnd, "wanted": n, "opened": opened,
                     "answered": ready.get("answered"), "still_open": still, "open_errors": ready.get("errors"),
                     "base_main_kb": base_main, "base_children_kb": base_kids,
                     "held_main_kb": held_main, "held_children_kb": held_kids,
                     "main_bytes_per_conn": (held_main - base_main) * 1024.0 / held if held else None,
                     "children_bytes_per_conn": (held_kids - base_kids) * 1024.0 / held if held else None,
                     "total_bytes_per_conn": (held_main + held_kids - base_main - base_kids) * 1024.0 / held if held else None,
                     "cpu_ms": ticks * 1000.0 / CLK, "cpu_seconds": args.tls_idle_cpu_seconds,
                     "alive": s.alive(), "loadavg_before": la}
                idle.append(r)
                log("tls idle round %d %s: opened %d still open %s; main %+d kB children %+d kB -> %.0f B/conn total; cpu %.0f ms in %ds" % (
                    rnd, s.name, opened, still, held_main - base_main, held_kids - base_kids,
                    r["total_bytes_per_conn"] or 0, r["cpu_ms"], args.tls_idle_cpu_seconds))
            finally:
                s.stop()
            time.sleep(1)
    out["loadavg_end"] = open("/proc/loadavg").read().strip()
    out["summary"] = tls_summary(out)
    log("tls summary: %s" % json.dumps(out["summary"]))


def tls_summary(out):
    """Medians per server and measure, and the issue's three ratios."""
    def m(server, measure, conns=None):
        xs = [r.get("rps") for r in out.get("rows", []) if r["server"] == server and r["measure"] == measure
              and (conns is None or r["conns"] == conns)]
        a = med(xs)
        return a["median"] if a else None

    def idle(server):
        a = med([r["total_bytes_per_conn"] for r in out.get("idle", []) if r["server"] == server])
        return a["median"] if a else None

    def ratio(a, b):
        return round(a / b, 3) if a and b else None

    sm = {}
    for g in ("gatehouse-tls", "gatehouse-shipped-tls"):
        nh = m("nethttp-tls", "handshake")
        row = {"handshakes_per_s": m(g, "handshake"), "handshakes_vs_nethttp": ratio(m(g, "handshake"), nh),
               "idle_bytes_per_conn": idle(g), "idle_vs_nginx": ratio(idle(g), idle("nginx-tls"))}
        for c in sorted({r["conns"] for r in out.get("rows", []) if r["measure"] == "keep-alive"}):
            row["keepalive_%d_rps" % c] = m(g, "keep-alive", c)
            row["keepalive_%d_vs_nethttp" % c] = ratio(m(g, "keep-alive", c), m("nethttp-tls", "keep-alive", c))
        sm[g] = row
    for o in ("nethttp-tls", "nginx-tls"):
        row = {"handshakes_per_s": m(o, "handshake"), "idle_bytes_per_conn": idle(o)}
        for c in sorted({r["conns"] for r in out.get("rows", []) if r["measure"] == "keep-alive"}):
            row["keepalive_%d_rps" % c] = m(o, "keep-alive", c)
        sm[o] = row
    return sm


def perf_under(args, gh, load_argv, tag, prof, seconds=8):
    """CPU seconds per process and perf recordings of gatehouse's supervisor
    and workers while load_argv runs (it must run longer than seconds + 1).
    Returns the recordings for perf_reports."""
    logdir = os.path.join(args.out, "logs")
    pid, kids = gh.pids()
    load = spawn(load_argv, stdout=subprocess.PIPE)
    time.sleep(1)
    t0 = {p: cpu_ticks(p) for p in [pid] + kids}
    perfs = []
    for who, target in (("supervisor", [pid]), ("workers", kids)):
        data = os.path.join(logdir, "perf-%s-%s.data" % (tag, who))
        perfs.append((who, data, spawn(["perf", "record", "-e", "cpu-clock", "-F", "499", "-g",
                                        "-p", ",".join(str(x) for x in target), "-o", data, "--", "sleep", str(seconds)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    for who, data, p in perfs:
        p.wait(60)
    t1 = {p: cpu_ticks(p) for p in [pid] + kids}
    lout, _ = load.communicate(timeout=120)
    prof[tag] = {"load": " ".join(load_argv), "load_output": lout.decode()[-3000:],
                 "cpu_seconds": {("supervisor" if p == pid else "process %d" % p): (t1[p] - t0[p]) / CLK for p in t0},
                 "seconds": seconds}
    log("%s: cpu seconds over %d s: %s" % (tag, seconds, prof[tag]["cpu_seconds"]))
    return [(who, data) for who, data, _ in perfs]


def perf_reports(args, tag, perfs, r):
    """perf's reports of perf_under's recordings, made once gatehouse has
    stopped: perf looks for a live worker's binary inside the worker's mount
    namespace, which does not hold it, and for a dead one's by its path
    (--symfs=/)."""
    logdir = os.path.join(args.out, "logs")
    for who, data in perfs:
        rep = subprocess.run(["perf", "report", "-i", data, "--symfs=/", "--stdio", "--no-children", "-g", "none",
                              "--sort", "dso,symbol", "--percent-limit", "0.7"],
                             capture_output=True, text=True, timeout=300)
        txt = "\n".join(l for l in rep.stdout.splitlines() if l and not l.startswith("#"))
        with open(os.path.join(logdir, "perf-%s-%s.txt" % (tag, who)), "w") as f:
            f.write(rep.stdout + rep.stderr)
        r["perf_" + who] = txt[:6000]
        log("perf %s %s top:\n%s" % (tag, who, "\n".join(txt.splitlines()[:15])))
        # inclusive time per function (callers credited with their callees)
        inc = subprocess.run(["perf", "report", "-i", data, "--symfs=/", "--stdio", "--children", "-g", "none",
                              "--sort", "symbol", "--percent-limit", "2"],
                             capture_output=True, text=True, timeout=300)
        with open(os.path.join(logdir, "perf-%s-%s-inclusive.txt" % (tag, who)), "w") as f:
            f.write(inc.stdout + inc.stderr)
        r["perf_inclusive_" + who] = "\n".join(l for l in inc.stdout.splitlines() if l and not l.startswith("#"))[:8000]


def phase_tlsprofile(args, res, tmp, logdir, nethttp_bin):
    """Where gatehouse (tuned) spends its time over TLS, and net/http's CPU
    under the same loads for comparison."""
    prof = res.setdefault("tls_profile", {})
    if not shutil.which("perf"):
        prof["error"] = "perf not installed"
        return
    cert = (os.path.join(args.out, "tls", "cert.pem"), os.path.join(args.out, "tls", "key.pem"))
    if not os.path.exists(cert[0]):
        cert = make_cert(args.out)
    names = args.servers
    args.servers = "gatehouse,nethttp"
    servers = tls_servers(args, tmp, logdir, nethttp_bin, cert)
    args.servers = names
    gh = [s for s in servers if s.name == "gatehouse-tls"][0]
    nh = [s for s in servers if s.name == "nethttp-tls"][0]
    loads = {
        "keepalive64": lambda s: ["wrk", "-t2", "-c64", "-d12s", "https://%s/" % s.addr],
        "handshake": lambda s: [args.handshake_bin, "-addr", s.addr, "-c", str(args.tls_handshake_conns), "-d", "12s"],
    }
    for tag, argv in loads.items():
        gh.start(args.nofile, "tlsprofile")
        try:
            perfs = perf_under(args, gh, argv(gh), "tls-" + tag, prof)
        finally:
            gh.stop()
        perf_reports(args, "tls-" + tag, perfs, prof["tls-" + tag])
        nh.start(args.nofile, "tlsprofile")
        try:
            pid = nh.main_pid()
            load = spawn(argv(nh), stdout=subprocess.PIPE)
            time.sleep(1)
            c0 = cpu_ticks(pid)
            time.sleep(8)
            c1 = cpu_ticks(pid)
            lout, _ = load.communicate(timeout=120)
            prof["nethttp-tls-" + tag] = {"cpu_seconds": (c1 - c0) / CLK, "seconds": 8, "load_output": lout.decode()[-3000:]}
            log("nethttp tls-%s: cpu seconds over 8 s: %.2f" % (tag, (c1 - c0) / CLK))
        finally:
            nh.stop()


def ctx_switches(pids):
    n = 0
    for pid in pids:
        try:
            tasks = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for t in tasks:
            try:
                with open("/proc/%d/task/%s/status" % (pid, t)) as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                            n += int(line.split()[1])
            except OSError:
                pass
    return n


def phase_costs(args, servers, res):
    """Per request under wrk -t2 -c64 keep-alive for 5 s: context switches
    and CPU microseconds of the server's processes (main and children)."""
    out = res.setdefault("costs", [])
    for s in servers:
        s.start(args.nofile, "costs")
        try:
            pid, kids = s.pids()
            c0, m0, k0 = ctx_switches([pid] + kids), cpu_ticks(pid), sum(cpu_ticks(k) for k in kids)
            r = wrk(s.addr, 64, 5, False)
            pid2, kids2 = s.pids()
            c1, m1, k1 = ctx_switches([pid] + kids), cpu_ticks(pid), sum(cpu_ticks(k) for k in kids)
            n = r.get("requests") or 0
            row = {"server": s.name, "requests": n, "rps": r["rps"],
                   "ctx_switches_per_request": (c1 - c0) / n if n else None,
                   "main_cpu_us_per_request": (m1 - m0) * 1e6 / CLK / n if n else None,
                   "children_cpu_us_per_request": (k1 - k0) * 1e6 / CLK / n if n and kids2 == kids else None}
            out.append(row)
            log("costs %s: %s" % (s.name, row))
        finally:
            s.stop()


def phase_ipc(args, res):
    argv = ["go", "test", "-run", "^$", "-bench", "DispatchFD|RoundTrip|BatchedFDs",
            "-benchtime=%s" % args.ipc_benchtime, "-count", str(args.rounds), "./ipc/"]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, CGO_ENABLED="0"))
    with open(os.path.join(args.out, "logs", "ipc-bench.txt"), "w") as f:
        f.write(p.stdout + p.stderr)
    rows = []
    for line in p.stdout.splitlines():
        if not line.startswith("Benchmark"):
            continue
        parts = line.split()
        row = {"name": re.sub(r"-\d+$", "", parts[0]), "iterations": int(parts[1])}
        for i in range(2, len(parts) - 1, 2):
            try:
                row[parts[i + 1]] = float(parts[i])
            except ValueError:
                pass
        rows.append(row)
        log("ipc %s" % line)
    res["ipc"] = {"command": " ".join(argv), "rows": rows, "status": p.returncode}


def machine():
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip() + \
                subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stderr.strip()
        except Exception as e:
            return str(e)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": os.cpu_count(),
        "cpu": sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
        "kernel": os.uname().release,
        "go": subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip(),
        "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
        "wrk": sh("wrk -v 2>&1 | head -1"),
        "slowhttptest": sh("dpkg-query -W -f '${Version}' slowhttptest 2>/dev/null"),
        "nofile_hard": sh("ulimit -Hn"),
        "loadavg_start": open("/proc/loadavg").read().strip(),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--gatehouse", default=os.path.join(ROOT, "bin", "gatehouse"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--conns", default="64,256,1000",
                    help="client counts of the throughput and conns phases (the conns phase's TLS handshakes run at 64)")
    ap.add_argument("--phases", default="conns,parked,syscalls,real,upgrade",
                    help="comma-separated; also throughput, realprofile, reallevers, idle, attack, distributed, "
                         "costs, profile, tls, tlsprofile, ipc")
    ap.add_argument("--client-addrs", type=int, default=64,
                    help="source addresses of loadgen's load (conns, syscalls and real phases)")
    ap.add_argument("--conns-loads", default="close,handshake,keepalive", help="the conns phase's loads")
    ap.add_argument("--conns-gatehouse", default="shipped,tuned",
                    help="gatehouse configurations of the conns, parked and syscalls phases")
    ap.add_argument("--syscall-conns", type=int, default=20000,
                    help="connections counted with perf stat in the syscalls phase")
    ap.add_argument("--strace-conns", type=int, default=2000,
                    help="connections counted with strace -c in the syscalls phase")
    ap.add_argument("--real-client", choices=("loadgen", "wrk"), default="loadgen",
                    help="the real-traffic phase's HTTP client: loadgen from --client-addrs addresses, or wrk from one")
    ap.add_argument("--compare-default-workers", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure keep-alive throughput with gatehouse's default workers (4x16)")
    ap.add_argument("--nofile", type=int, default=0, help="servers' generous descriptor limit (default: hard limit)")
    ap.add_argument("--idle-conns", type=int, default=10000)
    ap.add_argument("--idle-rounds", type=int, default=3)
    ap.add_argument("--idle-cpu-seconds", type=int, default=10)
    ap.add_argument("--idle-warm-quiet", type=int, default=6,
                    help="seconds of quiet between the warm-up burst and a warm baseline")
    ap.add_argument("--attack-conns", type=int, default=4000)
    ap.add_argument("--attack-seconds", type=int, default=20)
    ap.add_argument("--distributed-seconds", type=int, default=20,
                    help="how long the legitimate client runs during each distributed attack")
    ap.add_argument("--tls-conns", default="64,256", help="wrk connections of the keep-alive TLS rows")
    ap.add_argument("--tls-handshake-conns", type=int, default=64, help="concurrent new handshakes")
    ap.add_argument("--tls-idle-conns", type=int, default=4000,
                    help="idle TLS connections held (gatehouse's workers keep at most 4096 TLS sessions each)")
    ap.add_argument("--tls-idle-rounds", type=int, default=3)
    ap.add_argument("--tls-idle-cpu-seconds", type=int, default=3)
    ap.add_argument("--real-conns", type=int, default=64, help="wrk connections of the real-traffic phase")
    ap.add_argument("--real-measures", default="site-http,site-https,api-2k,api-200k,ws-tls",
                    help="the real-traffic phase's workloads")
    ap.add_argument("--real-gatehouse", default="shipped,tuned",
                    help="the real-traffic phase's gatehouse configurations")
    ap.add_argument("--ws-conns", type=int, default=16,
                    help="WebSocket connections of the real-traffic phase (gatehouse's default streams per client: 16)")
    ap.add_argument("--ws-size", type=int, default=1024, help="WebSocket message size, bytes")
    ap.add_argument("--ipc-benchtime", default="2s")
    ap.add_argument("--port-base", type=int, default=18081)
    ap.add_argument("--servers", default="gatehouse,nethttp,nginx",
                    help="which servers to measure (with --no-compare-default-workers and --gatehouse-before, "
                         "'gatehouse,nethttp' measures exactly gatehouse before, after and net/http)")
    ap.add_argument("--gatehouse-before", default="",
                    help="a second gatehouse binary (e.g. built from an older commit) measured beside --gatehouse, "
                         "same configuration, interleaved: in the throughput phase as server 'gatehouse-before', in the "
                         "conns, parked and syscalls phases as 'gatehouse-before-shipped' and '-tuned'")
    ap.add_argument("--workers", default="2x64",
                    help="gatehouse workers (COUNTxCONCURRENCY or 'default') of the idle, attack and costs phases")
    ap.add_argument("--throughput-workers", default="2x1024",
                    help="tuned gatehouse's workers in the throughput, profile and TLS phases")
    ap.add_argument("--threads", type=int, default=0, help="tuned gatehouse's workers.threads (0: its default)")
    ap.add_argument("--hot-window", default="50ms", help="tuned gatehouse's workers.hot_window ('': its default)")
    ap.add_argument("--trusted-loopback", action=argparse.BooleanOptionalAction, default=True,
                    help="make 127.0.0.1 a trusted proxy for tuned gatehouse (no per-client share for wrk's one address)")
    ap.add_argument("--per-client-cap", type=int, default=65535,
                    help="gatehouse's max_connections_per_client (default 65535: the load comes from one address)")
    args = ap.parse_args()
    # servers run in their own directories and are given paths under OUT
    args.out = os.path.abspath(args.out)
    args.conns = [int(c) for c in args.conns.split(",")]
    args.tls_conns = [int(c) for c in args.tls_conns.split(",")]
    if not args.nofile:
        import resource
        args.nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if args.nofile == resource.RLIM_INFINITY or args.nofile > 1048576:
            args.nofile = 1048576
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="gatehouse-bench-")
    os.chmod(tmp, 0o755)
    atexit.register(shutil.rmtree, tmp, True)
    logdir = os.path.join(args.out, "logs")

    log("building the net/http server and the clients")
    nethttp_bin = build_go("./scripts/bench/nethttp", os.path.join(tmp, "nethttp"))
    args.idle_bin = build_go("./scripts/bench/idle", os.path.join(tmp, "idle"))
    args.legit_bin = build_go("./scripts/bench/legit", os.path.join(tmp, "legit"))
    args.slowattack_bin = build_go("./scripts/bench/slowattack", os.path.join(tmp, "slowattack"))
    args.handshake_bin = build_go("./scripts/bench/handshake", os.path.join(tmp, "handshake"))
    args.loadgen_bin = build_go("./scripts/bench/loadgen", os.path.join(tmp, "loadgen"))

    if args.workers == "default":
        count = conc = 0
    else:
        count, conc = (int(x) for x in args.workers.split("x"))
    gh = Gatehouse(args.port_base, tmp, logdir, args.gatehouse, count, conc, per_client=args.per_client_cap)
    gt = throughput_gatehouse(args, args.port_base + 4, tmp, logdir)
    nh = NetHTTP(args.port_base + 1, tmp, logdir, nethttp_bin)
    ng = Nginx(args.port_base + 2, tmp, logdir, args.nofile)
    servers = [s for s in (gh, nh, ng) if s.name in args.servers.split(",")]
    # the throughput rows' gatehouse is tuned for throughput; the idle,
    # attack and costs phases keep gh, whose client caps hold wrk's address
    tp_servers = [gt if s is gh else s for s in servers]

    res = {"machine": machine(), "config": {
        "rounds": args.rounds, "duration_s": args.duration, "conns": args.conns,
        "gatehouse_workers": gh.describe(), "gatehouse_throughput_workers": gt.describe(),
        "servers_nofile": args.nofile,
        "gatehouse_max_connections_per_client": args.per_client_cap,
        "gatehouse_trusted_loopback": args.trusted_loopback,
        "idle_conns": args.idle_conns, "idle_rounds": args.idle_rounds,
        "attack_conns": args.attack_conns, "attack_seconds": args.attack_seconds,
        "distributed_seconds": args.distributed_seconds,
        "tls_conns": args.tls_conns, "tls_handshake_conns": args.tls_handshake_conns,
        "tls_idle_conns": args.tls_idle_conns, "tls_idle_rounds": args.tls_idle_rounds,
        "command": " ".join(sys.argv), "phases": args.phases, "client_addrs": args.client_addrs,
        "ports": {s.name: s.port for s in servers},
    }}
    if args.gatehouse_before:
        res["config"]["gatehouse_before"] = os.path.abspath(args.gatehouse_before)
        res["config"]["gatehouse_after"] = os.path.abspath(args.gatehouse)
    path = os.path.join(args.out, "results.json")

    def save():
        res["machine"]["loadavg_end"] = open("/proc/loadavg").read().strip()
        with open(path + ".tmp", "w") as f:
            json.dump(res, f, indent=1)
        os.replace(path + ".tmp", path)

    phases = args.phases.split(",")
    # conns.py and real.py import this module as bench: the same one, not a second copy
    sys.modules.setdefault("bench", sys.modules[__name__])
    try:
        for name in ("conns", "parked", "syscalls"):
            if name in phases:
                import conns
                getattr(conns, "phase_" + name)(args, res, tmp, logdir, nethttp_bin)
                conns.write_markdown(args, res)
                save()
        if "throughput" in phases:
            tp = tp_servers
            if args.gatehouse_before and gt in tp:
                # the same tuned configuration from the other binary, on its
                # own port, next to the after side in the rotation
                gb = throughput_gatehouse(args, args.port_base + 9, tmp, logdir, name="gatehouse-before",
                                          binary=args.gatehouse_before)
                i = tp.index(gt)
                tp = tp[:i] + [gb] + tp[i:]
                res["config"]["ports"][gb.name] = gb.port
            if args.compare_default_workers:
                g2 = Gatehouse(args.port_base + 3, tmp, logdir, args.gatehouse, 0, 0, name="gatehouse-shipped")
                g2.keepalive_only = True
                tp = tp_servers + [g2]
                res["config"]["ports"][g2.name] = g2.port
            phase_throughput(args, tp, res)
            save()
        if "real" in phases:
            # real.py imports this module as bench: the same one, not a second copy
            sys.modules.setdefault("bench", sys.modules[__name__])
            import real
            real.phase_real(args, res, tmp, logdir, nethttp_bin)
            save()
        if "realprofile" in phases:
            sys.modules.setdefault("bench", sys.modules[__name__])
            import real
            real.phase_realprofile(args, res, tmp, logdir, nethttp_bin)
            save()
        if "reallevers" in phases:
            sys.modules.setdefault("bench", sys.modules[__name__])
            import real
            real.phase_reallevers(args, res, tmp, logdir, nethttp_bin)
            save()
        if "idle" in phases:
            phase_idle(args, servers, res)
            save()
        if "attack" in phases:
            phase_attack(args, servers, res)
            save()
        if "distributed" in phases:
            phase_distributed(args, res, tmp, logdir, nethttp_bin)
            save()
        if "costs" in phases:
            phase_costs(args, tp_servers, res)
            save()
        if "profile" in phases:
            phase_profile(args, gt, res)
            save()
        if "tls" in phases:
            phase_tls(args, res, tmp, logdir, nethttp_bin)
            save()
        if "tlsprofile" in phases:
            phase_tlsprofile(args, res, tmp, logdir, nethttp_bin)
            save()
        if "ipc" in phases:
            phase_ipc(args, res)
            save()
        if "upgrade" in phases:
            sys.modules.setdefault("bench", sys.modules[__name__])
            import upgrade
            upgrade.phase_upgrade(args, res, tmp, logdir)
            save()
    finally:
        save()
        log("results in %s" % path)


if __name__ == "__main__":
    main()
