/* SPDX-License-Identifier: MIT */
/* tools/json.h: the JSON the gpux command writes, through jansson (never printf). */
#pragma once

#include <stdint.h>

#include <jansson.h>

/* A new reference to a number; a non-finite double is null. */
json_t *tool_json_u64(uint64_t v);
json_t *tool_json_real(double v);

/*
 * A new reference to a string of text from outside (a compiler's log, a file or device name):
 * as it is when it is UTF-8, else with each byte that is not a UTF-8 character written as the
 * four characters \xNN. NULL only when out of memory.
 */
json_t *tool_json_text(const char *s);

/* Print root (taking its reference) as one JSON document and a newline on stdout. */
int tool_json_print(json_t *root);
