/* taskgraph.c - not written yet. */
