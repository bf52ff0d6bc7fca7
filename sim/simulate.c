/* simulate.c - not written yet. */
