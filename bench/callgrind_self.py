#!/usr/bin/env python3
"""Self cost per request of each function in a callgrind dump (for bench/http-callgrind.sh).

    callgrind_self.py DUMP REQUESTS OUT     prints "requests total hash" per request and
                                            writes every function's self cost to OUT
    callgrind_self.py --diff ON OFF N       the N functions whose self cost differs most
"""
import collections
import re
import sys


def self_costs(path):
    """Instructions executed in each function itself (calls' inclusive costs left out)."""
    names, costs, function, after_call = {}, collections.Counter(), None, False

    def name(text):
        match = re.match(r"\((\d+)\)(?: (.*))?", text)
        if not match:
            return text
        if match.group(2):
            names[match.group(1)] = match.group(2)
        return names.get(match.group(1), "?")

    with open(path) as dump:
        for line in dump:
            if line.startswith("fn="):
                function = name(line[3:].strip())
            elif line.startswith("cfn="):
                name(line[4:].strip())  # defines the compressed name
            elif line.startswith("calls="):
                after_call = True  # the next cost line is the call's inclusive cost
            elif line[:1].isdigit() or line[:1] in "+-*":
                fields = line.split()
                if len(fields) >= 2:
                    if not after_call:
                        costs[function] += int(fields[1])
                    after_call = False
    return costs


def main(args):
    if args[0] == "--diff":
        on, off = (
            {name: float(cost) for cost, name in (l.rstrip("\n").split(" ", 1) for l in open(p))}
            for p in args[1:3]
        )
        rows = sorted(((on.get(n, 0) - off.get(n, 0), n) for n in set(on) | set(off)),
                      key=lambda row: -abs(row[0]))
        print(f"  {'layer-bare':>10} {'layer':>8} {'bare':>8}  function (self instructions per request)")
        for delta, function in rows[: int(args[3])]:
            print(f"  {delta:+10.0f} {on.get(function, 0):8.0f} {off.get(function, 0):8.0f}  {function[:110]}")
        return
    costs, requests = self_costs(args[0]), int(args[1])
    with open(args[2], "w") as out:
        for function, cost in costs.most_common():
            out.write(f"{cost / requests} {function}\n")
    hashing = sum(cost for function, cost in costs.items() if "blake3" in function or "sha256" in function)
    print(requests, sum(costs.values()) // requests, hashing // requests)


if __name__ == "__main__":
    main(sys.argv[1:])
