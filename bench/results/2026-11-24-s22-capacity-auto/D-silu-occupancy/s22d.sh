#!/usr/bin/env bash
# s22d: SiluMulFp8Kernel register cap for more blocks an SM: base (58 registers, 2 blocks of 448
# threads), __launch_bounds__(448, 3) (40 registers, small spills), (448, 4) (32, more spills).
tar -xJf .gpu/s22d.tar.xz -C /tmp; R=/tmp/s22d/run; O=$OUT/s22d; mkdir -p $O
for v in base v3 v4 base v3 v4; do echo "== $v" >> $O/silu.txt; timeout 60 $R silu_$v >> $O/silu.txt 2>&1; done
