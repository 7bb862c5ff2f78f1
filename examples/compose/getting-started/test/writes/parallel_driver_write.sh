#!/bin/bash
# Writes five keys of its own to the store; each write the store
# acknowledged (+OK) is recorded in /tmp/acks. A write to a store that is
# down fails, and is not recorded.
# shellcheck source=helper_redis.sh
. "${0%/*}/helper_redis.sh"
for i in 1 2 3 4 5; do
  key="client-$$-$i"
  redis set "$key" "$i" 2>/dev/null
  if [ "$reply" = +OK ]; then
    echo "$key" >> /tmp/acks
  fi
done
