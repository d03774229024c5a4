/* Byte sizes as users write them, and as messages print them. The one parser of sizes: every
 * option that takes one (--gpu-mem, --save-staging, export's --shard-size) goes through it. */
#ifndef MT_UTIL_SIZE_H
#define MT_UTIL_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

/* The largest size any option takes: 1 PiB, past any machine's memory or disk. */
#define MT_SIZE_MAX ((int64_t)1 << 50)

/* A number and an optional unit: B, KB/MB/GB/TB/PB (powers of 1000) or KiB/MiB/GiB/TiB/PiB
 * (powers of 1024), in any letter case: "24GiB", "512MB", "1e9", "8 GiB". A fraction of a
 * byte is dropped. Refused (MT_ERR_INVALID, the message names `what` and the text): no number,
 * an unknown unit, a negative or non-finite number, less than `min` or more than MT_SIZE_MAX. */
mt_status mt_size_parse(const char *what, const char *text, int64_t min, int64_t *bytes);

/* "24 GiB", "512 MiB", "1000 bytes": exact where the size is a whole number of a binary unit. */
const char *mt_size_format(int64_t bytes, char *buf, size_t cap);

/* A device budget or need for messages: "%.2f GiB", or below a hundredth of a GiB the binary unit
 * that shows it ("1000 bytes", "12.5 KiB", "3.4 MiB"), never "0.00 GiB". */
const char *mt_size_gib_text(int64_t bytes, char *buf, size_t cap);

/* A byte count for messages, in the decimal unit that shows it: "142.80 GB", "48.3 MB", "512 kB",
 * "100 bytes" (a small model's needs are not "0.00 GB"). */
const char *mt_size_text(int64_t bytes, char *buf, size_t cap);

#endif
