#!/usr/bin/env python3
"""Checks that vitddp emits the NVTX ranges README documents, without nsys.

Runs a short vitddp job with the NVTX injection library `nvtx_recorder` (NVTX_INJECTION64_PATH),
which logs every push/pop with its thread id to one file per rank, then verifies on every rank:

  * push/pop are balanced on every thread;
  * for each step i exactly one top-level range "Batch i", in step order;
  * each "Batch i" holds exactly one "forward", one "backward" and one "optimizer step", in that
    order (besides them only "get batch" may appear directly inside it);
  * inside each "backward", exactly one "all-reduce bucket k" for every bucket k, in bucket
    order, and no all-reduce range anywhere else;
  * one "get batch" range per step (the batch of step 0 is fetched before "Batch 0"), never
    inside forward, backward or optimizer step, with nothing nested in it.

Usage (as ctest runs it):
  check_nvtx_ranges.py --vitddp build/vitddp --mpirun mpirun --recorder build/tests/libnvtx_recorder.so
Or on logs recorded elsewhere (e.g. a GPU run, `mpirun -x NVTX_INJECTION64_PATH=... -x
VITDDP_NVTX_LOG=nvtx.%r.log vitddp ...`):
  check_nvtx_ranges.py --logs 'nvtx.%r.log' --ranks 2 --steps 14 --buckets 38
Exit status 0 when everything holds, 1 when a check fails, 2 on a usage or run error.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


class Range:
    """One NVTX push/pop range on one thread, with the ranges nested directly inside it."""

    def __init__(self, name, parent):
        """Creates a range called `name` nested in `parent` (None for the thread's root)."""
        self.name = name
        self.parent = parent
        self.children = []

    def path(self):
        """The names from the outermost range down to this one, joined by ' > '."""
        names, r = [], self
        while r is not None and r.name is not None:
            names.append(r.name)
            r = r.parent
        return " > ".join(reversed(names))


def parse_log(path):
    """Reads one recorder log; returns ({tid: root Range}, [problems])."""
    roots, current, problems = {}, {}, []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split(" ", 2)
            if len(parts) < 2 or parts[1] not in ("push", "pop"):
                problems.append("%s:%d: unreadable line %r" % (path, lineno, line))
                continue
            tid = parts[0]
            if tid not in roots:
                roots[tid] = Range(None, None)
                current[tid] = roots[tid]
            if parts[1] == "push":
                r = Range(parts[2] if len(parts) > 2 else "", current[tid])
                current[tid].children.append(r)
                current[tid] = r
            elif current[tid] is roots[tid]:
                problems.append("%s:%d: pop without a matching push on thread %s" % (path, lineno, tid))
            else:
                current[tid] = current[tid].parent
    for tid, cur in current.items():
        if cur is not roots[tid]:
            problems.append("%s: thread %s ends with open range(s): %s" % (path, tid, cur.path()))
    return roots, problems


def walk(r):
    """Yields every range below `r` (depth first)."""
    for c in r.children:
        yield c
        yield from walk(c)


def check_rank(rank, roots, steps, buckets):
    """Verifies one rank's ranges; returns (list of failures, list of verified facts)."""
    fails, facts = [], []
    main = [t for t, root in roots.items() if any(c.name.startswith("Batch ") for c in root.children)]
    if len(main) != 1:
        return ["rank %d: expected the 'Batch i' ranges on exactly one thread, found %d" % (rank, len(main))], facts
    tid = main[0]
    root = roots[tid]
    batches = [c for c in root.children if c.name.startswith("Batch ")]
    names = [b.name for b in batches]
    want = ["Batch %d" % i for i in range(steps)]
    if names != want:
        fails.append("rank %d: top-level Batch ranges %s, expected %s" % (rank, names, want))
    else:
        facts.append("%d top-level ranges 'Batch 0'..'Batch %d' in order" % (steps, steps - 1))
    nested_batch = [r.path() for r in walk(root) if r.name.startswith("Batch ") and r.parent is not root]
    if nested_batch:
        fails.append("rank %d: nested Batch ranges: %s" % (rank, nested_batch[:3]))

    phases = ["forward", "backward", "optimizer step"]
    bucket_names = ["all-reduce bucket %d" % k for k in range(buckets)]
    ok_batches = 0
    for b in batches:
        kids = [c.name for c in b.children]
        found = [k for k in kids if k in phases]
        others = [k for k in kids if k not in phases and k != "get batch"]
        if found != phases:
            fails.append("rank %d: %s holds %s, expected exactly %s in that order" % (rank, b.name, found, phases))
            continue
        if others:
            fails.append("rank %d: %s holds unexpected ranges %s" % (rank, b.name, others))
            continue
        bwd = next(c for c in b.children if c.name == "backward")
        got = [c.name for c in bwd.children]
        if got != bucket_names:
            fails.append("rank %d: %s > backward holds %s, expected %s" % (rank, b.name, got, bucket_names))
            continue
        deep = [r.path() for c in bwd.children for r in walk(c)]
        if deep:
            fails.append("rank %d: ranges nested inside all-reduce ranges: %s" % (rank, deep[:3]))
            continue
        ok_batches += 1
    if ok_batches == len(batches) and batches:
        facts.append("each Batch i holds exactly one forward, backward, optimizer step (in order)")
        facts.append("each backward holds 'all-reduce bucket 0'..'all-reduce bucket %d' once each, in order "
                     "(%d all-reduce ranges)" % (buckets - 1, buckets * len(batches)))

    all_ranges = [r for t in roots.values() for r in walk(t)]
    stray = [r.path() for r in all_ranges
             if r.name.startswith("all-reduce bucket") and (r.parent.name != "backward")]
    if stray:
        fails.append("rank %d: all-reduce ranges outside backward: %s" % (rank, stray[:3]))
    gets = [r for r in all_ranges if r.name == "get batch"]
    bad_gets = [r.path() for r in gets
                if r.children or any(p in r.path().split(" > ")[:-1] for p in phases + bucket_names)]
    if len(gets) != steps:
        fails.append("rank %d: %d 'get batch' ranges, expected one per step (%d)" % (rank, len(gets), steps))
    elif bad_gets:
        fails.append("rank %d: 'get batch' inside a compute range or with nested ranges: %s" % (rank, bad_gets[:3]))
    else:
        where = "before Batch 0" if root.children and root.children[0].name == "get batch" else "not before Batch 0"
        facts.append("%d 'get batch' ranges (one per step; the first %s), none inside forward/backward/optimizer"
                     % (len(gets), where))
    unknown = sorted({r.name for r in all_ranges} - set(phases + bucket_names + want + ["get batch"]))
    if unknown:
        facts.append("other ranges seen (not checked): %s" % unknown)
    threads = len([t for t, r in roots.items() if r.children])
    facts.append("%d range(s) in all on %d thread(s)" % (len(all_ranges), threads))
    return fails, facts


def run_vitddp(a, tmp):
    """Runs vitddp under mpirun with the recorder injected; returns (log template, buckets)."""
    template = os.path.join(tmp, "nvtx.%r.log")
    out_h5 = os.path.join(tmp, "run.h5")
    env = dict(os.environ, NVTX_INJECTION64_PATH=os.path.abspath(a.recorder), VITDDP_NVTX_LOG=template)
    cmd = a.mpirun.split() + ["--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
                              "-x", "NVTX_INJECTION64_PATH", "-x", "VITDDP_NVTX_LOG", "-x", "NCCL_NVLS_ENABLE=0",
                              "-np", str(a.ranks), a.vitddp, "--backend", "cpu", "--model", "vit_micro",
                              "--batch-size", "4", "--warmup-steps", "1", "--steps", "3", "--cooldown-steps", "1",
                              "--bucket-cap-mb", a.bucket_cap_mb, "--first-bucket-mb", a.bucket_cap_mb,
                              "--out", out_h5]
    print("running:", " ".join(cmd))
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=300)
    if p.returncode != 0:
        print(p.stdout)
        raise SystemExit("check_nvtx_ranges: error: vitddp exited with %d" % p.returncode)
    m = re.search(r"(\d+) bucket\(s\)", p.stdout)
    if not m:
        print(p.stdout)
        raise SystemExit("check_nvtx_ranges: error: no 'N bucket(s)' in vitddp's output")
    buckets = int(m.group(1))
    try:  # cross-check with the results file when h5py is there
        import h5py
        with h5py.File(out_h5, "r") as f:
            if int(f.attrs["num_buckets"]) != buckets:
                raise SystemExit("check_nvtx_ranges: error: num_buckets %d in the file, %d printed"
                                 % (int(f.attrs["num_buckets"]), buckets))
    except ImportError:
        pass
    return template, buckets


def main():
    """Parses the command line, runs or reads the logs, checks every rank; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vitddp", help="vitddp binary to run (CPU backend)")
    ap.add_argument("--mpirun", default="mpirun", help="MPI launcher [mpirun]")
    ap.add_argument("--recorder", help="path of libnvtx_recorder.so")
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks [2]")
    ap.add_argument("--bucket-cap-mb", default="0.0005",
                    help="bucket cap (and first bucket) for the run, small to get several buckets [0.0005]")
    ap.add_argument("--logs", help="check existing logs instead of running: template with %%r for the rank")
    ap.add_argument("--steps", type=int, help="with --logs: recorded steps (warm-up + timed + cool-down)")
    ap.add_argument("--buckets", type=int, help="with --logs: number of gradient buckets")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if a.logs:
            if a.steps is None or a.buckets is None:
                ap.error("--logs needs --steps and --buckets")
            template, steps, buckets = a.logs, a.steps, a.buckets
        else:
            if not a.vitddp or not a.recorder:
                ap.error("give --vitddp and --recorder (or --logs)")
            template, buckets = run_vitddp(a, tmp)
            steps = 1 + 3 + 1
            if buckets < 3:
                print("check_nvtx_ranges: error: only %d bucket(s); use a smaller --bucket-cap-mb" % buckets)
                return 2
        failures = 0
        for rank in range(a.ranks):
            path = template.replace("%r", str(rank))
            if not os.path.isfile(path):
                print("FAIL - rank %d: no NVTX log %s (was the recorder injected?)" % (rank, path))
                failures += 1
                continue
            roots, problems = parse_log(path)
            fails, facts = ([], []) if problems else check_rank(rank, roots, steps, buckets)
            for p in problems + fails:
                print("FAIL - " + p)
            for fact in facts:
                print("ok   - rank %d: %s" % (rank, fact))
            failures += len(problems) + len(fails)
        print("verified %d rank(s), %d steps, %d buckets: %s"
              % (a.ranks, steps, buckets, "all NVTX ranges as documented" if failures == 0
                 else "%d failure(s)" % failures))
        return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
