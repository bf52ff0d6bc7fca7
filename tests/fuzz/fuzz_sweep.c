/* fuzz_sweep.c - libFuzzer target: the sweep loader (psim_sweep_load, which
 * reads a file: the input is written to a private temporary folder first) and
 * the results-log line parser that --resume runs on a possibly damaged
 * results.jsonl (psim_sweep_row_parse). A row that parses must write out to a
 * line that parses to the same row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "search/sweep/sweep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char sweep_path[64];

/* The folder is in memory (/dev/shm) where there is one: on ext4, rewriting a
 * truncated file flushes it to disk at close (auto_da_alloc), which held the
 * target to about 330 executions/s; in memory it runs as fast as the loader. */
static char sweep_dir[64];

static void remove_input(void) {
  unlink(sweep_path);
  rmdir(sweep_dir);
}

static void write_input(const uint8_t *data, size_t size) {
  if (!sweep_path[0]) {
    char shm[] = "/dev/shm/psim-fuzz-sweep.XXXXXX", tmp[] = "/tmp/psim-fuzz-sweep.XXXXXX";
    const char *dir = mkdtemp(shm) ? shm : mkdtemp(tmp);
    if (!dir)
      abort();
    snprintf(sweep_dir, sizeof sweep_dir, "%s", dir);
    snprintf(sweep_path, sizeof sweep_path, "%s/sweep.json", dir);
    atexit(remove_input);
  }
  FILE *f = fopen(sweep_path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
    abort();
}

static void row_round_trip(const uint8_t *data, size_t size) {
  char *line = psim_malloc(size + 1);
  if (!line)
    return;
  memcpy(line, data, size);
  line[size] = '\0';
  psim_sweep_row row, back;
  if (psim_sweep_row_parse(line, &row) == PSIM_OK) {
    static char buf[16384];
    if (psim_sweep_row_jsonl(&row, buf, sizeof buf) == PSIM_OK &&
        psim_sweep_row_parse(buf, &back) != PSIM_OK) {
      fprintf(stderr, "a written row does not parse back: %s\n", psim_error_message());
      abort();
    }
    char csv[16384];
    psim_sweep_row_csv(&row, csv, sizeof csv);
  }
  psim_free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  psim_json_init_hooks();
  write_input(data, size);
  psim_sweep s;
  psim_sweep_init(&s);
  (void)psim_sweep_load(sweep_path, &s);
  psim_sweep_destroy(&s);
  psim_error_clear();
  row_round_trip(data, size);
  psim_error_clear();
  return 0;
}
