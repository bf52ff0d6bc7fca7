/* strategy_load.c - not written yet. */
