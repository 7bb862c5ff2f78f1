#!/usr/bin/env bash
# Builds the example statically with SanitizerCoverage, as a user would
# build a program for hvsim (docs/sdk-protocol.md), into a target
# directory outside the repository; prints the binary's path. Used by
# cli/tests/sdk.rs and `hvsim bench explore --linux`.
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
echo "$target/x86_64-unknown-linux-gnu/release/antithesis-vault"
