/* cluster_load.c - not written yet. */
