#!/usr/bin/env python3
"""Charts and tables from a bench.py results directory, without matplotlib.

    charts.py RESULTS_DIR OUT_DIR

Writes OUT_DIR/latency.svg (p99 latency against connections, keep-alive and
Connection: close, one line per server, median with min-max whiskers),
OUT_DIR/attack.svg (the legitimate client's success rate and p99 under
attack, three servers x two descriptor limits), and prints Markdown tables
(medians with min-max) to stdout, which BENCHMARKS.md quotes. Also writes
RESULTS_DIR/throughput.tsv, idle.tsv and attack.tsv.
"""

import json
import math
import os
import statistics
import sys

COLORS = {"gatehouse": "#d62728", "nethttp": "#1f77b4", "nginx": "#2ca02c", "gatehouse-shipped": "#ff9896",
          "gatehouse-before": "#8c564b"}
LABEL = {"gatehouse": "gatehouse", "gatehouse-before": "gatehouse before", "nethttp": "net/http", "nginx": "nginx", "gatehouse-shipped": "gatehouse as shipped",
         "gatehouse-tls": "gatehouse tuned", "gatehouse-shipped-tls": "gatehouse as shipped",
         "nethttp-tls": "net/http (crypto/tls)", "nginx-tls": "nginx (OpenSSL)"}
TLS_SERVERS = ["gatehouse-tls", "gatehouse-shipped-tls", "nethttp-tls", "nginx-tls"]
SERVERS = ["gatehouse", "nethttp", "nginx"]


def agg(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return statistics.median(xs), min(xs), max(xs)


def fmt(a, digits=0, unit=""):
    if a is None:
        return "n/a"
    m, lo, hi = a
    f = "%%.%df" % digits
    return (f % m) + unit + " (" + (f % lo) + "–" + (f % hi) + ")"


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SVG:
    def __init__(self, w, h):
        self.w, self.h, self.parts = w, h, []

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, size=12, anchor="start", weight="normal", color="#222", rotate=None):
        tr = ' transform="rotate(%d %g %g)"' % (rotate, x, y) if rotate else ""
        self.add('<text x="%g" y="%g" font-size="%d" text-anchor="%s" font-weight="%s" fill="%s"%s>%s</text>' % (
            x, y, size, anchor, weight, color, tr, esc(s)))

    def line(self, x1, y1, x2, y2, color="#000", width=1, dash=None):
        d = ' stroke-dasharray="%s"' % dash if dash else ""
        self.add('<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="%g"%s/>' % (x1, y1, x2, y2, color, width, d))

    def rect(self, x, y, w, h, color, opacity=1.0):
        self.add('<rect x="%g" y="%g" width="%g" height="%g" fill="%s" fill-opacity="%g"/>' % (x, y, max(w, 0), max(h, 0), color, opacity))

    def circle(self, x, y, r, color):
        self.add('<circle cx="%g" cy="%g" r="%g" fill="%s"/>' % (x, y, r, color))

    def polyline(self, pts, color, width=2, dash=None):
        d = ' stroke-dasharray="%s"' % dash if dash else ""
        self.add('<polyline fill="none" stroke="%s" stroke-width="%g"%s points="%s"/>' % (
            color, width, d, " ".join("%g,%g" % p for p in pts)))

    def save(self, path):
        with open(path, "w") as f:
            f.write('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
                    'font-family="DejaVu Sans, Helvetica, Arial, sans-serif">\n' % (self.w, self.h, self.w, self.h))
            f.write('<rect width="100%" height="100%" fill="white"/>\n')
            f.write("\n".join(self.parts))
            f.write("\n</svg>\n")


def nice_log_ticks(lo, hi):
    ticks = []
    e = math.floor(math.log10(lo))
    while 10 ** e <= hi * 1.0001:
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo * 0.999 <= v <= hi * 1.001:
                ticks.append(v)
        e += 1
    return ticks


def latency_chart(tp, conns, path):
    servers = [s for s in SERVERS + ["gatehouse-shipped", "gatehouse-before"] if any(r["server"] == s for r in tp)]
    panels = [(False, "keep-alive"), (True, "Connection: close")]
    pw, ph, ml, mt, mb = 360, 300, 70, 60, 60
    svg = SVG(ml + 2 * (pw + 40) + 10, mt + ph + mb + 30)
    svg.text(svg.w / 2, 24, "wrk -t2 --latency, 10 s runs: p99 latency (median of rounds, whiskers min–max)", 14, "middle", "bold")
    vals = [r["p99_ms"] for r in tp if r.get("p99_ms")]
    lo, hi = min(vals) * 0.8, max(vals) * 1.25
    llo, lhi = math.log10(lo), math.log10(hi)
    for i, (close, title) in enumerate(panels):
        x0 = ml + i * (pw + 40)
        y0 = mt
        svg.text(x0 + pw / 2, y0 - 10, title, 13, "middle", "bold")
        svg.line(x0, y0 + ph, x0 + pw, y0 + ph)
        svg.line(x0, y0, x0, y0 + ph)

        def Y(v):
            return y0 + ph - (math.log10(v) - llo) / (lhi - llo) * ph

        def X(j):
            return x0 + 30 + j * (pw - 60) / max(1, len(conns) - 1)
        for t in nice_log_ticks(lo, hi):
            svg.line(x0 - 4, Y(t), x0 + pw, Y(t), "#ddd")
            svg.text(x0 - 6, Y(t) + 4, ("%g" % t), 10, "end")
        for j, c in enumerate(conns):
            svg.text(X(j), y0 + ph + 16, str(c), 11, "middle")
        svg.text(x0 + pw / 2, y0 + ph + 34, "connections", 11, "middle")
        if i == 0:
            svg.text(18, y0 + ph / 2, "p99 latency, ms (log scale)", 11, "middle", rotate=-90)
        for s in servers:
            pts = []
            for j, c in enumerate(conns):
                a = agg([r["p99_ms"] for r in tp if r["server"] == s and r["conns"] == c and r["close"] == close])
                if a is None:
                    continue
                m, mn, mx = a
                pts.append((X(j), Y(m)))
                svg.line(X(j), Y(mn), X(j), Y(mx), COLORS[s], 1.5)
                svg.line(X(j) - 4, Y(mn), X(j) + 4, Y(mn), COLORS[s], 1.5)
                svg.line(X(j) - 4, Y(mx), X(j) + 4, Y(mx), COLORS[s], 1.5)
                svg.circle(X(j), Y(m), 3.5, COLORS[s])
            if pts:
                svg.polyline(pts, COLORS[s], 2, "5,3" if s == "gatehouse-shipped" else None)
    lx = ml
    for s in servers:
        svg.rect(lx, svg.h - 22, 14, 10, COLORS[s])
        svg.text(lx + 18, svg.h - 13, LABEL[s], 12)
        lx += 140
    svg.save(path)


def attack_chart(at, path):
    limits = sorted({r["nofile"] for r in at}, reverse=True)
    groups = [(s, n) for n in limits for s in SERVERS]
    gw, ml, mt, ph = 70, 70, 80, 220
    gw = max(gw, 620 // max(1, len(groups)))
    W = ml + len(groups) * gw + 40
    svg = SVG(W, mt + 2 * ph + 150)
    svg.text(W / 2, 22, "Legitimate client (127.0.0.3, sequential requests) under attack:", 14, "middle", "bold")
    svg.text(W / 2, 40, "4000 slowloris connections (slowhttptest -H) + 10 000 idle connections", 13, "middle")

    def panel(y0, title, key, ymax, unit, log=False):
        svg.text(ml - 50, y0 - 20, title, 13, "start", "bold")
        svg.line(ml, y0 + ph, ml + len(groups) * gw, y0 + ph)
        svg.line(ml, y0, ml, y0 + ph)
        if log:
            vals = [max(v, 0.01) for v in (key(r) for r in at) if v]
            lo, hi = 0.05, max(vals + [1]) * 2
            ticks = nice_log_ticks(lo, hi)

            def Y(v):
                v = max(v, lo)
                return y0 + ph - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * ph
        else:
            ticks = [0, 25, 50, 75, 100]

            def Y(v):
                return y0 + ph - v / ymax * ph
        for t in ticks:
            svg.line(ml - 4, Y(t), ml + len(groups) * gw, Y(t), "#ddd")
            svg.text(ml - 6, Y(t) + 4, "%g" % t, 10, "end")
        for i, (s, n) in enumerate(groups):
            rows = [r for r in at if r["server"] == s and r["nofile"] == n]
            x = ml + i * gw + 12
            if not rows:
                svg.text(x + gw / 2 - 12, y0 + ph - 4, "n/a", 10, "middle")
                continue
            v = key(rows[0])
            if v is None:
                svg.text(x + gw / 2 - 12, y0 + ph - 4, "none", 10, "middle")
                continue
            svg.rect(x, Y(v), gw - 24, y0 + ph - Y(v), COLORS[s])
            svg.text(x + (gw - 24) / 2, Y(v) - 4, ("%.1f" % v) + unit, 10, "middle")
            if log:
                b = rows[0]["unloaded"]["p99_ms"]
                if b:
                    svg.line(x - 3, Y(b), x + gw - 21, Y(b), "#000", 1.5, "3,2")
        return Y

    panel(mt + 10, "answered, % of requests", lambda r: 100.0 * r["attacked"]["ok"] / max(1, r["attacked"]["sent"]), 100, "%")
    y2 = mt + ph + 60
    panel(y2, "p99 of the answered requests, ms (log scale; dashed line: unloaded p99)",
          lambda r: r["attacked"]["p99_ms"] if r["attacked"]["ok"] else None, None, "", log=True)
    yb = y2 + ph + 18
    for i, (s, n) in enumerate(groups):
        svg.text(ml + i * gw + gw / 2, yb, LABEL[s], 11, "middle")
    for j, n in enumerate(limits):
        cx = ml + (j * len(SERVERS) + len(SERVERS) / 2) * gw
        svg.text(cx, yb + 18, "ulimit -n %d" % n, 12, "middle", "bold")
        if j:
            x = ml + j * len(SERVERS) * gw
            svg.line(x, mt, x, yb + 20, "#999", 1, "4,3")
    svg.save(path)


def tables(res, rdir):
    out = []
    tp = res.get("throughput", [])
    conns = res["config"]["conns"]
    if tp:
        with open(os.path.join(rdir, "throughput.tsv"), "w") as f:
            f.write("server\tclose\tconns\tround\trps\tp50_ms\tp99_ms\tnon2xx\tsocket_errors\n")
            for r in tp:
                f.write("%s\t%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\n" % (r["server"], r["close"], r["conns"], r["round"], r["rps"],
                                                              r["p50_ms"], r["p99_ms"], r["non2xx"], json.dumps(r["socket_errors"])))
        servers = [s for s in SERVERS + ["gatehouse-shipped", "gatehouse-before"] if any(r["server"] == s for r in tp)]
        for close, title in ((False, "keep-alive"), (True, "Connection: close")):
            out.append("\n#### %s (wrk -t2 -d%ds, %d rounds; median (min–max))\n" % (title, res["config"]["duration_s"], res["config"]["rounds"]))
            out.append("| server | conns | requests/s | p50 ms | p99 ms | non-2xx | socket errors |")
            out.append("|---|---:|---:|---:|---:|---:|---|")
            for c in conns:
                for s in servers:
                    rows = [r for r in tp if r["server"] == s and r["conns"] == c and r["close"] == close]
                    if not rows:
                        continue
                    errs = {}
                    for r in rows:
                        for k, v in r["socket_errors"].items():
                            errs[k] = errs.get(k, 0) + v
                    out.append("| %s | %d | %s | %s | %s | %d | %s |" % (
                        LABEL[s], c, fmt(agg([r["rps"] for r in rows])), fmt(agg([r["p50_ms"] for r in rows]), 2),
                        fmt(agg([r["p99_ms"] for r in rows]), 2), sum(r["non2xx"] for r in rows),
                        ", ".join("%s %d" % kv for kv in sorted(errs.items())) or "–"))
            out.append("\nRatios of medians (requests/s):\n")
            out.append("| conns | gatehouse / net/http | gatehouse / nginx | nginx / net/http |")
            out.append("|---:|---:|---:|---:|")
            for c in conns:
                m = {}
                for s in SERVERS:
                    a = agg([r["rps"] for r in tp if r["server"] == s and r["conns"] == c and r["close"] == close])
                    m[s] = a[0] if a else None
                def ratio(a, b):
                    return "%.2f" % (m[a] / m[b]) if m.get(a) and m.get(b) else "n/a"
                out.append("| %d | %s | %s | %s |" % (c, ratio("gatehouse", "nethttp"), ratio("gatehouse", "nginx"), ratio("nginx", "nethttp")))
            if any(r["server"] == "gatehouse-before" for r in tp):
                out += before_after(tp, conns, close)
    idle = res.get("idle", [])
    if idle:
        with open(os.path.join(rdir, "idle.tsv"), "w") as f:
            keys = ["server", "round", "after_request", "warm", "opened", "still_open", "base_main_kb", "base_children_kb",
                    "held_main_kb", "held_children_kb", "main_bytes_per_conn", "children_bytes_per_conn",
                    "total_bytes_per_conn", "cpu_ms"]
            f.write("\t".join(keys) + "\n")
            for r in idle:
                f.write("\t".join(str(r.get(k)) for k in keys) + "\n")
        out.append("\n#### Idle connections (%d held, %d rounds; median (min–max))\n" % (res["config"]["idle_conns"], res["config"]["idle_rounds"]))
        out.append("| server | state | opened / still open | main process B/conn | workers B/conn | total B/conn | CPU ms holding them 10 s |")
        out.append("|---|---|---|---:|---:|---:|---:|")
        states = {(False, False): "no request yet", (True, False): "after one request",
                  (True, True): "after one request, warm baseline"}
        for (req, warm), state in states.items():
            for s in SERVERS:
                rows = [r for r in idle if r["server"] == s and r["after_request"] == req and r.get("warm", False) == warm]
                if not rows:
                    continue
                out.append("| %s | %s | %s / %s | %s | %s | %s | %s |" % (
                    LABEL[s], state,
                    min(r["opened"] for r in rows), min((r.get("still_open") or 0) for r in rows),
                    fmt(agg([r["main_bytes_per_conn"] for r in rows])),
                    fmt(agg([r["children_bytes_per_conn"] for r in rows])) if s != "nethttp" else "–",
                    fmt(agg([r["total_bytes_per_conn"] for r in rows])),
                    fmt(agg([r["cpu_ms"] for r in rows]))))
    at = res.get("attack", [])
    if at:
        with open(os.path.join(rdir, "attack.tsv"), "w") as f:
            f.write("server\tnofile\tunloaded_ok\tunloaded_sent\tunloaded_p50_ms\tunloaded_p99_ms\tok\tsent\tp50_ms\tp99_ms\terrors\tidle_opened\tattack_established_start\talive\n")
            for r in at:
                u, a = r["unloaded"], r["attacked"]
                f.write("%s\t%d\t%d\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n" % (
                    r["server"], r["nofile"], u["ok"], u["sent"], u["p50_ms"], u["p99_ms"], a["ok"], a["sent"],
                    a["p50_ms"], a["p99_ms"], json.dumps(a.get("errors", {})), r["idle_ready"].get("opened"),
                    r.get("client_side_established_at_start"), r["alive"]))
        out.append("\n#### Under attack (one run each)\n")
        out.append("| server | ulimit -n | unloaded: answered, p50 / p99 ms | attacked: answered | p50 / p99 ms | p99 ÷ unloaded p99 | failures | idle conns opened (still open at end) | client-side established during the attack |")
        out.append("|---|---:|---|---|---|---:|---|---|---|")
        for n in sorted({r["nofile"] for r in at}, reverse=True):
            for s in SERVERS:
                for r in [r for r in at if r["server"] == s and r["nofile"] == n]:
                    u, a = r["unloaded"], r["attacked"]
                    ratio = "%.1f" % (a["p99_ms"] / u["p99_ms"]) if a["ok"] and u["p99_ms"] else "n/a"
                    out.append("| %s | %d | %d/%d, %.2f / %.2f | %d/%d (%.1f%%) | %s | %s | %s | %s (%s) | %s |" % (
                        LABEL[s], n, u["ok"], u["sent"], u["p50_ms"], u["p99_ms"], a["ok"], a["sent"],
                        100.0 * a["ok"] / max(1, a["sent"]),
                        "%.2f / %.2f" % (a["p50_ms"], a["p99_ms"]) if a["ok"] else "–", ratio,
                        ", ".join("%s %d" % kv for kv in sorted((a.get("errors") or {}).items())) or "–",
                        r["idle_ready"].get("opened"), (r.get("idle_done") or {}).get("still_open", 0 if (r.get("idle_done") or {}).get("phase") == "done" else "?"),
                        r.get("client_side_established_at_start")))
    dist = res.get("distributed", [])
    if dist:
        with open(os.path.join(rdir, "distributed.tsv"), "w") as f:
            f.write("attack\tserver\tunloaded_ok\tunloaded_sent\tok\tsent\tp50_ms\tp99_ms\terrors\tattacker_dials\tattacker_peak_open\talive\n")
            for r in dist:
                u, a, k = r["unloaded"], r["attacked"], r.get("attacker") or {}
                f.write("%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n" % (
                    r["attack"], r["server"], u["ok"], u["sent"], a["ok"], a["sent"], a["p50_ms"], a["p99_ms"],
                    json.dumps(a.get("errors", {})), k.get("dials"), k.get("peak_open"), r["alive"]))
        out.append("\n#### Distributed slow clients (default configuration, proxy to one upstream; one run each)\n")
        out.append("Slow heads: 3000 connections from 50 addresses, one header line every 3 s. "
                   "Slow bodies: 40 connections from 5 addresses, POST of 1 000 000 bytes at 2 KiB every 100 ms. "
                   "The legitimate client (127.0.0.3) sends sequential requests with a 3 s timeout.\n")
        out.append("| attack | server | unloaded: answered | attacked: answered | p50 / p99 ms | failures | attacker dials (peak open) |")
        out.append("|---|---|---|---|---|---|---|")
        for r in dist:
            u, a, k = r["unloaded"], r["attacked"], r.get("attacker") or {}
            out.append("| %s | %s | %d/%d | %d/%d (%.1f%%) | %s | %s | %s (%s) |" % (
                r["attack"], LABEL.get(r["server"], r["server"]), u["ok"], u["sent"], a["ok"], a["sent"],
                100.0 * a["ok"] / max(1, a["sent"]),
                "%.2f / %.2f" % (a["p50_ms"], a["p99_ms"]) if a["ok"] else "–",
                ", ".join("%s %d" % kv for kv in sorted((a.get("errors") or {}).items())) or "–",
                k.get("dials", "?"), k.get("peak_open", "?")))
    costs = res.get("costs")
    if costs:
        out.append("\n#### Per request under wrk -t2 -c64 keep-alive, 5 s (one run each)\n")
        out.append("| server | requests/s | CPU µs/request, main process | CPU µs/request, children | context switches/request |")
        out.append("|---|---:|---:|---:|---:|")
        for r in costs:
            out.append("| %s | %.0f | %.1f | %s | %.2f |" % (
                LABEL.get(r["server"], r["server"]), r["rps"] or 0, r["main_cpu_us_per_request"] or 0,
                "%.1f" % r["children_cpu_us_per_request"] if r.get("children_cpu_us_per_request") is not None else "n/a",
                r["ctx_switches_per_request"] or 0))
    out += tls_tables(res, rdir)
    ipc = res.get("ipc")
    if ipc:
        out.append("\n#### Hand-off (`%s`; median (min–max) of %d runs)\n" % (ipc["command"], res["config"]["rounds"]))
        out.append("| benchmark | ns/op | fds/s | round trips/s | B/op | allocs/op |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for name in sorted({r["name"] for r in ipc["rows"]}):
            rows = [r for r in ipc["rows"] if r["name"] == name]
            out.append("| %s | %s | %s | %s | %s | %s |" % (name, fmt(agg([r.get("ns/op") for r in rows]), 0),
                                                      fmt(agg([r.get("fds/s") for r in rows])),
                                                      fmt(agg([r.get("roundtrips/s") for r in rows])),
                                                      fmt(agg([r.get("B/op") for r in rows])),
                                                      fmt(agg([r.get("allocs/op") for r in rows]))))
    return "\n".join(out)


def before_after(tp, conns, close):
    """gatehouse after against gatehouse before (--gatehouse-before): the
    ratio of the medians, and the range of the ratios of each round's pair,
    measured one after the other, so that the machine's drift shows as
    spread instead of as a difference."""
    out = ["\ngatehouse after / before (requests/s, p99):\n",
           "| conns | before req/s | after req/s | after/before median | per-round range "
           "| before p99 ms | after p99 ms | net/http req/s |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in conns:
        def rows(s):
            return {r["round"]: r for r in tp if r["server"] == s and r["conns"] == c and r["close"] == close}
        b, a, n = rows("gatehouse-before"), rows("gatehouse"), rows("nethttp")
        rb, ra = agg([r["rps"] for r in b.values()]), agg([r["rps"] for r in a.values()])
        per = [a[k]["rps"] / b[k]["rps"] for k in a if k in b and a[k]["rps"] and b[k]["rps"]]
        out.append("| %d | %s | %s | %s | %s | %s | %s | %s |" % (
            c, fmt(rb), fmt(ra), "%.3f" % (ra[0] / rb[0]) if ra and rb else "n/a",
            "%.3f–%.3f" % (min(per), max(per)) if per else "n/a",
            fmt(agg([r["p99_ms"] for r in b.values()]), 2), fmt(agg([r["p99_ms"] for r in a.values()]), 2),
            fmt(agg([r["rps"] for r in n.values()]))))
    return out


def tls_tables(res, rdir):
    t = res.get("tls") or {}
    rows, idle = t.get("rows", []), t.get("idle", [])
    out = []
    if rows:
        with open(os.path.join(rdir, "tls.tsv"), "w") as f:
            f.write("server\tmeasure\tconns\tround\trps\tp50_ms\tp99_ms\tresumed\tfailed\tloadavg_before\n")
            for r in rows:
                f.write("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" % (
                    r["server"], r["measure"], r["conns"], r["round"], r.get("rps"), r.get("p50_ms"), r.get("p99_ms"),
                    r.get("resumed", ""), r.get("failed", ""), r.get("loadavg_before")))
        rounds = len({r["round"] for r in rows})
        out.append("\n#### TLS (ECDSA P-256, TLS 1.3, X25519; %d interleaved rounds; median (min–max))\n" % rounds)
        out.append("| server | measure | conns | per second | p50 ms | p99 ms | ratio to net/http: of medians, per round | resumed / failed | errors |")
        out.append("|---|---|---:|---:|---:|---:|---:|---|---|")
        keys = []
        for r in rows:
            if (r["measure"], r["conns"]) not in keys:
                keys.append((r["measure"], r["conns"]))
        for measure, c in keys:
            base = agg([r.get("rps") for r in rows if r["server"] == "nethttp-tls" and r["measure"] == measure and r["conns"] == c])
            for s in TLS_SERVERS:
                sel = [r for r in rows if r["server"] == s and r["measure"] == measure and r["conns"] == c]
                if not sel:
                    continue
                a = agg([r.get("rps") for r in sel])
                errs = {}
                for r in sel:
                    for k, v in (r.get("errors") or r.get("socket_errors") or {}).items():
                        errs[k] = errs.get(k, 0) + v
                # the same round's net/http run was seconds away: under a load
                # that drifts, its ratio says more than the ratio of medians
                nh = {r["round"]: r.get("rps") for r in rows
                      if r["server"] == "nethttp-tls" and r["measure"] == measure and r["conns"] == c}
                per = agg([r["rps"] / nh[r["round"]] for r in sel if r.get("rps") and nh.get(r["round"])])
                out.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s |" % (
                    LABEL[s], "new handshakes" if measure == "handshake" else "keep-alive requests", c, fmt(a),
                    fmt(agg([r.get("p50_ms") for r in sel]), 2), fmt(agg([r.get("p99_ms") for r in sel]), 2),
                    ("%.2f×; %s" % (a[0] / base[0], fmt(per, 2, "×"))) if a and base else "n/a",
                    "%s / %s" % (sum(r.get("resumed") or 0 for r in sel), sum(r.get("failed") or 0 for r in sel))
                    if measure == "handshake" else "–",
                    ", ".join("%s %d" % kv for kv in sorted(errs.items())) or "–"))
    if idle:
        n = res["config"].get("tls_idle_conns")
        out.append("\n#### Idle TLS connections after one request each (%s held, %d rounds; median (min–max))\n" % (
            n, len({r["round"] for r in idle})))
        out.append("| server | opened / still open | main process B/conn | workers B/conn | total B/conn | ratio to nginx |")
        out.append("|---|---|---:|---:|---:|---:|")
        ng = agg([r["total_bytes_per_conn"] for r in idle if r["server"] == "nginx-tls"])
        for s in TLS_SERVERS:
            sel = [r for r in idle if r["server"] == s]
            if not sel:
                continue
            a = agg([r["total_bytes_per_conn"] for r in sel])
            out.append("| %s | %d / %d | %s | %s | %s | %s |" % (
                LABEL[s], min(r["opened"] for r in sel), min((r.get("still_open") or 0) for r in sel),
                fmt(agg([r["main_bytes_per_conn"] for r in sel])),
                fmt(agg([r["children_bytes_per_conn"] for r in sel])) if s != "nethttp-tls" else "–", fmt(a),
                "%.2f×" % (a[0] / ng[0]) if a and ng else "n/a"))
    return out


def main():
    rdir, odir = sys.argv[1], sys.argv[2]
    with open(os.path.join(rdir, "results.json")) as f:
        res = json.load(f)
    os.makedirs(odir, exist_ok=True)
    if res.get("throughput"):
        latency_chart(res["throughput"], res["config"]["conns"], os.path.join(odir, "latency.svg"))
    if res.get("attack"):
        attack_chart(res["attack"], os.path.join(odir, "attack.svg"))
    t = tables(res, rdir)
    with open(os.path.join(rdir, "tables.md"), "w") as f:
        f.write(t + "\n")
    print(t)


if __name__ == "__main__":
    main()
