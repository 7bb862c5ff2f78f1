#!/bin/sh
# Waits up to $1 seconds until r0 has its three mids and each mid its
# leaves (20, 20 and 19), every one online at r0's replication offset: a
# chained replica receives its mid's stream at the same offsets, so all
# 62 at r0's offset hold everything r0 acknowledged. Four processes a
# round (one redis-cli per replicating server), the rest is the shell's.
deadline=$1
t=0
while :; do
  root=$(redis-cli -h r0 info replication)
  target=${root#*master_repl_offset:}
  target=${target%%[!0-9]*}
  behind=
  for s in r0 m1 m2 m3; do
    case $s in r0) want=3 info=$root ;; m3) want=19 ;; *) want=20 ;; esac
    [ "$s" = r0 ] || info=$(redis-cli -h "$s" info replication)
    # Count the replicas this server sees online at r0's offset.
    n=0
    rest=$info
    while :; do
      case $rest in
        *"state=online,offset=$target,"*) n=$((n + 1)); rest=${rest#*"state=online,offset=$target,"} ;;
        *) break ;;
      esac
    done
    [ "$n" = "$want" ] || behind="$behind $s:$n/$want"
  done
  if [ -z "$behind" ]; then
    echo "after ${t}s, all 62 replicas at r0's offset $target"
    exit 0
  fi
  if [ "$t" -ge "$deadline" ]; then
    echo "after ${t}s, replicas online at r0's offset $target (server: count/expected):$behind"
    exit 1
  fi
  sleep 1
  t=$((t + 1))
done
