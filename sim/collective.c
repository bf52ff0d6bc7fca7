/* collective.c - not written yet. */
