/* opkind.c - not written yet. */
