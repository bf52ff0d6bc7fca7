/* memory.c - not written yet. */
