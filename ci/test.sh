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

# The C and Python guest SDKs test themselves outside hvsim.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -std=gnu11 -Wall -Wextra -Werror -O1 -o "$tmp/test_sdk" guest-sdk/c/test_sdk.c
"$tmp/test_sdk"
python3 -m unittest discover -s guest-sdk/python
