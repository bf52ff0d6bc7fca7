/* templates.c - not written yet. */
