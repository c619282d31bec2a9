#!/usr/bin/env bash
# expect.sh "REGEX1;REGEX2;..." COMMAND...: run COMMAND; pass only if it exits 0
# and its output matches every regex (grep -E), each on some line.
set -u
patterns=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out" | tail -n 40
if [ $rc -ne 0 ]; then
  echo "expect.sh: command exited with $rc"
  exit 1
fi
IFS=';' read -ra pats <<<"$patterns"
for p in "${pats[@]}"; do
  if ! printf '%s\n' "$out" | grep -Eq -- "$p"; then
    echo "expect.sh: no line matches /$p/"
    exit 1
  fi
done
echo "expect.sh: all ${#pats[@]} patterns found"
