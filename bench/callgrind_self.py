#!/usr/bin/env python3
"""Self cost per request of each function in a callgrind dump (for bench/http-callgrind.sh).

    callgrind_self.py DUMP REQUESTS OUT     prints "requests total hash" per request and
                                            writes every function's self cost to OUT; a dump
                                            made with --cache-sim=yes also gets "i1 d1 ll":
                                            simulated L1i, L1d and last-level misses per request
    callgrind_self.py --diff ON OFF N       the N functions whose self cost differs most
    callgrind_self.py --misses DUMP N       with --cache-sim=yes: the N functions with the most
                                            L1i misses (self, per request as in OUT's scale)
"""
import collections
import re
import sys


def self_costs(path):
    """Each event's count in each function itself (calls' inclusive costs left out), and the
    event names (`Ir` first; with --cache-sim=yes also `I1mr`, `D1mr`, `D1mw`, `ILmr`, ...)."""
    names, function, after_call = {}, None, False
    events, costs = ["Ir"], collections.defaultdict(collections.Counter)

    def name(text):
        match = re.match(r"\((\d+)\)(?: (.*))?", text)
        if not match:
            return text
        if match.group(2):
            names[match.group(1)] = match.group(2)
        return names.get(match.group(1), "?")

    with open(path) as dump:
        for line in dump:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("fn="):
                function = name(line[3:].strip())
            elif line.startswith("cfn="):
                name(line[4:].strip())  # defines the compressed name
            elif line.startswith("calls="):
                after_call = True  # the next cost line is the call's inclusive cost
            elif line[:1].isdigit() or line[:1] in "+-*":
                fields = line.split()
                if not after_call:
                    for event, count in zip(events, fields[1:]):
                        costs[event][function] += int(count)
                after_call = False
    return costs, events


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
    if args[0] == "--misses":
        costs, events = self_costs(args[1])
        if "I1mr" not in events:
            sys.exit("no cache events in this dump (run callgrind with --cache-sim=yes)")
        print(f"  {'L1i':>8} {'instr':>10}  function (self, whole window)")
        for function, misses in costs["I1mr"].most_common(int(args[2])):
            print(f"  {misses:8d} {costs['Ir'][function]:10d}  {function[:110]}")
        return
    (costs, events), requests = self_costs(args[0]), int(args[1])
    instructions = costs["Ir"]
    with open(args[2], "w") as out:
        for function, cost in instructions.most_common():
            out.write(f"{cost / requests} {function}\n")
    hashing = sum(cost for function, cost in instructions.items() if "blake3" in function or "sha256" in function)
    line = [requests, sum(instructions.values()) // requests, hashing // requests]
    if "I1mr" in events:
        per_request = {event: sum(costs[event].values()) / requests for event in events}
        line += [
            round(per_request["I1mr"]),
            round(per_request["D1mr"] + per_request["D1mw"]),
            round(per_request["ILmr"] + per_request["DLmr"] + per_request["DLmw"]),
        ]
    print(*line)


if __name__ == "__main__":
    main(sys.argv[1:])
