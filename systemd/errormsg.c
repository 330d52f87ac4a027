/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "systemd/errormsg.h"

int error_message(char **ret_error, int r, const char *format, ...) {
        va_list ap;
        int k;

        if (!ret_error)
                return r;
        va_start(ap, format);
        k = vasprintf(ret_error, format, ap);
        va_end(ap);
        if (k < 0) {
                *ret_error = NULL;
                return -ENOMEM;
        }
        return r;
}
