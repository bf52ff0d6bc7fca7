/* cluster.c - not written yet. */
