"""What the ignore rules cost a walk: the walk with respect_gitignore=false is the floor, measured
in the same run (rounds interleaved; min of --runs per setting).

    python bench/ignore_walk.py --corpus DIR [--runs N]

The corpus is changed while this runs: .gitignore files are added (at the top and in 5 folders),
then removed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import file_utils  # noqa: E402

ROOT_RULES = """# build output and tool state
*.pyc
__pycache__/
build/
dist/
/out/
*.log
*.tmp
.DS_Store
coverage/
.env
*.swp
*~
docs/_build/
**/generated/
/site/
*.egg-info/
!important.log
"""
NESTED_RULES = "*.bak\n/local/\n!keep.bak\ndrafts/*.md\n"
#: A long generated file, as large project templates are (200 rules of the usual shapes).
LONG_RULES = "".join(f"*.ext{n}\n/top{n}/\n**/cache{n}/\nsub{n}/**/*.o\n[Bb]in{n}/\n" for n in range(40))


def walk(root: Path, **settings: object) -> int:
    rules = file_utils.FileFilter((".md", ".txt", ".rst"), (), 10 << 20, Path("/nonexistent-index-dir"), **settings)
    return sum(1 for _ in file_utils.walk_source(root, rules, lambda *skip: None))


def interleaved(settings: dict[str, Callable[[], int]], runs: int) -> dict[str, tuple[float, int]]:
    best: dict[str, tuple[float, int]] = {name: (float("inf"), 0) for name in settings}
    for _ in range(runs):
        for name, run in settings.items():
            started = time.perf_counter()
            files = run()
            elapsed = time.perf_counter() - started
            if elapsed < best[name][0]:
                best[name] = (elapsed, files)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    root = args.corpus.resolve()
    folders = sorted({path.parent for path in root.rglob("*.md")})
    written = [root / ".gitignore"] + [folder / ".gitignore" for folder in folders[:: max(1, len(folders) // 5)][:5]]
    if any(path.exists() for path in written):
        sys.exit("the corpus already has .gitignore files where this would write them")
    walk(root)  # warm the caches
    results = interleaved({"floor: respect_gitignore=false": lambda: walk(root, respect_gitignore=False),
                           "on, no rule files": lambda: walk(root)}, args.runs)
    try:
        written[0].write_text(ROOT_RULES)
        for path in written[1:]:
            path.write_text(NESTED_RULES)
        results.update(interleaved({
            "floor again, rule files present": lambda: walk(root, respect_gitignore=False),
            f"on, {ROOT_RULES.count(chr(10)) - 1} rules at the top + {len(written) - 1} nested files": lambda: walk(root),
            "same + exclude_patterns drafts/**, **/*.tmp.md": lambda: walk(root, exclude_patterns=("drafts/**", "**/*.tmp.md")),
        }, args.runs))
        written[0].write_text(LONG_RULES)
        results.update(interleaved({
            "floor, long rule file present": lambda: walk(root, respect_gitignore=False),
            f"on, {LONG_RULES.count(chr(10))} rules at the top + {len(written) - 1} nested files": lambda: walk(root),
        }, args.runs))
    finally:
        for path in written:
            path.unlink(missing_ok=True)
    floor = results["floor: respect_gitignore=false"][0]
    print(f"{root}: min of {args.runs} interleaved runs; ratio to the floor")
    for name, (seconds, files) in results.items():
        print(f"  {name:62} {seconds * 1000:8.1f} ms  {seconds / floor:5.2f}x  {files} files")


if __name__ == "__main__":
    main()
