"""`vitddp-report power`: clocks and power of each GPU while a run was busy, from nvidia-smi samples.

    nvidia-smi --query-gpu=timestamp,index,utilization.gpu,clocks.sm,power.draw,temperature.gpu,\\
               clocks_event_reasons.active --format=csv,nounits -lms 50 > smi-RUN.csv &
    vitddp-report power smi-*.csv          (prints a Markdown table)

Per file and GPU index, over the busy samples only (utilization.gpu >= 50 %; where a file has no
utilization column or a row has no number in it, power.draw >= --min-power W): the number of
samples, the mean and minimum SM clock (MHz), the mean power (W), the highest GPU temperature (C)
and the share of samples whose active clock-event reasons include SW Power Cap (bit 0x4: the
driver lowers the clocks to hold the board power limit) or any slowdown (HW slowdown 0x8, SW
thermal 0x20, HW thermal 0x40, HW power brake 0x80). Bit values: NVML nvmlClocksEventReasons
(nvml.h). GPUs without busy samples are left out; a file with none at all gets a row "no busy
sample" (a host-bound run, such as PyTorch's bf16 step, may keep every sample below 50 %).
Columns are found by their header names, in any order; the reasons column may be called
clocks_event_reasons.active or clocks_throttle_reasons.active (older drivers). Cells without a
number ("[N/A]", "[Not Supported]") count as missing: a row without an SM clock is skipped, a
reasons cell without a hex number counts as no reason. A torn last line (no newline: the sampler
was stopped while writing) is dropped. An empty or unreadable file, or one whose header lacks the
index or SM-clock column, is named in one line on stderr before any line of the table: exit status 2.
Short windows give few samples, and power.draw is itself averaged by the driver (about a second
on recent GPUs, so a 0.2 s run shows less than its peak): the benchmark's 20 bf16 steps give 4
samples at 50 ms. Use 300-step runs to measure power.
"""
import argparse
import csv
import os
import statistics

from .reader import ResultsError

SW_POWER_CAP = 0x4
SLOWDOWN = 0x8 | 0x20 | 0x40 | 0x80


def column(header, *names):
    """Index of the first header cell that starts with one of `names` (case-insensitive), or None."""
    for i, h in enumerate(header):
        if any(h.strip().lower().startswith(n) for n in names):
            return i
    return None


def cell(r, i):
    """Float value of cell i of row r, or None when there is no such column or nvidia-smi wrote no
    number ("", "N/A", "[N/A]", "[Not Supported]", "[Unknown Error]", ...)."""
    if i is None:
        return None
    try:
        return float(r[i])
    except ValueError:
        return None


def busy_samples(path, min_power):
    """{gpu index: [(sm MHz, power W or None, temperature C or None, reasons bitmask)]} of the busy samples."""
    with open(path, newline="") as f:
        text = f.read()
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # a torn last line, cut when the sampler was stopped
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise ValueError("empty file")
    head = rows[0]
    ix, sm = column(head, "index"), column(head, "clocks.current.sm", "clocks.sm")
    if ix is None or sm is None:
        raise ValueError("no 'index' or SM clock column in the header")
    util, power = column(head, "utilization.gpu"), column(head, "power.draw")
    temp, why = column(head, "temperature.gpu"), column(head, "clocks_event_reasons", "clocks_throttle_reasons")
    out = {}
    for r in rows[1:]:
        if len(r) != len(head) or cell(r, sm) is None:
            continue
        u, p = cell(r, util), cell(r, power)
        busy = u >= 50 if u is not None else (p is not None and p >= min_power)
        if busy:
            try:
                reasons = int(r[why].strip(), 16) if why is not None else 0
            except ValueError:
                reasons = 0  # "[N/A]": counted as no reason
            out.setdefault(r[ix].strip(), []).append((cell(r, sm), p, cell(r, temp), reasons))
    return out


def main(argv=None, prog="vitddp-report power"):
    """Prints the table of the CSV files in `argv`; returns 0 (ResultsError naming an unusable file,
    before any line is printed)."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--min-power", type=float, default=250.0,
                    help="busy threshold in W for files without utilization.gpu (default 250)")
    ap.add_argument("files", nargs="+", help="nvidia-smi CSV files (smi-<run>.csv)")
    a = ap.parse_args(argv)
    samples = {}
    for path in a.files:  # every file read before the table starts
        try:
            samples[path] = busy_samples(path, a.min_power)
        except (OSError, ValueError) as e:
            raise ResultsError("%s: %s" % (path, e.strerror if isinstance(e, OSError) and e.strerror else e))
    print("| run | GPU | busy samples | SM clock mean / min (MHz) | power mean (W) | max temp (C) "
          "| SW power cap | other slowdown |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in a.files:
        name = os.path.basename(path)
        name = name[4:] if name.startswith("smi-") else name
        name = name[:-4] if name.endswith(".csv") else name
        gpus = samples[path]
        if not gpus:
            print(f"| {name} | - | 0 | no busy sample | | | | |")
        for g in sorted(gpus, key=int):
            s = gpus[g]
            clocks = [x[0] for x in s]
            powers = [x[1] for x in s if x[1] is not None]
            temps = [x[2] for x in s if x[2] is not None]
            cap = 100 * sum(1 for x in s if x[3] & SW_POWER_CAP) / len(s)
            slow = 100 * sum(1 for x in s if x[3] & SLOWDOWN) / len(s)
            pw = f"{statistics.mean(powers):.0f}" if powers else "n/a"
            tc = f"{max(temps):.0f}" if temps else "n/a"
            print(f"| {name} | {g} | {len(s)} | {statistics.mean(clocks):.0f} / {min(clocks):.0f} | {pw} | {tc} "
                  f"| {cap:.0f}% | {slow:.0f}% |")
    return 0

