#!/usr/bin/env bash
# Coverage-guided fuzzing of hvsim's parsers with AFL++ through cargo-afl
# (docs/fuzzing.md).
#
#   ci/fuzz.sh [--smoke]         every target for a few seconds (default)
#   ci/fuzz.sh --full            every target for at least 1,000,000 executions
#   ci/fuzz.sh --full TARGET...  only these targets (see fuzz/src/lib.rs)
#
# Installs cargo-afl and builds AFL++'s runtime the first time (about two
# minutes), builds the instrumented harness into $CARGO_TARGET_DIR/afl (target/afl/), runs the
# targets HVSIM_FUZZ_JOBS (default 2) at a time from fuzz/corpus/TARGET,
# and fails if any target crashed or hung (or, with --full, ran fewer
# executions than asked). Findings stay in target/afl/out/MODE/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=smoke
targets=()
for arg in "$@"; do
  case "$arg" in
    --smoke) mode=smoke ;;
    --full) mode=full ;;
    -*) echo "usage: ci/fuzz.sh [--smoke|--full] [TARGET...]" >&2; exit 2 ;;
    *) targets+=("$arg") ;;
  esac
done
if [ ${#targets[@]} = 0 ]; then
  targets=(snapshot bug_record fault_plan sdk diff_log compose layer_path virtio hypercall layers image history txn_history registry)
fi
case "$mode" in
  smoke) bound=(-V "${HVSIM_FUZZ_SECONDS:-5}") ;;
  full) bound=(-E "${HVSIM_FUZZ_EXECS:-1000000}") ;;
esac
jobs="${HVSIM_FUZZ_JOBS:-2}"

# The tools, once per machine: cargo-afl (the version of fuzz/Cargo.toml's
# `afl`) and AFL++ built for this rustc.
afl_version=0.18.2
if ! cargo afl --version 2>/dev/null | grep -q "$afl_version"; then
  cargo install --locked --force cargo-afl --version "$afl_version"
fi
rustc_version=$(rustc --version | awk '{print $2}')
afl_data="${XDG_DATA_HOME:-$HOME/.local/share}/afl.rs"
if ! compgen -G "$afl_data/rustc-$rustc_version-*/afl.rs-$afl_version/afl/bin/afl-fuzz" >/dev/null; then
  cargo afl config --build
fi

# Under CI's cached target directory when it sets one (.ci/run), so a
# fresh clone does not rebuild the harness's dependencies; apart from the
# workspace's own builds, whose flags differ (AFL++'s instrumentation). The
# fuzz crate's lints and tests (they replay every target's corpus) run with
# the workspace's (ci/test.sh).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/afl"
cargo afl build --profile fuzz --features afl -p hvsim-fuzz
harness="$CARGO_TARGET_DIR/fuzz/hvsim-fuzz"

# No UI, no checks of this host's CPU governor or core-dump handler (a
# container's), no pinning to cores (other work may hold them).
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1
export AFL_FAST_CAL=1 AFL_QUIET=1
# The extraction targets write a scratch directory per input: in memory
# where there is a tmpfs.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi

out_root="$CARGO_TARGET_DIR/out/$mode"
run() {
  local t=$1 out="$out_root/$1"
  rm -rf "$out"
  mkdir -p "$out"
  # -t: an input that takes longer than 1 s is a hang; -m: an input that
  # makes the harness map more than 2 GiB is a crash.
  cargo afl fuzz -i "fuzz/corpus/$t" -o "$out" -t 1000 -m 2048 "${bound[@]}" -- "$harness" "$t" \
    >"$out/afl.log" 2>&1 || echo "$t: afl-fuzz exited with status $? (see $out/afl.log)" >&2
}

start=$SECONDS
running=0
for t in "${targets[@]}"; do
  [ -d "fuzz/corpus/$t" ] || { echo "ci/fuzz.sh: no target $t (no fuzz/corpus/$t)" >&2; exit 2; }
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run "$t" &
  running=$((running + 1))
done
wait

field() { sed -n "s/^$1 *: *//p" "$2" | head -n1; }
failed=0
printf '%-11s %10s %9s %7s %7s %5s %7s\n' target execs exec/s seconds crashes hangs corpus
for t in "${targets[@]}"; do
  s="$out_root/$t/default/fuzzer_stats"
  if [ ! -f "$s" ]; then
    echo "$t: no fuzzer_stats: afl-fuzz did not start; its log:" >&2
    tail -n 30 "$out_root/$t/afl.log" >&2 || true
    failed=1
    continue
  fi
  execs=$(field execs_done "$s")
  crashes=$(field saved_crashes "$s")
  hangs=$(field saved_hangs "$s")
  secs=$(field run_time "$s")
  printf '%-11s %10s %9s %7s %7s %5s %7s\n' "$t" "$execs" "$((execs / (secs > 0 ? secs : 1)))" "$secs" \
    "$crashes" "$hangs" "$(field corpus_count "$s")"
  if [ "$crashes" != 0 ] || [ "$hangs" != 0 ]; then
    echo "$t: $crashes crash(es), $hangs hang(s): inputs in $out_root/$t/default/{crashes,hangs}/;" \
      "replay one with: $harness $t < FILE; add it to fuzz/regressions/$t/ with its fix" >&2
    failed=1
  fi
  if [ "$mode" = full ] && [ "$execs" -lt "${HVSIM_FUZZ_EXECS:-1000000}" ]; then
    echo "$t: only $execs executions" >&2
    failed=1
  fi
done
echo "ci/fuzz.sh --$mode: ${#targets[@]} target(s) in $((SECONDS - start)) s of fuzzing"
exit "$failed"
