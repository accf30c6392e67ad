#!/usr/bin/env python3
"""make bench, distance part: `campaign send` over HTTP/2 (token auth, release
build) into the simulator emulating a round trip of 0, 50 and 150 ms
(`simulator --latency-ms` holds every byte half of that each way; Apple's
65,535-byte window is unchanged), with payloads of ~150 B and ~3 KB: the
default send (`--connections auto`) beside `--connections` 4, 16 and 64, and
beside h2load with as many connections as the default ended with, same
simulator, same run. Every run sends the same plan for at most CAP seconds
(SIGTERM then, which a send answers by ending cleanly); the rate is what was
answered over the time it ran, start-up included. Each count runs
DISTANCE_REPEATS times (3), the counts in a rotated order each time, and the
table gives medians: on a 2-core machine the simulator and the send share
the cores, and one 30-s run of the same count varies by a fifth. Writes
out/bench/distance.json and prints the table."""
import json, os, re, signal, statistics, subprocess, sys, time

OUT = "out/bench"
C = ".build/release/campaign"
CAP = float(os.environ.get("DISTANCE_SECONDS", "30"))
RTTS = [int(x) for x in os.environ.get("DISTANCE_RTTS", "0,50,150").split(",")]
SIZES = os.environ.get("DISTANCE_PAYLOADS", "small,large").split(",")
CONNS = [int(x) for x in os.environ.get("DISTANCE_CONNECTIONS", "4,16,64").split(",")]
REPEATS = int(os.environ.get("DISTANCE_REPEATS", "3"))
ROWS = {"small": int(os.environ.get("DISTANCE_SMALL_ROWS", "1500000")), "large": int(os.environ.get("DISTANCE_LARGE_ROWS", "300000"))}
os.makedirs(OUT, exist_ok=True)


def sh(cmd):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True)


def simulator(rtt):
    ready = f"{OUT}/distance-ready.json"
    if os.path.exists(ready): os.remove(ready)
    p = subprocess.Popen([C, "simulator", "--protocol", "h2", "--certs", f"{OUT}/certs", "--auth-keys", f"{OUT}/certs/auth-keys",
                          "--ready-file", ready, "--max-seconds", "3600", "--latency-ms", str(rtt // 2)],
                         stderr=open(f"{OUT}/distance-sim.log", "w"))
    for _ in range(200):
        if os.path.exists(ready) and os.path.getsize(ready) > 0: break
        if p.poll() is not None: sys.exit("the simulator did not start")
        time.sleep(0.05)
    return p, json.load(open(ready))["port"]


JOBS = {
    "small": {"campaign": "distance-small", "format": "h2", "topic": "com.example.campaign", "fallback": ["en"],
              "messages": {"en": {"alert": {"title": "Sale", "body": "Hi {first_name}, {discount}% off until Sunday."}}}},
    "large": {"campaign": "distance-large", "format": "h2", "topic": "com.example.campaign", "fallback": ["en"],
              "messages": {"en": {"alert": {"title": "Sale", "body": "Hi {first_name}, {discount}% off until Sunday."}}},
              "custom": {"catalogue": "x" * 2900}},
}

if not os.path.exists(f"{OUT}/certs/AuthKey_DEVKEY0001.p8"):
    sh(f"rm -rf {OUT}/certs && {C} certs {OUT}/certs")
token = sh(f"{C} token --auth-key {OUT}/certs/AuthKey_DEVKEY0001.p8 --key-id DEVKEY0001 --team-id DEVTEAM001").stdout.strip()
auth = f"--auth-key {OUT}/certs/AuthKey_DEVKEY0001.p8 --key-id DEVKEY0001 --team-id DEVTEAM001 --ca {OUT}/certs/ca.pem"
plans, payload_bytes = {}, {}
for size in SIZES:
    audience = f"{OUT}/audience-distance-{ROWS[size]}.csv"
    if not os.path.exists(audience):
        sh(f".build/release/campaign-bench audience --rows {ROWS[size]} --seed 3 > {audience}")
    json.dump(JOBS[size], open(f"{OUT}/distance-{size}.json", "w"))
    plans[size] = f"{OUT}/distance-{size}-{ROWS[size]}.plan"
    if not os.path.exists(plans[size]):
        sh(f"{C} plan {OUT}/distance-{size}.json {audience} --out {plans[size]} --rejects {OUT}/distance-rejects.ndjson")
    with open(plans[size]) as f:
        next(f)
        line = next(f)
    payload = line[line.index('"payload":') + 10:line.rindex("}")]
    open(f"{OUT}/distance-{size}-payload.json", "w").write(payload)
    payload_bytes[size] = len(payload.encode())


# DISTANCE_BASELINE=path/to/an/older/campaign adds its default send beside ours (same plans, same simulator).
BASELINE = os.environ.get("DISTANCE_BASELINE")


def send(port, size, connections, binary=C):
    """One capped send; (answered per second, connections at the end, round trip ms, connections opened)."""
    sh(f"rm -rf {OUT}/distance-journal {OUT}/distance-report.json")
    how = f"--connections {connections}" if connections else ""
    p = subprocess.Popen(f"exec {binary} send {plans[size]} --journal {OUT}/distance-journal --gateway 127.0.0.1:{port} {auth} "
                         f"{how} --report {OUT}/distance-report.json",
                         shell=True, stderr=open(f"{OUT}/distance-send.log", "w"))
    try:
        p.wait(timeout=CAP)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
    rep = json.load(open(f"{OUT}/distance-report.json"))
    assert rep["outcome"] in ("complete", "interrupted") and rep["failed"] == 0, rep
    answered = rep["accepted"] + rep["failed"]
    return answered / rep["seconds"], rep.get("pool_connections"), rep.get("round_trip_ms"), rep["reconnects"]


def h2load(port, size, connections):
    r = sh(f"h2load -D {int(CAP)} -c {connections} -m 1000 -d {OUT}/distance-{size}-payload.json "
           f"-H 'authorization: bearer {token}' -H 'apns-topic: com.example.campaign' -H 'apns-push-type: alert' "
           f"https://127.0.0.1:{port}/3/device/{'0f' * 32}")
    m = re.search(r"finished in ([0-9.]+)(ms|s), ([0-9.]+) req/s", r.stdout)
    return float(m.group(3)) if m else 0.0


results = {"cap_seconds": CAP, "repeats": REPEATS, "payload_bytes": payload_bytes, "rows": []}
for rtt in RTTS:
    sim, port = simulator(rtt)
    try:
        for size in SIZES:
            row = {"rtt_ms": rtt, "payload": size, "payload_bytes": payload_bytes[size]}
            counts = ["auto"] + (CONNS if rtt > 0 else [4])
            runs = {str(n): [] for n in counts}
            autos = []
            for repeat in range(REPEATS):
                # Rotated, so that no count always runs first on the simulator or last.
                for n in counts[repeat % len(counts):] + counts[:repeat % len(counts)]:
                    rate, pool, measured, opened = send(port, size, n)
                    runs[str(n)].append(round(rate))
                    if n == "auto":
                        autos.append({"per_second": round(rate), "connections": pool, "round_trip_ms": measured, "opened": opened})
            median_auto = sorted(autos, key=lambda a: a["per_second"])[(len(autos) - 1) // 2]
            rate = statistics.median(runs["auto"])
            row["auto"] = dict(median_auto, per_second=round(rate))
            row["runs"] = runs
            for n in counts[1:]:
                row[str(n)] = round(statistics.median(runs[str(n)]))
            row["h2load"] = round(h2load(port, size, median_auto["connections"]))
            if BASELINE and rtt == 0:   # (far away the older default is the 4 column)
                row["baseline_default"] = round(send(port, size, None, BASELINE)[0])
                row["auto_share_of_baseline"] = round(rate / row["baseline_default"], 3)
            best = max(row[str(n)] for n in (CONNS if rtt > 0 else [4]))
            row["auto_share_of_best"] = round(rate / best, 3)
            results["rows"].append(row)
            print(json.dumps(row), file=sys.stderr)
    finally:
        sim.terminate(); sim.wait()

json.dump(results, open(f"{OUT}/distance.json", "w"), indent=2)
print(f"\n{'round trip':>10} {'payload':>8} {'auto (conns)':>16} " + " ".join(f"{n:>8}" for n in CONNS) + f" {'h2load':>8} {'auto/best':>9}")
for r in results["rows"]:
    fixed = " ".join(f"{r.get(str(n), ''):>8}" for n in CONNS)
    print(f"{r['rtt_ms']:>8}ms {r['payload_bytes']:>7}B {r['auto']['per_second']:>10} ({r['auto']['connections']:>2}) {fixed} {r['h2load']:>8} {r['auto_share_of_best']:>9.0%}")
print(f"\nwritten: {OUT}/distance.json (medians of {REPEATS} runs, each at most {CAP:.0f} s)", file=sys.stderr)
