#!/bin/bash
# Before and after, alternating: the default send (`--connections auto`) of
# PLAN by each of two campaign binaries into one `campaign simulator
# --protocol h2 --latency-ms HALF_RTT` (the after binary's), RUNS times
# each, 30 s at most a run; one line a run: which, answered per second,
# connections at the end. Take medians. Needs what scripts/bench_distance.py
# made in out/bench (certificates, keys, plans).
#   scripts/bench_ab.sh BEFORE_BINARY PLAN HALF_RTT_MS [RUNS]
set -euo pipefail
BEFORE=$1 PLAN=$2 LAT=$3 RUNS=${4:-3}
AFTER=.build/release/campaign O=out/bench
rm -f $O/ab-ready.json
$AFTER simulator --protocol h2 --certs $O/certs --auth-keys $O/certs/auth-keys --ready-file $O/ab-ready.json \
  --max-seconds 3600 --latency-ms "$LAT" 2>/dev/null &
SIM=$!
trap 'kill $SIM 2>/dev/null' EXIT
for _ in $(seq 100); do [ -s $O/ab-ready.json ] && break; sleep 0.1; done
PORT=$(python3 -c "import json; print(json.load(open('$O/ab-ready.json'))['port'])")
for _ in $(seq "$RUNS"); do
  for which in before after; do
    bin=$AFTER; [ $which = before ] && bin=$BEFORE
    rm -rf $O/ab-journal $O/ab-report.json
    timeout -s TERM 30 "$bin" send "$PLAN" --journal $O/ab-journal --gateway 127.0.0.1:"$PORT" \
      --auth-key $O/certs/AuthKey_DEVKEY0001.p8 --key-id DEVKEY0001 --team-id DEVTEAM001 --ca $O/certs/ca.pem \
      --report $O/ab-report.json 2>/dev/null || true
    python3 -c "import json; r=json.load(open('$O/ab-report.json')); print('$which', round((r['accepted']+r['failed'])/r['seconds']), r['pool_connections'])"
  done
done
