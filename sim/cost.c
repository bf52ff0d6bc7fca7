/* cost.c - not written yet. */
