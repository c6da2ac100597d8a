#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# version.sh [--commit] — prints the version `make` and scripts/dist.sh stamp
# into build/gpurt (-ldflags -X main.version=...), the form Go itself gives
# a module version:
#   vX.Y.Z                            HEAD is tagged vX.Y.Z
#   vX.Y.(Z+1)-0.YYYYMMDDhhmmss-HASH  commits after the tag vX.Y.Z
#   v0.0.0-YYYYMMDDhhmmss-HASH        no v* tag yet
# (HASH: the commit's first 12 hex digits; the time its commit time, UTC),
# with "+dirty" appended when the work tree has uncommitted changes. Archives
# of `make dist` are named gpurt-VERSION-OS-ARCH.tar.gz.
# --commit prints the full commit hash instead ("unknown" outside git).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --commit ]; then
  git rev-parse HEAD 2>/dev/null || echo unknown
  exit 0
fi
if ! git rev-parse HEAD >/dev/null 2>&1; then
  echo "v0.0.0-unknown"
  exit 0
fi
dirty=""
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || dirty="+dirty"
hash=$(git rev-parse --short=12 HEAD)
when=$(TZ=UTC git log -1 --date=format-local:%Y%m%d%H%M%S --format=%cd HEAD)
if tag=$(git describe --tags --exact-match --match 'v[0-9]*' HEAD 2>/dev/null); then
  echo "$tag$dirty"
elif tag=$(git describe --tags --abbrev=0 --match 'v[0-9]*.[0-9]*.[0-9]*' HEAD 2>/dev/null) &&
     [[ $tag =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "v${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.$((BASH_REMATCH[3] + 1))-0.$when-$hash$dirty"
else
  echo "v0.0.0-$when-$hash$dirty"
fi
