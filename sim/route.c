/* route.c - not written yet. */
