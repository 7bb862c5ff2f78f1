#!/usr/bin/env bash
# Builds the example statically with SanitizerCoverage, as a user would
# build a program for hvsim (docs/sdk-protocol.md), into a target
# directory outside the repository; prints the path of the binary asked
# for: the vault (default) or, with `family`, the family of programs
# (src/bin/antithesis-family.rs). Used by cli/tests/sdk.rs and `hvsim
# bench explore --linux` and `--family`.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
target="${HVSIM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hvsim}/examples-target"
# A build inside another cargo (tests) must not inherit its target, flags
# or compiler wrapper (ci/test.sh lints through clippy's driver).
unset CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_TARGET CARGO_TARGET_DIR RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
RUSTFLAGS="-C target-feature=+crt-static -C passes=sancov-module \
 -C llvm-args=-sanitizer-coverage-level=3 -C llvm-args=-sanitizer-coverage-trace-pc-guard" \
    "${CARGO:-cargo}" build --release --locked --quiet --target x86_64-unknown-linux-gnu \
    --manifest-path "$here/Cargo.toml" --target-dir "$target" >&2
case "${1:-vault}" in
  vault) echo "$target/x86_64-unknown-linux-gnu/release/antithesis-vault" ;;
  family) echo "$target/x86_64-unknown-linux-gnu/release/antithesis-family" ;;
  *) echo "usage: build.sh [vault|family]" >&2; exit 2 ;;
esac
