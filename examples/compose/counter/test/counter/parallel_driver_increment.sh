#!/bin/sh
# Increments the counter three times. Each increment takes the lock on the
# primary, reads the counter from the replica (the mistake: the lock does
# not make the replica fresh), never goes behind this client's own last
# write, writes the next value to the primary and releases the lock. An
# increment the primary acknowledged is recorded in /tmp/acks.
me=$$
mine=0
for i in 1 2 3; do
  until [ "$(redis-cli -h primary set lock "$me" nx px 10000)" = OK ]; do
    sleep 0.01
  done
  v=$(redis-cli -h replica get counter)
  [ "${v:-0}" -ge "$mine" ] || v=$mine
  next=$((v + 1))
  if [ "$(redis-cli -h primary set counter "$next")" = OK ]; then
    mine=$next
    echo "$me $next" >> /tmp/acks
    echo "increment $i: $v -> $next"
  fi
  redis-cli -h primary eval "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0" 1 lock "$me" > /dev/null
done
