#!/usr/bin/env python3
"""Test-accuracy table of vitddp runs with --eval-every, from their HDF5 files.

    python3 results/tools/eval_table.py FILE_OR_DIR... > accuracy.md

A folder stands for its `*.h5` files and the members of its `h5.tar.xz`. Per file: the recipe
(model, ranks x option.batch-size, optimizer, option.lr, option.lr-schedule, option.seed), the
optimizer steps run, the timed window (summary/timed_window, s), the last and the best top-1 of
eval/accuracy (eval/step of the best) and the images evaluated each time (eval/samples); then one
table per file of eval/step against eval/accuracy. Dataset names: docs/schema.md.
Exit 0; 2 when no file with evaluations is found.
"""
import glob
import os
import sys
import tarfile
import tempfile


def files(args, tmp):
    out = []
    for k, a in enumerate(args):
        if os.path.isdir(a):
            out += sorted(glob.glob(os.path.join(a, "*.h5")))
            arch = os.path.join(a, "h5.tar.xz")
            if os.path.isfile(arch):
                dest = os.path.join(tmp, str(k))
                with tarfile.open(arch) as t:
                    ms = [m for m in t.getmembers() if m.isfile() and m.name.endswith(".h5") and ".." not in m.name]
                    t.extractall(dest, members=ms)
                out += sorted(os.path.join(dest, m.name) for m in ms)
        else:
            out.append(a)
    return out


def main(argv):
    import h5py
    head = ["| run | model | ranks x batch | optimizer | lr | schedule | seed | steps | timed window s "
            "| final top-1 | best top-1 (step) | images per evaluation |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    curves = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in files(argv, tmp):
            try:
                f = h5py.File(path, "r")
            except OSError:
                continue
            with f:
                if "eval/accuracy" not in f:
                    continue
                a = f.attrs
                o = lambda k: (lambda v: v.decode() if isinstance(v, bytes) else str(v))(a.get("option." + k, ""))
                acc, step = f["eval/accuracy"][0], f["eval/step"][0]
                name = os.path.basename(path)[:-3]
                best = int(acc.argmax())
                head.append(f"| {name} | {o('model')} | {int(a.get('world_size', 1))} x {o('batch-size')} | "
                            f"{o('optimizer') or 'sgd'} | {o('lr')} | {o('lr-schedule') or 'constant'} | {o('seed')} | "
                            f"{int(f['training/loss'].shape[1])} | {float(f['summary/timed_window'][()]):.1f} | "
                            f"{100 * acc[-1]:.2f}% | {100 * acc[best]:.2f}% ({int(step[best])}) | "
                            f"{', '.join(sorted({str(int(n)) for n in f['eval/samples'][0]}))} |")
                curves.append(f"\n{name}: top-1 after each evaluation\n\n| step | "
                              + " | ".join(str(int(s)) for s in step) + " |\n| --- |" + " --- |" * len(step)
                              + "\n| top-1 | " + " | ".join(f"{100 * x:.2f}%" for x in acc) + " |")
    if len(head) == 2:
        print("eval_table.py: no results file with evaluations (eval/accuracy)", file=sys.stderr)
        return 2
    print("\n".join(head) + "\n" + "\n".join(curves))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
