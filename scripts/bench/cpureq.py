#!/usr/bin/env python3
"""CPU per request of one wrk run, from /proc: the server's own process (for
gatehouse, the supervisor) and all its descendants (the spawner and the
workers), over the requests wrk counted. Less sensitive to a loaded machine
than requests/s.

    cpureq.py BIN CONFIGDIR MODE SECONDS
      BIN        bin/gatehouse, or the nethttp baseline (scripts/bench/nethttp)
      CONFIGDIR  the directory holding gatehouse.hcl (its listener's 127.0.0.1
                 port is used), or "-" for nethttp (on 127.0.0.1:18183)
      MODE       ka (keep-alive) or close (Connection: close)

It prints requests/s and CPU microseconds per request: sup_us (the process
started), work_us (its descendants), total_us.
"""
import os, subprocess, sys, time, re
binary, kind, mode, dur = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
tck = os.sysconf('SC_CLK_TCK')
def tree(root):
    kids = {}
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            s = open('/proc/%s/stat' % p).read()
        except OSError: continue
        f = s[s.rindex(')')+2:].split()
        kids.setdefault(int(f[1]), []).append(int(p))
    out, st = [], [root]
    while st:
        p = st.pop(); out.append(p); st += kids.get(p, [])
    return out
def cpu(pid):
    try:
        s = open('/proc/%d/stat' % pid).read()
    except OSError: return 0.0
    f = s[s.rindex(')')+2:].split()
    return (int(f[11]) + int(f[12])) / tck
def sample(root):
    t = tree(root)
    return cpu(root), sum(cpu(p) for p in t if p != root)
if kind == '-':
    port = '18183'
    p = subprocess.Popen([binary, '-addr', '127.0.0.1:' + port], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
else:
    d = kind
    port = re.search(r'127\.0\.0\.1:(\d+)', open(d + '/gatehouse.hcl').read()).group(1)
    p = subprocess.Popen([binary, '-config', 'gatehouse.hcl'], cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for i in range(100):
    if subprocess.run(['curl', '-s', '-o', '/dev/null', 'http://127.0.0.1:%s/' % port]).returncode == 0: break
    time.sleep(0.1)
time.sleep(0.3)
s0, w0 = sample(p.pid)
args = ['wrk', '-t2', '-c64', '-d%ss' % dur]
if mode == 'close': args += ['-H', 'Connection: close']
out = subprocess.run(args + ['http://127.0.0.1:%s/' % port], capture_output=True, text=True).stdout
s1, w1 = sample(p.pid)
p.terminate(); p.wait()
n = int(re.search(r'(\d+) requests in', out).group(1))
rps = float(re.search(r'Requests/sec:\s+([\d.]+)', out).group(1))
print('%s %s %s rps=%.0f sup_us=%.1f work_us=%.1f total_us=%.1f load=%s' % (os.path.basename(binary), kind, mode, rps, (s1-s0)/n*1e6, (w1-w0)/n*1e6, (s1-s0+w1-w0)/n*1e6, open('/proc/loadavg').read().split()[0]))
