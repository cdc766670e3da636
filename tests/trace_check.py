#!/usr/bin/env python3
"""Checks a Chrome trace-event file of vitddp --trace as Perfetto needs it drawn.

Usage: trace_check.py TRACE.json RANKS

Asserts (Trace Event Format, complete events "ph":"X"):
  - the file is valid JSON with a "traceEvents" list;
  - every X event has numeric ts >= 0 and dur >= 0;
  - on each track (pid, tid) the X events are pairwise disjoint or properly nested (one inside
    the other): Perfetto draws a track's complete events only as a stack;
  - the pids of the X events are exactly the ranks 0 .. RANKS-1, each named by a process_name
    metadata event ("rank r"), and every (pid, tid) with X events has a thread_name.
Times are compared in whole nanoseconds (the file writes microseconds with 3 decimals).
Prints "ok: ..." and exits 0, or prints the first violation and exits 1.
"""
import json
import sys


def ns(x):
    return int(round(float(x) * 1000))


def check(path, ranks):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    assert isinstance(events, list), "traceEvents is not a list"
    x = [e for e in events if e.get("ph") == "X"]
    assert x, "no complete events"
    tracks = {}
    for e in x:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)), e
        assert e["ts"] >= 0, "negative ts: %r" % e
        assert e["dur"] >= 0, "negative dur: %r" % e
        tracks.setdefault((e["pid"], e["tid"]), []).append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"]))
    for key, evs in tracks.items():
        # Sorted by start, the longer first: each event must end before the next starts or
        # contain it, i.e. a stack of open intervals works.
        evs.sort(key=lambda t: (t[0], -t[1]))
        stack = []
        for start, end, name in evs:
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                raise AssertionError("track pid %s tid %s: '%s' [%d, %d] ns overlaps '%s' [%d, %d] ns without nesting"
                                     % (key[0], key[1], name, start, end, stack[-1][2], stack[-1][0], stack[-1][1]))
            stack.append((start, end, name))
    pids = sorted({p for p, _ in tracks})
    assert pids == list(range(ranks)), "pids %r, expected ranks 0..%d" % (pids, ranks - 1)
    pnames = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    for p in pids:
        assert pnames.get(p) == "rank %d" % p, "pid %d named %r" % (p, pnames.get(p))
    for key in tracks:
        assert key in tnames, "track pid %s tid %s has no thread_name" % key
    return "ok: %d complete events on %d tracks of %d ranks, ts >= 0, disjoint or nested per track" % (
        len(x), len(tracks), ranks)


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2])
        return 2
    try:
        print(check(sys.argv[1], int(sys.argv[2])))
    except (AssertionError, KeyError, ValueError, TypeError) as e:
        print("trace_check: %s: %s" % (sys.argv[1], e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
