#!/usr/bin/env bash
# scripts/bench/run.sh — what `make bench` runs (never part of `make test`).
#
# Installs wrk, nginx, slowhttptest, strace and perf when missing (Debian
# packages; needs root), raises the descriptor limit, then runs bench.py:
# gatehouse, a Go net/http server and nginx on 127.0.0.1:18081-18150,
# measured interleaved. By default (about 20 minutes on 2 cores) the phases
# conns, parked, syscalls and real; with the attack phase named in
# BENCH_ARGS, the slowloris acceptance script after it. Then the charts.
#
# Results: scripts/bench/results/<UTC time>/ (results.json, slowloris.jsonl,
# logs/), and docs/bench/{results.json,latency.svg,attack.svg}.
#
# Environment:
#   GATEHOUSE_BIN   binary to measure (default bin/gatehouse, which `make bench` builds)
#   BENCH_ARGS      extra bench.py flags, e.g. "--phases conns" (the new-connection rows
#                   alone, about 10 minutes), "--phases conns --conns-loads close",
#                   "--phases attack,distributed" (the attack rows and slowloris.sh)
#   BENCH_OUT       results directory (default scripts/bench/results/<UTC time>)
#   SKIP_SLOWLORIS  set to 1 to skip scripts/slowloris.sh in a run with the attack phase
#
# A before/after run (BENCH_ARGS with --gatehouse-before BIN) measures a binary
# that is not the tree's: its charts and results stay in $OUT/docs, and
# docs/bench is left alone.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export CGO_ENABLED=0

need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v nginx >/dev/null 2>&1 || need+=(nginx)
command -v slowhttptest >/dev/null 2>&1 || need+=(slowhttptest)
command -v ss >/dev/null 2>&1 || need+=(iproute2)
command -v strace >/dev/null 2>&1 || need+=(strace)
command -v perf >/dev/null 2>&1 || need+=(linux-perf)
if [ ${#need[@]} -gt 0 ]; then
  echo "[bench] installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v python3 >/dev/null 2>&1 || { echo "[bench] python3 is required" >&2; exit 1; }

GATEHOUSE_BIN=${GATEHOUSE_BIN:-$ROOT/bin/gatehouse}
[ -x "$GATEHOUSE_BIN" ] || make build
OUT=${BENCH_OUT:-$ROOT/scripts/bench/results/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
# Measure a copy: others may rebuild bin/gatehouse during a 30-minute run.
cp "$GATEHOUSE_BIN" "$OUT/gatehouse"
GATEHOUSE_BIN=$OUT/gatehouse
sha256sum "$GATEHOUSE_BIN" >"$OUT/gatehouse.sha256"

# The harness's own descriptors (the idle clients hold 10 000): as many as
# the hard limit allows (raising the hard limit needs CAP_SYS_RESOURCE).
ulimit -n 100000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
echo "[bench] descriptor limit $(ulimit -n); results in $OUT" >&2

# bench.py stops every server it starts (atexit, SIGTERM/SIGINT); the trap
# covers run.sh being interrupted between steps.
PY_PID=""
cleanup() {
  rc=$?
  [ -n "$PY_PID" ] && kill -TERM "$PY_PID" 2>/dev/null && wait "$PY_PID" 2>/dev/null
  rm -f "$OUT/gatehouse"   # the measured copy; its sha256 stays in gatehouse.sha256
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck disable=SC2086
python3 scripts/bench/bench.py --out "$OUT" --gatehouse "$GATEHOUSE_BIN" ${BENCH_ARGS:-} &
PY_PID=$!
wait "$PY_PID"
PY_PID=""

case " ${BENCH_ARGS:-} " in *" --phases "*attack*) ATTACK=1 ;; *) ATTACK=0 ;; esac
if [ "$ATTACK" = 1 ] && [ "${SKIP_SLOWLORIS:-0}" != 1 ]; then
  echo "[bench] scripts/slowloris.sh (gatehouse defaults, 1000 connections per mode)" >&2
  ./scripts/slowloris.sh -b "$GATEHOUSE_BIN" -p 18085 -l 35 -j "$OUT/slowloris.jsonl" | tee "$OUT/slowloris.txt" || \
    echo "[bench] slowloris.sh failed (see $OUT/slowloris.txt)" >&2
fi

DOCS=$ROOT/docs/bench
case " ${BENCH_ARGS:-} " in *" --gatehouse-before"*) DOCS=$OUT/docs ;; esac
python3 scripts/bench/charts.py "$OUT" "$DOCS"
# A run of the default phases replaces docs/bench/results.json; a run of some
# phases (BENCH_ARGS="--phases tls") replaces the results of those phases and
# keeps the others.
python3 - "$OUT/results.json" "$DOCS/results.json" <<'EOF'
import json, os, sys
new = json.load(open(sys.argv[1]))
old = json.load(open(sys.argv[2])) if os.path.exists(sys.argv[2]) else {}
phases = [k for k in new if k not in ("machine", "config")]
if ("conns" in new and "real" in new) or not old:
    merged = new
else:
    merged = dict(old, **{k: new[k] for k in phases})
    merged.setdefault("partial_runs", []).append({"phases": phases, "machine": new["machine"], "config": new["config"]})
with open(sys.argv[2] + ".tmp", "w") as f:
    json.dump(merged, f, indent=1)
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
EOF
[ -f "$OUT/slowloris.jsonl" ] && cp "$OUT/slowloris.jsonl" "$DOCS/slowloris.jsonl"
echo "[bench] done: $OUT, $DOCS" >&2
