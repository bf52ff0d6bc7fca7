/* lookup.c - not written yet. */
