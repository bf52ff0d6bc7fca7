/* build.c - not written yet. */
