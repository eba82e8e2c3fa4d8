#!/usr/bin/env bash
# test_docs.sh — the documentation holds together: every link in the repository's Markdown and every
# `docs/PAGE.md#anchor` a source comment, help text or message cites resolves to a file and a
# heading inside the repository (GitHub's anchor rule); nothing cites documents a reader of the
# repository does not have (the engineers' notes, issue numbers); the README's front page stays
# short; a LICENSE exists. A broken link or a stray citation fails with its file and line.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 - <<'EOF'
import os, re, subprocess, sys

fails = []
def fail(msg): fails.append(msg); print("FAIL", msg)

def slug(heading):
    # GitHub: lower-case, drop everything but letters, digits, spaces, '-' and '_', spaces to '-'
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")

anchor_cache = {}
def anchors(path):
    if path not in anchor_cache:
        seen, out, fence = {}, set(), False
        for line in open(path, encoding="utf-8"):
            if line.startswith("```"): fence = not fence
            m = None if fence else re.match(r"^(#{1,6}) +(.*?) *#*$", line.rstrip("\n"))
            if not m: continue
            s = slug(m.group(2))
            n = seen.get(s, 0); seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
        anchor_cache[path] = out
    return anchor_cache[path]

def check_target(src, where, target):
    # src: the file whose directory a relative link starts from; where: what the message names
    path, _, frag = target.partition("#")
    full = os.path.normpath(os.path.join(os.path.dirname(src), path)) if path else src
    if not os.path.exists(full):
        return fail(f"{where}: link to {target}: no file {full}")
    if frag and full.endswith(".md") and frag not in anchors(full):
        fail(f"{where}: link to {target}: {full} has no heading with anchor #{frag}")

tracked = subprocess.check_output(["git", "ls-files", "--cached", "--others", "--exclude-standard"], text=True).split()
tracked = [f for f in tracked if os.path.isfile(f)]
md = [f for f in tracked if f.endswith(".md")]
links = 0
for f in md:
    fence = False
    for i, line in enumerate(open(f, encoding="utf-8"), 1):
        if line.startswith("```"): fence = not fence
        if fence: continue
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z]+://|^mailto:", target): continue
            links += 1; check_target(f, f"{f}:{i}", target)

# citations of the docs from code, scripts, help text and messages: docs/PAGE.md#a, #b, #c
code = [f for f in tracked if re.search(r"\.(h|cuh|cu|cpp|c|sh|py|js|args|sbatch)$|(^|/)Makefile$", f)]
cites = 0
for f in code:
    for i, line in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
        for m in re.finditer(r"docs/([a-z0-9-]+\.md)((?:#[A-Za-z0-9_-]+)?(?:, #[A-Za-z0-9_-]+)*)", line):
            cites += 1
            frags = re.findall(r"#([A-Za-z0-9_-]+)", m.group(2)) or [""]
            for frag in frags:
                check_target("README.md", f"{f}:{i}", "docs/" + m.group(1) + ("#" + frag if frag else ""))

# nothing cites what a reader of the repository does not have
stray = re.compile(r"\.\./shared|\b(KNOBS|DESIGN)(\.md)?\s*§|\b(KNOBS|DESIGN|STYLE|CUDA_EMULATION)\.md\b|\bSTYLE\s+[0-9]|§\s?[0-9]|\b[Ii]ssues?\s+#?[0-9]+")
for f in md + code:
    if f == "test/test_docs.sh": continue
    for i, line in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
        if stray.search(line): fail(f"{f}:{i}: cites a document outside the repository: {line.strip()[:120]}")

n = sum(1 for _ in open("README.md", encoding="utf-8"))
if n > 400: fail(f"README.md has {n} lines; the front page stays within 400 (move detail into docs/)")
if not os.path.isfile("LICENSE"): fail("no LICENSE file")
listed = set(re.findall(r"\]\((docs/[a-z0-9-]+\.md)\)", open("README.md", encoding="utf-8").read()))
for page in sorted(f for f in tracked if re.match(r"^docs/[^/]+\.md$", f)):
    if page not in listed: fail(f"{page} is not in the README's map of the docs")

print(f"{len(md)} Markdown files, {links} links, {cites} citations from code; README {n} lines")
print("test_docs:", "FAIL" if fails else "PASS", f"({len(fails)} problems)")
sys.exit(1 if fails else 0)
EOF
