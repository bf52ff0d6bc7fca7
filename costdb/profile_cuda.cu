/* profile_cuda.cu - not written yet. */
