#!/usr/bin/env python3
"""A plain Python HTTP/2 APNs client (httpx with h2): what a provider written
in Python does. Used by the tests (a conformant client other than ours) and by
`make bench` (the same payloads as `campaign send`, for comparison).

  h2client.py --port P --ca CA [--cert C --key K | --token JWT] --topic T
              [--count N] [--streams S] [--tokens FILE] [--payload JSON]

Prints one JSON line: {"sent":N,"status":{"200":n,...},"seconds":s,"per_second":r}.
"""
import argparse, asyncio, json, ssl, sys, time

import httpx


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--cert"); p.add_argument("--key"); p.add_argument("--token")
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--streams", type=int, default=100)
    p.add_argument("--tokens", help="hex device tokens, one per line (default: one made-up token)")
    p.add_argument("--payload", default='{"aps":{"alert":"python"}}')
    a = p.parse_args()
    tokens = [l.strip() for l in open(a.tokens)] if a.tokens else ["0f" * 32]
    headers = {"apns-topic": a.topic, "apns-push-type": "alert"}
    if a.token:
        headers["authorization"] = "bearer " + a.token
    context = ssl.create_default_context(cafile=a.ca)
    if a.cert:
        context.load_cert_chain(a.cert, a.key)
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    counts = {}
    async with httpx.AsyncClient(http2=True, verify=context, limits=limits, timeout=30) as client:
        queue = asyncio.Queue()
        for i in range(a.count):
            queue.put_nowait(tokens[i % len(tokens)])

        async def worker():
            while not queue.empty():
                token = queue.get_nowait()
                r = await client.post(f"https://127.0.0.1:{a.port}/3/device/{token}", headers=headers, content=a.payload)
                if r.http_version != "HTTP/2":
                    raise SystemExit(f"not HTTP/2: {r.http_version}")
                key = str(r.status_code) + ("" if r.status_code == 200 else " " + r.json().get("reason", ""))
                counts[key] = counts.get(key, 0) + 1

        start = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(a.streams)))
        seconds = time.monotonic() - start
    print(json.dumps({"sent": a.count, "status": counts, "seconds": round(seconds, 3), "per_second": round(a.count / seconds)}))


asyncio.run(main())
