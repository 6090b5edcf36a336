#!/usr/bin/env bash
# The harness's module file of a release, from the one template of every Go
# harness: e2e/gen-modfile.sh. usage: gen.sh 1.N.x
exec "$(dirname "${BASH_SOURCE[0]}")/../../gen-modfile.sh" harness "$@"
