/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* sd_notify helpers: what the service manager is told about our state.  Each
 * returns sd_notify()'s result (>0 sent, 0 no NOTIFY_SOCKET, <0 error). */

#include <systemd/sd-event.h>

#include "systemd/macro.h"

int notify_ready(void);
int notify_stopping(void);
/* RELOADING=1 with MONOTONIC_USEC, as Type=notify-reload expects; notify_ready() ends it. */
int notify_reloading(void);
int notify_status(const char *format, ...) _printf_(1, 2);

/* Pings WATCHDOG=1 from the event loop at half of WATCHDOG_USEC when the
 * service manager asked for it; a stuck loop therefore stops the pings.
 * Returns >0 when enabled, 0 when not requested. */
int notify_watchdog_setup(sd_event *event);
