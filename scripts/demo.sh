#!/usr/bin/env bash
# make demo: the whole pipeline on this machine, against the simulator on 127.0.0.1.
# Writes everything under out/demo/ and stops the simulator when done (or on error).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.build/release/campaign
out=out/demo
rm -rf "$out"
mkdir -p "$out"

echo "== development certificates"
"$bin" certs "$out/certs" --bundle-id com.example.shop >/dev/null

echo "== simulator: 3 bad tokens, a shutdown every 700 notifications per connection, 0.1% processing errors"
"$bin" simulator --certs "$out/certs" --ready-file "$out/ready.json" --record "$out/record.ndjson" \
  --stats "$out/stats.json" --bad-tokens samples/bad-tokens.txt --shutdown-after 700 \
  --error-rate 0.001 --seed 7 --max-seconds 300 2>"$out/simulator.log" &
simulator=$!
trap 'kill "$simulator" 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  [ -s "$out/ready.json" ] && break
  kill -0 "$simulator" 2>/dev/null || { cat "$out/simulator.log" >&2; exit 1; }
  sleep 0.05
done
[ -s "$out/ready.json" ] || { echo "the simulator did not start" >&2; exit 1; }
port=$(sed -E 's/.*"port":([0-9]+).*/\1/' "$out/ready.json")

echo "== plan jobs/spring.json samples/audience.csv | send"
"$bin" plan jobs/spring.json samples/audience.csv --rejects "$out/rejects.ndjson" --summary "$out/plan-summary.json" \
  | "$bin" send --journal "$out/journal" --gateway "127.0.0.1:$port" \
      --cert "$out/certs/client.pem" --key "$out/certs/client.key" --ca "$out/certs/ca.pem" \
      --feedback-store "$out/suppressed.ndjson" --report "$out/report.json"

echo "== status"
"$bin" status "$out/journal"

kill -TERM "$simulator"
wait "$simulator" || true
trap - EXIT
echo "== simulator"
tail -n 1 "$out/simulator.log"
echo "== report ($out/report.json)"
cat "$out/report.json"
