#!/usr/bin/env bash
# make sanitize, last step: the credential loaders in a RELEASE build under
# AddressSanitizer. The PKCS#12 use-after-free (a BIO over an array's bytes
# that outlived withUnsafeBytes) showed only in release builds, where the
# array is released after its last use; debug builds keep it to the end of
# the scope, so the test suite under ASan could not see it. This runs the
# real commands that load a .p12 (with and without a passphrase) and a PEM
# pair against the simulator on 127.0.0.1 and fails on any ASan report.
# Usage: scripts/sanitize-credentials.sh BINARY
set -euo pipefail
bin=${1:?usage: sanitize-credentials.sh BINARY}
out=$(mktemp -d)
simulators=()
trap cleanup EXIT
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=99
fail() { echo "sanitize-credentials: $1" >&2; cat "$out"/*.log >&2 2>/dev/null; exit 1; }

"$bin" certs "$out/certs" --bundle-id com.example.asan >/dev/null 2>"$out/certs.log" || fail "certs failed"
PASS=s3cret "$bin" certs "$out/certs-pass" --bundle-id com.example.asan --p12-passphrase-env PASS >/dev/null 2>"$out/certs-pass.log" \
  || fail "certs with a passphrase failed"
printf 's3cret\n' > "$out/pass.txt"

cleanup() { for p in "${simulators[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$out"; }
start_simulator() {   # certificate directory, name; sets $port and $fport
  "$bin" simulator --certs "$1" --port 0 --feedback-port 0 --ready-file "$out/$2.json" \
    --max-seconds 120 2>"$out/$2.log" &
  simulators+=($!)
  for _ in $(seq 1 600); do
    [ -s "$out/$2.json" ] && break
    kill -0 "$!" 2>/dev/null || fail "the simulator did not start"
    sleep 0.05
  done
  [ -s "$out/$2.json" ] || fail "the simulator did not start"
  port=$(sed -E 's/.*"port":([0-9]+).*/\1/' "$out/$2.json")
  fport=$(sed -E 's/.*"feedback_port":([0-9]+).*/\1/' "$out/$2.json")
}

cat > "$out/job.json" <<'JOB'
{"campaign":"asan","messages":{"en":{"alert":"Hello {name}"}}}
JOB
printf 'token,lang,name\n%s,en,Ann\n%s,en,Bob\n' "$(printf 'ab%.0s' $(seq 32))" "$(printf 'cd%.0s' $(seq 32))" > "$out/audience.csv"
"$bin" plan "$out/job.json" "$out/audience.csv" --out "$out/plan" 2>"$out/plan.log" || fail "plan failed"

run() {   # name, then the command's arguments
  local name=$1; shift
  "$@" >/dev/null 2>"$out/$name.log" || fail "$name exited $? (99 is an AddressSanitizer report)"
  ! grep -q "AddressSanitizer" "$out/$name.log" || fail "$name: AddressSanitizer report"
  echo "  $name: ok"
}
start_simulator "$out/certs" sim
run send-p12 "$bin" send "$out/plan" --journal "$out/j1" --gateway "127.0.0.1:$port" \
  --cert "$out/certs/client.p12" --ca "$out/certs/ca.pem"
run feedback-p12 "$bin" feedback --store "$out/store.ndjson" --feedback "127.0.0.1:$fport" \
  --cert "$out/certs/client.p12" --ca "$out/certs/ca.pem"
run send-pem "$bin" send "$out/plan" --journal "$out/j3" --gateway "127.0.0.1:$port" \
  --cert "$out/certs/client.pem" --key "$out/certs/client.key" --ca "$out/certs/ca.pem"
# A bundle with a passphrase: its own development CA, so its own simulator.
start_simulator "$out/certs-pass" sim-pass
run send-p12-passphrase "$bin" send "$out/plan" --journal "$out/j2" --gateway "127.0.0.1:$port" \
  --cert "$out/certs-pass/client.p12" --passphrase-file "$out/pass.txt" --ca "$out/certs-pass/ca.pem"
