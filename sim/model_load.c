/* model_load.c - not written yet. */
