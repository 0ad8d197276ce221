"""`trnsim run SCRIPT [ARGS...]`: run a Python script with `import nki` aliased to trnsim.nki.

    trnsim run my_kernels.py --size 256      # the script's own `import nki` now runs on trnsim

The aliases are the ones `trnsim.nki.compat.enable()` installs; a real nki installation is
never shadowed (the command stops with an error instead).
"""

from __future__ import annotations

import argparse
import runpy
import sys

from trnsim.nki import compat


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run a script with `import nki` mapped to trnsim.nki",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script", help="the Python file to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    parser.set_defaults(run=run)


def run(args) -> int:
    compat.enable()
    saved_argv = sys.argv
    sys.argv = [args.script, *args.script_args]
    try:
        runpy.run_path(args.script, run_name="__main__")
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.argv = saved_argv
    return 0
