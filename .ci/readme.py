#!/usr/bin/env python3
"""Runs the shell blocks of README.md and docs/*.md as a new user would, and fails when one
no longer does what its page says (SPEC U1).

Each page runs in a fresh directory against a fresh server: the page's own (a block marked
`<!-- readme.sh: server -->`, run in the background until the page ends) or, when the page
starts none, `muster serve` with its defaults. Blocks run in order with `bash -e`; `muster`
is the binary under test and `cargo run --release --` is replaced by it.

What a page says is checked three ways:
- a full-line comment right under a command (`# 10.0.0.1`) is output that command's block
  must print, in order: a line that starts with it (`... X`: holds it), whole words and
  numbers only (`1` is not `10`), runs of spaces as one, a duration as any duration;
- a ```text block marked `<!-- readme.sh: output -->` is output of the block before it;
- `<!-- readme.sh: background NAME -->` runs a block in the background (a watch), and
  `<!-- readme.sh: output NAME -->` on a ```text block waits for those lines in its output.

`<!-- readme.sh: until -->` runs a block that only reads again until it prints what the page
says (bounded): a mirror or an election a second away.
`<!-- readme.sh: skip REASON -->` leaves a block out, saying why (another machine, a
certificate authority, a package the CI stage installs elsewhere).

Usage: readme.py BINARY [PAGE...]
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIRECTIVE = re.compile(r"<!--\s*readme\.sh:\s*(\w[\w-]*)\s*(.*?)\s*-->")
DIRECTIVES = {"server", "background", "output", "until", "skip"}
WAIT_S = 20
BLOCK_TIMEOUT_S = 120


def blocks(page):
    """(line, language, text, directive, argument) for every fenced block of `page`."""
    lines = page.read_text().split("\n")
    found, directive, i = [], (None, ""), 0
    while i < len(lines):
        line = lines[i]
        match = DIRECTIVE.fullmatch(line.strip())
        if match:
            directive = (match.group(1), match.group(2))
            i += 1
            continue
        if line.startswith("```"):
            language, start, body = line[3:].strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            found.append((start, language, "\n".join(body), directive[0], directive[1]))
            directive = (None, "")
        elif line.strip():
            directive = (None, "")
        i += 1
    return found


def expected_in_script(text):
    """The output lines a block's comments promise: full-line comments right under a command
    (a comment after a blank line, or opening the block, is a heading, not output)."""
    expected, after_command = [], False
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("#"):
            if after_command and stripped[1:].strip():
                expected.append(stripped[1:].strip())
        else:
            after_command = bool(stripped)
    return expected


def normal(line):
    """Runs of spaces as one; a duration (`812ms`, `1.5s`) as any duration: a fresh server
    numbers its revisions, leases and incarnations as the page does, but time varies."""
    return re.sub(r"\b\d+(\.\d+)?(ms|s|µs)\b", "<duration>", " ".join(line.split()))


def matches(want, line):
    """Whether output `line` starts with `want` (a whole word or number at its end: `1` is not
    `10`); `... X` finds X anywhere in the line, on word boundaries too."""
    anywhere = want.startswith("... ")
    if anywhere:
        want = want[4:]
    start = line.find(want) if anywhere else (0 if line.startswith(want) else -1)
    while start >= 0:
        end = start + len(want)
        left = start == 0 or not (line[start - 1].isalnum() and want[0].isalnum())
        right = end == len(line) or not (line[end].isalnum() and want[-1].isalnum())
        if left and right:
            return True
        start = line.find(want, start + 1) if anywhere else -1
    return False


def missing(expected, output):
    """The first expected line not found (in order) in `output`, or None."""
    lines = [normal(line) for line in output.split("\n")]
    at = 0
    for want in expected:
        want_n = normal(want)
        while at < len(lines) and not matches(want_n, lines[at]):
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


def script(text):
    """The block as the runner runs it."""
    body = []
    for line in text.split("\n"):
        if re.match(r"\s*alias muster=", line):
            continue
        body.append(line.replace("cargo run --release --", "muster"))
    return "set -eo pipefail\n" + "\n".join(body) + "\n"


def http_addr(text):
    match = re.search(r"--http\s+(\S+)", text)
    return match.group(1) if match else "127.0.0.1:7070"


def up(addr, deadline):
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://{addr}/v1/status", timeout=1) as reply:
                if reply.status == 200 and b'"ready":true' in reply.read():
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


class Page:
    def __init__(self, path, binary):
        self.path = path
        self.dir = Path(tempfile.mkdtemp(prefix="readme-"))
        bin_dir = self.dir / ".bin"
        bin_dir.mkdir()
        (bin_dir / "muster").symlink_to(binary)
        self.env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
        self.env.pop("MUSTER_SERVER", None)
        self.env.pop("MUSTER_TOKEN", None)
        self.background = {}
        # Every block's process group: what a block left running (`serve ... &`) ends with
        # the page.
        self.groups = []
        self.last_output = ""
        self.failures = []

    def fail(self, line, why, output="", quiet=False):
        where = f"{self.path.relative_to(ROOT)}:{line}"
        self.failures.append(f"{where}: {why}\n{output[-3000:]}")
        if not quiet:
            print(f"FAIL {where}: {why}", flush=True)

    def start(self, name, text):
        log = self.dir / f".{name}.log"
        process = subprocess.Popen(
            ["bash", "-c", script(text)],
            cwd=self.dir,
            env=self.env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.background[name] = (process, log)
        return process, log

    def wait_for(self, name, expected, line):
        process, log = self.background[name]
        deadline = time.time() + WAIT_S
        while True:
            output = log.read_text(errors="replace")
            gone = missing(expected, output)
            if gone is None:
                return
            if time.time() > deadline:
                self.fail(line, f"'{name}' never printed: {gone}", output)
                return
            time.sleep(0.2)

    def run_until(self, line, text):
        deadline = time.time() + WAIT_S
        while True:
            failures = len(self.failures)
            self.run(line, text, quiet=time.time() < deadline)
            if len(self.failures) == failures or time.time() >= deadline:
                return
            self.failures.pop()
            time.sleep(0.5)

    def run(self, line, text, quiet=False):
        process = subprocess.Popen(
            ["bash", "-c", script(text)],
            cwd=self.dir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.groups.append(process.pid)
        try:
            output, _ = process.communicate(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            self.fail(line, f"still running after {BLOCK_TIMEOUT_S} s", output)
            return
        self.last_output = output
        if process.returncode != 0:
            self.fail(line, f"exit {process.returncode}", output, quiet)
            return
        gone = missing(expected_in_script(text), output)
        if gone is not None:
            self.fail(line, f"the page says it prints: {gone}", output, quiet)

    def serve(self, line, text):
        name = f"server{len(self.background)}"
        _, log = self.start(name, text)
        addr = http_addr(text)
        if not up(addr, time.time() + 60):
            self.fail(line, f"the server never answered on {addr}", log.read_text(errors="replace"))
            return
        self.wait_for(name, expected_in_script(text), line)

    def stop(self):
        """Ends every process the page started (servers started with `&` included) and waits
        until they are gone, so the next page finds its ports free."""
        groups = self.groups + [process.pid for process, _ in self.background.values()]
        for group in groups:
            signal_group(group, signal.SIGTERM)
        deadline = time.time() + 15
        while time.time() < deadline and any(signal_group(group, 0) for group in groups):
            for process, _ in self.background.values():
                process.poll()
            time.sleep(0.1)
        for group in groups:
            signal_group(group, signal.SIGKILL)
        for process, _ in self.background.values():
            process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def signal_group(group, number):
    """Sends `number` to process group `group`; whether the group was there."""
    try:
        os.killpg(group, number)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def run_page(path, binary):
    page = Page(path, binary)
    found = blocks(path)
    runnable = [b for b in found if b[1] == "sh" and b[3] != "skip"]
    if not runnable:
        return page.failures
    print(f"== {path.relative_to(ROOT)}", flush=True)
    unknown = [(line, d) for line, _, _, d, _ in found if d is not None and d not in DIRECTIVES]
    for line, directive in unknown:
        page.fail(line, f"unknown directive readme.sh: {directive} (one of {', '.join(sorted(DIRECTIVES))})")
    try:
        if not any(b[3] == "server" for b in found):
            page.serve(0, "muster serve")
        for line, language, text, directive, argument in found:
            if directive == "skip":
                print(f"   skip {path.relative_to(ROOT)}:{line}: {argument}", flush=True)
            elif language == "sh" and directive == "server":
                page.serve(line, text)
            elif language == "sh" and directive == "until":
                page.run_until(line, text)
            elif language == "sh" and directive == "background":
                page.start(argument, text)
                page.wait_for(argument, expected_in_script(text), line)
            elif language == "sh":
                page.run(line, text)
            elif directive == "output" and argument:
                page.wait_for(argument, [l for l in text.split("\n") if l.strip()], line)
            elif directive == "output":
                gone = missing([l for l in text.split("\n") if l.strip()], page.last_output)
                if gone is not None:
                    page.fail(line, f"the page shows: {gone}", page.last_output)
    finally:
        page.stop()
    return page.failures


def main():
    # Stopped from outside (CI's timeout): end the current page's processes on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    binary = Path(sys.argv[1]).resolve()
    pages = [Path(p).resolve() for p in sys.argv[2:]] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    failures = []
    for path in pages:
        failures += run_page(path, binary)
    for failure in failures:
        print(f"\n--- {failure}")
    print(f"\nreadme.sh: {len(pages)} pages, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
