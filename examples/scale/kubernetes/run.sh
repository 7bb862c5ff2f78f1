#!/bin/sh
# Runs the sharded exploration of job.yaml on the cluster kubectl points at,
# one step after the other: the scripts' ConfigMap and the results claim,
# the root step, the shards, the merge. Prints the merge's log and exits
# with its status (0 no bug, 8 a bug found, else a failure).
#
#   sh examples/scale/kubernetes/run.sh
#   KUBECTL="kubectl -n hvsim" HVSIM_WAIT=14400 sh examples/scale/kubernetes/run.sh
#
# HVSIM_WAIT bounds the wait for each step, in seconds (default 21600, 6 h);
# KUBECTL is the kubectl command (default kubectl), e.g. with a namespace.
# The Jobs of an earlier run are deleted first; the claim and its results
# are kept. A merge into a claim that already holds merged/ is refused:
# move it away first (or use a new claim per exploration).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
scale=$(dirname "$here")
kubectl=${KUBECTL:-kubectl}
limit=${HVSIM_WAIT:-21600}

say() {
  echo "run.sh: $*"
}

# finished JOB: waits until JOB completed (status 0) or failed (status 1),
# for at most $HVSIM_WAIT seconds. (`kubectl wait` waits for one condition,
# and a Job that failed never completes.)
finished() {
  waited=0
  while :; do
    conditions=$($kubectl get "job/$1" -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}')
    case " $conditions " in
      *" Complete "*) return 0 ;;
      *" Failed "*) return 1 ;;
    esac
    if [ "$waited" -ge "$limit" ]; then
      say "job/$1 did not finish within $limit s" >&2
      exit 1
    fi
    sleep 15
    waited=$((waited + 15))
  done
}

say "the scripts, from $scale"
$kubectl create configmap hvsim-scale-scripts \
  --from-file="$scale/common.sh" --from-file="$scale/root.sh" \
  --from-file="$scale/shard.sh" --from-file="$scale/merge.sh" \
  --dry-run=client -o yaml | $kubectl apply -f -
$kubectl delete job hvsim-root hvsim-shards hvsim-merge --ignore-not-found

say "the results claim and the root step"
$kubectl apply -f "$here/job.yaml" -l 'app.kubernetes.io/component in (results,root)'
if ! finished hvsim-root; then
  $kubectl logs job/hvsim-root >&2 || true
  say "the root step failed: no shard can start" >&2
  exit 1
fi

say "the shards"
$kubectl apply -f "$here/job.yaml" -l app.kubernetes.io/component=shards
if ! finished hvsim-shards; then
  say "some shards failed (kubectl describe job/hvsim-shards): the merge reports them missing" >&2
fi

say "the merge"
$kubectl apply -f "$here/job.yaml" -l app.kubernetes.io/component=merge
finished hvsim-merge || true
$kubectl logs job/hvsim-merge
status=$($kubectl get pods -l job-name=hvsim-merge \
  -o jsonpath='{.items[0].status.containerStatuses[0].state.terminated.exitCode}')
say "merge exit status ${status:-unknown}; the results are on the claim hvsim-results"
exit "${status:-1}"
