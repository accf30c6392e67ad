#!/usr/bin/env bash
# make demo: the whole pipeline on this machine, against the simulator on 127.0.0.1.
# Writes everything under out/demo/ and stops the simulator when done (or on error).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.build/release/campaign
out=out/demo
rm -rf "$out"
mkdir -p "$out"

# Waits for the simulator started last ($simulator) to write its ready file
# ($1) and prints its port; says why (its log, $2) when it did not start.
await_simulator() {
  for _ in $(seq 1 300); do
    [ -s "$1" ] && break
    kill -0 "$simulator" 2>/dev/null || { cat "$2" >&2; exit 1; }
    sleep 0.05
  done
  [ -s "$1" ] || { echo "the simulator did not start ($2)" >&2; exit 1; }
  sed -E 's/.*"port":([0-9]+).*/\1/' "$1"
}

echo "== development certificates"
"$bin" certs "$out/certs" --bundle-id com.example.shop >/dev/null

echo "== simulator: 3 bad tokens, a shutdown every 700 notifications per connection, 0.1% processing errors"
"$bin" simulator --certs "$out/certs" --ready-file "$out/ready.json" --record "$out/record.ndjson" \
  --stats "$out/stats.json" --bad-tokens samples/bad-tokens.txt --shutdown-after 700 \
  --error-rate 0.001 --seed 7 --max-seconds 300 2>"$out/simulator.log" &
simulator=$!
trap 'kill "$simulator" 2>/dev/null || true' EXIT
port=$(await_simulator "$out/ready.json" "$out/simulator.log")

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

echo
echo "== HTTP/2: simulator --protocol h2 with provider-token auth, 3 bad tokens, a GOAWAY every 500 streams, 1% 500/503 answers"
"$bin" simulator --protocol h2 --certs "$out/certs" --auth-keys "$out/certs/auth-keys" --ready-file "$out/h2-ready.json" \
  --record "$out/h2-record.ndjson" --stats "$out/h2-stats.json" --bad-tokens samples/bad-tokens.txt --goaway-after 500 \
  --error-rate 0.01 --seed 7 --max-seconds 300 2>"$out/h2-simulator.log" &
simulator=$!
trap 'kill "$simulator" 2>/dev/null || true' EXIT
port=$(await_simulator "$out/h2-ready.json" "$out/h2-simulator.log")

echo "== plan jobs/spring-h2.json samples/audience.csv | send (token auth: AuthKey_DEVKEY0001.p8)"
"$bin" plan jobs/spring-h2.json samples/audience.csv --rejects "$out/h2-rejects.ndjson" \
  | "$bin" send --journal "$out/h2-journal" --gateway "127.0.0.1:$port" \
      --auth-key "$out/certs/AuthKey_DEVKEY0001.p8" --key-id DEVKEY0001 --team-id DEVTEAM001 --ca "$out/certs/ca.pem" \
      --feedback-store "$out/suppressed.ndjson" --report "$out/h2-report.json"

echo "== status"
"$bin" status "$out/h2-journal"

kill -TERM "$simulator"
wait "$simulator" || true
trap - EXIT
echo "== HTTP/2 simulator"
tail -n 1 "$out/h2-simulator.log"
echo "== report ($out/h2-report.json)"
cat "$out/h2-report.json"
