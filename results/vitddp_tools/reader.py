"""The one reader of vitddp results files (HDF5, layout: docs/schema.md).

Every command of vitddp_tools reads through `Run`: root attributes and options, per-step series
([ranks, steps], [ranks, steps, buckets] or [ranks, steps, groups], numpy, with their units), the
fixed bucket tables, the gradient-ready times and their group table (`grad_ready/*`, runs with
--record-grad-ready), the `/summary` scalars, the timed-window mask (`steps/timed`) and the
evaluation series (`eval/*`).
Errors a user can act on (missing file, dataset or attribute, a file that is not HDF5) raise
`ResultsError` with one line naming the file and what is wrong.
"""
import os
import sys
import tarfile

import h5py
import numpy as np


class ResultsError(Exception):
    """A user-facing error about a results file or an argument: printed as one line."""


_REQUIRED = object()


def text(value):
    """An HDF5 attribute or string-dataset value as `str` (h5py may return bytes or numpy scalars)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.shape == ():
        return text(value[()])
    return str(value)


class Series:
    """A dataset read into memory: `values` (numpy array, the file's dtype and shape), `units`
    (the `units` attribute, e.g. "s", "bytes", "1"; "" when absent) and `axes` ("rank,step",
    "rank,step,bucket" or "" for tables)."""

    def __init__(self, values, units, axes):
        self.values, self.units, self.axes = values, units, axes

    def __repr__(self):
        return "Series(shape=%s, units=%r, axes=%r)" % (self.values.shape, self.units, self.axes)


class GradReady:
    """The gradient-ready times of a --record-grad-ready run (docs/schema.md): `ready_time`
    (float64 [ranks, steps, groups], seconds from the step start: when backward reported each
    group's gradients final), and per group in the order reported: `bytes` (int64, fp32 bytes of
    its tensors), `prefix_bytes` (int64, the flat gradient buffer's prefix complete by then: a
    bucket is complete at the first group whose prefix reaches its end), `first_param`,
    `last_param` (lists of str)."""

    def __init__(self, ready_time, nbytes, prefix_bytes, first_param, last_param):
        self.ready_time, self.bytes, self.prefix_bytes = ready_time, nbytes, prefix_bytes
        self.first_param, self.last_param = first_param, last_param

    @property
    def groups(self):
        """Number of groups (int)."""
        return int(self.bytes.size)

    def __repr__(self):
        return "GradReady(ready_time shape=%s, groups=%d)" % (self.ready_time.shape, self.groups)


class Run:
    """One vitddp results file, opened read-only.

    `path` must name an HDF5 file; ResultsError("<path>: no such file" / "is a directory" /
    "cannot open as HDF5 (...)") otherwise. Use as a context manager or call `close()`.
    """

    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)
        self.label = self.name[:-3] if self.name.endswith(".h5") else self.name
        if not os.path.exists(path):
            raise ResultsError("%s: no such file" % path)
        if os.path.isdir(path):
            raise ResultsError("%s: is a directory, not a results file" % path)
        try:
            self.f = h5py.File(path, "r")
        except OSError as e:
            raise ResultsError("%s: cannot open as HDF5 (%s)" % (path, str(e).split("\n")[0]))

    def close(self):
        """Closes the file."""
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def has(self, name):
        """True when dataset `name` (e.g. "timing/forward") exists."""
        return name in self.f and isinstance(self.f[name], h5py.Dataset)

    # ---- attributes ----
    def attr(self, name, default=_REQUIRED):
        """Root attribute `name` as h5py returns it (str, numpy integer/float or array);
        ResultsError naming it when absent and no default is given."""
        if name in self.f.attrs:
            return self.f.attrs[name]
        if default is _REQUIRED:
            raise ResultsError("%s: missing attribute '%s'" % (self.path, name))
        return default

    def attrs(self):
        """Every root attribute as a dict (str -> str, int, float or list)."""
        out = {}
        for k, v in self.f.attrs.items():
            if isinstance(v, np.ndarray):
                out[k] = [text(x) if isinstance(x, (bytes, str)) else x.item() for x in v.reshape(-1)]
            elif isinstance(v, (bytes, str)):
                out[k] = text(v)
            else:
                out[k] = v.item() if hasattr(v, "item") else v
        return out

    def option(self, name, default=None):
        """Command-line option `name` (attribute option.<name>, a string as given or defaulted),
        or `default` when the file predates the option."""
        v = self.attr("option." + name, None)
        return default if v is None else text(v)

    def options(self):
        """Every option.<name> attribute as {name: str}."""
        return {k[len("option."):]: text(v) for k, v in self.f.attrs.items() if k.startswith("option.")}

    # ---- datasets ----
    def data(self, name):
        """Dataset `name` as a numpy array; ResultsError naming it when absent."""
        if not self.has(name):
            raise ResultsError("%s: missing dataset '%s'" % (self.path, name))
        return self.f[name][()]

    def series(self, name):
        """Dataset `name` as a `Series` (values, units, axes); ResultsError naming it when absent."""
        values = self.data(name)
        a = self.f[name].attrs
        return Series(values, text(a.get("units", "")), text(a.get("axes", "")))

    def strings(self, name):
        """1-D string dataset `name` (e.g. "buckets/first_param") as a list of str."""
        if not self.has(name):
            raise ResultsError("%s: missing dataset '%s'" % (self.path, name))
        return [text(x) for x in self.f[name][()]]

    def step_series(self, name):
        """Per-step series `name`: float64 or int64 [ranks, steps]; ResultsError if its axes differ."""
        s = self.data(name)
        if s.ndim != 2:
            raise ResultsError("%s: dataset '%s' has shape %s, expected [ranks, steps]" % (self.path, name, s.shape))
        return s

    def bucket_series(self, name):
        """Per-bucket series `name` (e.g. "buckets/allreduce_time"): [ranks, steps, buckets]."""
        s = self.data(name)
        if s.ndim != 3:
            raise ResultsError("%s: dataset '%s' has shape %s, expected [ranks, steps, buckets]"
                               % (self.path, name, s.shape))
        return s

    def group_series(self, name):
        """Per-group series `name` (e.g. "grad_ready/ready_time"): [ranks, steps, groups]."""
        s = self.data(name)
        if s.ndim != 3:
            raise ResultsError("%s: dataset '%s' has shape %s, expected [ranks, steps, groups]"
                               % (self.path, name, s.shape))
        return s

    def has_grad_ready(self):
        """True when the run recorded gradient-ready times (vitddp --record-grad-ready)."""
        return self.has("grad_ready/ready_time") and self.has("grad_ready/bytes")

    def grad_ready(self):
        """The run's `GradReady` (ready times and the group table); ResultsError naming the file when
        it has none (a run without --record-grad-ready) or when the table and the series disagree."""
        if not self.has_grad_ready():
            raise ResultsError("%s: no gradient-ready times recorded (no dataset 'grad_ready/ready_time': run "
                               "vitddp with --record-grad-ready)" % self.path)
        ready = np.asarray(self.group_series("grad_ready/ready_time"), dtype=float)
        nbytes = np.asarray(self.data("grad_ready/bytes"), dtype=np.int64).reshape(-1)
        prefix = (np.asarray(self.data("grad_ready/prefix_bytes"), dtype=np.int64).reshape(-1)
                  if self.has("grad_ready/prefix_bytes") else np.cumsum(nbytes))
        if ready.shape[2] != nbytes.size or prefix.size != nbytes.size:
            raise ResultsError("%s: grad_ready/ready_time has %d groups, grad_ready/bytes %d, "
                               "grad_ready/prefix_bytes %d" % (self.path, ready.shape[2], nbytes.size, prefix.size))
        names = lambda n: self.strings(n) if self.has(n) else [""] * nbytes.size
        return GradReady(ready, nbytes, prefix, names("grad_ready/first_param"), names("grad_ready/last_param"))

    def summary(self, name):
        """The scalar /summary/<name> as float (units: docs/schema.md, e.g. steps/s, s)."""
        return float(self.data("summary/" + name))

    def summary_all(self):
        """Every /summary scalar as {name: (value float, units str)}; {} when the group is absent
        (a run that stopped before writing it)."""
        if "summary" not in self.f:
            return {}
        return {k: (float(d[()]), text(d.attrs.get("units", ""))) for k, d in self.f["summary"].items()
                if isinstance(d, h5py.Dataset) and d.shape == ()}

    def summary_or(self, name, default=None):
        """/summary/<name> as float, or `default` when the file has none."""
        return self.summary(name) if self.has("summary/" + name) else default

    # ---- configuration ----
    @property
    def world_size(self):
        """Number of ranks (MPI world size)."""
        return int(self.attr("world_size"))

    @property
    def model(self):
        """ViT variant name."""
        return text(self.attr("model"))

    @property
    def backend(self):
        """'gpu' or 'cpu'."""
        return text(self.attr("backend"))

    @property
    def precision(self):
        """Training precision (attribute `precision`; 'fp32' if absent)."""
        return text(self.attr("precision", "fp32"))

    @property
    def compression(self):
        """Gradient compression: attribute option.compression, or 'none' when the run had none."""
        return text(self.attr("option.compression", "none"))

    @property
    def bucket_cap_mb(self):
        """DDP bucket capacity in MiB (option.bucket-cap-mb), float."""
        v = text(self.attr("option.bucket-cap-mb"))
        try:
            return float(v)
        except ValueError:
            raise ResultsError("%s: attribute 'option.bucket-cap-mb' is not a number: %r" % (self.path, v))

    @property
    def ddp(self):
        """True when the run used a reducer (attribute ddp)."""
        return bool(int(self.attr("ddp")))

    @property
    def overlap(self):
        """True when all-reduces overlap backward (attribute overlap)."""
        return bool(int(self.attr("overlap")))

    @property
    def batch_size(self):
        """Images per rank per micro-step (attribute batch_size)."""
        return int(self.attr("batch_size"))

    @property
    def grad_accum_steps(self):
        """Micro-steps per optimizer step (option.grad-accum-steps; 1 when the file predates it)."""
        v = self.option("grad-accum-steps", "1")
        try:
            return int(v)
        except ValueError:
            raise ResultsError("%s: attribute 'option.grad-accum-steps' is not an integer: %r" % (self.path, v))

    @property
    def allreduce(self):
        """All-reduce implementation: option.allreduce (e.g. 'nccl', 'copy-engine'); files that
        predate the option: 'nccl' on the GPU backend, 'mpi' on the CPU backend."""
        return self.option("allreduce", "nccl" if self.backend == "gpu" else "mpi")

    @property
    def num_buckets(self):
        """Number of gradient buckets."""
        if "num_buckets" in self.f.attrs:
            return int(self.f.attrs["num_buckets"])
        return int(self.data("buckets/bytes").shape[0])

    def transports(self):
        """nccl_transport per rank as a list of str ([] when not recorded)."""
        tr = self.attr("nccl_transport", None)
        if tr is None:
            return []
        if isinstance(tr, np.ndarray):
            return [text(x) for x in tr.reshape(-1)]
        return [text(tr)]

    def config_text(self):
        """One line describing the run's configuration, for plot titles."""
        bits = ["%s" % self.model, "%d x %s" % (self.world_size, self.backend.upper()), self.precision,
                "batch %d/rank" % self.batch_size]
        if self.grad_accum_steps > 1:
            bits.append("x %d accumulated" % self.grad_accum_steps)
        if self.ddp:
            bits.append("%d buckets of %g MiB" % (self.num_buckets, self.bucket_cap_mb))
            if self.compression != "none":
                bits.append("compression " + self.compression)
            if not self.overlap:
                bits.append("no overlap")
        else:
            bits.append("no DDP")
        return ", ".join(bits)

    # ---- steps ----
    def timed(self):
        """Boolean mask [steps] of the timed window (steps/timed == 1); ResultsError if empty."""
        t = np.asarray(self.data("steps/timed")).reshape(-1) == 1
        if not t.any():
            raise ResultsError("%s: no timed steps (steps/timed is 0 everywhere: the run did not reach "
                               "its timed window)" % self.path)
        return t

    def series_ms(self, name):
        """Per-step series `name` ([ranks, steps] or [ranks, steps, buckets], seconds) in ms, float64."""
        return np.asarray(self.data(name), dtype=float) * 1e3

    def timed_mean_ms(self, name):
        """Mean over the timed steps of series `name`, per rank, in ms ([ranks])."""
        return self.series_ms(name)[:, self.timed()].mean(axis=1)

    def images_per_second(self):
        """Images per second over all ranks, computed here as steps/s x batch_size x
        grad_accum_steps x world_size (summary/steps_per_second counts optimizer steps; each takes
        grad_accum_steps micro-batches of batch_size images on every rank). float."""
        return self.summary("steps_per_second") * self.batch_size * self.grad_accum_steps * self.world_size

    # ---- evaluation ----
    def eval_series(self):
        """The --eval-every curve as a dict of 1-D arrays: step (int64, the 0-based index of the
        step after which each evaluation ran, as vitddp prints it: docs/schema.md, Step numbering;
        files without the root attribute step_numbering stored the count of steps done, converted
        here by - 1), accuracy (float64 fraction), loss (float64 nats), samples (int64), time
        (float64 s; absent in older files). ResultsError when the file has no evaluation."""
        if not self.has("eval/step"):
            raise ResultsError("%s: no evaluation recorded (no dataset 'eval/step': run vitddp with --eval-every N)"
                               % self.path)
        out = {"step": np.asarray(self.data("eval/step")).reshape(-1)}
        if out["step"].size == 0:
            raise ResultsError("%s: no evaluation recorded (eval/step is empty: run vitddp with --eval-every N)"
                               % self.path)
        if self.attr("step_numbering", None) is None:  # an older file: steps done, 1-based
            out["step"] = out["step"] - 1
        for k, dt in (("accuracy", float), ("loss", float), ("samples", None), ("time", float)):
            if k == "time" and not self.has("eval/time"):
                continue
            out[k] = np.asarray(self.data("eval/" + k), dtype=dt).reshape(-1)
        return out


def open_runs(paths):
    """Opens every file of `paths` (all are checked before any work starts); list of Run. Runs
    whose file names repeat (b25.h5 in nvlink/ and in shm/) are named by as many trailing path
    parts as tell them apart (nvlink/b25.h5, shm/b25.h5)."""
    runs = [Run(p) for p in paths]
    parts = [os.path.normpath(os.path.abspath(p)).split(os.sep) for p in paths]
    depth = 1
    while depth < max((len(p) for p in parts), default=1) and \
            len({tuple(p[-depth:]) for p in parts}) < len(parts):
        depth += 1
    if depth > 1:
        for r, p in zip(runs, parts):
            r.name = "/".join(p[-depth:])
            r.label = r.name[:-3] if r.name.endswith(".h5") else r.name
    return runs


def _paths(value):
    """The path strings of an argparse value (a string, a list of them, or anything else: none)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str)]
    return []


def check_outputs(args, outputs):
    """Before any work or output: ResultsError when one of the files a command will write is
    unusable. `args`: the parsed argparse namespace; `outputs`: {attribute: option name} of the
    arguments that name files the command writes (None = not given). Refused: an empty path, a
    directory, a missing parent folder, and a path that is the same file as any other argument naming
    an existing file (an input: a results file must never be overwritten by the table made from it)."""
    vals = vars(args)
    ins = {os.path.realpath(p) for k, v in vals.items() if k not in outputs
           for p in _paths(v) if p and os.path.exists(p)}
    for key, opt in outputs.items():
        path = vals.get(key)
        if path is None:
            continue
        if path == "":
            raise ResultsError("%s: an empty path" % opt)
        if os.path.isdir(path):
            raise ResultsError("%s %s: is a directory" % (opt, path))
        d = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(d):
            raise ResultsError("%s %s: directory '%s' does not exist" % (opt, path, d))
        if os.path.realpath(path) in ins:
            raise ResultsError("%s %s: is also an input of this command (choose another path)" % (opt, path))


def input_error_line(e):
    """The one error line for exception `e` raised while reading a command's inputs (a missing or
    unreadable file, a truncated archive, a file of another schema: OSError, EOFError, tar errors,
    ValueError, IndexError, ZeroDivisionError), or None when the command should let it propagate:
    another kind of exception, or VITDDP_TRACEBACK set in the environment."""
    kinds = (OSError, EOFError, tarfile.TarError, ValueError, IndexError, ZeroDivisionError)
    if os.environ.get("VITDDP_TRACEBACK") or not isinstance(e, kinds):
        return None
    what = getattr(e, "filename", None)
    msg = (e.strerror or str(e)) if isinstance(e, OSError) else str(e)
    msg = "; ".join(part.strip() for part in msg.splitlines() if part.strip())  # one line
    return "%s%s: %s (a missing, unreadable or malformed input?)" % (
        "%s: " % what if what else "", type(e).__name__, msg)


def run_command(prog, body):
    """The exit status of a command-line entry point that runs `body()` (its status): an error about
    the arguments or the inputs prints one line "<prog>: error: ..." on stderr and gives 2:
    ResultsError, a KeyError (a dataset or attribute no code checked first: "missing <key>"), and
    what input_error_line names. Any other exception propagates."""
    try:
        return body()
    except ResultsError as e:
        line = str(e)
    except KeyError as e:
        line = "missing %s" % e
    except Exception as e:  # noqa: BLE001 - input_error_line decides which ones are the inputs' fault
        line = input_error_line(e)
        if line is None:
            raise
    sys.stderr.write("%s: error: %s\n" % (prog, line))
    return 2


def write_text(path, text, opt="-o"):
    """Writes `text` to `path` (check_outputs has vetted it); ResultsError naming `opt` when the file
    cannot be written."""
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise ResultsError("%s %s: cannot write: %s" % (opt, path, e.strerror or e))


def write_output(text, output):
    """Prints `text` and, with -o, writes it to `output` too (write_text's errors)."""
    sys.stdout.write(text)
    if output:
        write_text(output, text)
