#!/bin/sh
# Submits a sharded hvsim exploration to Slurm (docs/scale.md): the root
# step, then the shards as an array once the root step succeeded, then the
# merge once every shard ended, whatever its state (a failed shard is
# reported missing by the merge).
#
#   HVSIM_RESULTS=/shared/hvsim/run1 HVSIM_SHARDS=4 sh examples/scale/slurm/submit.sh
#
# HVSIM_RESULTS must be on a file system every node mounts at the same path
# (it is made absolute here). The other settings are common.sh's; they
# reach the jobs through Slurm's default --export=ALL. Arguments go to every
# sbatch, e.g. --partition=kvm --account=...
set -eu

here=$(cd "$(dirname "$0")" && pwd)
HVSIM_SCALE_DIR=$(dirname "$here")
HVSIM_SHARDS=${HVSIM_SHARDS:-4}
HVSIM_RESULTS=${HVSIM_RESULTS:-./hvsim-shards}
case $HVSIM_SHARDS in
  '' | *[!0-9]* | 0)
    echo "submit.sh: HVSIM_SHARDS must be a whole number of at least 1, not '$HVSIM_SHARDS'" >&2
    exit 2
    ;;
esac
mkdir -p "$HVSIM_RESULTS"
HVSIM_RESULTS=$(cd "$HVSIM_RESULTS" && pwd)
export HVSIM_SCALE_DIR HVSIM_SHARDS HVSIM_RESULTS

# sbatch --parsable prints "id" or "id;cluster".
job_id() {
  echo "${1%%;*}"
}

# The root step needs /dev/kvm and the shards' machine type: give it the
# same partition or constraint (in the arguments) as the shards.
root=$(job_id "$(sbatch --parsable "$@" --job-name=hvsim-root --nodes=1 --ntasks=1 --exclusive \
  --output="$HVSIM_RESULTS/root-%j.out" --wrap="sh '$HVSIM_SCALE_DIR/root.sh'")")
echo "submit.sh: root step: job $root"

# A failed root step leaves the array's dependency unsatisfiable: Slurm then
# cancels the array (--kill-on-invalid-dep) instead of keeping it pending.
shards=$(job_id "$(sbatch --parsable "$@" --array="0-$((HVSIM_SHARDS - 1))" \
  --dependency="afterok:$root" --kill-on-invalid-dep=yes \
  --output="$HVSIM_RESULTS/shard-%A_%a.out" "$here/explore.sbatch")")
echo "submit.sh: shards 0-$((HVSIM_SHARDS - 1)): array job $shards (after $root succeeds)"

# The merge reads files only: no /dev/kvm needed. Its exit status is
# explore's: the job fails (8) when a bug was found.
merge=$(job_id "$(sbatch --parsable "$@" --job-name=hvsim-merge --nodes=1 --ntasks=1 \
  --dependency="afterany:$shards" --kill-on-invalid-dep=yes \
  --output="$HVSIM_RESULTS/merge-%j.out" --wrap="sh '$HVSIM_SCALE_DIR/merge.sh'")")
echo "submit.sh: merge: job $merge (after every shard ends); report: $HVSIM_RESULTS/merged/report.html"
