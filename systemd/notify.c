/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "systemd/log.h"
#include "systemd/notify.h"

int notify_ready(void) {
        return sd_notify(0, "READY=1");
}

int notify_stopping(void) {
        return sd_notify(0, "STOPPING=1");
}

int notify_reloading(void) {
        struct timespec ts;

        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu",
                          (unsigned long long) ts.tv_sec * 1000000ULL + (unsigned long long) ts.tv_nsec / 1000ULL);
}

int notify_status(const char *format, ...) {
        _cleanup_free_ char *status = NULL;
        va_list ap;
        int r;

        va_start(ap, format);
        r = vasprintf(&status, format, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        return sd_notifyf(0, "STATUS=%s", status);
}

int notify_watchdog_setup(sd_event *event) {
        uint64_t usec = 0;
        int r;

        /* sd-event reads WATCHDOG_USEC/WATCHDOG_PID itself and sends the pings
         * from its own loop iteration, which is exactly the liveness we want. */
        r = sd_event_set_watchdog(event, true);
        if (r < 0)
                return log_error_errno(r, "Failed to enable the watchdog: %m");
        if (r > 0 && sd_watchdog_enabled(false, &usec) > 0)
                log_info("Watchdog enabled, pinging every %llu ms", (unsigned long long) (usec / 2000));
        return r;
}
