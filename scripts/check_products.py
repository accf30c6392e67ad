#!/usr/bin/env python3
"""Fails when a library product, or a target it depends on, has unsafe build
flags: SwiftPM refuses such a product to any package that depends on a
tagged version of ours ("contains unsafe build flags"). Reads
`swift package dump-package`; prints each library's targets."""
import json
import subprocess
import sys

package = json.loads(subprocess.run(["swift", "package", "dump-package"], check=True,
                                    capture_output=True, text=True).stdout)
targets = {t["name"]: t for t in package["targets"]}


def dependencies(target):
    for dependency in target["dependencies"]:
        for kind in ("byName", "target"):
            if kind in dependency and dependency[kind][0] in targets:
                yield dependency[kind][0]


def closure(names):
    seen, stack = set(), list(names)
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(dependencies(targets[name]))
    return seen


failed = False
for product in package["products"]:
    if "library" not in product["type"]:
        continue
    names = sorted(closure(product["targets"]))
    unsafe = [n for n in names if any("unsafeFlags" in s["kind"] for s in targets[n].get("settings", []))]
    if unsafe:
        failed = True
        print(f"product {product['name']}: {', '.join(unsafe)} has unsafe build flags; "
              "a package depending on a tagged version of campaign could not use it", file=sys.stderr)
    else:
        print(f"product {product['name']}: {len(names)} targets, none with unsafe build flags ({', '.join(names)})")
sys.exit(1 if failed else 0)
