#!/usr/bin/env bash
# The committed dense grids (issue 66), in the order they are trained. Each line resumes where
# its record in this folder stops (a fresh database first takes the runs the record holds), so
# the plan is run again, as it is, until every grid is whole:
#   nice -n 10 bash reports/search/grids/plan.sh > studies/logs/grids.log 2>&1 &
# WORKERS (default 2: one a core), STORAGE and OUT (this folder) may be set.
set -euo pipefail
cd "$(dirname "$0")/../../.."
STORAGE=${STORAGE:-sqlite:///studies/grids.db}
OUT=${OUT:-reports/search/grids}
WORKERS=${WORKERS:-2}
grid() { threshold grid --storage "$STORAGE" --out "$OUT" --workers "$WORKERS" "$@"; }
# Easy ops at a short budget (their transitions near d 5-15); MED mod 10 is left out on purpose:
# it is kept for a check from outside.
grid --tasks max --mod 10 --steps 2000 --sizes 3..30 --seeds 5
grid --tasks min --mod 10 --steps 2000 --sizes 3..30 --seeds 5
# The hard op at the fast recipe's schedule over 4,000 steps (half of 8,000, where its
# transition is near d 40): every third d below 36 and every fourth above 60. Its checkpoint at
# 500 steps is the bound: no size learns ADD by then.
ADD_SIZES=16..34/3,36..60/2,64..96/4
# The bound: ADD over a 1,000-step schedule, where no size up to d 96 should learn it (cheap:
# the stuck rule ends a run at chance half way).
grid --tasks add --mod 10 --steps 1000 --sizes "$ADD_SIZES" --seeds 5
grid --tasks add --mod 10 --steps 4000 --sizes "$ADD_SIZES" --seeds 5
grid --tasks max,med,add --measure add --mod 10 --steps 4000 --sizes "$ADD_SIZES" --seeds 5
# The permutation testbed's hard op: products in S_3, which learn only after several thousand
# steps (at 20,000 steps its transition is near d 22-26, reports/cpu/perm): 8,000 steps.
grid --testbed perm --mod 3 --tasks mul --steps 8000 --sizes 10..56/2 --seeds 5
