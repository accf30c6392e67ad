#!/usr/bin/env python3
"""make bench, HTTP/2 part: `campaign send` over HTTP/2 into the simulator
(--protocol h2, token auth, release builds) beside nghttp2's h2load with the
same payload, connections and streams, into the same simulator in the same
run, alternating; beside a Python HTTP/2 client (httpx + h2); and send's peak
memory with up to 100,000 requests outstanding (100 connections x 1000
streams against a slow simulator). Writes out/bench/h2.json, prints a table."""
import json, os, re, statistics, subprocess, sys, time

RUNS = int(os.environ.get("RUNS", "3"))
ROWS = int(os.environ.get("H2_ROWS", "300000"))
OUT = "out/bench"
C = ".build/release/campaign"
TIME = "/usr/bin/time"
os.makedirs(OUT, exist_ok=True)


def sh(cmd):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True)


def timed(cmd):
    r = sh(f"{TIME} -f '@@ %e %M' {cmd}")
    m = re.search(r"@@ ([0-9.]+) ([0-9]+)", r.stderr)
    return float(m.group(1)), int(m.group(2)) / 1024, r.stdout, r.stderr


def simulator(name, *extra):
    ready = f"{OUT}/{name}-ready.json"
    if os.path.exists(ready): os.remove(ready)
    p = subprocess.Popen([C, "simulator", "--protocol", "h2", "--certs", f"{OUT}/certs", "--auth-keys", f"{OUT}/certs/auth-keys",
                          "--ready-file", ready, "--max-seconds", "3600", *extra], stderr=open(f"{OUT}/{name}.log", "w"))
    for _ in range(200):
        if os.path.exists(ready) and os.path.getsize(ready) > 0: break
        if p.poll() is not None: sys.exit(f"the {name} simulator did not start")
        time.sleep(0.05)
    return p, json.load(open(ready))["port"]


if not os.path.exists(f"{OUT}/certs/AuthKey_DEVKEY0001.p8"):
    sh(f"rm -rf {OUT}/certs && {C} certs {OUT}/certs")
audience = f"{OUT}/audience-h2-{ROWS}.csv"
if not os.path.exists(audience):
    src = f"{OUT}/audience-1000000.csv"
    if not os.path.exists(src): sh(f".build/release/campaign-bench audience --rows 1000000 --seed 1 > {src}")
    sh(f"head -n {ROWS + 1} {src} > {audience}")
plan = f"{OUT}/h2.plan"
sh(f"rm -f {plan} && {C} plan jobs/spring-h2.json {audience} --out {plan} --rejects {OUT}/h2-rejects.ndjson")
planned = json.loads(open(plan).readlines()[-1])["trailer"]["records"]
# The payload h2load sends: the plan's median payload, byte for byte.
payloads = []
with open(plan) as f:
    next(f)
    for line in f:
        if line.startswith('{"trailer"'): break
        payloads.append(line[line.index('"payload":') + 10:-2])
payloads.sort(key=len)
open(f"{OUT}/h2-payload.json", "w").write(payloads[len(payloads) // 2])
token = sh(f"{C} token --auth-key {OUT}/certs/AuthKey_DEVKEY0001.p8 --key-id DEVKEY0001 --team-id DEVTEAM001").stdout.strip()
auth = f"--auth-key {OUT}/certs/AuthKey_DEVKEY0001.p8 --key-id DEVKEY0001 --team-id DEVTEAM001 --ca {OUT}/certs/ca.pem"
results = {"rows": planned, "runs": RUNS, "payload_bytes": len(payloads[len(payloads) // 2])}


def send_rate(port, conns, streams, extra=""):
    sh(f"rm -rf {OUT}/h2-journal")
    s, rss, _, _ = timed(f"{C} send {plan} --journal {OUT}/h2-journal --gateway 127.0.0.1:{port} {auth} "
                         f"--connections {conns} --streams {streams} --report {OUT}/h2-report.json {extra}")
    rep = json.load(open(f"{OUT}/h2-report.json"))
    assert rep["outcome"] == "complete" and rep["accepted"] == planned, rep
    return planned / s, rss, rep


def h2load_rate(port, conns, streams):
    r = sh(f"h2load -n {planned} -c {conns} -m {streams} -d {OUT}/h2-payload.json -H 'authorization: bearer {token}' "
           f"-H 'apns-topic: com.example.campaign' -H 'apns-push-type: alert' -H 'apns-priority: 10' "
           f"https://127.0.0.1:{port}/3/device/{'0f' * 32}")
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", r.stdout)
    secs = re.search(r"finished in ([0-9.]+)(ms|s),", r.stdout)
    seconds = float(secs.group(1)) / (1000 if secs.group(2) == "ms" else 1)
    # Streams opened before the simulator's one-stream SETTINGS (token auth) are refused and not retried by h2load.
    return int(done.group(1)) / seconds


sim, port = simulator("h2-sim")
try:
    conns, streams = 4, 1000
    ours, theirs, reps = [], [], []
    for _ in range(RUNS):
        rate, rss, rep = send_rate(port, conns, streams)
        ours.append(rate); reps.append(rep)
        theirs.append(h2load_rate(port, conns, streams))
    results["send_per_second"] = round(statistics.median(ours))
    results["h2load_per_second"] = round(statistics.median(theirs))
    results["send_share_of_h2load"] = round(statistics.median(ours) / statistics.median(theirs), 3)
    results["send_resends"] = [r["resends"] for r in reps]
    one, _, _ = send_rate(port, 1, 100)
    results["send_1_connection_100_streams_per_second"] = round(one)
    py = json.loads(sh(f"python3 scripts/h2client.py --port {port} --ca {OUT}/certs/ca.pem --token {token} "
                       f"--topic com.example.campaign --count 20000 --streams 100 --payload \"$(cat {OUT}/h2-payload.json | sed 's/\"/\\\\\"/g')\"").stdout)
    assert py["status"].get("200", 0) + sum(v for k, v in py["status"].items() if k != "200") == 20000, py
    results["python_httpx_per_second"] = py["per_second"]
    results["send_1x100_over_python"] = round(one / py["per_second"], 1)
finally:
    sim.terminate(); sim.wait()

# Memory: 100 connections x 1000 streams against a simulator that reads slowly.
slow, port = simulator("h2-slow", "--read-delay-ms", "20")
try:
    rate, rss, rep = send_rate(port, 100, 1000)
    results["outstanding_100k"] = {"connections": 100, "streams": 1000, "peak_rss_mb": round(rss, 1), "per_second": round(rate)}
finally:
    slow.terminate(); slow.wait()

# Broadcasts: one request per Live Activity channel (POST /4/broadcasts/apps/<bundle id>),
# beside device pushes above. Channels are made by h2load on the management port
# (a create is one POST each) and gathered with `campaign channels list`.
CHANNELS = int(os.environ.get("BROADCAST_CHANNELS", "50000"))
bsim, port = simulator("h2-broadcast", "--management-port", "0", "--channel-limit", str(CHANNELS))
try:
    mport = json.load(open(f"{OUT}/h2-broadcast-ready.json"))["management_port"]
    open(f"{OUT}/channel-create.json", "w").write('{"message-storage-policy":1,"push-type":"LiveActivity"}')
    sh(f"h2load -n {CHANNELS} -c 4 -m 100 -d {OUT}/channel-create.json -H 'authorization: bearer {token}' "
       f"https://127.0.0.1:{mport}/1/apps/com.example.campaign/channels")
    ids = sh(f"{C} channels list --bundle-id com.example.campaign --gateway 127.0.0.1:{mport} {auth}").stdout.split()
    assert len(ids) >= CHANNELS * 0.99, f"{len(ids)} channels made of {CHANNELS}"
    with open(f"{OUT}/broadcast-channels.csv", "w") as f:
        f.write("channel_id,home,away,minute,home_team,away_team\n")
        for i, cid in enumerate(ids): f.write(f"{cid},{i % 5},{i % 3},{i % 90},Home {i},Away {i}\n")
    bplan = f"{OUT}/broadcast.plan"
    sh(f"rm -f {bplan} && {C} plan jobs/match-night.json {OUT}/broadcast-channels.csv --out {bplan}")
    brates = []
    for _ in range(RUNS):
        sh(f"rm -rf {OUT}/broadcast-journal")
        s, rss, _, _ = timed(f"{C} send {bplan} --journal {OUT}/broadcast-journal --gateway 127.0.0.1:{port} {auth} "
                             f"--connections 4 --streams 1000 --report {OUT}/broadcast-report.json")
        rep = json.load(open(f"{OUT}/broadcast-report.json"))
        assert rep["outcome"] == "complete" and rep["accepted"] == len(ids), rep
        brates.append(len(ids) / s)
    results["broadcasts"] = {"channels": len(ids), "per_second": round(statistics.median(brates)),
                             "device_pushes_per_second": results["send_per_second"]}
finally:
    bsim.terminate(); bsim.wait()

json.dump(results, open(f"{OUT}/h2.json", "w"), indent=2)
def row(name, value): print(f"{name:55} {value:>14}")
print(f"\n{'HTTP/2 (' + str(planned) + ' notifications, ' + str(results['payload_bytes']) + '-byte payload)':55} {'value':>14}")
row("send, 4 connections x 1000 streams, /s", f"{results['send_per_second']:,}")
row("h2load, same payload, connections, streams, /s", f"{results['h2load_per_second']:,}")
row("send / h2load (target >= 70%)", f"{results['send_share_of_h2load']:.0%}")
row("send, 1 connection x 100 streams, /s", f"{results['send_1_connection_100_streams_per_second']:,}")
row("Python httpx+h2, 1 connection x 100 streams, /s", f"{results['python_httpx_per_second']:,}")
row("send / Python, same connection and streams (target >= 20x)", f"{results['send_1x100_over_python']}x")
o = results["outstanding_100k"]
row("send peak RSS, 100 conns x 1000 streams outstanding, MB", o["peak_rss_mb"])
b = results["broadcasts"]
row(f"broadcasts, {b['channels']:,} channels, 4 x 1000, /s", f"{b['per_second']:,}")
row("device pushes, 4 x 1000 (above), /s", f"{b['device_pushes_per_second']:,}")
print(f"\nwritten: {OUT}/h2.json", file=sys.stderr)
