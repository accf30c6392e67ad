#!/usr/bin/env bash
# make nightly JOB=jobs/x.json AUDIENCE=path (ENVIRONMENT=sandbox|production | GATEWAY=host:port [FEEDBACK=host:port])
#              (AUTH_KEY=AuthKey_KID.p8 KEY_ID=… TEAM_ID=… | CERT=… [KEY=…] [PASSPHRASE_ENV=VAR]) [CA=…]
#              [PLAN_ARGS='--delimiter ;'] [SEND_ARGS='--connections 8'] [OUT=out] [BIN=/usr/local/bin/campaign]
#              [PARTS=N [JOBS=J] [HOSTS=host1,host2]] [LEDGER=/srv/ledger/app]
#
# (feedback →) plan → send, with everything under $OUT/<campaign>/<UTC date>/ and
# the suppression store at $OUT/<campaign>/suppressed.ndjson. An h2 job (what
# Apple runs) sends with a provider token (AUTH_KEY, KEY_ID, TEAM_ID) or a
# certificate (CERT); its 410 answers feed the store, so the binary feedback
# service is read only for binary jobs (CERT). Safe to run twice a day: if
# today's journal exists it is resumed (a complete send sends nothing again).
# A lock refuses a second concurrent run of the same campaign. With PARTS=N
# the plan is made in N parts (plan --parts) and deploy/parallel.sh sends
# them, JOBS at a time (default N), on HOSTS over ssh when given; a second run
# resumes the parts that did not finish. PLAN_ARGS and SEND_ARGS are split on
# spaces and passed to plan and send. Needs only bash, coreutils, flock and
# the campaign binary (BIN): it runs under cron's bare environment.
# LEDGER=DIR: the app's send ledger (one directory per app, shared by all its
# campaigns): plan drops devices already reached by this campaign and those at
# the job's frequencyCap; send records what was accepted (README "Campaign rules").
set -euo pipefail
cd "$(dirname "$0")/.."
: "${JOB:?JOB=jobs/….json is required}" "${AUDIENCE:?AUDIENCE=… is required}"
bin=${BIN:-.build/release/campaign}
out=${OUT:-out}
[ -x "$bin" ] || { echo "nightly: $bin is not an executable campaign binary (make release, or BIN=/path/to/campaign)" >&2; exit 69; }
read -r -a plan_args <<< "${PLAN_ARGS:-}"
read -r -a send_args <<< "${SEND_ARGS:-}"
ledger_args=()
if [ -n "${LEDGER:-}" ]; then mkdir -p "$LEDGER"; ledger_args=(--ledger "$(cd "$LEDGER" && pwd)"); fi

format=$("$bin" validate "$JOB" --format)
if [ -n "${AUTH_KEY:-}" ]; then
  [ "$format" = h2 ] || { echo "nightly: $JOB is a $format job: the binary interface needs CERT=, provider tokens (AUTH_KEY) are for h2 jobs" >&2; exit 64; }
  : "${KEY_ID:?KEY_ID=… (the 10-character id of the key) goes with AUTH_KEY}" "${TEAM_ID:?TEAM_ID=… goes with AUTH_KEY}"
  # One token for every night and every part: kept beside the nightly runs, not in each journal.
  mkdir -p "$out/token-cache"
  credentials=(--auth-key "$AUTH_KEY" --key-id "$KEY_ID" --team-id "$TEAM_ID" --token-cache "$(cd "$out/token-cache" && pwd)")
else
  : "${CERT:?CERT=… (or, for an h2 job, AUTH_KEY= KEY_ID= TEAM_ID=) is required}"
  credentials=(--cert "$CERT")
  [ -n "${KEY:-}" ] && credentials+=(--key "$KEY")
  [ -n "${PASSPHRASE_ENV:-}" ] && credentials+=(--passphrase-env "$PASSPHRASE_ENV")
fi
[ -n "${CA:-}" ] && credentials+=(--ca "$CA")
if [ -n "${GATEWAY:-}" ]; then gateway=(--gateway "$GATEWAY"); else gateway=(--environment "${ENVIRONMENT:?GATEWAY=host:port or ENVIRONMENT=sandbox|production}"); fi

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

echo "nightly: $campaign $day in $dir ($format)"
if [ "$format" != h2 ]; then
  if [ -n "${FEEDBACK:-}" ]; then feedback=(--feedback "$FEEDBACK"); else feedback=(--environment "${ENVIRONMENT:?FEEDBACK=host:port or ENVIRONMENT=sandbox|production}"); fi
  "$bin" feedback --store "$store" "${feedback[@]}" "${credentials[@]}"
fi

if [ -n "${PARTS:-}" ]; then
  send_options=("${gateway[@]}" "${credentials[@]}" --feedback-store "$(cd "$base" && pwd)/suppressed.ndjson" "${ledger_args[@]}" "${send_args[@]}")
  engine=(-j "${JOBS:-$PARTS}")
  [ -n "${HOSTS:-}" ] && engine+=(-S "$HOSTS")
  if [ -f "$dir/parts/manifest.json" ]; then
    echo "nightly: today's parts exist: resuming those not complete"
  else
    "$bin" plan "$JOB" "$AUDIENCE" --parts "$PARTS" --out "$dir/parts" --summary "$dir/plan-summary.json" --feedback-store "$store" "${ledger_args[@]}" "${plan_args[@]}"
  fi
  CAMPAIGN="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")" bash deploy/parallel.sh "$dir/parts" "$dir/journals" "${engine[@]}" -- "${send_options[@]}"
  exit 0
fi

if [ -s "$dir/journal/journal.log" ]; then
  echo "nightly: today's journal exists: resuming it"
  "$bin" send --resume "$dir/journal" "${credentials[@]}" "${send_args[@]}"
else
  "$bin" plan "$JOB" "$AUDIENCE" --out "$dir/plan.ndjson" --rejects "$dir/rejects.ndjson" \
    --summary "$dir/plan-summary.json" --feedback-store "$store" "${ledger_args[@]}" "${plan_args[@]}"
  "$bin" send "$dir/plan.ndjson" --journal "$dir/journal" "${gateway[@]}" "${credentials[@]}" \
    --feedback-store "$store" --report "$dir/report.json" "${ledger_args[@]}" "${send_args[@]}"
fi
"$bin" status "$dir/journal"
