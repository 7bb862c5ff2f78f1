# shellcheck shell=sh disable=SC2034
# The settings that root.sh, shard.sh and merge.sh share, read from the
# environment (sourced by each; not run on its own). The root step and every
# shard must agree on the binary, the seed and the target: they are read
# here, in one place.
#
#   HVSIM              the hvsim binary (default: hvsim on the PATH)
#   HVSIM_SEED         the master seed (default 1)
#   HVSIM_BRANCHES     the branch budget of the whole exploration, all
#                      shards together (default 200)
#   HVSIM_RESULTS      the directory every job shares (default ./hvsim-shards):
#                      roots/, root/, shard-0/ ... shard-N-1/, merged/
#   HVSIM_TARGET_ARGS  the target flags, as shell words (quotes work), e.g.
#                      "--compose examples/compose/redis-set/compose.yaml";
#                      empty (the default): the built-in demo guest
#   HVSIM_EXTRA_ARGS   more `hvsim explore` flags, as shell words, e.g.
#                      "--workers 2 --batch 4"
#
# The two *_ARGS are expanded with `eval`: they are the operator's own
# settings, never input from elsewhere. HVSIM_TARGET_ARGS holds every flag
# that makes the target (--compose, --guest, --linux, --init-cmd,
# --fault-plan, --nodes, --mem...): the root step and the
# shards must get the same. HVSIM_EXTRA_ARGS holds the exploration's
# own (--workers, --batch, --timeline-limit...).
#
# (shellcheck: the variables are set here and used by the scripts that
# source this file.)

hvsim=${HVSIM:-hvsim}
seed=${HVSIM_SEED:-1}
branches=${HVSIM_BRANCHES:-200}
results=${HVSIM_RESULTS:-./hvsim-shards}
target_args=${HVSIM_TARGET_ARGS:-}
extra_args=${HVSIM_EXTRA_ARGS:-}
roots=$results/roots

# die MESSAGE: one line on stderr naming the script, and exit status 2 (a
# usage error, as hvsim's own).
die() {
  echo "$(basename "$0"): $1" >&2
  exit 2
}

# is_count NAME VALUE: VALUE is a whole number, or die naming NAME.
is_count() {
  case $2 in
    '' | *[!0-9]*) die "$1 must be a whole number, not '$2'" ;;
  esac
}

is_count HVSIM_SEED "$seed"
is_count HVSIM_BRANCHES "$branches"
if ! command -v "$hvsim" >/dev/null 2>&1; then
  die "no hvsim binary '$hvsim': put hvsim on the PATH or set HVSIM to its path"
fi
