"""The upgrade phase of bench.py (`--phases upgrade`): what a binary upgrade
under load costs the clients.

wrk -c256 runs against the server, keep-alive and then Connection: close;
a few seconds in, the server is upgraded to a new binary (the same file, as
a security fix's rebuild would be): gatehouse with `gatehousectl upgrade`,
nginx with USR2 to its master, then QUIT to the old master once the new one
runs (nginx's documented procedure, which closes the old workers' idle
keep-alive connections). The row is what wrk saw: requests answered,
responses not 2xx, and its socket errors (connect: refused; read and write:
connections closed or reset under it; timeout).
"""

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request

import bench

UPGRADE_CONNS = 256
UPGRADE_SECONDS = 12
UPGRADE_AT = 4  # seconds into the run


class UpgradableNginx(bench.Nginx):
    """nginx as a daemon, started by its absolute path: USR2 re-executes
    argv[0], and a master whose parent is the one it started with (daemon
    off) ignores USR2."""

    name = "nginx"

    def conf(self, nofile):
        path = super().conf(nofile)
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("daemon off;", "daemon on;"))
        return path

    def argv(self, nofile):
        argv, cwd = super().argv(nofile)
        return [shutil.which("nginx")] + argv[1:], cwd

    def pidfile(self):
        return os.path.join(self.dir, "nginx.pid")

    def start(self, nofile, tag):
        self.logfile = os.path.join(self.logdir, "%s-%s.log" % (self.name, tag))
        with open(self.logfile, "ab") as lf:
            argv, cwd = self.argv(nofile)
            launcher = bench.spawn(argv, cwd=cwd, stdout=lf, stderr=lf, nofile=nofile)
        if launcher.wait(20) != 0:
            raise RuntimeError("nginx did not start; see %s" % self.logfile)
        deadline = time.time() + 20
        while True:
            try:
                with urllib.request.urlopen("http://%s/" % self.addr, timeout=1) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if time.time() > deadline:
                raise RuntimeError("nginx does not answer on %s" % self.addr)
            time.sleep(0.1)
        time.sleep(0.5)

    def stop(self):
        for path in (self.pidfile() + ".oldbin", self.pidfile()):
            try:
                pid = int(open(path).read())
            except (OSError, ValueError):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                continue
            deadline = time.time() + 15
            while time.time() < deadline and bench.alive(pid):
                time.sleep(0.05)
        # Its workers may outlive the master for a moment: the next start
        # binds the same port.
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                break
            time.sleep(0.1)
        return None

    def upgrade(self):
        pidfile = self.pidfile()
        old = int(open(pidfile).read())
        os.kill(old, signal.SIGUSR2)
        deadline = time.time() + 20
        # The old master moves its pid file to nginx.pid.oldbin; the new
        # one writes nginx.pid once it runs.
        while time.time() < deadline:
            try:
                new = int(open(pidfile).read())
                if new != old:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        else:
            raise RuntimeError("nginx: no new master within 20 s of USR2")
        time.sleep(0.5)  # its workers start
        os.kill(old, signal.SIGQUIT)
        return "USR2 to %d, new master %d, QUIT to %d" % (old, new, old)


class UpgradableGatehouse(bench.Gatehouse):
    """gatehouse with an admin socket, upgraded through it."""

    def __init__(self, *a, ctl=None, **kw):
        super().__init__(*a, **kw)
        self.ctl = ctl
        self.sock = os.path.join(self.dir, "admin.sock")
        with open(os.path.join(self.dir, "gatehouse.hcl"), "a") as f:
            f.write('admin {\n  socket = "%s"\n}\n' % self.sock)

    def stop(self):
        # The process started is gone after an upgrade; the one serving is
        # in its process group.
        if self.proc is None:
            return None
        pgid, self.proc = self.proc.pid, None
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                return None
            deadline = time.time() + wait
            while time.time() < deadline:
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    return None
                time.sleep(0.05)
        return None

    def upgrade(self):
        r = subprocess.run([self.ctl, "-socket", self.sock, "upgrade"], capture_output=True, text=True, timeout=90)
        if r.returncode != 0:
            raise RuntimeError("gatehousectl upgrade: %s" % r.stderr.strip())
        return r.stdout.strip()


def upgrade_row(s, close):
    """One wrk run across an upgrade of s."""
    out = {}
    t = threading.Thread(target=lambda: out.update(r=bench.wrk(s.addr, UPGRADE_CONNS, UPGRADE_SECONDS, close)))
    t.start()
    time.sleep(UPGRADE_AT)
    t0 = time.time()
    how = s.upgrade()
    took = time.time() - t0
    t.join()
    r = out["r"]
    errs = r["socket_errors"]
    r.update(server=s.name, close=close, conns=UPGRADE_CONNS, upgrade=how, upgrade_s=round(took, 3),
             failed=r["non2xx"] + errs.get("read", 0) + errs.get("write", 0) + errs.get("timeout", 0),
             refused=errs.get("connect", 0))
    return r


def phase_upgrade(args, res, tmp, logdir):
    out = res.setdefault("upgrade", [])
    ctl = bench.build_go("./cmd/gatehousectl", os.path.join(tmp, "gatehousectl"))
    count, conc = (int(x) for x in args.throughput_workers.split("x"))
    for close in (False, True):
        servers = [
            UpgradableGatehouse(args.port_base + 60, tmp, logdir, args.gatehouse, count, conc, name="gatehouse",
                                per_client=args.per_client_cap, trusted_loopback=args.trusted_loopback, ctl=ctl),
            UpgradableNginx(args.port_base + 61, tmp, logdir, args.nofile),
        ]
        for s in servers:
            s.start(args.nofile, "upgrade")
            try:
                r = upgrade_row(s, close)
            finally:
                s.stop()
                # An upgraded server's new process is in the old one's
                # process group, which stop signalled; let it go.
                time.sleep(1)
            out.append(r)
            bench.log("upgrade %s %s: %s requests, %d failed (non-2xx %d, errors %s), %d refused; %s" % (
                s.name, "close" if close else "keep-alive", r["requests"], r["failed"], r["non2xx"],
                r["socket_errors"] or "-", r["refused"], r["upgrade"]))
