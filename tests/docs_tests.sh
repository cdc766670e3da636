#!/usr/bin/env bash
# What README.md and docs/*.md tell a user, checked against the repository and the binary (ctest
# label cli, no GPU needed). Data-driven: every document, path, option and command is read from
# the documents themselves, so a rename anywhere in the tree is caught.
#   1. paths: every repository path named in backticks, code blocks or markdown links exists
#      (globs match something; links' #anchors name a heading of the target). Skipped: URLs,
#      absolute paths, placeholders (<...>, {...}, $VAR, FILE, PATH, DIR, ...), run outputs
#      (results/runs/, checkpoints/, build/), words whose first part is no top-level entry of the
#      repository (dataset names such as timing/forward);
#   2. options: every --option that belongs to vitddp (on a command line: after the vitddp
#      binary; inline: unless it is a listed option of another tool) is in `vitddp --help`; those
#      after vitddp-probe in its own --help;
#   3. vitddp-report / vitddp-plot subcommands named exist, with the options named after them: each
#      runs with --help from the package source in results/ (its pyproject.toml
#      [project.scripts]); without that package the check is skipped with a SKIP line;
#   4. the README's commands that need no GPU run: every `build/vitddp` line with --help,
#      --version, --dry-run or --backend cpu, in a scratch directory, exit 0 (a CPU run must write
#      a results file with its summary); `make -n run NGPUS=0` runs the CPU backend with vit_tiny;
#   5. CPU safety: every training command of README.md and of the docs listed in CPU_SAFE_DOCS
#      either says --backend gpu (a machine without a GPU refuses it at once) or runs a small model
#      on the CPU backend, so no documented command drives a CPU-only machine into the OOM killer;
#   6. the README's results table equals results/commands/readme_table.py's output (--check), and
#      the README has at most 300 lines besides that table.
# Usage: docs_tests.sh <vitddp> <mpirun> <python3 with h5py>
set -u
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIRUN_BIN=$2
PY=$3
REPO=$(cd "$(dirname "$0")/.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "$PY" - "$REPO" "$BIN" "$MPIRUN_BIN" <<'PY'
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile
import tomllib

REPO, BIN, MPIRUN = sys.argv[1:4]
# Documents whose training commands must be safe on a CPU-only machine (check 5).
CPU_SAFE_DOCS = ["README.md", "docs/design.md", "docs/failures.md", "docs/profiling.md", "docs/checkpoints.md"]
SMALL_MODELS = {"vit_tiny", "vit_micro", "vit_fmnist", "vit_fmnist_cpu"}
# Options of other tools that the documents name in inline code without their command.
FOREIGN_OPTIONS = {
    "--requeue", "--signal", "--open-mode", "--array", "--export", "--nodes", "--gpus-per-node",
    "--gpus-per-task", "--ntasks-per-node", "--cpus-per-task", "--cpu-bind", "--mpi", "--exclusive",  # Slurm
    "--bind-to", "--map-by", "--mca", "--oversubscribe", "--allow-run-as-root",  # Open MPI
    "--capture-range", "--capture-range-end", "--trace", "--cuda-graph-trace", "--sample", "--report",  # nsys
    "--load", "--logs", "--ranks", "--buckets", "--check", "--update", "--json", "--csv", "--format",  # scripts
    "--output-on-failure",  # ctest
    "--probe",  # vitddp-plot busbw, vitddp-report summary
}
# Words that start another tool's part of a command line (options after them are not vitddp's).
OTHER_COMMANDS = {"mpirun", "mpiexec", "srun", "sbatch", "nsys", "ncu", "python3", "python", "pip", "make",
                  "ctest", "cmake", "scontrol", "scancel", "vitddp-report", "vitddp-plot", "bash", "env", "git"}
PLACEHOLDER = re.compile(r"[<>{}*$%]|\.\.\.|\b(FILE|PATH|DIR|MODEL|NAME|A|B)\b")
OUTPUT_PREFIXES = ("results/runs/", "checkpoints/", "build/", "prof/", "ckpt/")
# Options the documents name as examples of bad input.
BAD_INPUT_EXAMPLES = {"--bogus"}
failures, passes = [], 0


def ok(msg):
    global passes
    passes += 1
    print("ok   - " + msg)


def bad(msg):
    failures.append(msg)
    print("FAIL - " + msg)


def documents():
    docs = ["README.md"] + sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
    return [(d, open(os.path.join(REPO, d)).read()) for d in docs]


def split_blocks(text):
    """(prose with code blocks blanked, [code block lines]) of a markdown text."""
    prose, code, inside = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
            prose.append("")
            continue
        (code if inside else prose).append(line)
        if inside:
            prose.append("")
    return "\n".join(prose), code


def command_lines(code_lines):
    """Code lines with backslash continuations joined and comments removed."""
    out, buf = [], ""
    for line in code_lines:
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        full = (buf + stripped).strip()
        buf = ""
        full = re.sub(r"\s#\s.*$", "", full) if not full.startswith("#") else ""
        if full:
            out.append(full)
    return out


def inline_spans(prose):
    return re.findall(r"`([^`\n]+)`", prose)


def heading_slugs(text):
    """GitHub's anchors of the headings of a markdown text."""
    slugs = set()
    for line in split_blocks(text)[0].splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            s = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            slugs.add(s)
    return slugs


TOP = set(os.listdir(REPO)) - {".git", "build"}


def check_path(doc, token, where):
    """Checks one repository path token; returns True if it was a path that was checked."""
    token = token.strip("'\",;:()").rstrip(".")
    if not token or token.startswith(("/", "http:", "https:", "-", "~")) or "/" not in token and \
            not re.search(r"\.(md|sh|py|sbatch|cpp|h|cu|toml|txt)$", token):
        return False
    if token.startswith(OUTPUT_PREFIXES) or PLACEHOLDER.search(token.replace(".*", "")):
        return False
    if "=" in token or token.split("/")[0] not in TOP:
        return False
    pattern = os.path.join(REPO, token)
    if glob.glob(pattern) or os.path.exists(pattern):
        ok(f"{doc}: {where} {token} exists")
    else:
        bad(f"{doc}: {where} {token} does not exist in the repository")
    return True


def check_paths(docs):
    for doc, text in docs:
        prose, code = split_blocks(text)
        for span in inline_spans(prose):
            for tok in span.split():
                check_path(doc, tok, "path")
        for line in command_lines(code):
            for tok in line.split():
                check_path(doc, tok, "command path")
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if target.startswith(("http:", "https:", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(REPO, os.path.dirname(doc), path)) if path else os.path.join(REPO, doc)
            if not os.path.exists(full):
                rel = os.path.relpath(full, REPO)
                bad(f"{doc}: link ({target}) points to a missing {rel}")
                continue
            if anchor and full.endswith(".md") and anchor not in heading_slugs(open(full).read()):
                bad(f"{doc}: link ({target}): no heading '#{anchor}' in {os.path.relpath(full, REPO)}")
                continue
            ok(f"{doc}: link ({target})")


def vitddp_options(binary=BIN):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"^\s+(--[a-z0-9][a-z0-9-]*)", out.stdout, re.M)), out.returncode


# vitddp-probe (src/probe/), built next to vitddp: its options are checked against its own --help.
PROBE_BIN = os.path.join(os.path.dirname(BIN), "vitddp-probe")


def is_vitddp(word):
    return word.endswith("/vitddp") or word in ("vitddp", '"$VITDDP"', "$VITDDP")


def is_probe(word):
    return word.endswith("/vitddp-probe") or word == "vitddp-probe"


def options_of_vitddp(line, binary="vitddp"):
    """The --options on a command line that follow the `binary` ("vitddp" or "vitddp-probe")
    (until another command)."""
    opts, owner = [], None
    for word in line.split():
        base = os.path.basename(word)
        if is_vitddp(word):
            owner = "vitddp"
        elif is_probe(word):
            owner = "vitddp-probe"
        elif base in OTHER_COMMANDS or word in ("|", "&&", ";", "||"):
            owner = base
        elif word.startswith("--") and owner == binary:
            opts.append(word.split("=", 1)[0])
    return opts


def check_options(docs):
    known, rc = vitddp_options()
    if rc != 0 or not known:
        bad(f"{BIN} --help failed (exit {rc})")
        return
    probe_known, probe_rc = vitddp_options(PROBE_BIN) if os.path.exists(PROBE_BIN) else (set(), 1)
    if probe_rc != 0 or not probe_known:
        bad(f"{PROBE_BIN} --help failed (exit {probe_rc})")
    for doc, text in docs:
        prose, code = split_blocks(text)
        named, probe_named, bare = set(), set(), set()
        for line in command_lines(code):
            named.update(options_of_vitddp(line))
            probe_named.update(options_of_vitddp(line, "vitddp-probe"))
        for span in inline_spans(prose):
            words = span.split()
            if any(is_vitddp(w) or is_probe(w) or os.path.basename(w) in OTHER_COMMANDS for w in words):
                named.update(options_of_vitddp(span))
                probe_named.update(options_of_vitddp(span, "vitddp-probe"))
            else:
                bare.update(w.split("=", 1)[0] for w in words if re.match(r"^--[a-z]", w) and
                            w.split("=", 1)[0] not in FOREIGN_OPTIONS)
        # An option named alone is vitddp's; vitddp-probe's are named with the binary.
        for o, where, label in ([(o, known, "vitddp") for o in sorted(named | bare)] +
                                [(o, probe_known, "vitddp-probe") for o in sorted(probe_named)]):
            o = o.rstrip(".,;:)")
            if o in BAD_INPUT_EXAMPLES:
                continue
            if o in where:
                ok(f"{doc}: {o} is a {label} option")
            else:
                bad(f"{doc}: {o} is not in {label} --help")


def package_entry_points():
    """{'vitddp-report': (module, function), ...} from results/pyproject.toml, or None."""
    p = os.path.join(REPO, "results", "pyproject.toml")
    if not os.path.exists(p):
        return None
    with open(p, "rb") as f:
        scripts = tomllib.load(f).get("project", {}).get("scripts", {})
    return {k: tuple(v.split(":", 1)) for k, v in scripts.items()}


def check_subcommands(docs):
    named = {}
    for doc, text in docs:
        prose, code = split_blocks(text)
        for line in command_lines(code) + inline_spans(prose):
            for m in re.finditer(r"\b(vitddp-report|vitddp-plot)[ \t]+([a-z][a-z0-9_-]*)([^|;&]*)", line):
                opts = named.setdefault((m.group(1), m.group(2)), (doc, {}))[1]
                for o in re.findall(r"(?<![\w-])--?[a-z][a-z0-9-]*", m.group(3)):
                    opts.setdefault(o.split("=", 1)[0], doc)
    if not named:
        return
    entry = package_entry_points()
    if not entry:
        print("SKIP - results/pyproject.toml (the vitddp-report/vitddp-plot package) is not in this tree: "
              "not checked: " + ", ".join(f"{t} {s}" for t, s in sorted(named)))
        return
    for (tool, sub), (doc, opts) in sorted(named.items()):
        if tool not in entry:
            bad(f"{doc}: {tool}: no such console script in results/pyproject.toml")
            continue
        module, func = entry[tool]
        code = (f"import sys; sys.path.insert(0, {os.path.join(REPO, 'results')!r}); "
                f"from {module} import {func} as m; sys.exit(m([{sub!r}, '--help']))")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        if r.returncode == 0:
            ok(f"{doc}: {tool} {sub} exists")
            for o, odoc in sorted(opts.items()):
                if re.search(r"(^|[\s,\[])" + re.escape(o) + r"([\s,=\]]|$)", r.stdout, re.M):
                    ok(f"{odoc}: {tool} {sub} {o}")
                else:
                    bad(f"{odoc}: {tool} {sub}: no option {o} in its --help")
        else:
            bad(f"{doc}: {tool} {sub}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")


def readme_commands():
    text = open(os.path.join(REPO, "README.md")).read()
    return command_lines(split_blocks(text)[1])


def run_cpu_commands():
    """Check 4: the README's commands that need no GPU."""
    found = 0
    for line in readme_commands():
        words = shlex.split(line)
        if not any(w == "build/vitddp" for w in words):
            continue
        opts = set(options_of_vitddp(line))
        cpu_run = "--backend" in words and words[words.index("--backend") + 1] == "cpu"
        if not (opts & {"--help", "--version", "--dry-run"} or cpu_run):
            continue
        found += 1
        gpu_only = "--backend" in words and words[words.index("--backend") + 1] == "gpu"
        if gpu_only and os.environ.get("VITDDP_GPU_BUILT", "1") == "0":
            # The CPU-only build refuses the GPU backend with one line and exit 2 (tested in
            # reliability_tests); the command is checked in the full build.
            print(f"SKIP - README command needs the GPU backend, not in this build: {line[:110]}")
            continue
        cmd = []
        for w in words:
            if w == "build/vitddp":
                cmd.append(BIN)
            elif w == "mpirun":
                cmd += [MPIRUN, "--allow-run-as-root"]
            else:
                cmd.append(w)
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=300)
            outs = [words[i + 1] for i, w in enumerate(words) if w == "--out"]
            written = all(os.path.exists(os.path.join(d, o)) for o in outs)
            summary = True
            if outs and written:
                probe = ("import h5py, sys; f = h5py.File(sys.argv[1], 'r'); "
                         "sys.exit(0 if f['summary/steps_per_second'][()] > 0 and f.attrs['stop_reason'] == 'completed' else 1)")
                summary = subprocess.run([sys.executable, "-c", probe, os.path.join(d, outs[0])]).returncode == 0
        if r.returncode == 0 and written and summary:
            ok(f"README command runs without a GPU: {line[:110]}")
        else:
            bad(f"README command failed (exit {r.returncode}, output written {written}, summary {summary}): {line}\n"
                f"{(r.stdout + r.stderr)[-800:]}")
    if found < 3:
        bad(f"README: expected --help, --dry-run and a CPU-backend run among its commands, found {found}")
    r = subprocess.run(["make", "-n", "-C", REPO, "run", "NGPUS=0"], capture_output=True, text=True, timeout=60)
    run = [l for l in command_lines(r.stdout.splitlines()) if "vitddp" in l and "--out" in l]
    if r.returncode == 0 and run and all("--backend cpu" in l and "--model vit_tiny" in l for l in run):
        ok("make run without a GPU: the CPU backend with vit_tiny")
    else:
        bad(f"make -n run NGPUS=0 (exit {r.returncode}) does not run --backend cpu --model vit_tiny: {run or r.stderr}")


def check_cpu_safety():
    """Check 5: no documented training command can run a full-size model on the CPU backend."""
    for doc in CPU_SAFE_DOCS:
        path = os.path.join(REPO, doc)
        if not os.path.exists(path):
            continue
        for line in command_lines(split_blocks(open(path).read())[1]):
            words = line.split()
            if not any(is_vitddp(w) for w in words) or " ..." in line:
                continue
            opts = options_of_vitddp(line)
            if {"--help", "--version", "--dry-run"} & set(opts):
                continue
            after = words[[i for i, w in enumerate(words) if is_vitddp(w)][-1]:]
            val = lambda o: after[after.index(o) + 1] if o in after and after.index(o) + 1 < len(after) else None
            if val("--backend") == "gpu" or (val("--backend") == "cpu" and val("--model") in SMALL_MODELS):
                ok(f"{doc}: CPU-safe: {line[:100]}")
            else:
                bad(f"{doc}: without --backend gpu this runs on a CPU-only machine's CPU backend "
                    f"(vit_l_32 needs 14.3 GiB of host memory per rank there): {line}")


def check_readme_table_and_length():
    readme = os.path.join(REPO, "README.md")
    text = open(readme).read()
    blocks = re.findall(r"^<!-- ([a-z-]+):begin -->$", text, re.M)
    tables = {b: text[text.find(f"<!-- {b}:begin -->"):text.find(f"<!-- {b}:end -->")] for b in blocks}
    n = text.count("\n") - sum(t.count("\n") for t in tables.values())
    if n <= 300:
        ok(f"README.md: {n} lines besides the generated tables (at most 300)")
    else:
        bad(f"README.md: {n} lines besides the generated tables, more than 300")
    if "results-table" not in blocks:
        bad("README.md: no results-table block")
    for b, table in tables.items():
        source = re.search(r"^Source: `([^`]+)`", table, re.M)
        if source and not os.path.exists(os.path.join(REPO, source.group(1))):
            bad(f"README.md: {b}: its source {source.group(1)} does not exist")
            continue
        r = subprocess.run([sys.executable, os.path.join(REPO, "results", "commands", "readme_table.py"), "--check",
                            "README.md", "--block", b], cwd=REPO, capture_output=True, text=True, timeout=300)
        if r.returncode == 0:
            ok(f"README.md {b}: " + r.stdout.strip().split(": ", 1)[-1])
        else:
            bad(f"README.md: {b} (readme_table.py --check --block {b}, exit {r.returncode}): {(r.stdout + r.stderr)[-1500:]}")

docs = documents()
check_paths(docs)
check_options(docs)
check_subcommands(docs)
run_cpu_commands()
check_cpu_safety()
check_readme_table_and_length()
print(f"{passes} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
PY
