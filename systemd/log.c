/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>
#include <systemd/sd-login.h>

#include "systemd/log.h"

/* Process-wide by nature (like stderr itself): the level and where entries go. */
static int log_max_level = LOG_INFO;
static LogTarget log_target = LOG_TARGET_STDERR;
/* "OBJECT_SYSTEMD_UNIT=<the unit kvolumed runs in>", or "" outside one. */
static char log_object_unit[128];

static const char *const level_names[] = {
        [LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",     [LOG_ERR] = "err",
        [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice", [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

int log_level_from_string(const char *s) {
        if (!s)
                return -EINVAL;
        for (int i = LOG_ERR; i <= LOG_DEBUG; i++)
                if (streq(s, level_names[i]))
                        return i;
        return -EINVAL;
}

const char *log_level_to_string(int level) {
        if (level < 0 || level >= (int) ELEMENTSOF(level_names))
                return NULL;
        return level_names[level];
}

void log_set_max_level(int level) {
        log_max_level = level;
}

int log_get_max_level(void) {
        return log_max_level;
}

void log_set_target(LogTarget target) {
        log_target = target;
}

LogTarget log_get_target(void) {
        return log_target;
}

/* systemd sets JOURNAL_STREAM=<dev>:<inode> when stderr is connected to the
 * journal; a stderr redirected elsewhere by the user no longer matches. */
static bool stderr_is_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;

        if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
                return false;
        if (fstat(STDERR_FILENO, &st) < 0)
                return false;
        return (unsigned long long) st.st_dev == dev && (unsigned long long) st.st_ino == ino;
}

/* journald learns an entry's unit from the sender's cgroup, read when it
 * handles the entry: the last lines of a process that exits at once (the
 * reason a start failed) may be handled after it is gone and carry no
 * _SYSTEMD_UNIT, and `journalctl -u kvolumed` did not show why the unit
 * failed.  journalctl -u also shows entries of root's processes naming the
 * unit in OBJECT_SYSTEMD_UNIT, which journald takes as sent: each entry names
 * kvolumed's own unit, learnt while it surely runs. */
static void log_name_own_unit(void) {
        _cleanup_free_ char *unit = NULL;

        log_object_unit[0] = 0;
        if (log_target != LOG_TARGET_JOURNAL || geteuid() != 0 || sd_pid_get_unit(0, &unit) < 0)
                return;
        if ((size_t) snprintf(log_object_unit, sizeof log_object_unit, "OBJECT_SYSTEMD_UNIT=%s", unit) >=
            sizeof log_object_unit)
                log_object_unit[0] = 0;
}

void log_setup(void) {
        const char *forced = getenv("KVOLUMED_LOG_TARGET");

        if (forced && streq(forced, "journal"))
                log_target = LOG_TARGET_JOURNAL;
        else if (forced && streq(forced, "stderr"))
                log_target = LOG_TARGET_STDERR;
        else
                log_target = stderr_is_journal() ? LOG_TARGET_JOURNAL : LOG_TARGET_STDERR;
        log_name_own_unit();
}

typedef struct FieldRef {
        const char *name;
        const char *value;
} FieldRef;

static size_t collect_fields(const LogFields *f, FieldRef out[static 9]) {
        size_t n = 0;
        if (!f)
                return 0;
#define ADD(n_, v_)                                                                                        \
        do {                                                                                               \
                if (v_)                                                                                    \
                        out[n++] = (FieldRef){ n_, v_ };                                                   \
        } while (0)
        ADD("POD_UID", f->pod_uid);
        ADD("POD", f->pod);
        ADD("VOLUME", f->volume);
        ADD("DRIVER", f->driver);
        ADD("VOLUME_HANDLE", f->volume_handle);
        ADD("CSI_METHOD", f->csi_method);
        ADD("CSI_CODE", f->csi_code);
        ADD("OBJECT", f->object);
        ADD("MESSAGE_ID", f->message_id);
#undef ADD
        return n;
}

static bool needs_quoting(const char *v) {
        if (!*v)
                return true;
        for (const char *p = v; *p; p++)
                if (*p <= ' ' || *p == '"' || *p == '\\' || *p == 0x7f)
                        return true;
        return false;
}

static void write_value(FILE *out, const char *v) {
        if (!needs_quoting(v)) {
                fputs(v, out);
                return;
        }
        fputc('"', out);
        for (const char *p = v; *p; p++) {
                unsigned char c = (unsigned char) *p;
                if (c == '"' || c == '\\')
                        fprintf(out, "\\%c", c);
                else if (c == '\n')
                        fputs("\\n", out);
                else if (c < ' ' || c == 0x7f)
                        fprintf(out, "\\x%02x", c);
                else
                        fputc(c, out);
        }
        fputc('"', out);
}

static void log_to_stderr(int level, const char *message, const FieldRef *fields, size_t n_fields) {
        struct timespec ts;
        struct tm tm;
        char stamp[32] = "";
        /* Build the line in memory and write it at once, so that concurrent
         * writers (a test double sharing the terminal) do not interleave. */
        char *buf = NULL;
        size_t size = 0;
        FILE *line = open_memstream(&buf, &size);

        if (!line)
                return;
        if (clock_gettime(CLOCK_REALTIME, &ts) == 0 && localtime_r(&ts.tv_sec, &tm))
                snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03ld", tm.tm_hour, tm.tm_min, tm.tm_sec,
                         ts.tv_nsec / 1000000);
        fprintf(line, "%s %s: %s", stamp, strempty(log_level_to_string(level)), message);
        for (size_t i = 0; i < n_fields; i++) {
                fprintf(line, " %s=", fields[i].name);
                write_value(line, fields[i].value);
        }
        fputc('\n', line);
        if (fclose(line) == 0) {
                (void) !write(STDERR_FILENO, buf, size);
        }
        free(buf);
}

static int log_to_journal(int level, int error, const char *message, const FieldRef *fields, size_t n_fields,
                          const char *file, int line, const char *func) {
        /* MESSAGE, PRIORITY, CODE_FILE, CODE_LINE, CODE_FUNC, SYSLOG_IDENTIFIER, ERRNO,
         * OBJECT_SYSTEMD_UNIT + fields. */
        struct iovec iov[8 + 9];
        _cleanup_free_ char *m = NULL, *p = NULL, *cf = NULL, *cl = NULL, *cfn = NULL, *er = NULL;
        char *field_bufs[9] = {};
        size_t n = 0;
        int r;

        if (asprintf(&m, "MESSAGE=%s", message) < 0 || asprintf(&p, "PRIORITY=%d", level) < 0 ||
            asprintf(&cf, "CODE_FILE=%s", file) < 0 || asprintf(&cl, "CODE_LINE=%d", line) < 0 ||
            asprintf(&cfn, "CODE_FUNC=%s", func) < 0)
                return -ENOMEM;
        iov[n++] = (struct iovec){ m, strlen(m) };
        iov[n++] = (struct iovec){ p, strlen(p) };
        iov[n++] = (struct iovec){ cf, strlen(cf) };
        iov[n++] = (struct iovec){ cl, strlen(cl) };
        iov[n++] = (struct iovec){ cfn, strlen(cfn) };
        iov[n++] = (struct iovec){ (char *) "SYSLOG_IDENTIFIER=kvolumed", strlen("SYSLOG_IDENTIFIER=kvolumed") };
        if (error != 0) {
                if (asprintf(&er, "ERRNO=%d", error < 0 ? -error : error) < 0)
                        return -ENOMEM;
                iov[n++] = (struct iovec){ er, strlen(er) };
        }
        if (log_object_unit[0])
                iov[n++] = (struct iovec){ log_object_unit, strlen(log_object_unit) };
        r = 0;
        for (size_t i = 0; i < n_fields; i++) {
                if (asprintf(&field_bufs[i], "%s=%s", fields[i].name, fields[i].value) < 0) {
                        field_bufs[i] = NULL;
                        r = -ENOMEM;
                        break;
                }
                iov[n++] = (struct iovec){ field_bufs[i], strlen(field_bufs[i]) };
        }
        if (r == 0)
                r = sd_journal_sendv(iov, (int) n);
        for (size_t i = 0; i < n_fields; i++)
                free(field_bufs[i]);
        return r;
}

int log_internal(int level, int error, const LogFields *fields, const char *file, int line, const char *func,
                 const char *format, ...) {
        char message[4096];
        FieldRef refs[9];
        size_t n_refs;
        int saved_errno = errno;
        va_list ap;

        if (error < 0)
                error = -error;
        errno = error;
        va_start(ap, format);
        (void) vsnprintf(message, sizeof message, format, ap);
        va_end(ap);

        n_refs = collect_fields(fields, refs);
        if (log_target != LOG_TARGET_JOURNAL ||
            log_to_journal(level, error, message, refs, n_refs, file, line, func) < 0)
                log_to_stderr(level, message, refs, n_refs);

        errno = saved_errno;
        return -error;
}
