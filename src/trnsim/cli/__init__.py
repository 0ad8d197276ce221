"""The `trnsim` command. Each subcommand lives in its own module of this package.

A subcommand module defines `register(subparsers)`, which adds its parser and sets
`run=<function(args) -> int>` as the parser default. Add the module's name to COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys

from trnsim import __version__
from trnsim.config import current
from trnsim.errors import TrnsimError

COMMANDS = ["specs", "compare", "run", "formats", "nccom", "plan"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trnsim", description="AWS Trainium in software.")
    parser.add_argument("--version", action="version", version=f"trnsim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"trnsim.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; a TrnsimError becomes one line on stderr and exit code 2.

    No command is a usage error like any other (help on stderr, exit code 2); a bad TRNSIM_*
    setting is refused before the command runs; Ctrl-C exits with 130 and a closed output pipe
    (`| head`) with 1 (as rich does for tables), both without a traceback.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        current()  # a bad TRNSIM_* value is a one-line error now, not a traceback mid-run
        return int(args.run(args) or 0)
    except TrnsimError as error:
        if _debug():
            raise
        print(f"trnsim: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("trnsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit's flush
        return 1


def _debug() -> bool:
    """TRNSIM_DEBUG, or False when the settings themselves are what is wrong."""
    try:
        return current().debug
    except TrnsimError:
        return False


def count(minimum: int = 1):
    """An argparse type: a whole number of at least `minimum` (a count of nodes, ranks, tokens)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}")
        return value
    parse.__name__ = "count"
    return parse


def amount(zero: bool = False):
    """An argparse type: a finite number above 0 (or at least 0 with `zero`): prices, tokens, ms."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"{text} must be a finite number {'>= 0' if zero else '> 0'}")
        return value
    parse.__name__ = "amount"
    return parse


def one_line(message: str) -> str:
    """A message that spans lines, joined into one: every error is one line of the output."""
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


if __name__ == "__main__":
    sys.exit(main())
