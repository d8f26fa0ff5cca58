#!/usr/bin/env python3
"""Every "DESIGN §N" that the sources cite is a section of docs/DESIGN.md.

Comments, tests and the README cite the design document by section number
("DESIGN §6", "docs/DESIGN.md §11", a range "DESIGN §4-5", or a citation
wrapped across comment lines: "(DESIGN\\n * §6)"). This check reads every
text file of the source tree (build folders, .git and ignored outputs left
out), collects those citations and fails, naming each file and line, when
one names a section that docs/DESIGN.md has no heading for ("## N. Title").
It also fails on a citation of the old out-of-tree copy (shared/DESIGN.md)
and when it finds no citation at all (a pattern that matches nothing proves
nothing).

    check_design_refs.py [ROOT]     # ROOT: the repository (default: ../..)
    check_design_refs.py --self-test

Exit 0 and "PASS: ..." when every citation lands, else 1 and "FAIL: ...".
"""
import os
import re
import sys
import tempfile

DESIGN = os.path.join("docs", "DESIGN.md")
# Folders that hold no sources: build trees, VCS data, generated outputs.
SKIP_DIRS = {".git", "__pycache__", "gpu-bundle", "gpu-bundle.new", "gpu-blocks",
             "gpu-check-out", "out", "corpus", "figures"}
SKIP_SUFFIXES = (".png", ".npy", ".safetensors", ".so", ".o", ".a", ".gz", ".pyc")
# "DESIGN" or "DESIGN.md", then blanks, possibly a line break and the next
# comment line's leader (" * ", "// ", "# "), then § and a number or range.
CITATION = re.compile(
    r"DESIGN(?:\.md)?(?:[ \t]|\n[ \t]*(?:\*|//|#|--|;)?)*§[ \t]*(\d+)(?:[ \t]*[-–][ \t]*(\d+))?")
HEADING = re.compile(r"^## (\d+)\. \S", re.MULTILINE)
OLD_COPY = re.compile(r"shared/DESIGN\.md")


def sections(root):
    with open(os.path.join(root, DESIGN), encoding="utf-8") as f:
        return {int(n) for n in HEADING.findall(f.read())}


def source_files(root):
    for directory, dirs, files in os.walk(root):
        rel = os.path.relpath(directory, root)
        dirs[:] = sorted(d for d in dirs
                         if d not in SKIP_DIRS and not (rel == "." and d.startswith("build")))
        for name in sorted(files):
            path = os.path.join(directory, name)
            if name.endswith(SKIP_SUFFIXES) or os.path.relpath(path, root) == DESIGN:
                continue
            if os.path.abspath(path) == os.path.abspath(__file__):
                continue  # its examples are not citations
            yield path


def citations(root):
    """(path relative to root, line, first section, last section) for each
    citation, and each citation of the old out-of-tree copy."""
    found, old = [], []
    for path in source_files(root):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue  # not a text file
        rel = os.path.relpath(path, root)
        for match in CITATION.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            first = int(match.group(1))
            last = int(match.group(2)) if match.group(2) else first
            found.append((rel, line, first, last))
        for match in OLD_COPY.finditer(text):
            old.append((rel, text.count("\n", 0, match.start()) + 1))
    return found, old


def check(root):
    """Returns (ok, report lines)."""
    try:
        have = sections(root)
    except OSError as error:
        return False, [f"FAIL: cannot read {DESIGN}: {error.strerror or error}"]
    found, old = citations(root)
    bad = [f"{rel}:{line}: cites DESIGN §{first}" + (f"-{last}" if last != first else "") +
           f", but {DESIGN} has no section {n}"
           for rel, line, first, last in found
           for n in range(first, last + 1) if n not in have]
    bad += [f"{rel}:{line}: cites shared/DESIGN.md, which is not in the repository "
            f"(cite {DESIGN})" for rel, line in old]
    if not found:
        bad.append("no DESIGN § citation found at all (is ROOT the repository?)")
    files = len({rel for rel, _, _, _ in found})
    if bad:
        return False, [f"FAIL: {len(bad)} citation(s) do not land:"] + ["  " + b for b in bad]
    cited = sorted({n for _, _, first, last in found for n in range(first, last + 1)})
    return True, [f"PASS: {len(found)} citations in {files} files, sections "
                  f"{', '.join(map(str, cited))} of {DESIGN} (which has "
                  f"{', '.join(map(str, sorted(have)))})"]


def self_test():
    """The check must pass on a tree whose citations land and fail, naming
    file and line, on one that cites a missing section."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "src"))
        os.makedirs(os.path.join(root, "build", "x"))
        with open(os.path.join(root, DESIGN), "w") as f:
            f.write("# D\n\n## 1. One\n\ntext §9\n\n## 2. Two\n")
        with open(os.path.join(root, "src", "a.c"), "w") as f:
            f.write("/* DESIGN §1 */\n/* a range (DESIGN §1-2) and a wrapped one (DESIGN\n"
                    " * §2) */\n")
        with open(os.path.join(root, "build", "x", "gen.c"), "w") as f:
            f.write("/* DESIGN §7: build trees are not sources */\n")
        ok, lines = check(root)
        assert ok and lines[0].startswith("PASS: 3 citations in 1 files"), lines
        with open(os.path.join(root, "src", "b.py"), "w") as f:
            f.write("x = 1\n# see docs/DESIGN.md §3\n")
        with open(os.path.join(root, "src", "c.h"), "w") as f:
            f.write("/* DESIGN §2-4 */\n")
        ok, lines = check(root)
        text = "\n".join(lines)
        assert not ok, lines
        assert "src/b.py:2: cites DESIGN §3, but docs/DESIGN.md has no section 3" in text, text
        assert "src/c.h:1: cites DESIGN §2-4, but docs/DESIGN.md has no section 4" in text, text
        assert "section 2\n" not in text + "\n", text
        with open(os.path.join(root, "src", "b.py"), "w") as f:
            f.write("# see ../shared/DESIGN.md\n")
        os.remove(os.path.join(root, "src", "c.h"))
        ok, lines = check(root)
        assert not ok and "src/b.py:1: cites shared/DESIGN.md" in "\n".join(lines), lines
    print("PASS: self-test (a missing section and the old copy fail, wrapped lines and "
          "ranges are read, build trees are skipped)")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(__file__), "..", "..")
    ok, lines = check(os.path.abspath(root))
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
