#!/usr/bin/env bash
# speed-19 call 2 ran speed-18's next2.sh unchanged.
exec bash bench/results/2026-12-02-h200-speed-18/next2.sh
