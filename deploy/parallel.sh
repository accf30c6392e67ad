#!/usr/bin/env bash
# deploy/parallel.sh: send every part of a parted plan with GNU parallel, on
# this machine or over ssh.
#
#   deploy/parallel.sh PLAN_DIR JOURNAL_DIR [parallel options…] -- [send options…]
#
#   PLAN_DIR     made by `campaign plan JOB AUDIENCE --parts N --out PLAN_DIR`
#   JOURNAL_DIR  one journal per part: JOURNAL_DIR/000, JOURNAL_DIR/001, …
#   parallel options, e.g. -j 4 (parts at a time), -S host1,host2 (ssh hosts),
#                 --retries 2
#   send options: the gateway and credentials, as for `campaign send`
#                 (--gateway HOST:PORT or --environment, --cert/--key/--ca, --rate,
#                 --ledger DIR: the app's send ledger, on the shared filesystem, …)
#
# Each part is its own `campaign send`, with --journal JOURNAL_DIR/k on its
# first run and --resume JOURNAL_DIR/k (the plan named, so a plan directory
# at another path, or on another machine, is fine) when its journal exists.
# parallel's own --joblog (JOURNAL_DIR/parallel.joblog) with --resume-failed
# makes a second run of this script run only the parts that did not finish:
# stopped, killed, or never started. A complete part's resume sends nothing.
#
# Over ssh (-S): campaign must be on each host's PATH (or CAMPAIGN=/path) and
# PLAN_DIR and JOURNAL_DIR must be the same paths on every host (a shared
# filesystem), since any host may take any part and a later run may resume a
# part on another host. The plan directory holds tokens: keep it 0700.
# --ledger DIR (a send option) must be a shared path too: each part's send
# appends its own segment (<host>-<journal id>.seg), no lock spans hosts.
# With --auth-key, the parts share one provider token in
# JOURNAL_DIR/token-cache (--token-cache; a lock there lets one part sign
# and the others read it: on a network file system, one with shared locks).
#
# Exit status: parallel's: 0 when every part completed, else the number of
# parts that failed (up to 101). Run it again to resume them.
# Environment: CAMPAIGN (default: campaign on PATH, else .build/release/campaign
# beside this script).
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 64; }
[ $# -ge 2 ] || usage
plans=$1 journals=$2
shift 2
popts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do popts+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
sendopts=("$@")
# Token authentication: every part uses one provider token, kept on the shared
# journals' path (APNs refuses a key's tokens renewed more often than every 20
# minutes), unless the send options name a --token-cache of their own.
token_cache=
case " ${sendopts[*]-} " in *" --auth-key "*) case " ${sendopts[*]} " in *" --token-cache "*) ;; *) token_cache=yes ;; esac ;; esac

command -v parallel >/dev/null || { echo "parallel.sh: GNU parallel is not installed (apt-get install parallel, or make deps)" >&2; exit 69; }
[ -f "$plans/manifest.json" ] || { echo "parallel.sh: $plans/manifest.json not found: make the parts with campaign plan … --parts N --out $plans" >&2; exit 66; }

if [ -z "${CAMPAIGN:-}" ]; then
  if command -v campaign >/dev/null; then CAMPAIGN=campaign
  else CAMPAIGN="$(cd "$(dirname "$0")/.." && pwd)/.build/release/campaign"; fi
fi

# Absolute paths: the commands run in parallel's working directory, or on another host.
plans=$(cd "$plans" && pwd)
mkdir -p "$journals"
chmod 700 "$journals"
journals=$(cd "$journals" && pwd)
[ -n "$token_cache" ] && sendopts+=(--token-cache "$journals/token-cache")

shopt -s nullglob
parts=("$plans"/part-*.plan)
[ ${#parts[@]} -gt 0 ] || { echo "parallel.sh: no part-*.plan in $plans" >&2; exit 66; }
expected=$(sed -E 's/.*"parts":([0-9]+).*/\1/' "$plans/manifest.json")
[ "${#parts[@]}" = "$expected" ] || { echo "parallel.sh: $plans has ${#parts[@]} part files but its manifest lists $expected" >&2; exit 66; }

# One part's command, with every send option quoted for the shell that runs it.
quoted=$(printf '%q ' "$CAMPAIGN")
opts=$(printf '%q ' "${sendopts[@]+"${sendopts[@]}"}")
# {} is the part's file; its number names the journal (part-007.plan → JOURNAL_DIR/007).
journal="$journals/{= s:.*/part-::; s:\\.plan\$:: =}"
part_command="if [ -e $journal/journal.log ]; then $quoted send {} --resume $journal $opts; else $quoted send {} --journal $journal $opts; fi"

echo "parallel.sh: ${#parts[@]} parts from $plans, journals in $journals (joblog $journals/parallel.joblog)" >&2
status=0
parallel --joblog "$journals/parallel.joblog" --resume-failed --line-buffer --tagstring 'part {= s:.*/part-::; s:\.plan$:: =}' \
  "${popts[@]+"${popts[@]}"}" "$part_command" ::: "${parts[@]}" || status=$?
"$CAMPAIGN" status --manifest "$plans/manifest.json" --journals "$journals/*" >&2 || true
exit $status
