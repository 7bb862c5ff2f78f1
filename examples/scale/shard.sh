#!/bin/sh
# One shard of a sharded exploration (docs/scale.md), as every engine runs
# it: a Kubernetes Indexed Job, a Slurm array, a CI matrix, or by hand.
#
#   HVSIM_SHARDS=4 sh shard.sh 2          # shard 2 of 4
#   HVSIM_SHARDS=4 sh shard.sh            # the index from the engine
#
# The shard index (from 0) is the first argument if there is one (further
# arguments go to `hvsim explore`), else $JOB_COMPLETION_INDEX (Kubernetes
# Indexed Job), else $SLURM_ARRAY_TASK_ID (Slurm array). $HVSIM_SHARDS, the
# number of shards, is required and must be the same for every shard. The
# other settings are common.sh's (HVSIM, HVSIM_SEED, HVSIM_BRANCHES: the
# budget of the whole exploration, HVSIM_RESULTS, HVSIM_TARGET_ARGS,
# HVSIM_EXTRA_ARGS), the same as the root step's (root.sh), which must have
# saved the root in $HVSIM_RESULTS/roots first (a Linux target's; a raw
# guest needs none).
#
# The shard writes its exploration to $HVSIM_RESULTS/shard-I/ (shard-I/latest
# is the newest); merge.sh merges them.
#
# Exit status: 0 when the shard ran its branches, whether or not it found a
# bug. A bug (hvsim's exit status 8) is a result, not a failure of the shard's
# job: the merge reports it, and fails with 8. Any other status is hvsim's
# and is passed on (docs/cli.md): 1 an error (no root, another world, the
# target did not start), 2 a usage error, 9 interrupted before its budget
# was spent (run the shard again), 10 only with --fail-on-unmet, which
# judges one shard alone (a property unmet here may be met in another
# shard): leave it out of HVSIM_EXTRA_ARGS and give it to merge.sh.
set -eu

index=${1:-${JOB_COMPLETION_INDEX:-${SLURM_ARRAY_TASK_ID:-}}}
if [ $# -gt 0 ]; then
  shift
fi
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

if [ -z "$index" ]; then
  die "no shard index: give it as the first argument, or run as a Kubernetes Indexed Job (JOB_COMPLETION_INDEX) or a Slurm array task (SLURM_ARRAY_TASK_ID)"
fi
count=${HVSIM_SHARDS:-}
if [ -z "$count" ]; then
  die "HVSIM_SHARDS is not set: it is the number of shards, the same for every shard"
fi
is_count "the shard index" "$index"
is_count HVSIM_SHARDS "$count"
if [ "$count" -lt 1 ]; then
  die "HVSIM_SHARDS must be at least 1"
fi
if [ "$index" -ge "$count" ]; then
  die "shard $index of $count: shards are numbered from 0 to $((count - 1))"
fi

shard=$index/$count
out=$results/shard-$index
mkdir -p "$out"
eval "set -- $target_args $extra_args"' "$@"'
status=0
"$hvsim" explore "$@" --seed "$seed" --branches "$branches" --shard "$shard" --roots "$roots" --out "$out" || status=$?
case $status in
  0) echo "shard.sh: shard $shard: no bug; results in $out/latest" ;;
  8)
    echo "shard.sh: shard $shard: found a bug (hvsim exit status 8), a result the merge reports; results in $out/latest"
    status=0
    ;;
  9) echo "shard.sh: shard $shard: interrupted before its budget was spent (exit status 9): run it again" >&2 ;;
  10) echo "shard.sh: shard $shard: --fail-on-unmet judged one shard alone (exit status 10): give it to merge.sh instead" >&2 ;;
  *) echo "shard.sh: shard $shard: hvsim explore failed (exit status $status): see $out/latest/ (error.txt)" >&2 ;;
esac
exit "$status"
