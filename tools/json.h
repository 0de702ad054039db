/* SPDX-License-Identifier: MIT */
/* tools/json.h: the JSON the gpux command writes, through jansson (never printf). */
#pragma once

#include <stdint.h>

#include <jansson.h>

/* A new reference to a number; a non-finite double is null. */
json_t *tool_json_u64(uint64_t v);
json_t *tool_json_real(double v);

/* Print root (taking its reference) as one JSON document and a newline on stdout. */
int tool_json_print(json_t *root);
