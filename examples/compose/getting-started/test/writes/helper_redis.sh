# shellcheck shell=bash
# Sourced by the template's commands (a helper_ file is never run on its
# own): `redis COMMAND ARGS...` sends one command to the store on a new
# connection, as redis-cli would, and leaves the first line of its reply in
# $reply (empty when the store could not be reached or did not answer
# within 5 s). bash speaks Redis's inline protocol over /dev/tcp itself:
# redis-cli would start a process per command, and where guest kernel code
# is emulated (hvsim's nested development host) each start costs seconds.
redis() {
  reply=
  exec 3<>/dev/tcp/store/6379 || return 1
  printf '%s\r\n' "$*" >&3
  # shellcheck disable=SC2034 # read by the commands that source this
  IFS=$'\r' read -r -t 5 reply <&3
  exec 3<&-
}
