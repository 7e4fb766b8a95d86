#!/bin/sh
# Re-records every set of this folder, one at a time (see README.md). Run from the repository root:
#   sh tests/data/kineto_widened/record.sh [.venv/bin/python]
# The tuning part (tune/) and the held-out part (heldout/) were fixed here before any was diagnosed.
set -e
PY=${1:-.venv/bin/python}
D=tests/data/kineto_widened
rec() { part=$1; name=$2; shift 2; rm -rf "$D/$part/$name"; "$PY" examples/pp_dp_train.py --layers 1 --out "$D/$part/$name" "$@" >/dev/null 2>&1; echo "$part/$name"; }
# --- tuning ---
rec tune healthy-2x2            --dp 2 --pp 2 --steps 6 --seed 51
rec tune slow-rank-2x2          --dp 2 --pp 2 --steps 6 --seed 51 --slow-rank 2 --slow-ms 8
rec tune slow-rank-weak-4x2     --dp 4 --pp 2 --steps 6 --seed 52 --slow-rank 1 --slow-ms 5
rec tune onset-2x2              --dp 2 --pp 2 --steps 8 --seed 53 --slow-rank 1 --slow-ms 15 --slow-from-step 5
rec tune onset-2x3              --dp 2 --pp 3 --steps 8 --seed 54 --slow-rank 4 --slow-ms 15 --slow-from-step 4
rec tune layers-2x3             --dp 2 --pp 3 --steps 6 --seed 55 --layers-per-stage 1,3,1
rec tune layers-2x2             --dp 2 --pp 2 --steps 6 --seed 56 --layers-per-stage 3,1
rec tune send-delay-2x2         --dp 2 --pp 2 --steps 6 --seed 57 --send-delay-rank 0 --send-delay-ms 20
rec tune send-delay-2x3         --dp 2 --pp 3 --steps 6 --seed 58 --send-delay-rank 3 --send-delay-ms 15
rec tune var-seq-2x2            --dp 2 --pp 2 --steps 6 --seed 59 --var-seq --seq 64
rec tune var-seq-4x2            --dp 4 --pp 2 --steps 6 --seed 60 --var-seq --seq 64
rec tune gc-pause-2x2           --dp 2 --pp 2 --steps 6 --seed 52 --gc-pause
rec tune dataloader-stall-2x2   --dp 2 --pp 2 --steps 6 --seed 51 --stall-rank 2 --stall-ms 80
rec tune mixed-layers-slow-2x2  --dp 2 --pp 2 --steps 6 --seed 65 --layers-per-stage 1,3 --slow-rank 0 --slow-ms 15
# --- held out ---
rec heldout healthy-4x2          --dp 4 --pp 2 --steps 6 --seed 61
rec heldout healthy-2x3          --dp 2 --pp 3 --steps 6 --seed 62
rec heldout slow-rank-2x2        --dp 2 --pp 2 --steps 6 --seed 61 --slow-rank 3 --slow-ms 10
rec heldout onset-4x2            --dp 4 --pp 2 --steps 8 --seed 63 --slow-rank 5 --slow-ms 15 --slow-from-step 4
rec heldout layers-2x4           --dp 2 --pp 4 --steps 6 --seed 64 --layers-per-stage 1,1,3,1
rec heldout send-delay-4x2       --dp 4 --pp 2 --steps 6 --seed 66 --send-delay-rank 3 --send-delay-ms 20
rec heldout var-seq-2x3          --dp 2 --pp 3 --steps 6 --seed 67 --var-seq --seq 64
rec heldout gc-pause-4x2         --dp 4 --pp 2 --steps 6 --seed 64 --gc-pause
rec heldout dataloader-stall-2x3 --dp 2 --pp 3 --steps 6 --seed 68 --stall-rank 3 --stall-ms 80
