#!/usr/bin/env bash
# The project's test command (the README's, and CI's through .ci/run).
#
#   ci/test.sh            the default suite: unit tests, raw-guest and Linux KVM tests
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
threads="${HVSIM_TEST_THREADS:-2}"
# Formatting is checked first: it takes a second (rustfmt.toml sets the style).
cargo fmt --all --check
cargo fmt --manifest-path fuzz/Cargo.toml --check
# Lints next: warnings are errors, in every target (tests and benches too).
cargo clippy --workspace --all-targets -- -D warnings
cargo build --workspace --all-targets
# cargo-nextest (on every machine of this project's kind) schedules every
# test of every binary on one pool of threads: the Linux tests, which take
# most of the time, spread over both cores. Plain cargo test otherwise.
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --test-threads "$threads" --no-fail-fast --failure-output final
else
  cargo test --workspace -- --test-threads="$threads"
fi

# The C and Python guest SDKs test themselves outside hvsim.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -std=gnu11 -Wall -Wextra -Werror -O1 -o "$tmp/test_sdk" guest-sdk/c/test_sdk.c
"$tmp/test_sdk"
python3 -m unittest discover -s guest-sdk/python

# Fuzzing (ci/fuzz.sh, docs/fuzzing.md): every parser target for 5 s
# (about 25 s, 80 s when the parsers' crates changed); the slow suite
# instead fuzzes each target for at least 1,000,000 executions.
if [ "$slow" = 1 ]; then
  ci/fuzz.sh --full
else
  ci/fuzz.sh --smoke
fi
