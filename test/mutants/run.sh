#!/usr/bin/env bash
# make test-mutants: plants each defect of test/mutants/*.patch, one at a time, in a scratch copy of
# the committed tree (git archive HEAD), rebuilds what the tests need and runs the tests the patch names;
# the defect is caught when every one of them fails. Prints one line per defect and the mutation
# score; exits non-zero if a defect survives or a patch no longer applies (the code it plants into
# has changed: update the patch).
#   bash test/mutants/run.sh [NAME...]   only those patches (test/mutants/NAME.patch)
# A patch is a `git diff` with two header lines before it:
#   # what the defect is
#   # must fail: test_a test_b       (test/NAME.sh, or test/NAME.cpp built as build/NAME)
# and, where a scripted test needs more than ./train_gpt_cpu, an optional third line naming the make
# targets it runs (without them the test would fail for the wrong reason: a missing binary):
#   # build: megatron_data batch_lookup
cd "$(dirname "$0")/../.."
repo=$PWD
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
patches=()
if [ $# -gt 0 ]; then for n in "$@"; do patches+=("test/mutants/${n%.patch}.patch"); done
else patches=(test/mutants/*.patch); fi
scratch=$(mktemp -d /tmp/keel_mutants.XXXXXX)
logs=build/mutant_logs
mkdir -p "$logs"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/tree"
git archive HEAD | tar -x -C "$scratch/tree" || { echo "error: cannot copy the committed tree"; exit 1; }
ln -s "$PWD/data" "$scratch/tree/data"
caught=0 total=0 broken=0
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  total=$((total+1))
  [ -f "$p" ] || { echo "MISSING  $name"; broken=$((broken+1)); continue; }
  what=$(sed -n '1s/^# //p' "$p")
  tests=$(sed -n 's/^# must fail: //p' "$p")
  extra=$(sed -n '3s/^# build: //p' "$p")
  if [ -z "$tests" ]; then  # without it the loop below would run nothing and count the defect caught
    echo "NOTESTS  $name: no '# must fail:' line names the tests that must fail"
    broken=$((broken+1))
    continue
  fi
  if ! (cd "$scratch/tree" && git apply "$repo/$p") 2>"$logs/$name.apply"; then
    echo "STALE    $name: the patch no longer applies ($(head -1 "$logs/$name.apply"))"
    broken=$((broken+1))
    continue
  fi
  bins=()  # what the named tests run: a unit test its binary, a scripted test ./train_gpt_cpu
  for t in $tests; do if [ -f "test/$t.cpp" ]; then bins+=("build/$t"); else bins+=(train_gpt_cpu); fi; done
  if ! make -C "$scratch/tree" --no-print-directory NO_CUDA=1 $extra $(printf '%s\n' "${bins[@]}" | sort -u) >"$logs/$name.build" 2>&1; then
    # a defect the compiler rejects would be caught by any build; it is not a test of the suite
    echo "NOBUILD  $name: the planted defect does not compile (log $logs/$name.build)"
    broken=$((broken+1))
  else
    missed=""
    for t in $tests; do
      if [ -f "test/$t.sh" ]; then (cd "$scratch/tree" && bash "test/$t.sh") >"$logs/$name.$t.log" 2>&1
      else (cd "$scratch/tree" && "build/$t") >"$logs/$name.$t.log" 2>&1; fi
      [ $? -ne 0 ] || missed+=" $t"
    done
    if [ -z "$missed" ]; then caught=$((caught+1)); echo "caught   $name: $what ($tests)"
    else echo "SURVIVED $name: $what — passed:$missed (logs $logs/$name.*)"; fi
  fi
  (cd "$scratch/tree" && git apply -R "$repo/$p") || { echo "error: cannot take $name out again"; exit 1; }
done
echo "mutation score: $caught of $total defects caught"
[ "$caught" -eq "$total" ]
