#!/usr/bin/env bash
# Every planted defect of test/mutants/*.patch still applies to the code it plants into. The patches
# are run by `make test-mutants` (too slow for `make test`: each rebuilds and reruns tests), so a
# change to the code around a plant would otherwise leave the patch stale, unnoticed until the next
# mutation run; here `git apply --check` (no build) catches that in seconds. A stale patch is
# regenerated from the current code: plant the same defect again and `git diff`.
source "$(dirname "$0")/lib.sh"
command -v git >/dev/null || { fail "git not found"; finish; }
n=0
for p in test/mutants/*.patch; do
  n=$((n+1))
  head -2 "$p" | grep -q '^# must fail: ' || fail "$p: no '# must fail:' line among its first two"
  out=$(git apply --check "$p" 2>&1) || fail "$p no longer applies: $(head -1 <<<"$out")"
done
ok "$n planted defects apply to the current code"
# negative control: a patch whose context is gone is reported
bad="$TMP/stale.patch"
sed 's/^ \(.*\)$/ \1 stale/' "$(ls test/mutants/*.patch | head -1)" >"$bad"
git apply --check "$bad" >/dev/null 2>&1 && fail "a patch with changed context still applies: the check cannot fail" || ok "a patch whose context changed is refused (negative control)"
finish
