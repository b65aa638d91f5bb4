#!/usr/bin/env bash
# mypy --strict over the package as it installs (raftka.raft, raftka.client, ...).
# The repository keeps the layers as top-level folders (raft/, client/, ...) that the
# installed package maps under raftka/; mypy cannot follow setuptools' package-dir
# mapping, so we give it a link tree with the installed shape. Directory links keep it
# current as files are added.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
mypy_bin=${MYPY:-mypy}
# A relative path to mypy (MYPY=.venv/bin/mypy) must survive the cd below.
case "$mypy_bin" in
  */*) mypy_bin="$(cd "$(dirname "$mypy_bin")" && pwd)/$(basename "$mypy_bin")" ;;
esac
tree="$top/build/typecheck"
rm -rf "$tree" && mkdir -p "$tree/raftka"
for f in "$top"/src/raftka/*; do ln -s "$f" "$tree/raftka/"; done
for layer in common server_common storage raft metadata broker client local chaos console; do ln -s "$top/$layer" "$tree/raftka/$layer"; done
cd "$tree"
exec "$mypy_bin" --config-file "$top/pyproject.toml" --cache-dir "$top/build/mypy-cache" -p raftka "$@"
