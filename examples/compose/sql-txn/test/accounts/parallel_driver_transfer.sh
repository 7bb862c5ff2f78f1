#!/bin/bash
# Three transfers: each reads both accounts (lists x and y) and appends to
# one of them an element no other driver appends (this driver's pid and a
# counter). The client (client/sql_client.py) runs each as one
# transaction and records it as this driver's.
exec 3<>/dev/tcp/127.0.0.1/7000
for i in 1 2 3; do
  if ((RANDOM % 2)); then key=x; else key=y; fi
  echo "$$ txn r x r y append $key $(($$ * 10 + i))" >&3
  read -r -t 60 answer <&3
  case "$answer" in
    ok | fail) ;;
    # Unknown or not run: the database is not answering; this driver ends.
    *) exit 0 ;;
  esac
done
