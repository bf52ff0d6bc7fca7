/* generators.c - not written yet. */
