#!/bin/bash
# Four requests to the client (client/sql_client.py), each one
# transaction: mostly transfers of 1 to 5 between two of the accounts a to
# e (refused if the source cannot pay), sometimes a read of every balance.
exec 3<>/dev/tcp/127.0.0.1/7000
accounts=(a b c d e)
for _ in 1 2 3 4; do
  if ((RANDOM % 3)); then
    from=$((RANDOM % 5)) to=$((RANDOM % 4))
    ((to >= from)) && to=$((to + 1))
    echo "$$ transfer ${accounts[from]} ${accounts[to]} $((1 + RANDOM % 5))" >&3
  else
    echo "$$ read" >&3
  fi
  read -r -t 60 answer <&3
  case "$answer" in
    ok | fail) ;;
    # Unknown or not run: the database is not answering; this driver ends.
    *) exit 0 ;;
  esac
done
