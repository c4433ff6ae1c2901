"""A fake model command for the `cli` provider kind (tests and the demo).

    python -m fakes.cli_model [--prompt TEXT] [--model NAME] [--lines N]
                              [--delay S] [--fail STATUS] [--stderr TEXT]
                              [--hang] [--ignore-term] [--pid-file PATH]
                              [--echo-env NAME] [--after-lines N]

Reads the prompt from `--prompt` or else all of stdin, then prints a
deterministic reply line by line (flushing each line, `--delay` seconds
apart): `Hello from <model>.`, `You said: <first prompt line>`,
`Line 3 of N.`, … . Only the standard library: any Python 3 runs it.

Faults, for tests: `--fail STATUS` exits with STATUS after `--after-lines`
lines (default 0) and writes `--stderr` text to stderr; `--hang` sleeps
for ever after those lines (`--ignore-term` ignores SIGTERM, so only SIGKILL
ends it); `--pid-file` gets the pid first thing; `--echo-env NAME` prints
`NAME=<value>` (or `NAME unset`) as a line of the reply.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def reply(prompt: str, model: str, lines: int) -> list[str]:
    first = prompt.strip().splitlines()[0] if prompt.strip() else ""
    out = [f"Hello from {model}.", f"You said: {first}"]
    out += [f"Line {i} of {lines}." for i in range(3, lines + 1)]
    return out[:lines]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fakes.cli_model", description="a fake model command")
    parser.add_argument("--prompt", help="the prompt (else read from stdin)")
    parser.add_argument("--model", default="cli-model")
    parser.add_argument("--lines", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between lines")
    parser.add_argument("--fail", type=int, default=0, metavar="STATUS", help="exit with STATUS")
    parser.add_argument("--stderr", default="", help="text written to stderr")
    parser.add_argument("--after-lines", type=int, default=0, help="lines printed before --fail / --hang act")
    parser.add_argument("--hang", action="store_true", help="never finish")
    parser.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM")
    parser.add_argument("--pid-file")
    parser.add_argument("--echo-env", action="append", default=[], metavar="NAME")
    args = parser.parse_args(argv)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.pid_file:
        with open(args.pid_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(args.pid_file + ".tmp", args.pid_file)  # whole, or not there
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    if args.stderr:
        sys.stderr.write(args.stderr + "\n")
        sys.stderr.flush()
    lines = reply(prompt, args.model, args.lines)
    lines += [f"{name}={os.environ[name]}" if name in os.environ else f"{name} unset" for name in args.echo_env]
    faulty = args.fail or args.hang
    for i, line in enumerate(lines):
        if faulty and i >= args.after_lines:
            break
        if i and args.delay:
            time.sleep(args.delay)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    if args.hang:
        while True:
            time.sleep(3600)
    return args.fail


if __name__ == "__main__":
    raise SystemExit(main())
