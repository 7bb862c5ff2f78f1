#!/usr/bin/env bash
# The project's test command (the README's, and CI's through .ci/run).
#
#   ci/test.sh            the default suite: formatting, lints, unit, property,
#                         raw-guest and Linux KVM tests, the SDKs' own tests,
#                         every fuzz target's corpus replayed
#   ci/test.sh --quick    the inner loop: formatting, lints, unit, property and
#                         raw-guest tests (no Linux boot, no fuzzing)
#   ci/test.sh --slow     the default suite and the slow suites, with every fuzz
#                         target fuzzed (docs/testing.md)
#
# KVM tests skip with a printed reason where /dev/kvm cannot be opened;
# with HVSIM_REQUIRE_KVM=1 (set by CI) that is a failure instead.
# .config/nextest.toml schedules the tests: longest first, each test thread
# pinned to a CPU of its own (ci/lane.py); each run writes a JUnit report,
# and the 15 slowest tests are printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=default
for arg in "$@"; do
  case "$arg" in
    --quick) mode=quick ;;
    --slow) mode=slow ;;
    *) echo "usage: ci/test.sh [--quick|--slow]" >&2; exit 2 ;;
  esac
done
start=$SECONDS
stamp() { echo "ci/test.sh: $1 at $((SECONDS - start)) s" >&2; }

export HVSIM_SLOW_TESTS=$([ "$mode" = slow ] && echo 1 || echo 0)
threads="${HVSIM_TEST_THREADS:-2}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
# Scratch space, and what runs in the background below: none outlives the run,
# whether it passes, fails or is interrupted.
tmp=$(mktemp -d)
fuzz_pid=
prep_pid=
cleanup() {
  rm -rf "$tmp"
  for pid in $fuzz_pid $prep_pid; do kill "$pid" 2>/dev/null; done
  true
}
trap cleanup EXIT

# Formatting first: it takes a second (rustfmt.toml sets the style). Then
# the layering rule: no file imports a file that imports it back
# (docs/architecture.md).
cargo fmt --all --check
python3 ci/circles.py

# Lints ride on the build: clippy's driver compiles the workspace's own
# crates (cargo runs it as `cargo clippy` does, through
# RUSTC_WORKSPACE_WRAPPER), so every build below lints what it compiles,
# with warnings as errors, and the dependencies are compiled once instead
# of twice (a separate `cargo clippy` checked them all again: 7 minutes of
# a fresh machine's set-up). The builds below cover every target of
# `cargo clippy --all-targets` (there are no benches or cargo examples).
# The gate is itself checked: a known lint must stop a build.
clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
if [ ! -x "$clippy_driver" ]; then
  echo "ci/test.sh: clippy is not installed ($clippy_driver; rustup component add clippy)" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
echo 'pub fn len(v: &Vec<u8>) -> usize { v.len() }' >"$tmp/canary.rs"
if "$clippy_driver" rustc --edition 2021 --crate-type lib --emit metadata --out-dir "$tmp" "$tmp/canary.rs" 2>/dev/null; then
  echo "ci/test.sh: clippy's driver let clippy::ptr_arg through; the lints would not stop a build" >&2
  exit 1
fi
# What the tests use is made in the background while the workspace
# builds: the guest kernel (about 5 minutes the first time on a machine),
# the Debian images the default suite runs (about a minute each) and the
# Debian tools the tests call. Each is a no-op when cached and logs its
# progress (printed when it is done). The hvsim binary that makes them is
# built first, alone, so that on a fresh machine the kernel's build and
# the images' downloads overlap the rest; it runs from a copy, which the
# tests' build cannot relink under it. The first Linux test then measures
# itself, not the machine's set-up.
prep_log="$tmp/prepare.log"
if [ "$mode" != quick ]; then
  cargo build --workspace --bin hvsim
  stamp "built hvsim"
  hvsim="$tmp/hvsim"
  cp "$target/debug/hvsim" "$hvsim"
  (
    set -e
    # The kernel compiles while the images download and unpack.
    "$hvsim" kernel build &
    kernel=$!
    for image in redis python-antithesis postgres mariadb; do
      "$hvsim" image debian "--$image" >/dev/null
    done
    wait "$kernel"
    # Debian's tools the tests use: shellcheck for the example scripts; a
    # registry (the CNCF distribution registry), skopeo to push to it, and
    # htpasswd, openssl and PyJWT for its password, private CA and token
    # service (the registry tests); Slurm and munge, for a cluster of one node (the scale
    # tests); xmllint, which validates JUnit reports. After the kernel,
    # whose build installs its own packages (one apt at a time).
    tools="shellcheck:shellcheck docker-registry:docker-registry skopeo:skopeo htpasswd:apache2-utils openssl:openssl
      slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge xmllint:libxml2-utils"
    missing=$(for t in $tools; do command -v "${t%%:*}" >/dev/null || echo "${t#*:}"; done)
    # The token service of the registry tests signs its tokens in Python.
    python3 -c 'import jwt, cryptography' 2>/dev/null || missing="$missing python3-jwt python3-cryptography"
    if [ -n "$missing" ]; then
      if [ "$(id -u)" = 0 ]; then
        # shellcheck disable=SC2086 # one package a word
        apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1 \
          || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $missing >/dev/null; }
      else
        echo "ci/test.sh: not installed: $missing (Debian's packages); the tests that use them will say so" >&2
      fi
    fi
  ) >"$prep_log" 2>&1 &
  prep_pid=$!
  echo "ci/test.sh: making the guest kernel and images in the background (log: $prep_log)" >&2
fi
# Every binary, then the test binaries as cargo-nextest builds them, while
# the kernel and images may still be in the making.
cargo build --workspace --bins
cargo test --workspace --no-run
stamp "built and linted"
if [ -n "$prep_pid" ]; then
  prep_status=0
  wait "$prep_pid" || prep_status=$?
  prep_pid=
  cat "$prep_log" >&2
  if [ "$prep_status" != 0 ]; then
    echo "ci/test.sh: making the guest kernel or images failed (status $prep_status; log above)" >&2
    exit 1
  fi
  stamp "prepared"
fi

# Fuzzing (ci/fuzz.sh, docs/fuzzing.md) is the slow suite's: it runs beside
# the tests at the lowest CPU priority, taking only the time they leave
# unused. The default suite replays every target's corpus and regressions
# (the fuzz crate's tests) instead: a few seconds of AFL++ per target added
# little to that and cost an instrumented release build of the workspace,
# 17 minutes of CPU on a fresh machine (docs/testing.md).
fuzz_log="$target/fuzz-$mode.log"
if [ "$mode" = slow ]; then
  mkdir -p "$target"
  # cargo-afl builds with its own flags and no lints.
  env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS nice -n 19 ci/fuzz.sh --full >"$fuzz_log" 2>&1 &
  fuzz_pid=$!
fi
# cargo-nextest is on every machine of this project's kind; plain cargo
# test runs the same tests (without the schedule and the report) elsewhere.
status=0
profile=default
case "$mode" in
  quick) filter=(-E 'not group(linux)') ;;
  slow) filter=(--run-ignored all); profile=slow ;;
  *) filter=() ;;
esac
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --profile "$profile" --test-threads "$threads" --no-fail-fast \
    --failure-output final "${filter[@]}" || status=$?
  stamp "tests ended"
  # The 15 tests that took longest: where the suite's time goes.
  junit="target/nextest/$profile/junit.xml"
  if [ -f "$junit" ]; then
    python3 ci/slowest.py "$junit" 15
  else
    echo "ci/test.sh: no JUnit report at $junit" >&2
  fi
else
  echo "ci/test.sh: cargo-nextest not found; cargo test runs the tests without the Linux tests' schedule" >&2
  ignored=()
  [ "$mode" = slow ] && ignored=(--include-ignored)
  cargo test --workspace -- --test-threads="$threads" "${ignored[@]}" || status=$?
fi

# The C and Python guest SDKs test themselves outside hvsim.
gcc -std=gnu11 -Wall -Wextra -Werror -O1 -o "$tmp/test_sdk" guest-sdk/c/test_sdk.c
"$tmp/test_sdk" || status=$?
python3 -m unittest discover -s guest-sdk/python || status=$?

if [ -n "$fuzz_pid" ]; then
  fuzz_status=0
  wait "$fuzz_pid" || fuzz_status=$?
  fuzz_pid=
  cat "$fuzz_log"
  if [ "$fuzz_status" != 0 ]; then
    echo "ci/test.sh: fuzzing failed (status $fuzz_status; log above, $fuzz_log)" >&2
    status=1
  fi
fi
stamp "done (status $status)"
exit "$status"
