#!/bin/sh
# Reads the counter from the primary twice: every write is an increment
# made under the lock, so it must never go down.
a=$(redis-cli -h primary get counter)
sleep 0.02
b=$(redis-cli -h primary get counter)
echo "read $a then $b"
if [ "${b:-0}" -lt "${a:-0}" ]; then
  echo "the counter went down from $a to $b"
  exit 1
fi
