/* presets.c - not written yet. */
