/* profile_cpu.c - not written yet. */
