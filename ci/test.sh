#!/usr/bin/env bash
# The project's test command (the README's, and CI's through .ci/run).
#
#   ci/test.sh            the default suite: unit tests, raw-guest KVM tests
#   ci/test.sh --slow     also the slow suites (see README)
#
# KVM tests skip with a printed reason where /dev/kvm cannot be opened;
# with HVSIM_REQUIRE_KVM=1 (set by CI) that is a failure instead.
set -euo pipefail
cd "$(dirname "$0")/.."

slow=0
for arg in "$@"; do
  case "$arg" in
    --slow) slow=1 ;;
    *) echo "usage: ci/test.sh [--slow]" >&2; exit 2 ;;
  esac
done

export HVSIM_SLOW_TESTS=$slow
cargo build --workspace --all-targets
cargo test --workspace -- --test-threads="${HVSIM_TEST_THREADS:-2}"
