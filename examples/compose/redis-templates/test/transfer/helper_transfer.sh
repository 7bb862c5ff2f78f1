# shellcheck shell=bash
# Sourced by the transfer drivers: `transfers N` makes N transfers of 1
# between the accounts, either way: read both, then write each new balance
# in its own request, as an application that never asked Redis for a
# transaction would.
# shellcheck source=../audit/helper_redis.sh
. "${0%/*}/../audit/helper_redis.sh"
transfers() {
  local i from to a b
  for ((i = 1; i <= $1; i++)); do
    if ((RANDOM % 2)); then from=x to=y; else from=y to=x; fi
    redis mget "$from" "$to"
    read -r a b <<< "$reply"
    [ -n "$b" ] || return 0
    think
    redis set "$from" $((a - 1))
    think
    redis set "$to" $((b + 1))
    echo "transfer $i: $from $a -> $((a - 1)), $to $b -> $((b + 1))"
  done
}
