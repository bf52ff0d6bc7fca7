/* grid.c - not written yet. */
