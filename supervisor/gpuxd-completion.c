/* SPDX-License-Identifier: MIT */
/* supervisor/gpuxd-completion.c: prints gpuxd's bash completion, made from its table of options (a build step). */
#include <stdio.h>

#include "sup.h"

int main(void)
{
	return ipc_opt_bash(&sup_prog, stdout) == 0 && fflush(stdout) == 0 ? 0 : 1;
}
