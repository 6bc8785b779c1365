#!/usr/bin/env python3
"""The instruction-count gate (docs/performance.md "Instruction counts"): instructions per
request on each hot path, counted by callgrind over the in-process driver
(`crates/muster/examples/ir.rs`), against the committed baseline.

For each path the driver runs under callgrind with N and with N/4 requests; the difference in
instructions over the difference in requests is the cost of one request, with start-up and
stop cancelled out. Counts, unlike wall-clock rates, hold on a shared machine. What still
moves them is timing: the log's group commit folds a varying number of writes into one
transaction, and timers fire by the clock. That only ever adds work, so each run is made
REPEATS times and the least count kept; the spread left is about 1-2% (register, watch).

    cargo build --release -p muster --example ir
    python3 .ci/ir.py target/release/examples/ir                 # print the table
    python3 .ci/ir.py --check .ci/ir-baseline.json target/release/examples/ir
    python3 .ci/ir.py --write .ci/ir-baseline.json target/release/examples/ir

`--check` fails (exit 1) when a path costs more than 5% over its baseline. A path over the
line is measured once more and judged on the lower count, so that one noisy run does not
fail CI; a real regression fails both. A change that makes a path dearer on purpose updates
the baseline with `--write` in the same commit and says why in its note. Needs valgrind.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# Requests per run (the short run does a quarter of them). `watch` counts one change
# delivered to the driver's WATCHERS streams; its figure is the cost of one delivery:
# (watch - register) / WATCHERS, both measured over the same number of changes.
RUNS = {"register": 400, "renew": 2000, "read": 2000, "watch": 400, "dns": 20000, "proxy": 2000}
WATCHERS = 100
LIMIT = 1.05
REPEATS = 3
# One run takes seconds; a hung one must not hold CI.
RUN_TIMEOUT_S = 900
VERBOSE = False


def instructions(driver, path, n):
    """Total instructions (every thread) of one driver run of `n` requests on `path`."""
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "cg.out")
        try:
            run = subprocess.run(
                ["valgrind", "-q", "--tool=callgrind", f"--callgrind-out-file={out}", driver, path, str(n)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            sys.exit(f"ir: the driver took over {RUN_TIMEOUT_S} s on {path} {n}")
        if run.returncode != 0:
            sys.exit(f"ir: the driver failed on {path} {n}:\n{run.stderr[-2000:]}")
        with open(out) as f:
            for line in f:
                if line.startswith("totals:") or line.startswith("summary:"):
                    return int(line.split()[1])
    sys.exit(f"ir: no totals in callgrind's output for {path} {n}")


def least(driver, path, n):
    counts = [instructions(driver, path, n) for _ in range(REPEATS)]
    if VERBOSE:
        print(f"# {path} {n}: {', '.join(f'{c:,}' for c in counts)}", file=sys.stderr)
    return min(counts)


def per_request(driver, path):
    n = RUNS[path]
    short = n // 4
    return (least(driver, path, n) - least(driver, path, short)) / (n - short)


def measure(driver, paths):
    """Instructions per request of each path in `paths` (and `register`, which `watch` needs)."""
    counts = {}
    needed = ["register"] if "watch" in paths and "register" not in paths else []
    for path in needed + paths:
        counts[path] = per_request(driver, path)
    if "watch" in counts:
        counts["watch"] = (counts["watch"] - counts["register"]) / WATCHERS
    return {path: round(counts[path]) for path in paths}


def tools():
    """What the counts depend on besides the code: the compiler and the counter."""
    def version(command):
        try:
            return subprocess.run(command, capture_output=True, text=True).stdout.strip()
        except OSError:
            return "missing"
    return {"rustc": version(["rustc", "-V"]), "valgrind": version(["valgrind", "--version"])}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("driver", help="the built driver: target/release/examples/ir")
    parser.add_argument("--check", metavar="BASELINE", help="fail on a path over the baseline by >5%%")
    parser.add_argument("--write", metavar="BASELINE", help="write the counts as the new baseline")
    parser.add_argument("--paths", default=",".join(RUNS), help="comma-separated paths (all)")
    parser.add_argument("--verbose", action="store_true", help="print every run's count")
    args = parser.parse_args()
    global VERBOSE
    VERBOSE = args.verbose
    paths = args.paths.split(",")
    unknown = [p for p in paths if p not in RUNS]
    if unknown:
        sys.exit(f"ir: no such path: {', '.join(unknown)} (paths: {', '.join(RUNS)})")
    baseline = {}
    judged = True
    if args.check:
        with open(args.check) as f:
            document = json.load(f)
        baseline = document["instructions_per_request"]
        if document.get("measured_with", {}) != tools():
            # Another compiler or counter moves every count by itself: judging the code against
            # it would fail (or pass) for the wrong reason. Say so, and count without judging.
            print(f"# WARNING: the baseline was counted with {document.get('measured_with')}, "
                  f"this run uses {tools()}: the counts are shown, not judged; rewrite the "
                  f"baseline with --write under this toolchain")
            judged = False
    counts = measure(args.driver, paths)
    over = []
    print(f"{'path':<10}{'Ir/request':>12}{'baseline':>12}{'change':>9}")
    for path in paths:
        count, base = counts[path], baseline.get(path)
        if base is None:
            print(f"{path:<10}{count:>12,}{'(none)':>12}" + ("  no baseline: add it with --write" if args.check else ""))
            continue
        if judged and count > base * LIMIT:
            # Once more, to tell a regression from one noisy run.
            again = measure(args.driver, [path])[path]
            print(f"# {path}: {count:,} over the line; measured again: {again:,}")
            count = counts[path] = min(count, again)
            if count > base * LIMIT:
                over.append(path)
        flag = "  OVER" if path in over else ""
        if count < base / LIMIT:
            # Cheaper: a baseline left high would let the next change take it back unseen.
            flag = "  under: lower the baseline with --write"
        print(f"{path:<10}{count:>12,}{base:>12,}{(count / base - 1) * 100:>+8.1f}%{flag}")
    if args.write:
        if os.path.exists(args.write):
            # A subset of the paths (--paths) keeps the others' counts.
            with open(args.write) as f:
                counts = {**json.load(f)["instructions_per_request"], **counts}
        document = {
            "about": "Instructions per request of each hot path, counted by callgrind over "
                     "crates/muster/examples/ir.rs (.ci/ir.py); `watch` is one delivery. "
                     "A change that raises one by more than 5% updates this file and says why.",
            "measured_with": tools(),
            "instructions_per_request": counts,
        }
        with open(args.write, "w") as f:
            json.dump(document, f, indent=2)
            f.write("\n")
        print(f"wrote {args.write}")
    if over:
        sys.exit(f"ir: {', '.join(over)} cost more than {round((LIMIT - 1) * 100)}% over the baseline "
                 f"({args.check}); if that is intended, update it with --write and say why")


if __name__ == "__main__":
    main()
