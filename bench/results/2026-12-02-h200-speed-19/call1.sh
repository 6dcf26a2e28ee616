#!/usr/bin/env bash
# speed-19 call 1 ran speed-18's next1.sh unchanged.
exec bash bench/results/2026-12-02-h200-speed-18/next1.sh
