#!/usr/bin/env bash
# make nightly JOB=jobs/x.json AUDIENCE=path [GATEWAY=host:port FEEDBACK=host:port | ENVIRONMENT=production]
#              CERT=… [KEY=…] [CA=…] [PASSPHRASE_ENV=VAR] [OUT=out] [BIN=.build/release/campaign]
#              [PARTS=N [JOBS=J] [HOSTS=host1,host2]]
#
# feedback → plan → send, with everything under $OUT/<campaign>/<UTC date>/ and
# the suppression store at $OUT/<campaign>/suppressed.ndjson. Safe to run
# twice a day: if today's journal exists it is resumed (a complete send sends
# nothing again). A lock refuses a second concurrent run of the same campaign.
# With PARTS=N the plan is made in N parts (plan --parts) and deploy/parallel.sh
# sends them, JOBS at a time (default N), on HOSTS over ssh when given; a second
# run resumes the parts that did not finish.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${JOB:?JOB=jobs/….json is required}" "${AUDIENCE:?AUDIENCE=… is required}" "${CERT:?CERT=… is required}"
bin=${BIN:-.build/release/campaign}
out=${OUT:-out}

credentials=(--cert "$CERT")
[ -n "${KEY:-}" ] && credentials+=(--key "$KEY")
[ -n "${CA:-}" ] && credentials+=(--ca "$CA")
[ -n "${PASSPHRASE_ENV:-}" ] && credentials+=(--passphrase-env "$PASSPHRASE_ENV")
if [ -n "${GATEWAY:-}" ]; then gateway=(--gateway "$GATEWAY"); else gateway=(--environment "${ENVIRONMENT:?GATEWAY=host:port or ENVIRONMENT=sandbox|production}"); fi
if [ -n "${FEEDBACK:-}" ]; then feedback=(--feedback "$FEEDBACK"); else feedback=(--environment "${ENVIRONMENT:?FEEDBACK=host:port or ENVIRONMENT=sandbox|production}"); fi

campaign=$("$bin" validate "$JOB" --campaign-name)
day=$(date -u +%Y-%m-%d)
base="$out/$campaign"
dir="$base/$day"
mkdir -p "$dir"
store="$base/suppressed.ndjson"

exec 9>"$base/nightly.lock"
if ! flock -n 9; then
  echo "nightly: another run of $campaign is in progress (lock $base/nightly.lock)" >&2
  exit 75
fi

echo "nightly: $campaign $day in $dir"
"$bin" feedback --store "$store" "${feedback[@]}" "${credentials[@]}"

if [ -n "${PARTS:-}" ]; then
  send_options=("${gateway[@]}" "${credentials[@]}" --feedback-store "$(cd "$base" && pwd)/suppressed.ndjson")
  engine=(-j "${JOBS:-$PARTS}")
  [ -n "${HOSTS:-}" ] && engine+=(-S "$HOSTS")
  if [ -f "$dir/parts/manifest.json" ]; then
    echo "nightly: today's parts exist: resuming those not complete"
  else
    "$bin" plan "$JOB" "$AUDIENCE" --parts "$PARTS" --out "$dir/parts" --summary "$dir/plan-summary.json" --feedback-store "$store"
  fi
  CAMPAIGN="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")" bash deploy/parallel.sh "$dir/parts" "$dir/journals" "${engine[@]}" -- "${send_options[@]}"
  exit 0
fi

if [ -s "$dir/journal/journal.log" ]; then
  echo "nightly: today's journal exists: resuming it"
  "$bin" send --resume "$dir/journal" "${credentials[@]}"
else
  "$bin" plan "$JOB" "$AUDIENCE" --out "$dir/plan.ndjson" --rejects "$dir/rejects.ndjson" \
    --summary "$dir/plan-summary.json" --feedback-store "$store"
  "$bin" send "$dir/plan.ndjson" --journal "$dir/journal" "${gateway[@]}" "${credentials[@]}" \
    --feedback-store "$store" --report "$dir/report.json"
fi
"$bin" status "$dir/journal"
