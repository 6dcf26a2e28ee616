#!/usr/bin/env bash
# For the session after speed-20, if device time is left after next4.sh (about 8 minutes): where the deeper
# contexts stand (the table's 32K row is ff549d7's, its 128K row 9f9a065's): one run each of 32K and 128K,
# 256 new tokens (128K's prefill alone is about 270 s), with main's binary or the one given as $1.
exec > >(tee ${OUT:-/tmp}/next5.log) 2>&1
date -u
STRATA_BIN=${1:-.dev/strata} PROFILES= REPEAT=1 timeout 560 bash bench/engine.sh "32768 131072" 256
date -u
