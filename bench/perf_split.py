"""Splits perf samples of the `payments` server into ns per request (bench/http-perf.sh).

    python3 bench/perf_split.py DIR TOP MODE...

DIR holds, per mode, `MODE.samples` (`perf report -n --sort dso,sym --stdio` lines) and
`MODE.requests` (the requests wrk completed while perf sampled at 10 kHz). Prints each mode's
ns per request by part; with TOP > 0, also the TOP symbols each mode adds most over the first.
"""

import re
import sys

SAMPLE_NS = 100_000  # one sample every 100 µs (perf record -F 10000)

PARTS = [
    ("kernel: waking wrk", lambda dso, sym: "kernel" in dso and "irqrestore" in sym),
    ("kernel: the rest", lambda dso, sym: "kernel" in dso),
    ("allocator", lambda dso, sym: re.search(r"malloc|free|unlink_chunk|consolidate|_int_", sym)),
    ("memcpy/memmove/memset", lambda dso, sym: re.search(r"mem(cpy|move|set)", sym)),
    ("BLAKE3", lambda dso, sym: "blake3" in sym),
    ("layer and its maps", lambda dso, sym: re.search(r"idempotency_(core|tower)|hashbrown", sym)),
    ("the rest of user space", lambda dso, sym: True),
]


def load(path):
    """{(dso, symbol): samples} from perf report's lines: `pct samples dso [.] symbol`."""
    samples = {}
    for line in open(path):
        fields = line.split()
        if len(fields) < 4 or not fields[1].isdigit():
            continue
        key = (fields[2], " ".join(fields[3:]))
        samples[key] = samples.get(key, 0) + int(fields[1])
    return samples


def per_request(samples, requests):
    return {key: count * SAMPLE_NS / requests for key, count in samples.items()}


def main():
    directory, top, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    costs = {}
    for mode in modes:
        requests = int(open(f"{directory}/{mode}.requests").read().split()[0])
        costs[mode] = per_request(load(f"{directory}/{mode}.samples"), requests)
        print(f"{mode}: {requests} requests sampled")
    print(f"\n{'ns per request':<26}" + "".join(f"{mode:>12}" for mode in modes))
    for name, _ in PARTS + [("total", None)]:
        row = []
        for mode in modes:
            total = 0.0
            for (dso, sym), ns in costs[mode].items():
                part = next(label for label, test in PARTS if test(dso, sym))
                if name in ("total", part):
                    total += ns
            row.append(total)
        print(f"{name:<26}" + "".join(f"{value:>12.0f}" for value in row))
    if top > 0:
        base = costs[modes[0]]
        for mode in modes[1:]:
            print(f"\n{mode} minus {modes[0]}, ns per request, largest first:")
            symbols = set(base) | set(costs[mode])
            rows = sorted(
                ((costs[mode].get(s, 0.0) - base.get(s, 0.0), s) for s in symbols), reverse=True
            )
            for delta, (dso, sym) in rows[:top]:
                print(f"{delta:>8.0f}  {sym[:110]}")


if __name__ == "__main__":
    main()
