"""Code lines per package, counted the way tinygrad's sz.py does: lines that carry a token.

Comments, blank lines and docstrings do not count. Exits non-zero when a package is over its
budget (STYLE.md), so CI can enforce the budgets.

    python tools/loc.py
"""

from __future__ import annotations

import io
import pathlib
import sys
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[1] / "src" / "trnsim"
BUDGETS = {"core": 4000}
SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
        tokenize.ENCODING, tokenize.ENDMARKER}


def code_lines(path: pathlib.Path) -> int:
    """Lines holding a token that is neither a comment nor a docstring."""
    lines: set[int] = set()
    previous = tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        is_docstring = token.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT,
                                                                      tokenize.DEDENT)
        if token.type not in SKIP and not is_docstring:
            lines.update(range(token.start[0], token.end[0] + 1))
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token.type
    return len(lines)


def package_lines(root: pathlib.Path = ROOT) -> dict[str, int]:
    totals: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        package = relative.parts[0] if len(relative.parts) > 1 else "(top)"
        totals[package] = totals.get(package, 0) + code_lines(path)
    return totals


def main() -> int:
    totals = package_lines()
    over = []
    for package, lines in sorted(totals.items(), key=lambda item: -item[1]):
        budget = BUDGETS.get(package)
        mark = f"  (budget {budget})" if budget else ""
        print(f"{package:<14}{lines:>7}{mark}")
        if budget and lines > budget:
            over.append(package)
    print(f"{'total':<14}{sum(totals.values()):>7}")
    if over:
        print(f"over budget: {', '.join(over)}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
