/* costdb.c - not written yet. */
