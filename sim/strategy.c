/* strategy.c - not written yet. */
