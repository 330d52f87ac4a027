/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "systemd/macro.h"

/* The words of a failure for a caller that asked for them: a function that
 * returns -errno and, through char **ret_error, what went wrong as an
 * operator reads it (a path, the rule, what to do).
 *
 * Sets *ret_error (when ret_error is not NULL; the caller frees it) and
 * returns r, so that a failure is one line:
 *         return error_message(ret_error, -EINVAL, "hostPath %s is not absolute", path);
 * Out of memory for the words: *ret_error is NULL and -ENOMEM is returned
 * in place of r. */
_printf_(3, 4) int error_message(char **ret_error, int r, const char *format, ...);
