#!/bin/sh
# Re-records every set of this folder, one at a time (see README.md). Run from the repository root:
#   sh tests/data/kineto_widened/record.sh [.venv/bin/python] [PART]
# The tuning part (tune/) and the held-out part (heldout/) were fixed here before any was diagnosed;
# the second held-out part (heldout2/) was recorded and committed before the next round of detector
# changes, and diagnosed once, at its end; heldout3 to heldout20 likewise. PART (tune,
# heldout, heldout2, heldout3, heldout4, heldout5, heldout6, heldout7, heldout8, heldout9, heldout10, heldout11, heldout12, heldout13, heldout14, heldout15,
# heldout16, heldout17, heldout18, heldout19, heldout20) re-records only that part.
set -e
PY=${1:-.venv/bin/python}
ONLY=${2:-}
D=tests/data/kineto_widened
rec() { part=$1; name=$2; shift 2; [ -z "$ONLY" ] || [ "$ONLY" = "$part" ] || return 0; rm -rf "$D/$part/$name"; "$PY" examples/pp_dp_train.py --layers 1 --out "$D/$part/$name" "$@" >/dev/null 2>&1; echo "$part/$name"; }
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
# --- held out, second set (new shapes, ranks, magnitudes, onset steps and seeds) ---
rec heldout2 healthy-3x2            --dp 3 --pp 2 --steps 6 --seed 71
rec heldout2 healthy-2x4            --dp 2 --pp 4 --steps 6 --seed 72
rec heldout2 slow-rank-3x2          --dp 3 --pp 2 --steps 6 --seed 73 --slow-rank 4 --slow-ms 12
rec heldout2 slow-rank-weak-4x2     --dp 4 --pp 2 --steps 6 --seed 74 --slow-rank 0 --slow-ms 6
rec heldout2 slow-rank-2x3          --dp 2 --pp 3 --steps 6 --seed 84 --slow-rank 3 --slow-ms 10
rec heldout2 onset-2x3              --dp 2 --pp 3 --steps 8 --seed 75 --slow-rank 1 --slow-ms 15 --slow-from-step 5
rec heldout2 onset-3x2              --dp 3 --pp 2 --steps 8 --seed 76 --slow-rank 5 --slow-ms 20 --slow-from-step 4
rec heldout2 layers-3x2             --dp 3 --pp 2 --steps 6 --seed 77 --layers-per-stage 3,1
rec heldout2 layers-2x3             --dp 2 --pp 3 --steps 6 --seed 85 --layers-per-stage 1,1,3
rec heldout2 send-delay-3x2         --dp 3 --pp 2 --steps 6 --seed 78 --send-delay-rank 1 --send-delay-ms 15
rec heldout2 send-delay-2x3         --dp 2 --pp 3 --steps 6 --seed 79 --send-delay-rank 2 --send-delay-ms 20
rec heldout2 var-seq-3x2            --dp 3 --pp 2 --steps 6 --seed 80 --var-seq --seq 64
rec heldout2 var-seq-2x2            --dp 2 --pp 2 --steps 6 --seed 81 --var-seq --seq 64
rec heldout2 gc-pause-2x3           --dp 2 --pp 3 --steps 6 --seed 82 --gc-pause
rec heldout2 dataloader-stall-4x2   --dp 4 --pp 2 --steps 6 --seed 83 --stall-rank 6 --stall-ms 100
# --- tuning, second round (shapes the first tuning part lacked: 3x2, 2x4; recorded before heldout2 was diagnosed) ---
rec tune healthy-3x2-s91           --dp 3 --pp 2 --steps 6 --seed 91
rec tune slow-rank-3x2-s92         --dp 3 --pp 2 --steps 6 --seed 92 --slow-rank 2 --slow-ms 10
rec tune onset-3x2-s93             --dp 3 --pp 2 --steps 8 --seed 93 --slow-rank 3 --slow-ms 15 --slow-from-step 5
rec tune send-delay-3x2-s94        --dp 3 --pp 2 --steps 6 --seed 94 --send-delay-rank 2 --send-delay-ms 20
rec tune var-seq-3x2-s95           --dp 3 --pp 2 --steps 6 --seed 95 --var-seq --seq 64
rec tune layers-3x2-s96            --dp 3 --pp 2 --steps 6 --seed 96 --layers-per-stage 1,3
rec tune dataloader-stall-3x2-s97  --dp 3 --pp 2 --steps 6 --seed 97 --stall-rank 4 --stall-ms 80
rec tune gc-pause-3x2-s98          --dp 3 --pp 2 --steps 6 --seed 98 --gc-pause
rec tune healthy-2x4-s99           --dp 2 --pp 4 --steps 6 --seed 99
rec tune slow-rank-2x4-s100        --dp 2 --pp 4 --steps 6 --seed 100 --slow-rank 5 --slow-ms 10
# --- held out, third set (recorded after the second round's last detector change; diagnosed once) ---
rec heldout3 healthy-2x3            --dp 2 --pp 3 --steps 6 --seed 111
rec heldout3 slow-rank-4x2          --dp 4 --pp 2 --steps 6 --seed 112 --slow-rank 6 --slow-ms 10
rec heldout3 slow-rank-2x2          --dp 2 --pp 2 --steps 6 --seed 113 --slow-rank 0 --slow-ms 15
rec heldout3 onset-2x2              --dp 2 --pp 2 --steps 8 --seed 114 --slow-rank 3 --slow-ms 20 --slow-from-step 4
rec heldout3 layers-2x4             --dp 2 --pp 4 --steps 6 --seed 115 --layers-per-stage 3,1,1,1
rec heldout3 send-delay-4x2         --dp 4 --pp 2 --steps 6 --seed 116 --send-delay-rank 1 --send-delay-ms 15
rec heldout3 var-seq-2x3            --dp 2 --pp 3 --steps 6 --seed 117 --var-seq --seq 64
rec heldout3 gc-pause-2x2           --dp 2 --pp 2 --steps 6 --seed 118 --gc-pause
rec heldout3 dataloader-stall-3x2   --dp 3 --pp 2 --steps 6 --seed 119 --stall-rank 1 --stall-ms 100
# --- held out, fourth set (recorded and committed before the third round of detector changes; diagnosed once, at its end) ---
rec heldout4 healthy-4x2            --dp 4 --pp 2 --steps 6 --seed 121
rec heldout4 healthy-2x2            --dp 2 --pp 2 --steps 6 --seed 122
rec heldout4 slow-rank-2x4          --dp 2 --pp 4 --steps 6 --seed 123 --slow-rank 2 --slow-ms 12
rec heldout4 slow-rank-3x2          --dp 3 --pp 2 --steps 6 --seed 124 --slow-rank 1 --slow-ms 8
rec heldout4 slow-rank-last-2x3     --dp 2 --pp 3 --steps 6 --seed 125 --slow-rank 5 --slow-ms 15
rec heldout4 onset-4x2              --dp 4 --pp 2 --steps 8 --seed 126 --slow-rank 2 --slow-ms 20 --slow-from-step 5
rec heldout4 onset-2x3              --dp 2 --pp 3 --steps 8 --seed 127 --slow-rank 0 --slow-ms 20 --slow-from-step 4
rec heldout4 layers-2x3             --dp 2 --pp 3 --steps 6 --seed 128 --layers-per-stage 3,1,1
rec heldout4 send-delay-2x4         --dp 2 --pp 4 --steps 6 --seed 129 --send-delay-rank 4 --send-delay-ms 20
rec heldout4 var-seq-4x2            --dp 4 --pp 2 --steps 6 --seed 130 --var-seq --seq 64
rec heldout4 gc-pause-3x2           --dp 3 --pp 2 --steps 6 --seed 131 --gc-pause
rec heldout4 dataloader-stall-2x2   --dp 2 --pp 2 --steps 6 --seed 132 --stall-rank 1 --stall-ms 100
# --- held out, fifth set (recorded and committed before the fourth round of detector changes; diagnosed once, at its end) ---
rec heldout5 healthy-2x4            --dp 2 --pp 4 --steps 6 --seed 141
rec heldout5 healthy-3x2            --dp 3 --pp 2 --steps 6 --seed 142
rec heldout5 healthy-4x2            --dp 4 --pp 2 --steps 6 --seed 143
rec heldout5 slow-rank-weak-4x2     --dp 4 --pp 2 --steps 6 --seed 144 --slow-rank 5 --slow-ms 3
rec heldout5 slow-rank-weak-3x2     --dp 3 --pp 2 --steps 6 --seed 145 --slow-rank 2 --slow-ms 4
rec heldout5 slow-rank-2x4          --dp 2 --pp 4 --steps 6 --seed 146 --slow-rank 1 --slow-ms 12
rec heldout5 slow-rank-last-4x2     --dp 4 --pp 2 --steps 6 --seed 147 --slow-rank 7 --slow-ms 10
rec heldout5 slow-rank-2x3          --dp 2 --pp 3 --steps 6 --seed 148 --slow-rank 2 --slow-ms 15
rec heldout5 onset-2x4              --dp 2 --pp 4 --steps 8 --seed 149 --slow-rank 5 --slow-ms 20 --slow-from-step 5
rec heldout5 onset-3x2              --dp 3 --pp 2 --steps 8 --seed 150 --slow-rank 0 --slow-ms 15 --slow-from-step 4
rec heldout5 layers-2x4             --dp 2 --pp 4 --steps 6 --seed 151 --layers-per-stage 1,2,1,1
rec heldout5 layers-4x2             --dp 4 --pp 2 --steps 6 --seed 152 --layers-per-stage 2,1
rec heldout5 send-delay-3x2         --dp 3 --pp 2 --steps 6 --seed 153 --send-delay-rank 0 --send-delay-ms 15
rec heldout5 send-delay-4x2         --dp 4 --pp 2 --steps 6 --seed 154 --send-delay-rank 2 --send-delay-ms 12
rec heldout5 var-seq-2x4            --dp 2 --pp 4 --steps 6 --seed 155 --var-seq --seq 64
rec heldout5 gc-pause-2x4           --dp 2 --pp 4 --steps 6 --seed 156 --gc-pause
rec heldout5 dataloader-stall-2x3   --dp 2 --pp 3 --steps 6 --seed 157 --stall-rank 4 --stall-ms 80
# --- held out, sixth set (recorded and committed before the fifth round of detector changes; diagnosed once, at its end) ---
rec heldout6 healthy-2x3            --dp 2 --pp 3 --steps 6 --seed 161
rec heldout6 healthy-4x2            --dp 4 --pp 2 --steps 6 --seed 162
rec heldout6 slow-rank-weak-2x4     --dp 2 --pp 4 --steps 6 --seed 163 --slow-rank 3 --slow-ms 4
rec heldout6 slow-rank-weak-4x2     --dp 4 --pp 2 --steps 6 --seed 164 --slow-rank 6 --slow-ms 5
rec heldout6 slow-rank-weak-2x3     --dp 2 --pp 3 --steps 6 --seed 165 --slow-rank 0 --slow-ms 6
rec heldout6 slow-rank-2x4          --dp 2 --pp 4 --steps 6 --seed 166 --slow-rank 7 --slow-ms 10
rec heldout6 slow-rank-2x3          --dp 2 --pp 3 --steps 6 --seed 167 --slow-rank 3 --slow-ms 13
rec heldout6 slow-rank-4x2          --dp 4 --pp 2 --steps 6 --seed 168 --slow-rank 1 --slow-ms 14
rec heldout6 slow-rank-last-3x2     --dp 3 --pp 2 --steps 6 --seed 169 --slow-rank 5 --slow-ms 12
rec heldout6 send-delay-2x4         --dp 2 --pp 4 --steps 6 --seed 170 --send-delay-rank 2 --send-delay-ms 15
rec heldout6 send-delay-3x2         --dp 3 --pp 2 --steps 6 --seed 171 --send-delay-rank 2 --send-delay-ms 12
rec heldout6 send-delay-4x2         --dp 4 --pp 2 --steps 6 --seed 172 --send-delay-rank 0 --send-delay-ms 15
rec heldout6 onset-2x3              --dp 2 --pp 3 --steps 8 --seed 173 --slow-rank 4 --slow-ms 15 --slow-from-step 5
rec heldout6 layers-3x2             --dp 3 --pp 2 --steps 6 --seed 174 --layers-per-stage 2,1
# --- held out, seventh set (a balanced sample of the classes; recorded and committed before the sixth round of detector changes; diagnosed once, at its end) ---
rec heldout7 healthy-2x3            --dp 2 --pp 3 --steps 6 --seed 181
rec heldout7 slow-rank-2x2          --dp 2 --pp 2 --steps 6 --seed 182 --slow-rank 1 --slow-ms 20
rec heldout7 layers-2x3             --dp 2 --pp 3 --steps 6 --seed 183 --layers-per-stage 1,2,1
rec heldout7 send-delay-2x3         --dp 2 --pp 3 --steps 6 --seed 184 --send-delay-rank 1 --send-delay-ms 15
rec heldout7 slow-rank-last-3x2     --dp 3 --pp 2 --steps 6 --seed 185 --slow-rank 3 --slow-ms 6
rec heldout7 onset-3x2              --dp 3 --pp 2 --steps 8 --seed 186 --slow-rank 1 --slow-ms 20 --slow-from-step 4
rec heldout7 healthy-4x2            --dp 4 --pp 2 --steps 6 --seed 187
rec heldout7 slow-rank-weak-4x2     --dp 4 --pp 2 --steps 6 --seed 188 --slow-rank 2 --slow-ms 2
rec heldout7 var-seq-3x2            --dp 3 --pp 2 --steps 6 --seed 189 --var-seq --seq 64
rec heldout7 layers-2x4             --dp 2 --pp 4 --steps 6 --seed 190 --layers-per-stage 1,1,2,1
rec heldout7 slow-rank-2x3          --dp 2 --pp 3 --steps 6 --seed 191 --slow-rank 2 --slow-ms 12
rec heldout7 send-delay-3x2         --dp 3 --pp 2 --steps 6 --seed 192 --send-delay-rank 1 --send-delay-ms 20
rec heldout7 gc-pause-2x3           --dp 2 --pp 3 --steps 6 --seed 193 --gc-pause
rec heldout7 onset-2x4              --dp 2 --pp 4 --steps 8 --seed 194 --slow-rank 6 --slow-ms 15 --slow-from-step 5
rec heldout7 dataloader-stall-4x2   --dp 4 --pp 2 --steps 6 --seed 195 --stall-rank 5 --stall-ms 80
# --- held out, eighth set (a balanced sample of the classes; recorded and committed before the seventh round's detector changes were committed; diagnosed once, at its end) ---
rec heldout8 healthy-3x2            --dp 3 --pp 2 --steps 6 --seed 201
rec heldout8 slow-rank-4x2          --dp 4 --pp 2 --steps 6 --seed 202 --slow-rank 1 --slow-ms 10
rec heldout8 layers-2x4             --dp 2 --pp 4 --steps 6 --seed 203 --layers-per-stage 1,2,1,1
rec heldout8 onset-2x3              --dp 2 --pp 3 --steps 8 --seed 204 --slow-rank 5 --slow-ms 20 --slow-from-step 4
rec heldout8 slow-rank-2x3          --dp 2 --pp 3 --steps 6 --seed 205 --slow-rank 3 --slow-ms 15
rec heldout8 send-delay-3x2         --dp 3 --pp 2 --steps 6 --seed 206 --send-delay-rank 0 --send-delay-ms 15
rec heldout8 healthy-2x4            --dp 2 --pp 4 --steps 6 --seed 207
rec heldout8 slow-rank-last-3x2     --dp 3 --pp 2 --steps 6 --seed 208 --slow-rank 4 --slow-ms 8
rec heldout8 var-seq-2x3            --dp 2 --pp 3 --steps 6 --seed 209 --var-seq --seq 64
rec heldout8 gc-pause-3x2           --dp 3 --pp 2 --steps 6 --seed 210 --gc-pause
rec heldout8 layers-3x3             --dp 3 --pp 3 --steps 6 --seed 211 --layers-per-stage 1,2,1
rec heldout8 dataloader-stall-2x2   --dp 2 --pp 2 --steps 6 --seed 212 --stall-rank 2 --stall-ms 80
# --- held out, ninth set (a balanced sample of the classes; recorded and committed before the eighth round's detector changes were committed; diagnosed once, at its end) ---
rec heldout9 healthy-2x3            --dp 2 --pp 3 --steps 6 --seed 301
rec heldout9 slow-rank-2x4          --dp 2 --pp 4 --steps 6 --seed 302 --slow-rank 5 --slow-ms 12
rec heldout9 layers-2x3             --dp 2 --pp 3 --steps 6 --seed 303 --layers-per-stage 1,2,1
rec heldout9 send-delay-2x3         --dp 2 --pp 3 --steps 6 --seed 304 --send-delay-rank 0 --send-delay-ms 20
rec heldout9 healthy-4x2            --dp 4 --pp 2 --steps 6 --seed 305
rec heldout9 slow-rank-2x2          --dp 2 --pp 2 --steps 6 --seed 306 --slow-rank 0 --slow-ms 10
rec heldout9 onset-4x2              --dp 4 --pp 2 --steps 8 --seed 307 --slow-rank 6 --slow-ms 20 --slow-from-step 5
rec heldout9 slow-rank-last-3x2     --dp 3 --pp 2 --steps 6 --seed 308 --slow-rank 4 --slow-ms 10
rec heldout9 var-seq-4x2            --dp 4 --pp 2 --steps 6 --seed 309 --var-seq --seq 64
rec heldout9 healthy-3x3            --dp 3 --pp 3 --steps 6 --seed 310
rec heldout9 gc-pause-2x4           --dp 2 --pp 4 --steps 6 --seed 311 --gc-pause
rec heldout9 dataloader-stall-3x2   --dp 3 --pp 2 --steps 6 --seed 312 --stall-rank 5 --stall-ms 80
rec heldout9 onset-2x3              --dp 2 --pp 3 --steps 8 --seed 313 --slow-rank 2 --slow-ms 15 --slow-from-step 4
# --- held out, tenth set (a balanced sample of the classes; recorded and committed before the ninth round's detector changes were committed; diagnosed once, at its end) ---
rec heldout10 healthy-2x3           --dp 2 --pp 3 --steps 6 --seed 601
rec heldout10 slow-rank-2x2         --dp 2 --pp 2 --steps 6 --seed 602 --slow-rank 1 --slow-ms 12
rec heldout10 layers-2x4            --dp 2 --pp 4 --steps 6 --seed 603 --layers-per-stage 1,1,2,1
rec heldout10 healthy-3x2           --dp 3 --pp 2 --steps 6 --seed 604
rec heldout10 slow-rank-2x3         --dp 2 --pp 3 --steps 6 --seed 605 --slow-rank 2 --slow-ms 10
rec heldout10 send-delay-3x2        --dp 3 --pp 2 --steps 6 --seed 606 --send-delay-rank 0 --send-delay-ms 15
rec heldout10 slow-rank-last-3x2    --dp 3 --pp 2 --steps 6 --seed 607 --slow-rank 5 --slow-ms 10
rec heldout10 onset-2x4             --dp 2 --pp 4 --steps 8 --seed 608 --slow-rank 3 --slow-ms 20 --slow-from-step 4
rec heldout10 healthy-2x4           --dp 2 --pp 4 --steps 6 --seed 609
rec heldout10 var-seq-2x3           --dp 2 --pp 3 --steps 6 --seed 610 --var-seq --seq 64
rec heldout10 slow-rank-4x2         --dp 4 --pp 2 --steps 6 --seed 611 --slow-rank 2 --slow-ms 10
rec heldout10 gc-pause-4x2          --dp 4 --pp 2 --steps 6 --seed 612 --gc-pause
rec heldout10 dataloader-stall-2x4  --dp 2 --pp 4 --steps 6 --seed 613 --stall-rank 6 --stall-ms 80
# --- held out, eleventh set (a balanced sample of the classes; recorded and committed before the tenth round's detector changes; diagnosed once, at its end) ---
rec heldout11 healthy-4x2           --dp 4 --pp 2 --steps 6 --seed 801
rec heldout11 slow-rank-2x2         --dp 2 --pp 2 --steps 6 --seed 802 --slow-rank 0 --slow-ms 15
rec heldout11 layers-2x3            --dp 2 --pp 3 --steps 6 --seed 803 --layers-per-stage 2,1,1
rec heldout11 healthy-2x2           --dp 2 --pp 2 --steps 6 --seed 804
rec heldout11 slow-rank-3x2         --dp 3 --pp 2 --steps 6 --seed 805 --slow-rank 2 --slow-ms 10
rec heldout11 send-delay-2x4        --dp 2 --pp 4 --steps 6 --seed 806 --send-delay-rank 2 --send-delay-ms 15
rec heldout11 slow-rank-last-4x2    --dp 4 --pp 2 --steps 6 --seed 807 --slow-rank 6 --slow-ms 12
rec heldout11 onset-3x2             --dp 3 --pp 2 --steps 8 --seed 808 --slow-rank 4 --slow-ms 20 --slow-from-step 5
rec heldout11 healthy-3x3           --dp 3 --pp 3 --steps 6 --seed 809
rec heldout11 var-seq-3x2           --dp 3 --pp 2 --steps 6 --seed 810 --var-seq --seq 64
rec heldout11 slow-rank-2x4         --dp 2 --pp 4 --steps 6 --seed 811 --slow-rank 5 --slow-ms 10
rec heldout11 gc-pause-2x3          --dp 2 --pp 3 --steps 6 --seed 812 --gc-pause
rec heldout11 dataloader-stall-4x2  --dp 4 --pp 2 --steps 6 --seed 813 --stall-rank 1 --stall-ms 80
# --- held out, twelfth set (a balanced sample of the classes; recorded and committed before the eleventh round's detector changes; diagnosed once, at its end) ---
rec heldout12 healthy-2x3           --dp 2 --pp 3 --steps 6 --seed 1101
rec heldout12 slow-rank-2x2         --dp 2 --pp 2 --steps 6 --seed 1102 --slow-rank 1 --slow-ms 12
rec heldout12 layers-2x3            --dp 2 --pp 3 --steps 6 --seed 1103 --layers-per-stage 1,1,2
rec heldout12 healthy-3x2           --dp 3 --pp 2 --steps 6 --seed 1104
rec heldout12 slow-rank-4x2         --dp 4 --pp 2 --steps 6 --seed 1105 --slow-rank 3 --slow-ms 10
rec heldout12 send-delay-3x2        --dp 3 --pp 2 --steps 6 --seed 1106 --send-delay-rank 1 --send-delay-ms 15
rec heldout12 slow-rank-last-2x3    --dp 2 --pp 3 --steps 6 --seed 1107 --slow-rank 5 --slow-ms 12
rec heldout12 onset-2x4             --dp 2 --pp 4 --steps 8 --seed 1108 --slow-rank 2 --slow-ms 20 --slow-from-step 5
rec heldout12 healthy-2x4           --dp 2 --pp 4 --steps 6 --seed 1109
rec heldout12 var-seq-2x2           --dp 2 --pp 2 --steps 6 --seed 1110 --var-seq --seq 64
rec heldout12 slow-rank-2x3         --dp 2 --pp 3 --steps 6 --seed 1111 --slow-rank 2 --slow-ms 12
rec heldout12 gc-pause-4x2          --dp 4 --pp 2 --steps 6 --seed 1112 --gc-pause
rec heldout12 dataloader-stall-2x3  --dp 2 --pp 3 --steps 6 --seed 1113 --stall-rank 2 --stall-ms 80
# --- held out, thirteenth set (20 recordings, a balanced sample of the classes; recorded on a quiet machine and committed before the twelfth round's detector changes; diagnosed once, at its end) ---
rec heldout13 healthy-2x2           --dp 2 --pp 2 --steps 6 --seed 1201
rec heldout13 healthy-3x2           --dp 3 --pp 2 --steps 6 --seed 1202
rec heldout13 healthy-2x4           --dp 2 --pp 4 --steps 6 --seed 1203
rec heldout13 healthy-4x2           --dp 4 --pp 2 --steps 6 --seed 1204
rec heldout13 slow-rank-last-2x2    --dp 2 --pp 2 --steps 6 --seed 1205 --slow-rank 2 --slow-ms 10
rec heldout13 slow-rank-3x2         --dp 3 --pp 2 --steps 6 --seed 1206 --slow-rank 1 --slow-ms 12
rec heldout13 slow-rank-2x3         --dp 2 --pp 3 --steps 6 --seed 1207 --slow-rank 3 --slow-ms 12
rec heldout13 slow-rank-last-4x2    --dp 4 --pp 2 --steps 6 --seed 1208 --slow-rank 5 --slow-ms 10
rec heldout13 slow-rank-2x4         --dp 2 --pp 4 --steps 6 --seed 1209 --slow-rank 4 --slow-ms 12
rec heldout13 onset-2x3             --dp 2 --pp 3 --steps 8 --seed 1210 --slow-rank 1 --slow-ms 20 --slow-from-step 5
rec heldout13 onset-4x2             --dp 4 --pp 2 --steps 8 --seed 1211 --slow-rank 2 --slow-ms 15 --slow-from-step 4
rec heldout13 layers-2x3            --dp 2 --pp 3 --steps 6 --seed 1212 --layers-per-stage 2,1,1
rec heldout13 layers-2x4            --dp 2 --pp 4 --steps 6 --seed 1213 --layers-per-stage 1,2,1,1
rec heldout13 send-delay-2x3        --dp 2 --pp 3 --steps 6 --seed 1214 --send-delay-rank 2 --send-delay-ms 15
rec heldout13 send-delay-4x2        --dp 4 --pp 2 --steps 6 --seed 1215 --send-delay-rank 1 --send-delay-ms 20
rec heldout13 var-seq-2x3           --dp 2 --pp 3 --steps 6 --seed 1216 --var-seq --seq 64
rec heldout13 var-seq-4x2           --dp 4 --pp 2 --steps 6 --seed 1217 --var-seq --seq 64
rec heldout13 gc-pause-2x3          --dp 2 --pp 3 --steps 6 --seed 1218 --gc-pause
rec heldout13 dataloader-stall-3x2  --dp 3 --pp 2 --steps 6 --seed 1219 --stall-rank 4 --stall-ms 80
rec heldout13 dataloader-stall-2x2  --dp 2 --pp 2 --steps 6 --seed 1220 --stall-rank 1 --stall-ms 100
# --- held out, fourteenth set (balanced; seeds 1301-1320; recorded on a quiet machine before the round's changes) ---
rec heldout14 healthy-2x3           --dp 2 --pp 3 --steps 6 --seed 1301
rec heldout14 healthy-3x3           --dp 3 --pp 3 --steps 6 --seed 1302
rec heldout14 healthy-2x4           --dp 2 --pp 4 --steps 6 --seed 1303
rec heldout14 slow-rank-first-2x2   --dp 2 --pp 2 --steps 6 --seed 1304 --slow-rank 0 --slow-ms 12
rec heldout14 slow-rank-3x3         --dp 3 --pp 3 --steps 6 --seed 1305 --slow-rank 4 --slow-ms 10
rec heldout14 slow-rank-last-2x3    --dp 2 --pp 3 --steps 6 --seed 1306 --slow-rank 5 --slow-ms 12
rec heldout14 slow-rank-4x2         --dp 4 --pp 2 --steps 6 --seed 1307 --slow-rank 2 --slow-ms 12
rec heldout14 slow-rank-last-2x4    --dp 2 --pp 4 --steps 6 --seed 1308 --slow-rank 6 --slow-ms 10
rec heldout14 onset-2x2             --dp 2 --pp 2 --steps 8 --seed 1309 --slow-rank 3 --slow-ms 20 --slow-from-step 4
rec heldout14 onset-3x2             --dp 3 --pp 2 --steps 8 --seed 1310 --slow-rank 1 --slow-ms 20 --slow-from-step 5
rec heldout14 layers-2x3            --dp 2 --pp 3 --steps 6 --seed 1311 --layers-per-stage 1,2,1
rec heldout14 layers-3x2            --dp 3 --pp 2 --steps 6 --seed 1312 --layers-per-stage 2,1
rec heldout14 send-delay-2x2        --dp 2 --pp 2 --steps 6 --seed 1313 --send-delay-rank 1 --send-delay-ms 20
rec heldout14 send-delay-2x4        --dp 2 --pp 4 --steps 6 --seed 1314 --send-delay-rank 2 --send-delay-ms 15
rec heldout14 var-seq-2x2           --dp 2 --pp 2 --steps 6 --seed 1315 --var-seq --seq 64
rec heldout14 var-seq-3x2           --dp 3 --pp 2 --steps 6 --seed 1316 --var-seq --seq 64
rec heldout14 gc-pause-4x2          --dp 4 --pp 2 --steps 6 --seed 1317 --gc-pause
rec heldout14 gc-pause-2x2          --dp 2 --pp 2 --steps 6 --seed 1318 --gc-pause
rec heldout14 dataloader-stall-2x3  --dp 2 --pp 3 --steps 6 --seed 1319 --stall-rank 2 --stall-ms 80
rec heldout14 dataloader-stall-4x2  --dp 4 --pp 2 --steps 6 --seed 1320 --stall-rank 6 --stall-ms 100
# --- held out, fifteenth set (balanced; seeds 1401-1420; recorded on a busy host: one extra process spinning on one of the two cores throughout, before the round's changes) ---
rec heldout15 healthy-2x2           --dp 2 --pp 2 --steps 6 --seed 1401
rec heldout15 healthy-3x2           --dp 3 --pp 2 --steps 6 --seed 1402
rec heldout15 healthy-2x3           --dp 2 --pp 3 --steps 6 --seed 1403
rec heldout15 slow-rank-2x2         --dp 2 --pp 2 --steps 6 --seed 1404 --slow-rank 1 --slow-ms 15
rec heldout15 slow-rank-last-3x2    --dp 3 --pp 2 --steps 6 --seed 1405 --slow-rank 4 --slow-ms 15
rec heldout15 slow-rank-2x3         --dp 2 --pp 3 --steps 6 --seed 1406 --slow-rank 2 --slow-ms 15
rec heldout15 slow-rank-4x2         --dp 4 --pp 2 --steps 6 --seed 1407 --slow-rank 3 --slow-ms 15
rec heldout15 slow-rank-first-2x4   --dp 2 --pp 4 --steps 6 --seed 1408 --slow-rank 1 --slow-ms 12
rec heldout15 onset-2x2             --dp 2 --pp 2 --steps 8 --seed 1409 --slow-rank 2 --slow-ms 25 --slow-from-step 4
rec heldout15 onset-2x3             --dp 2 --pp 3 --steps 8 --seed 1410 --slow-rank 3 --slow-ms 25 --slow-from-step 5
rec heldout15 layers-2x2            --dp 2 --pp 2 --steps 6 --seed 1411 --layers-per-stage 1,2
rec heldout15 layers-2x4            --dp 2 --pp 4 --steps 6 --seed 1412 --layers-per-stage 1,1,2,1
rec heldout15 send-delay-2x3        --dp 2 --pp 3 --steps 6 --seed 1413 --send-delay-rank 1 --send-delay-ms 25
rec heldout15 send-delay-3x2        --dp 3 --pp 2 --steps 6 --seed 1414 --send-delay-rank 0 --send-delay-ms 25
rec heldout15 var-seq-2x3           --dp 2 --pp 3 --steps 6 --seed 1415 --var-seq --seq 64
rec heldout15 var-seq-2x2           --dp 2 --pp 2 --steps 6 --seed 1416 --var-seq --seq 64
rec heldout15 gc-pause-2x3          --dp 2 --pp 3 --steps 6 --seed 1417 --gc-pause
rec heldout15 gc-pause-3x2          --dp 3 --pp 2 --steps 6 --seed 1418 --gc-pause
rec heldout15 dataloader-stall-2x2  --dp 2 --pp 2 --steps 6 --seed 1419 --stall-rank 3 --stall-ms 100
rec heldout15 dataloader-stall-3x2  --dp 3 --pp 2 --steps 6 --seed 1420 --stall-rank 2 --stall-ms 100
# --- held out, sixteenth set (balanced; seeds 1501-1520; recorded with other builds' benchmarks running on the machine, before the fifteenth round's changes) ---
rec heldout16 healthy-3x3           --dp 3 --pp 3 --steps 6 --seed 1501
rec heldout16 healthy-4x2           --dp 4 --pp 2 --steps 6 --seed 1502
rec heldout16 healthy-2x4           --dp 2 --pp 4 --steps 6 --seed 1503
rec heldout16 slow-rank-3x3         --dp 3 --pp 3 --steps 6 --seed 1504 --slow-rank 5 --slow-ms 12
rec heldout16 slow-rank-last-4x2    --dp 4 --pp 2 --steps 6 --seed 1505 --slow-rank 7 --slow-ms 12
rec heldout16 slow-rank-first-2x2   --dp 2 --pp 2 --steps 6 --seed 1506 --slow-rank 0 --slow-ms 15
rec heldout16 slow-rank-2x4         --dp 2 --pp 4 --steps 6 --seed 1507 --slow-rank 3 --slow-ms 12
rec heldout16 slow-rank-weak-3x2    --dp 3 --pp 2 --steps 6 --seed 1508 --slow-rank 1 --slow-ms 8
rec heldout16 onset-3x2             --dp 3 --pp 2 --steps 8 --seed 1509 --slow-rank 4 --slow-ms 20 --slow-from-step 4
rec heldout16 onset-2x4             --dp 2 --pp 4 --steps 8 --seed 1510 --slow-rank 5 --slow-ms 20 --slow-from-step 5
rec heldout16 layers-3x2            --dp 3 --pp 2 --steps 6 --seed 1511 --layers-per-stage 1,2
rec heldout16 layers-2x3            --dp 2 --pp 3 --steps 6 --seed 1512 --layers-per-stage 2,1,1
rec heldout16 send-delay-2x2        --dp 2 --pp 2 --steps 6 --seed 1513 --send-delay-rank 0 --send-delay-ms 20
rec heldout16 send-delay-4x2        --dp 4 --pp 2 --steps 6 --seed 1514 --send-delay-rank 1 --send-delay-ms 20
rec heldout16 var-seq-4x2           --dp 4 --pp 2 --steps 6 --seed 1515 --var-seq --seq 64
rec heldout16 var-seq-3x3           --dp 3 --pp 3 --steps 6 --seed 1516 --var-seq --seq 64
rec heldout16 gc-pause-2x2          --dp 2 --pp 2 --steps 6 --seed 1517 --gc-pause
rec heldout16 gc-pause-2x4          --dp 2 --pp 4 --steps 6 --seed 1518 --gc-pause
rec heldout16 dataloader-stall-2x3  --dp 2 --pp 3 --steps 6 --seed 1519 --stall-rank 1 --stall-ms 100
rec heldout16 dataloader-stall-4x2  --dp 4 --pp 2 --steps 6 --seed 1520 --stall-rank 5 --stall-ms 80
# --- held out, seventeenth set (balanced; seeds 1601-1620; recorded beside another build's benchmarks, before the eighteenth round's changes) ---
rec heldout17 healthy-2x2           --dp 2 --pp 2 --steps 6 --seed 1601
rec heldout17 healthy-3x2           --dp 3 --pp 2 --steps 6 --seed 1602
rec heldout17 healthy-2x3           --dp 2 --pp 3 --steps 6 --seed 1603
rec heldout17 slow-rank-4x2         --dp 4 --pp 2 --steps 6 --seed 1604 --slow-rank 2 --slow-ms 12
rec heldout17 slow-rank-last-2x3    --dp 2 --pp 3 --steps 6 --seed 1605 --slow-rank 5 --slow-ms 15
rec heldout17 slow-rank-first-3x2   --dp 3 --pp 2 --steps 6 --seed 1606 --slow-rank 0 --slow-ms 12
rec heldout17 slow-rank-3x3         --dp 3 --pp 3 --steps 6 --seed 1607 --slow-rank 4 --slow-ms 12
rec heldout17 slow-rank-weak-2x2    --dp 2 --pp 2 --steps 6 --seed 1608 --slow-rank 3 --slow-ms 8
rec heldout17 onset-2x2             --dp 2 --pp 2 --steps 8 --seed 1609 --slow-rank 0 --slow-ms 20 --slow-from-step 5
rec heldout17 onset-3x2             --dp 3 --pp 2 --steps 8 --seed 1610 --slow-rank 5 --slow-ms 20 --slow-from-step 4
rec heldout17 layers-2x2            --dp 2 --pp 2 --steps 6 --seed 1611 --layers-per-stage 2,1
rec heldout17 layers-2x4            --dp 2 --pp 4 --steps 6 --seed 1612 --layers-per-stage 1,2,1,1
rec heldout17 send-delay-2x3        --dp 2 --pp 3 --steps 6 --seed 1613 --send-delay-rank 2 --send-delay-ms 20
rec heldout17 send-delay-3x2        --dp 3 --pp 2 --steps 6 --seed 1614 --send-delay-rank 1 --send-delay-ms 25
rec heldout17 var-seq-2x2           --dp 2 --pp 2 --steps 6 --seed 1615 --var-seq --seq 64
rec heldout17 var-seq-2x4           --dp 2 --pp 4 --steps 6 --seed 1616 --var-seq --seq 64
rec heldout17 gc-pause-3x2          --dp 3 --pp 2 --steps 6 --seed 1617 --gc-pause
rec heldout17 gc-pause-2x3          --dp 2 --pp 3 --steps 6 --seed 1618 --gc-pause
rec heldout17 dataloader-stall-3x3  --dp 3 --pp 3 --steps 6 --seed 1619 --stall-rank 4 --stall-ms 100
rec heldout17 dataloader-stall-2x2  --dp 2 --pp 2 --steps 6 --seed 1620 --stall-rank 1 --stall-ms 100
# --- held out, eighteenth set (balanced; seeds 1701-1720; recorded beside the test suite's run, before the next round's changes) ---
rec heldout18 healthy-2x4           --dp 2 --pp 4 --steps 6 --seed 1701
rec heldout18 healthy-4x2           --dp 4 --pp 2 --steps 6 --seed 1702
rec heldout18 healthy-3x3           --dp 3 --pp 3 --steps 6 --seed 1703
rec heldout18 slow-rank-2x2         --dp 2 --pp 2 --steps 6 --seed 1704 --slow-rank 2 --slow-ms 12
rec heldout18 slow-rank-last-3x2    --dp 3 --pp 2 --steps 6 --seed 1705 --slow-rank 3 --slow-ms 15
rec heldout18 slow-rank-first-2x4   --dp 2 --pp 4 --steps 6 --seed 1706 --slow-rank 1 --slow-ms 12
rec heldout18 slow-rank-2x3         --dp 2 --pp 3 --steps 6 --seed 1707 --slow-rank 3 --slow-ms 12
rec heldout18 slow-rank-weak-4x2    --dp 4 --pp 2 --steps 6 --seed 1708 --slow-rank 6 --slow-ms 8
rec heldout18 onset-2x3             --dp 2 --pp 3 --steps 8 --seed 1709 --slow-rank 4 --slow-ms 20 --slow-from-step 4
rec heldout18 onset-4x2             --dp 4 --pp 2 --steps 8 --seed 1710 --slow-rank 1 --slow-ms 20 --slow-from-step 5
rec heldout18 layers-3x2            --dp 3 --pp 2 --steps 6 --seed 1711 --layers-per-stage 2,1
rec heldout18 layers-2x3            --dp 2 --pp 3 --steps 6 --seed 1712 --layers-per-stage 1,1,2
rec heldout18 send-delay-2x2        --dp 2 --pp 2 --steps 6 --seed 1713 --send-delay-rank 1 --send-delay-ms 25
rec heldout18 send-delay-2x4        --dp 2 --pp 4 --steps 6 --seed 1714 --send-delay-rank 2 --send-delay-ms 20
rec heldout18 var-seq-3x2           --dp 3 --pp 2 --steps 6 --seed 1715 --var-seq --seq 64
rec heldout18 var-seq-2x3           --dp 2 --pp 3 --steps 6 --seed 1716 --var-seq --seq 64
rec heldout18 gc-pause-2x2          --dp 2 --pp 2 --steps 6 --seed 1717 --gc-pause
rec heldout18 gc-pause-4x2          --dp 4 --pp 2 --steps 6 --seed 1718 --gc-pause
rec heldout18 dataloader-stall-2x4  --dp 2 --pp 4 --steps 6 --seed 1719 --stall-rank 3 --stall-ms 100
rec heldout18 dataloader-stall-3x2  --dp 3 --pp 2 --steps 6 --seed 1720 --stall-rank 4 --stall-ms 80
# --- held out, nineteenth set (recorded after the nineteenth round, before any rule of the twentieth) ---
rec heldout19 healthy-2x2           --dp 2 --pp 2 --steps 6 --seed 1801
rec heldout19 healthy-3x2           --dp 3 --pp 2 --steps 6 --seed 1802
rec heldout19 healthy-2x3           --dp 2 --pp 3 --steps 6 --seed 1803
rec heldout19 slow-rank-4x2         --dp 4 --pp 2 --steps 6 --seed 1804 --slow-rank 5 --slow-ms 12
rec heldout19 slow-rank-3x3         --dp 3 --pp 3 --steps 6 --seed 1805 --slow-rank 4 --slow-ms 12
rec heldout19 slow-rank-first-3x2   --dp 3 --pp 2 --steps 6 --seed 1806 --slow-rank 2 --slow-ms 15
rec heldout19 slow-rank-last-2x4    --dp 2 --pp 4 --steps 6 --seed 1807 --slow-rank 7 --slow-ms 12
rec heldout19 slow-rank-weak-2x2    --dp 2 --pp 2 --steps 6 --seed 1808 --slow-rank 0 --slow-ms 8
rec heldout19 onset-3x2             --dp 3 --pp 2 --steps 8 --seed 1809 --slow-rank 4 --slow-ms 20 --slow-from-step 5
rec heldout19 onset-2x4             --dp 2 --pp 4 --steps 8 --seed 1810 --slow-rank 2 --slow-ms 20 --slow-from-step 4
rec heldout19 layers-2x4            --dp 2 --pp 4 --steps 6 --seed 1811 --layers-per-stage 2,1,1,1
rec heldout19 layers-3x3            --dp 3 --pp 3 --steps 6 --seed 1812 --layers-per-stage 1,2,1
rec heldout19 send-delay-3x2        --dp 3 --pp 2 --steps 6 --seed 1813 --send-delay-rank 0 --send-delay-ms 20
rec heldout19 send-delay-2x3        --dp 2 --pp 3 --steps 6 --seed 1814 --send-delay-rank 3 --send-delay-ms 20
rec heldout19 var-seq-2x2           --dp 2 --pp 2 --steps 6 --seed 1815 --var-seq --seq 64
rec heldout19 var-seq-4x2           --dp 4 --pp 2 --steps 6 --seed 1816 --var-seq --seq 64
rec heldout19 gc-pause-3x2          --dp 3 --pp 2 --steps 6 --seed 1817 --gc-pause
rec heldout19 gc-pause-2x4          --dp 2 --pp 4 --steps 6 --seed 1818 --gc-pause
rec heldout19 dataloader-stall-2x3  --dp 2 --pp 3 --steps 6 --seed 1819 --stall-rank 5 --stall-ms 100
rec heldout19 dataloader-stall-4x2  --dp 4 --pp 2 --steps 6 --seed 1820 --stall-rank 2 --stall-ms 80
# --- held out, twentieth set (recorded after the twentieth round, before any rule of the twenty-first) ---
rec heldout20 healthy-2x4           --dp 2 --pp 4 --steps 6 --seed 1901
rec heldout20 healthy-3x3           --dp 3 --pp 3 --steps 6 --seed 1902
rec heldout20 healthy-4x2           --dp 4 --pp 2 --steps 6 --seed 1903
rec heldout20 slow-rank-2x2         --dp 2 --pp 2 --steps 6 --seed 1904 --slow-rank 1 --slow-ms 12
rec heldout20 slow-rank-2x3         --dp 2 --pp 3 --steps 6 --seed 1905 --slow-rank 5 --slow-ms 15
rec heldout20 slow-rank-first-4x2   --dp 4 --pp 2 --steps 6 --seed 1906 --slow-rank 3 --slow-ms 12
rec heldout20 slow-rank-3x2         --dp 3 --pp 2 --steps 6 --seed 1907 --slow-rank 4 --slow-ms 12
rec heldout20 slow-rank-weak-3x3    --dp 3 --pp 3 --steps 6 --seed 1908 --slow-rank 8 --slow-ms 8
rec heldout20 onset-2x2             --dp 2 --pp 2 --steps 8 --seed 1909 --slow-rank 3 --slow-ms 20 --slow-from-step 4
rec heldout20 onset-3x3             --dp 3 --pp 3 --steps 8 --seed 1910 --slow-rank 5 --slow-ms 20 --slow-from-step 5
rec heldout20 layers-2x2            --dp 2 --pp 2 --steps 6 --seed 1911 --layers-per-stage 2,1
rec heldout20 layers-2x4            --dp 2 --pp 4 --steps 6 --seed 1912 --layers-per-stage 1,1,2,1
rec heldout20 send-delay-4x2        --dp 4 --pp 2 --steps 6 --seed 1913 --send-delay-rank 2 --send-delay-ms 20
rec heldout20 send-delay-2x4        --dp 2 --pp 4 --steps 6 --seed 1914 --send-delay-rank 4 --send-delay-ms 20
rec heldout20 var-seq-3x2           --dp 3 --pp 2 --steps 6 --seed 1915 --var-seq --seq 64
rec heldout20 var-seq-2x4           --dp 2 --pp 4 --steps 6 --seed 1916 --var-seq --seq 64
rec heldout20 gc-pause-2x3          --dp 2 --pp 3 --steps 6 --seed 1917 --gc-pause
rec heldout20 gc-pause-4x2          --dp 4 --pp 2 --steps 6 --seed 1918 --gc-pause
rec heldout20 dataloader-stall-3x2  --dp 3 --pp 2 --steps 6 --seed 1919 --stall-rank 1 --stall-ms 100
rec heldout20 dataloader-stall-2x2  --dp 2 --pp 2 --steps 6 --seed 1920 --stall-rank 3 --stall-ms 80
