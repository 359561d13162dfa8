#!/bin/bash
# Session 31 call F (review mend: the device check under a mutex, CurrentDeviceSmCount).
cd /tmp && tar -xJf "$OLDPWD/.gpu/f.tar.xz" -C /tmp
timeout 90 /tmp/f/run fp8_gate_up_test 2>&1 | tail -4
timeout 90 /tmp/f/run gate_up_bench --rows 15360 --seconds 1 2>&1 | tail -8
