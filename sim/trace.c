/* trace.c - not written yet. */
