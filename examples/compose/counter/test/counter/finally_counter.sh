#!/bin/sh
# Faults are stopped and every driver has finished: the counter on the
# primary must count every acknowledged increment.
acks=$(wc -l < /tmp/acks)
counter=$(redis-cli -h primary get counter)
echo "$acks acknowledged increments, counter $counter"
if [ "${counter:-0}" -lt "$acks" ]; then
  echo "lost $((acks - ${counter:-0})) acknowledged increment(s):"
  cat /tmp/acks
  exit 1
fi
