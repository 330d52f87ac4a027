/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Logging for the whole agent.  Under systemd (JOURNAL_STREAM names our stderr)
 * entries go to the journal as structured records with the fields of
 * DESIGN.md §2; otherwise they are written to stderr as one readable line each
 * carrying the same fields as KEY=value pairs.  Secrets must never be passed in. */

#include <stdbool.h>
#include <syslog.h>

#include "systemd/macro.h"

/* The journal fields of a volume-related entry.  NULL means "absent".  Callers
 * fill only what they know: { .pod = "ns/name", .volume = "data" }. */
typedef struct LogFields {
        const char *pod_uid;       /* POD_UID= */
        const char *pod;           /* POD= namespace/name */
        const char *volume;        /* VOLUME= the pod's volume name (or PV name) */
        const char *driver;        /* DRIVER= */
        const char *volume_handle; /* VOLUME_HANDLE= */
        const char *csi_method;    /* CSI_METHOD= e.g. NodePublishVolume */
        const char *csi_code;      /* CSI_CODE= gRPC code name, e.g. OK, DeadlineExceeded */
        const char *message_id;    /* MESSAGE_ID= one of the LOG_MESSAGE_ID_* below */
        const char *object;        /* OBJECT= API object, e.g. "pods default/web" */
} LogFields;

/* MESSAGE_IDs for the events an operator filters on (journalctl MESSAGE_ID=...). */
#define LOG_MESSAGE_ID_VOLUME_PUBLISHED "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a51"
#define LOG_MESSAGE_ID_VOLUME_UNPUBLISHED "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a52"
#define LOG_MESSAGE_ID_VOLUME_FAILED "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a53"
#define LOG_MESSAGE_ID_DRIVER_REGISTERED "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a54"
/* A volume's failure found outside any CSI call (a claim not bound, a driver
 * not registered, an invalid pod, a directory that cannot be made): its
 * entries carry no CSI_METHOD= nor CSI_CODE=, which VOLUME_FAILED's
 * catalog text names. */
#define LOG_MESSAGE_ID_VOLUME_BLOCKED "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a55"
/* Each has an entry in systemd/kvolumed.catalog, which journalctl -x shows. */

typedef enum LogTarget {
        LOG_TARGET_STDERR,
        LOG_TARGET_JOURNAL,
} LogTarget;

/* Chooses the target: journal when JOURNAL_STREAM matches stderr, or when
 * KVOLUMED_LOG_TARGET=journal; stderr otherwise (KVOLUMED_LOG_TARGET=stderr forces it). */
void log_setup(void);
LogTarget log_get_target(void);
void log_set_target(LogTarget target);

void log_set_max_level(int level);
int log_get_max_level(void);

/* "debug", "info", "notice", "warning", "err" → LOG_*; -EINVAL otherwise. */
int log_level_from_string(const char *s);
const char *log_level_to_string(int level);

/* Returns -abs(error) when error != 0, else 0, so that callers can write
 * "return log_error_errno(r, ...);".  errno is set to error while formatting
 * so %m works. */
int log_internal(int level, int error, const LogFields *fields, const char *file, int line, const char *func,
                 const char *format, ...) _printf_(7, 8);

#define log_full_errno_fields(level, error, fields, ...)                                                    \
        ({                                                                                                 \
                int _level = (level), _e = (error);                                                        \
                _level <= log_get_max_level()                                                              \
                        ? log_internal(_level, _e, fields, __FILE__, __LINE__, __func__, __VA_ARGS__)      \
                        : (_e < 0 ? _e : -_e);                                                             \
        })

#define log_full_errno(level, error, ...) log_full_errno_fields(level, error, NULL, __VA_ARGS__)
#define log_full(level, ...) (void) log_full_errno(level, 0, __VA_ARGS__)

#define log_debug(...) log_full(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_full(LOG_INFO, __VA_ARGS__)
#define log_notice(...) log_full(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_full(LOG_ERR, __VA_ARGS__)

#define log_debug_errno(error, ...) log_full_errno(LOG_DEBUG, error, __VA_ARGS__)
#define log_info_errno(error, ...) log_full_errno(LOG_INFO, error, __VA_ARGS__)
#define log_notice_errno(error, ...) log_full_errno(LOG_NOTICE, error, __VA_ARGS__)
#define log_warning_errno(error, ...) log_full_errno(LOG_WARNING, error, __VA_ARGS__)
#define log_error_errno(error, ...) log_full_errno(LOG_ERR, error, __VA_ARGS__)

/* Volume-related entries: log_fields(LOG_INFO, &(LogFields){ .pod = ... }, "..."). */
#define log_fields(level, fields, ...) (void) log_full_errno_fields(level, 0, fields, __VA_ARGS__)
#define log_fields_errno(level, error, fields, ...) log_full_errno_fields(level, error, fields, __VA_ARGS__)
