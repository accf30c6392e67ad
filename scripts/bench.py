#!/usr/bin/env python3
"""make bench: throughput and memory of plan and send on this machine, beside
their limits (libcsv alone; a minimal TLS writer). Release builds; medians of
--runs runs. Writes out/bench/results.json and prints a table. Talks only to
127.0.0.1, and stops the simulator it starts."""
import json, os, re, signal, statistics, subprocess, sys, time

RUNS = int(os.environ.get("RUNS", "3"))
ROWS = int(os.environ.get("ROWS", "1000000"))
BIG = int(os.environ.get("BIG_ROWS", "10000000"))
OUT = "out/bench"
C, B = ".build/release/campaign", ".build/release/campaign-bench"
TIME = "/usr/bin/time"
os.makedirs(OUT, exist_ok=True)

def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True, **kw)

def timed(cmd):
    """Runs cmd under GNU time; returns (seconds, peak RSS in MB, stdout, stderr)."""
    r = sh(f"{TIME} -f '@@ %e %M' {cmd}")
    m = re.search(r"@@ ([0-9.]+) ([0-9]+)", r.stderr)
    return float(m.group(1)), int(m.group(2)) / 1024, r.stdout, r.stderr

def median(xs): return statistics.median(xs)

LEDGER_ROWS = int(os.environ.get("LEDGER_ROWS", str(BIG or ROWS)))
LEDGER_CAMPAIGNS = int(os.environ.get("LEDGER_CAMPAIGNS", "30"))

def ledger_bench():
    """plan --ledger: LEDGER_ROWS rows against a ledger of the same devices
    reached by LEDGER_CAMPAIGNS campaigns of one scope (one a day, the newest
    an hour ago: every device has 1 in the 24 h window, under a cap of 2, so
    every plan writes the same records), beside the same plan without a
    ledger; runs alternating. Two ledgers: as sends leave it (each segment's
    time its last entry's: plan reads the newest segment and skips the other
    29 by their names and time), and the worst case, every segment touched
    now (plan reads all 300 M entries). Goal: within 2x the time, under 1.5 GB."""
    # Seed 1, as `campaign-bench ledger --seed 1`: the ledger's devices are the audience's
    # (the memory section's audience of the same size has seed 3: another file).
    audience = f"{OUT}/audience-{LEDGER_ROWS}-seed1.csv"
    ledger = f"{OUT}/ledger-{LEDGER_ROWS}x{LEDGER_CAMPAIGNS}"
    if not os.path.exists(audience): sh(f"{B} audience --rows {LEDGER_ROWS} --seed 1 > {audience}")
    # Rewritten each time: its newest campaign must be inside the cap's window.
    sh(f"rm -rf {ledger}")
    gen = json.loads(sh(f"{B} ledger --devices {LEDGER_ROWS} --campaigns {LEDGER_CAMPAIGNS} --seed 1 --out {ledger}").stdout)
    segments = [f"{ledger}/{f}" for f in sorted(os.listdir(ledger))]
    as_left = {f: os.stat(f).st_mtime for f in segments}
    def set_times(now):
        for f in segments:
            t = time.time() if now else as_left[f]
            os.utime(f, (t, t))
    job = json.load(open("jobs/spring.json"))
    job["frequencyCap"] = {"max": 1, "per": "24h", "scope": "marketing"}
    json.dump(job, open(f"{OUT}/spring-cap1.json", "w"))
    # Check that they are: the first 1,000 rows under a cap of 1 are all capped.
    sh(f"head -n 1001 {audience} > {OUT}/audience-1000-seed1.csv")
    err = sh(f"{C} plan {OUT}/spring-cap1.json {OUT}/audience-1000-seed1.csv --out /dev/null --rejects {OUT}/rejects-ledger.ndjson --ledger {ledger}").stderr
    assert "frequency_capped 1000" in err, err
    job["frequencyCap"]["max"] = 2
    json.dump(job, open(f"{OUT}/spring-capped.json", "w"))
    plain, capped, worst = [], [], []
    for _ in range(RUNS):
        plain.append(timed(f"{C} plan jobs/spring.json {audience} --out /dev/null --rejects {OUT}/rejects-ledger.ndjson")[:2])
        for touched, into in ((False, capped), (True, worst)):
            set_times(touched)
            s, m, _, err = timed(f"{C} plan {OUT}/spring-capped.json {audience} --out /dev/null --rejects {OUT}/rejects-ledger.ndjson --ledger {ledger}")
            read = gen["entries"] if touched else gen["entries"] // LEDGER_CAMPAIGNS
            assert f"{LEDGER_ROWS} planned" in err and f"{read} entries read" in err, err
            into.append((s, m))
    t0, t1, t2 = (median([x[0] for x in xs]) for xs in (plain, capped, worst))
    return {"rows": LEDGER_ROWS, "campaigns": LEDGER_CAMPAIGNS, "entries": gen["entries"], "bytes_per_entry": gen["bytes_per_entry"],
            "ledger_bytes": sum(os.path.getsize(f) for f in segments), "generate_seconds": gen["seconds"],
            "plan_seconds": round(t0, 2), "plan_peak_rss_mb": round(max(p[1] for p in plain), 1),
            "plan_ledger_seconds": round(t1, 2), "ratio": round(t1 / t0, 2), "plan_ledger_peak_rss_mb": round(max(c[1] for c in capped), 1),
            "plan_ledger_all_read_seconds": round(t2, 2), "ratio_all_read": round(t2 / t0, 2),
            "plan_ledger_all_read_peak_rss_mb": round(max(c[1] for c in worst), 1)}

def ledger_rows(r):
    row(f"plan {r['rows']:,} rows, no ledger, s / peak MB", f"{r['plan_seconds']} / {r['plan_peak_rss_mb']}")
    row(f"  ledger of {r['entries']:,} entries ({r['ledger_bytes'] >> 20} MiB)", f"{r['plan_ledger_seconds']} / {r['plan_ledger_peak_rss_mb']}")
    row("    (as sends leave it: 1 segment read) ratio", f"{r['ratio']}x")
    row("  every segment recent: all entries read", f"{r['plan_ledger_all_read_seconds']} / {r['plan_ledger_all_read_peak_rss_mb']}")
    row("    ratio (goal <= 2x, < 1536 MB)", f"{r['ratio_all_read']}x")

def row(name, value): print(f"{name:45} {value:>14}")

if sys.argv[1:] == ["ledger"]:
    # `python3 scripts/bench.py ledger`: only this measurement.
    r = ledger_bench()
    json.dump(r, open(f"{OUT}/ledger.json", "w"), indent=2)
    ledger_rows(r)
    sys.exit(0)

results = {"machine": {"cores": os.cpu_count()}, "rows": ROWS, "runs": RUNS}
print(f"generating audiences ({ROWS:,} rows, and {BIG:,} for memory)…", file=sys.stderr)
a_csv, a_nd, a_big = f"{OUT}/audience-{ROWS}.csv", f"{OUT}/audience-{ROWS}.ndjson", f"{OUT}/audience-{BIG}.csv"
if not os.path.exists(a_csv): sh(f"{B} audience --rows {ROWS} --seed 1 > {a_csv}")
if not os.path.exists(a_nd): sh(f"{B} audience --rows {ROWS} --seed 1 --format ndjson > {a_nd}")
sh(f"rm -rf {OUT}/certs && {C} certs {OUT}/certs")

def plan_rate(audience, out=f"{OUT}/plan.ndjson"):
    rates, rss = [], []
    for _ in range(RUNS):
        # The previous run's plan is removed first, outside the timing: freeing
        # a 340 MB file is not planning.
        if os.path.exists(out) and out != "/dev/null": os.remove(out)
        s, m, _, err = timed(f"{C} plan jobs/spring.json {audience} --out {out} --rejects {OUT}/rejects.ndjson")
        rates.append(ROWS / s); rss.append(m)
    return {"rows_per_second": round(median(rates)), "peak_rss_mb": round(median(rss), 1), "seconds": [round(ROWS / r, 3) for r in rates]}

def disk_fsync_seconds(size):
    """Writing `size` bytes and fsyncing them, with nothing else: the disk's share of plan --out."""
    times = []
    for _ in range(RUNS):
        path = f"{OUT}/dd.bin"
        if os.path.exists(path): os.remove(path)
        t = time.time()
        sh(f"dd if=/dev/zero of={path} bs=1M count={max(1, size >> 20)} conv=fsync status=none")
        times.append(time.time() - t)
        os.remove(path)
    return round(median(times), 3)

print("plan…", file=sys.stderr)
results["plan_csv"] = plan_rate(a_csv)
plan_bytes = os.path.getsize(f"{OUT}/plan.ndjson")
results["plan_csv_no_file"] = plan_rate(a_csv, out="/dev/null")
results["plan_ndjson"] = plan_rate(a_nd)
results["plan_file_bytes"] = plan_bytes
results["disk_write_fsync_seconds_plan_size"] = disk_fsync_seconds(plan_bytes)
def plan_parts_vs_file(audience, parts=8):
    """plan --parts N into a directory beside plan --out FILE, runs alternating
    (the machine's drift hits both alike); the goal is parts within 10% of one file."""
    one, split = [], []
    for _ in range(RUNS):
        for target in ("file", "parts"):
            sh(f"rm -rf {OUT}/plan-one.ndjson {OUT}/parts")
            extra = f"--out {OUT}/plan-one.ndjson" if target == "file" else f"--parts {parts} --out {OUT}/parts"
            s, _, _, _ = timed(f"{C} plan jobs/spring.json {audience} {extra} --rejects {OUT}/rejects.ndjson")
            (one if target == "file" else split).append(ROWS / s)
    sh(f"rm -rf {OUT}/plan-one.ndjson {OUT}/parts")
    return {"parts": parts, "file_rows_per_second": round(median(one)), "parts_rows_per_second": round(median(split)),
            "parts_cost": round(median(one) / median(split) - 1, 3)}

results["plan_parts"] = plan_parts_vs_file(a_csv)
libcsv = [json.loads(sh(f"{B} csv-tokenize {a_csv}").stdout)["rows_per_second"] for _ in range(RUNS)]
results["libcsv_tokenize_rows_per_second"] = round(median(libcsv))
for k in ("plan_csv", "plan_csv_no_file"):
    results[k]["share_of_libcsv"] = round(results[k]["rows_per_second"] / results["libcsv_tokenize_rows_per_second"], 3)
sh(f"{C} plan jobs/spring.json {a_csv} --out {OUT}/plan.ndjson --rejects {OUT}/rejects.ndjson")

print("send…", file=sys.stderr)
ready = f"{OUT}/ready.json"
if os.path.exists(ready): os.remove(ready)
sim = subprocess.Popen([C, "simulator", "--certs", f"{OUT}/certs", "--ready-file", ready, "--max-seconds", "3600"],
                       stderr=open(f"{OUT}/simulator.log", "w"))
try:
    for _ in range(200):
        if os.path.exists(ready) and os.path.getsize(ready) > 0: break
        if sim.poll() is not None: sys.exit("the simulator did not start")
        time.sleep(0.05)
    port = json.load(open(ready))["port"]
    creds = f"--cert {OUT}/certs/client.pem --key {OUT}/certs/client.key --ca {OUT}/certs/ca.pem"
    results["send"] = {}
    for conns in (1, 2, 4, 8):
        rates = []
        for r in range(RUNS):
            sh(f"rm -rf {OUT}/journal")
            s, _, _, _ = timed(f"{C} send {OUT}/plan.ndjson --journal {OUT}/journal --gateway 127.0.0.1:{port} {creds} "
                               f"--connections {conns} --report {OUT}/report.json")
            rep = json.load(open(f"{OUT}/report.json"))
            assert rep["outcome"] == "complete" and rep["accepted"] == ROWS, rep
            rates.append(ROWS / s)
        results["send"][str(conns)] = {"notifications_per_second": round(median(rates))}
    # The plan's own frames, encoded before the clock starts: the same bytes as send writes.
    writer = [json.loads(sh(f"{B} writer --port {port} --certs {OUT}/certs --plan {OUT}/plan.ndjson").stdout)["per_second"] for _ in range(RUNS)]
    results["minimal_writer_per_second"] = round(median(writer))
    best = max(v["notifications_per_second"] for v in results["send"].values())
    results["send_best_share_of_writer"] = round(best / results["minimal_writer_per_second"], 3)
    e2e = []
    for _ in range(RUNS):
        sh(f"rm -rf {OUT}/journal")
        s, _, _, _ = timed(f"sh -c '{C} plan jobs/spring.json {a_csv} --rejects {OUT}/rejects.ndjson 2>/dev/null | "
                           f"{C} send --journal {OUT}/journal --gateway 127.0.0.1:{port} {creds} --connections 2'")
        e2e.append(ROWS / s)
    results["plan_pipe_send_per_second"] = round(median(e2e))
finally:
    sim.send_signal(signal.SIGTERM)
    sim.wait(timeout=60)

print("memory…", file=sys.stderr)
results[f"plan_rss_mb_{ROWS // 1000000}m" if ROWS >= 1000000 else f"plan_rss_mb_{ROWS}"] = results["plan_csv"]["peak_rss_mb"]
if BIG > 0:
    if not os.path.exists(a_big): sh(f"{B} audience --rows {BIG} --seed 3 > {a_big}")
    s, m, _, _ = timed(f"{C} plan jobs/spring.json {a_big} --out /dev/null --rejects {OUT}/rejects-big.ndjson")
    results[f"plan_rss_mb_{BIG // 1000000}m"] = round(m, 1)
    results[f"plan_big_rows_per_second"] = round(BIG / s)
    # A scheduled job (jobs/morning.json: 09:00 on each device's clock) over
    # the same number of rows with a tz column: every record waits in the
    # planner's spill file until the zones are known.
    a_tz = f"{OUT}/audience-{BIG}-tz.csv"
    if not os.path.exists(a_tz): sh(f"{B} audience --rows {BIG} --seed 3 --time-zones > {a_tz}")
    s, m, _, _ = timed(f"{C} plan jobs/morning.json {a_tz} --out /dev/null --rejects {OUT}/rejects-tz.ndjson")
    results[f"plan_scheduled_rss_mb_{BIG // 1000000}m"] = round(m, 1)
    results["plan_scheduled_big_rows_per_second"] = round(BIG / s)

def results_bench():
    """campaign results: RESULTS_EVENTS events (one per device, inside its
    window) against an A/B plan with a 10 % holdout of as many devices,
    whose every notification a journal made by campaign-bench says was
    accepted now. Events per second are the events over the time the run
    took beyond reading the plan, journal and holdout (a run with one event
    measures that). Goal: 1 M events/s or more, under 1.5 GB."""
    n = int(os.environ.get("RESULTS_EVENTS", str(BIG or ROWS)))
    audience = f"{OUT}/audience-{n}-seed3.csv"
    if not os.path.exists(audience): sh(f"{B} audience --rows {n} --seed 3 > {audience}")
    job = {"campaign": "bench-ab", "format": "h2", "topic": "com.example.campaign", "fallback": ["en"], "variants": [
        {"name": "A", "weight": 45, "messages": {"en": {"alert": "A"}}},
        {"name": "B", "weight": 45, "messages": {"en": {"alert": "B"}}},
        {"name": "control", "weight": 10, "holdout": True}]}
    json.dump(job, open(f"{OUT}/bench-ab.json", "w"))
    plan = f"{OUT}/results-plan.ndjson"
    sh(f"{C} plan {OUT}/bench-ab.json {audience} --out {plan} --rejects {OUT}/rejects-results.ndjson")
    sh(f"rm -rf {OUT}/results-journal && {B} results-journal {plan} {OUT}/results-journal")
    at = int(time.time()) + 60
    events = f"{OUT}/events-{n}.csv"
    sh(f"awk -F, -v t={at} 'NR==1{{print \"token,event,time\"; next}} {{print $1\",purchase,\"t}}' {audience} > {events}")
    sh(f"head -n 2 {events} > {OUT}/events-1.csv")
    load = median([timed(f"{C} results --events {OUT}/events-1.csv {OUT}/results-journal --json --rejects {OUT}/results.rejects.ndjson")[0] for _ in range(RUNS)])
    runs = [timed(f"{C} results --events {events} {OUT}/results-journal --json --rejects {OUT}/results.rejects.ndjson") for _ in range(RUNS)]
    seconds = median([r[0] for r in runs])
    counted = json.loads(runs[-1][2])["events_counted"]
    return {"events": n, "events_counted": counted, "seconds": seconds, "load_seconds": load,
            "events_per_second": round(n / max(0.001, seconds - load)), "peak_rss_mb": round(max(r[1] for r in runs), 1)}

print("results…", file=sys.stderr)
results["results"] = results_bench()

print("ledger…", file=sys.stderr)
results["plan_ledger"] = ledger_bench()
json.dump(results, open(f"{OUT}/results.json", "w"), indent=2)
print(f"\n{'measure':45} {'value':>14}")
row("plan CSV to a file (fsynced), rows/s", f"{results['plan_csv']['rows_per_second']:,}")
row("plan CSV to /dev/null, rows/s", f"{results['plan_csv_no_file']['rows_per_second']:,}")
row("libcsv tokenizing alone, rows/s", f"{results['libcsv_tokenize_rows_per_second']:,}")
row("plan CSV / libcsv (file, /dev/null)", f"{results['plan_csv']['share_of_libcsv']:.0%}, {results['plan_csv_no_file']['share_of_libcsv']:.0%}")
row(f"disk: {results['plan_file_bytes'] >> 20} MiB written + fsync, s", results["disk_write_fsync_seconds_plan_size"])
row("plan NDJSON, rows/s", f"{results['plan_ndjson']['rows_per_second']:,}")
pp = results["plan_parts"]
row(f"plan --parts {pp['parts']} / one file, rows/s", f"{pp['parts_rows_per_second']:,} / {pp['file_rows_per_second']:,}")
row(f"plan --parts {pp['parts']}: cost over one file (goal ≤ 10%)", f"{pp['parts_cost']:+.1%}")
for c, v in results["send"].items(): row(f"send, {c} connection(s), notifications/s", f"{v['notifications_per_second']:,}")
row("minimal writer, 1 connection, /s", f"{results['minimal_writer_per_second']:,}")
row("best send / minimal writer", f"{results['send_best_share_of_writer']:.0%}")
row("plan | send, 2 connections, /s", f"{results['plan_pipe_send_per_second']:,}")
for k, v in results.items():
    if k.startswith("plan_rss_mb"): row(f"plan peak RSS, {k.split('_')[-1]} unique tokens, MB", v)
    if k.startswith("plan_scheduled_rss_mb"): row(f"plan peak RSS, scheduled, {k.split('_')[-1]} tokens, MB", v)
ledger_rows(results["plan_ledger"])
rr = results["results"]
row(f"results, {rr['events']:,} events vs as many devices, events/s", f"{rr['events_per_second']:,}")
row("results: reading plan, journal, holdout, s", rr["load_seconds"])
row("results: peak RSS, MB (goal < 1,500)", rr["peak_rss_mb"])
print(f"\nwritten: {OUT}/results.json", file=sys.stderr)
