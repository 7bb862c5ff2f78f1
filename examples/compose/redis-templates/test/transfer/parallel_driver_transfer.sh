#!/bin/bash
# Three transfers of 1 between the accounts, either way: read both, then
# write each new balance in its own request. Nothing makes a transfer run
# alone, so two transfers whose writes interleave make or lose money.
# shellcheck source=../audit/helper_redis.sh
. "${0%/*}/../audit/helper_redis.sh"
for i in 1 2 3; do
  if ((RANDOM % 2)); then from=x to=y; else from=y to=x; fi
  redis mget "$from" "$to"
  read -r a b <<< "$reply"
  [ -n "$b" ] || exit 0
  think
  redis set "$from" $((a - 1))
  think
  redis set "$to" $((b + 1))
  echo "transfer $i: $from $a -> $((a - 1)), $to $b -> $((b + 1))"
done
