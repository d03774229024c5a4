/* TensorBoard event files, written by hand (the format is small): a TFRecord file, each record
 *   uint64 length, uint32 masked CRC32C of the length, the data, uint32 masked CRC32C of the data
 * (little-endian; masked: ((crc >> 15) | (crc << 17)) + 0xa282ead8), holding one Event protobuf:
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
 * The first record is the Event with file_version "brain.Event:2"; the others carry scalars.
 * `tensorboard --logdir RUN` reads the file from the run directory. */
#ifndef MT_IO_TB_EVENTS_H
#define MT_IO_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef struct mt_tb_events mt_tb_events;

/* Creates dir/events.out.tfevents.<seconds>.<host>.<pid>.<k>.megatrain (a new file each time: a
 * resumed run adds one, whose steps TensorBoard lets replace the abandoned ones) and writes the
 * file_version record. */
mt_status mt_tb_open(const char *dir, mt_tb_events **out);
/* One Event at `step` with the n scalars tags[i] = values[i]; flushed. */
mt_status mt_tb_scalars(mt_tb_events *tb, int64_t step, const char *const *tags, const double *values, size_t n);
void mt_tb_close(mt_tb_events *tb);
/* The file's path, for messages. */
const char *mt_tb_path(const mt_tb_events *tb);

/* CRC32C (Castagnoli) of n bytes, and its masked form as TFRecord stores it. */
uint32_t mt_crc32c(const void *data, size_t n);
uint32_t mt_tb_masked_crc(const void *data, size_t n);

#endif
