#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time on top of the committed seed corpus.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [--release]      (default 60)
#
# The default build is unoptimized with overflow checks and debug assertions (an overflow is
# a finding too): it builds in about 3.5 minutes from cold on 2 cores where `--release` takes
# about 9.5, and runs 2.5-4.5x fewer inputs a second. The test command's short run uses it;
# pass --release for long runs.
#
# Needs the nightly toolchain (rustup) and cargo-fuzz (installed from crates.io on first use).
# New inputs go to a scratch corpus, so the committed seeds stay as they are; a crash leaves
# its input in fuzz/artifacts/<target>/ and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
BUILD=--dev
case "${2:-}" in
  --release) BUILD=-O ;;
  "") ;;
  *) echo "usage: $0 [SECONDS_PER_TARGET] [--release]" >&2; exit 2 ;;
esac
if ! rustup toolchain list | grep -q nightly && ! rustup toolchain install nightly --profile minimal; then
  echo "fuzz: SKIPPED: no nightly toolchain here and none could be installed" >&2
  exit 0
fi
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
cd fuzz
cargo +nightly fuzz build "$BUILD"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in $(cargo +nightly fuzz list); do
  mkdir -p "$scratch/$target"
  echo "fuzz: $target for ${SECONDS_PER_TARGET}s"
  cargo +nightly fuzz run "$BUILD" "$target" "$scratch/$target" "corpus/$target" -- \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    2>&1 | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==|SUMMARY|Done)" || true
  # cargo fuzz exits non-zero on a crash; grep's status is masked, so check artifacts too.
  if [ -n "$(ls -A "artifacts/$target" 2>/dev/null)" ]; then
    echo "fuzz: $target found a failing input: fuzz/artifacts/$target" >&2
    exit 1
  fi
done
echo "fuzz: ok"
