#!/bin/sh
# The library's layers form a line, core <- registry <- autograd <- distributed <- program: an object file may
# use symbols of its own layer and of the layers below it, never of one above
# (docs/architecture.md, "Layers"). Reads the objects' symbol tables with nm.
# Usage: tests/check_layers.sh NM OBJECT...   (each object's path names its layer dir)
set -eu
nm=$1
shift
[ $# -gt 0 ] || { echo "check_layers: no object files given" >&2; exit 2; }
tab=$(mktemp)
trap 'rm -f "$tab"' EXIT
for o in "$@"; do
    case $o in
    */core/* | */registry/* | */autograd/* | */distributed/* | */program/*) ;;
    *) echo "check_layers: $o is in no known layer directory" >&2; exit 2 ;;
    esac
done
# one nm run per table (-A: each line starts with its object's path)
{
    "$nm" -A --defined-only --extern-only "$@" | awk 'NF == 3 { print "D", $3, $1 }'
    "$nm" -A --undefined-only "$@" | awk '{ print "U", $NF, $1 }'
} | sed -e 's#^\([DU] [^ ]*\) \(.*/core/.*\)$#\1 0 \2#' \
        -e 's#^\([DU] [^ ]*\) \(.*/registry/.*\)$#\1 1 \2#' \
        -e 's#^\([DU] [^ ]*\) \(.*/autograd/.*\)$#\1 2 \2#' \
        -e 's#^\([DU] [^ ]*\) \(.*/distributed/.*\)$#\1 3 \2#' \
        -e 's#^\([DU] [^ ]*\) \(.*/program/.*\)$#\1 4 \2#' -e 's#:$##' >"$tab"
awk '
    BEGIN { name[0] = "core"; name[1] = "registry"; name[2] = "autograd"; name[3] = "distributed"; name[4] = "program" }
    $1 == "D" { def[$2] = $3; next }
    { use[NR] = $0 }
    END {
        bad = 0
        for (i in use) {
            split(use[i], f, " ")
            if ((f[2] in def) && def[f[2]] > f[3]) {
                printf "check_layers: %s (%s) uses %s of the %s layer above it\n", f[4], name[f[3]], f[2], name[def[f[2]]]
                bad = 1
            }
        }
        n = 0
        for (s in def) n++
        if (n == 0) { print "check_layers: no symbols read"; exit 2 }
        if (!bad) printf "check_layers: %d symbols, no layer uses one above it\n", n
        exit bad
    }' "$tab"
