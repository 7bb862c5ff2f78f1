#!/bin/bash
# Three transfers: each reads both accounts (lists x and y) and appends to
# one of them an element no other driver appends (this driver's pid and a
# counter).
# shellcheck source=helper_txn.sh
. "${0%/*}/helper_txn.sh"
for i in 1 2 3; do
  if ((RANDOM % 2)); then key=x; else key=y; fi
  txn r x r y append "$key" "$(($$ * 10 + i))"
done
