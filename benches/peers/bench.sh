#!/usr/bin/env bash
# The project's watch (watch-bench) side by side with kube-rs's, on one fake API server's stream.
#
#   benches/peers/bench.sh                    # from anywhere; see benches/peers/README.md
#
# Builds everything in release (this workspace, and watch-bench from the repository's root),
# writes the stream to a file for the decode baseline, starts watch-feed, then RUNS times: kube-rs's
# watcher, (KUBE_REFLECT=1) kube-rs's watcher feeding a reflector, and watch-bench, each reading the
# whole stream; then the decode baseline RUNS times. Prints every result line, the medians, and
# watch-bench's events/s over each kube-rs variant's.
#
# Knobs (environment, defaults in brackets):
#   EVENTS [200000]   events in the stream, and how many each client waits for
#   OBJECTS [1000]    distinct objects the events are about
#   RUNS [3]          runs of each client; the medians are over these
#   CHUNK [16384]     HTTP chunk size of the watch response; 1 is the worst case for framing
#   THREADS [1]       client runtime: 1 = tokio current-thread, N = multi-thread with N workers
#   KUBE_REFLECT      set: also run kube-rs's watcher feeding a reflector store
#   BUSY              set: a spinning process keeps one core busy during the client runs
#   EVENTS_FILE [${TMPDIR:-/tmp}/watch-feed-events.ndjson]
#   CARGO_TARGET_DIR  honoured for both builds (default: each workspace's own target/)
set -euo pipefail

PEERS=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$PEERS/../.." && pwd)
EVENTS=${EVENTS:-200000}
OBJECTS=${OBJECTS:-1000}
RUNS=${RUNS:-3}
CHUNK=${CHUNK:-16384}
THREADS=${THREADS:-1}
EVENTS_FILE=${EVENTS_FILE:-${TMPDIR:-/tmp}/watch-feed-events.ndjson}
PEERS_BIN=${CARGO_TARGET_DIR:-$PEERS/target}/release
ROOT_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release

echo "--- building (release): benches/peers, and watch-bench at the root"
(cd "$PEERS" && cargo build --release --quiet --locked)
(cd "$ROOT" && cargo build --release --quiet --bin watch-bench)

WORK=$(mktemp -d)
FEED_PID=
BUSY_PID=
cleanup() {
  [ -n "$BUSY_PID" ] && kill "$BUSY_PID" 2>/dev/null
  [ -n "$FEED_PID" ] && kill "$FEED_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

"$PEERS_BIN/watch-feed" --events-file "$EVENTS_FILE" --events "$EVENTS" --objects "$OBJECTS"

"$PEERS_BIN/watch-feed" --listen 127.0.0.1:0 --events "$EVENTS" --objects "$OBJECTS" --chunk "$CHUNK" \
  >"$WORK/feed.out" 2>"$WORK/feed.err" &
FEED_PID=$!
URL=
for _ in $(seq 1 600); do
  URL=$(awk '/^ready /{print $2; exit}' "$WORK/feed.out")
  [ -n "$URL" ] && break
  kill -0 "$FEED_PID" 2>/dev/null || { cat "$WORK/feed.err" >&2; echo "watch-feed exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$URL" ] || { echo "watch-feed did not become ready in 60 s" >&2; exit 1; }
cat "$WORK/feed.out"

# One client run; keeps its result line (`<label> events=... events_per_s=...`). Its stderr (logs)
# is shown only if it fails.
record() {
  "$@" >"$WORK/run.out" 2>"$WORK/run.err" || { cat "$WORK/run.err" >&2; echo "failed: $*" >&2; exit 1; }
  grep -m1 ' events_per_s=' "$WORK/run.out" | tee -a "$WORK/results"
}

if [ -n "${BUSY:-}" ]; then
  sh -c 'while :; do :; done' &
  BUSY_PID=$!
  echo "(BUSY: pid $BUSY_PID spins on one core during the client runs)"
fi
echo "--- $RUNS runs against $URL: events=$EVENTS chunk=$CHUNK threads=$THREADS"
for _ in $(seq 1 "$RUNS"); do
  record "$PEERS_BIN/kube-peer" --server "$URL" --expect "$EVENTS" --threads "$THREADS"
  if [ -n "${KUBE_REFLECT:-}" ]; then
    record "$PEERS_BIN/kube-peer" --server "$URL" --expect "$EVENTS" --threads "$THREADS" --reflect
  fi
  record "$ROOT_BIN/watch-bench" --server "$URL" --expect "$EVENTS" --threads "$THREADS"
done
if [ -n "$BUSY_PID" ]; then
  kill "$BUSY_PID" 2>/dev/null || true
  wait "$BUSY_PID" 2>/dev/null || true
  BUSY_PID=
fi
kill "$FEED_PID" 2>/dev/null || true
wait "$FEED_PID" 2>/dev/null || true
FEED_PID=

echo "--- decode baseline, $RUNS runs (no HTTP: serde_json::Value per line of $EVENTS_FILE)"
for _ in $(seq 1 "$RUNS"); do
  record "$PEERS_BIN/json-baseline" "$EVENTS_FILE"
done

# median LABEL FIELD: the median of FIELD over LABEL's result lines.
median() {
  grep "^$1 " "$WORK/results" | sed -n "s/.* $2=\([0-9.]*\).*/\1/p" | sort -g |
    awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
echo "--- medians over $RUNS runs"
labels=$(awk '{print $1}' "$WORK/results" | awk '!seen[$0]++')
for label in $labels; do
  printf '%-20s events_per_s=%-8s seconds=%-7s max_rss_kb=%s\n' "$label" \
    "$(median "$label" events_per_s)" "$(median "$label" seconds)" "$(median "$label" max_rss_kb)"
done
echo "--- ratios (events/s; above 1 is watch-bench faster)"
ours=$(median watch-bench events_per_s)
for label in $labels; do
  case $label in kube-rs*) ;; *) continue ;; esac
  awk -v a="$ours" -v b="$(median "$label" events_per_s)" -v l="$label" \
    'BEGIN {printf "watch-bench / %s: %.2fx\n", l, a / b}'
done
