/* SPDX-License-Identifier: MIT */
/* tests/status-table.c: print the statuses of ipc/proto-schema.h, one a line, for a test. */
#include <stdio.h>

#include "proto.h"

/* "GPUX_E_INVAL -1 inval": gpux.h's name, the value, the label. */
int main(void)
{
#define STATUS_LINE_(wire, pub, value, label, text) printf("%s %d %s\n", #pub, value, label);
	IPC_STATUSES(STATUS_LINE_)
	return 0;
}
