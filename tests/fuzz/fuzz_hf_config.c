/* libFuzzer harness: config.json parsing (mt_hf_config_parse) on arbitrary text; a config it
 * accepts must survive the round trip through mt_hf_config_to_json and back. */
#include <stdlib.h>
#include <string.h>

#include "io/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mt_config cfg, again;
    if (mt_hf_config_parse((const char *)data, size, "fuzz/config.json", &cfg) != MT_OK) return 0;
    json_t *doc = mt_hf_config_to_json(&cfg, "float32");
    if (!doc) abort();
    if (mt_hf_config_from_json(doc, "fuzz/round-trip", &again) != MT_OK) abort();
    json_decref(doc);
    return 0;
}
