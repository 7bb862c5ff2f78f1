# shellcheck shell=bash
# Sourced by every template's commands (a helper_ file is never run on its
# own): `redis COMMAND ARGS...` sends one command to the store on a new
# connection and leaves its reply in $reply: the first line, or for an
# array the elements joined by spaces (empty when the store did not answer
# within 5 s). bash speaks Redis's inline protocol over /dev/tcp itself:
# redis-cli would start a process per command, which costs seconds where
# guest kernel code is emulated.
redis() {
  reply=
  exec 3<>/dev/tcp/127.0.0.1/6379 || return 1
  printf '%s\r\n' "$*" >&3
  local line n
  IFS=$'\r' read -r -t 5 line <&3 || { exec 3<&-; return 1; }
  if [[ $line == \** ]]; then
    # An array of bulk strings: a length line, then the value, each.
    for ((n = ${line#\*}; n > 0; n--)); do
      IFS=$'\r' read -r -t 5 line <&3 || break
      # A missing key's value is nil ($-1), with no line of its own.
      if [ "$line" = '$-1' ]; then line=nil; else IFS=$'\r' read -r -t 5 line <&3; fi
      reply+="${reply:+ }$line"
    done
  elif [[ $line == \$* && $line != '$-1' ]]; then
    IFS=$'\r' read -r -t 5 reply <&3
  else
    reply=${line#[:+]}
  fi
  exec 3<&-
}

# think: up to 50 ms between one request and the next, as an application
# computes what to write from what it read (bash's read timing out on a
# FIFO nobody writes: no process started).
think() {
  if [ -z "${THINK_FD:-}" ]; then
    mkfifo "/tmp/think.$$" && exec {THINK_FD}<>"/tmp/think.$$"
  fi
  read -r -t "0.0$((RANDOM % 5))$((RANDOM % 10))" -u "$THINK_FD" _ || true
}
