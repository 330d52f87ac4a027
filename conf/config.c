/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>

#include <grp.h>
#include <ini.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <syslog.h>

#include "conf/config.h"
#include "systemd/log.h"
#include "systemd/secure-file.h"
#include "systemd/validate.h"

typedef enum ValueType {
        VALUE_NODE_NAME,   /* empty: the host name */
        VALUE_PATH,        /* absolute path; empty: default */
        VALUE_OPTIONAL_PATH, /* absolute path; empty: unset / off */
        VALUE_HTTPS_URL,   /* empty: unset */
        VALUE_DURATION,    /* empty: default */
        VALUE_DURATION_OR_OFF, /* "0": off; empty: default */
        VALUE_UNSIGNED,    /* empty: default */
        VALUE_LISTEN,      /* empty: off */
        VALUE_LOG_LEVEL,   /* empty: default */
        VALUE_BOOL,        /* true | false; empty: default */
        VALUE_MOUNT_SOURCE, /* auto | mountinfo (a bool: mountinfo); empty: default */
        VALUE_UNIX_ENDPOINT, /* unix:///abs or /abs (a socket); empty: unset / off */
        VALUE_GROUP,       /* a group name or a numeric gid; empty: unset */
        VALUE_VOLUME_TYPES, /* volume source names, comma-separated; empty: none */
} ValueType;

typedef struct KeyDef {
        const char *section;
        const char *key;
        ValueType type;
        size_t offset;      /* into Config */
        const char *def;    /* default, in configuration syntax; NULL: unset */
        unsigned min, max;  /* VALUE_UNSIGNED range; durations: in seconds (0 stays "off" where allowed) */
        const char *why;    /* durations: what a value out of range would do */
} KeyDef;

#define FIELD(f) offsetof(Config, f)

/* What agent_reload() applies to the running agent (section.key, "driver":
 * every [driver "NAME"] section).  kvolumed.conf(5) and kvolumed(8) name the
 * same keys: test/integration/test_man_pages.py reads this list and the key
 * table below and compares them with the pages. */
static const char *const reloadable_settings[] = { "log.level",          "csi.call-timeout",   "csi.max-parallel",
                                                   "csi.republish-interval", "csi.stats-interval", "driver",
                                                   "metrics.listen" };

bool config_setting_reloadable(const char *line) {
        for (size_t i = 0; i < ELEMENTSOF(reloadable_settings); i++) {
                size_t n = strlen(reloadable_settings[i]);
                if (strncmp(line, reloadable_settings[i], n) == 0 && line[n] == ' ')
                        return true;
        }
        return false;
}

/* The order is the order of --check-config's listing and of the example file. */
static const KeyDef key_table[] = {
        { "agent", "node-name", VALUE_NODE_NAME, FIELD(node_name), NULL, 0, 0, NULL },
        { "agent", "root-dir", VALUE_PATH, FIELD(root_dir), "/var/lib/kubelet", 0, 0, NULL },
        { "agent", "resync-interval", VALUE_DURATION, FIELD(resync_interval_usec), "5m", 30, 24 * 3600,
          "each round re-reads every pod's objects from the API server" },
        { "agent", "mount-source", VALUE_MOUNT_SOURCE, FIELD(mount_source_mountinfo), "auto", 0, 0, NULL },
        { "kubernetes", "kubeconfig", VALUE_OPTIONAL_PATH, FIELD(kubeconfig), "/etc/kvolumed/kubeconfig", 0, 0, NULL },
        { "kubernetes", "server", VALUE_HTTPS_URL, FIELD(server), NULL, 0, 0, NULL },
        { "kubernetes", "token-file", VALUE_OPTIONAL_PATH, FIELD(token_file), NULL, 0, 0, NULL },
        { "kubernetes", "certificate-authority", VALUE_OPTIONAL_PATH, FIELD(certificate_authority), NULL, 0, 0, NULL },
        { "kubernetes", "client-certificate", VALUE_OPTIONAL_PATH, FIELD(client_certificate), NULL, 0, 0, NULL },
        { "kubernetes", "client-key", VALUE_OPTIONAL_PATH, FIELD(client_key), NULL, 0, 0, NULL },
        { "csi", "registration-dir", VALUE_OPTIONAL_PATH, FIELD(registration_dir), "/var/lib/kubelet/plugins_registry", 0, 0, NULL },
        { "csi", "call-timeout", VALUE_DURATION, FIELD(call_timeout_usec), "2m", 1, 30 * 60,
          "shorter gives up on a working driver; longer holds a volume on a hung one" },
        { "csi", "max-parallel", VALUE_UNSIGNED, FIELD(max_parallel), "64", 1, 4096, NULL },
        { "csi", "republish-interval", VALUE_DURATION, FIELD(republish_interval_usec), "1m", 10, 24 * 3600,
          "each round calls NodePublishVolume for every such volume" },
        { "csi", "stats-interval", VALUE_DURATION_OR_OFF, FIELD(stats_interval_usec), "1m", 10, 24 * 3600,
          "each round calls NodeGetVolumeStats for every volume" },
        { "csi", "attach-limit-refresh-interval", VALUE_DURATION_OR_OFF, FIELD(attach_limit_refresh_usec), "0", 10,
          24 * 3600, "each round calls NodeGetInfo and may write the CSINode" },
        { "volumes", "selinux-mount-all", VALUE_BOOL, FIELD(selinux_mount_all), "false", 0, 0, NULL },
        { "volumes", "expand-check-interval", VALUE_DURATION, FIELD(expand_check_interval_usec), "1m", 10, 24 * 3600,
          "each round GETs the claim of every published volume" },
        { "volumes", "runner-kinds", VALUE_VOLUME_TYPES, FIELD(runner_kinds), NULL, 0, 0, NULL },
        { "runtime", "endpoint", VALUE_UNIX_ENDPOINT, FIELD(runtime_endpoint), NULL, 0, 0, NULL },
        { "api", "socket", VALUE_OPTIONAL_PATH, FIELD(api_socket), "/run/kvolumed/kvolumed.sock", 0, 0, NULL },
        { "api", "group", VALUE_GROUP, FIELD(api_group), NULL, 0, 0, NULL },
        { "metrics", "listen", VALUE_LISTEN, FIELD(metrics_listen), "127.0.0.1:10284", 0, 0, NULL },
        { "log", "level", VALUE_LOG_LEVEL, FIELD(log_level), "info", 0, 0, NULL },
};

#define N_KEYS ELEMENTSOF(key_table)
#define DRIVER_SECTION "driver"

typedef struct ParseState {
        Config *config;
        const char *name;      /* file name for messages */
        const char *text;
        size_t pos;
        unsigned line;         /* line the reader returned last */
        bool at_line_start;

        char *error;           /* first error, "FILE:LINE: ..." */

        char **sections;       /* headers seen, for repeats */
        unsigned *section_lines;
        size_t n_sections;
        const char *section;   /* the current section, known-good */
        DriverConfig *driver;  /* the current [driver "..."] */

        unsigned key_line[N_KEYS]; /* 0: not set in this file (a repeat there is an error) */
        ConfigSource key_source[N_KEYS]; /* where the effective value was set, over all files */
        char **files;          /* the files read so far, main first; NULL-terminated */
        size_t n_files;
} ParseState;

static void fail(ParseState *st, unsigned line, const char *format, ...) _printf_(3, 4);
static void fail(ParseState *st, unsigned line, const char *format, ...) {
        _cleanup_free_ char *what = NULL;
        va_list ap;

        if (st->error)
                return; /* the first error is the one to fix first */
        va_start(ap, format);
        if (vasprintf(&what, format, ap) < 0)
                what = NULL;
        va_end(ap);
        if (line > 0) {
                if (asprintf(&st->error, "%s:%u: %s", st->name, line, what ? what : "out of memory") < 0)
                        st->error = NULL;
        } else if (asprintf(&st->error, "%s: %s", st->name, what ? what : "out of memory") < 0)
                st->error = NULL;
}

/* An error about a setting that may come from any of the files read. */
static void fail_at(ParseState *st, ConfigSource where, const char *format, ...) _printf_(3, 4);
static void fail_at(ParseState *st, ConfigSource where, const char *format, ...) {
        _cleanup_free_ char *what = NULL;
        const char *saved = st->name;
        va_list ap;

        va_start(ap, format);
        if (vasprintf(&what, format, ap) < 0)
                what = NULL;
        va_end(ap);
        if (where.file)
                st->name = where.file;
        fail(st, where.line, "%s", what ? what : "out of memory");
        st->name = saved;
}

int config_parse_duration(const char *s, uint64_t *ret_usec) {
        /* Largest unit first, each at most once: "1h30m", "1m30s", "2s500ms".
         * "ms" is tried before "m". */
        static const struct {
                const char *suffix;
                uint64_t usec;
        } units[] = { { "h", USEC_PER_HOUR }, { "ms", USEC_PER_MSEC }, { "m", USEC_PER_MINUTE },
                      { "s", USEC_PER_SEC } };
        static const unsigned rank[] = { 0, 3, 1, 2 }; /* the order units must come in */
        uint64_t total = 0;
        int last = -1;

        if (!s || !isdigit((unsigned char) s[0]))
                return -EINVAL;
        while (*s) {
                unsigned long long n;
                char *end;
                size_t u;

                if (!isdigit((unsigned char) s[0]))
                        return -EINVAL;
                errno = 0;
                n = strtoull(s, &end, 10);
                if (errno != 0 || end == s)
                        return -EINVAL;
                for (u = 0; u < ELEMENTSOF(units); u++)
                        if (strncmp(end, units[u].suffix, strlen(units[u].suffix)) == 0)
                                break;
                if (u == ELEMENTSOF(units) || (int) rank[u] <= last)
                        return -EINVAL;
                last = (int) rank[u];
                if (n > UINT64_MAX / units[u].usec || total > UINT64_MAX - n * units[u].usec)
                        return -ERANGE;
                total += n * units[u].usec;
                s = end + strlen(units[u].suffix);
        }
        *ret_usec = total;
        return 0;
}

const char *config_format_duration(uint64_t usec, char buf[static 32]) {
        if (usec != 0 && usec % USEC_PER_HOUR == 0)
                snprintf(buf, 32, "%" PRIu64 "h", usec / USEC_PER_HOUR);
        else if (usec != 0 && usec % USEC_PER_MINUTE == 0)
                snprintf(buf, 32, "%" PRIu64 "m", usec / USEC_PER_MINUTE);
        else if (usec % USEC_PER_SEC == 0)
                snprintf(buf, 32, "%" PRIu64 "s", usec / USEC_PER_SEC);
        else
                snprintf(buf, 32, "%" PRIu64 "ms", usec / USEC_PER_MSEC);
        return buf;
}

int config_validate_listen_address(const char *s) {
        return parse_listen_address(s, NULL, NULL);
}

static int default_node_name(char **ret) {
        char host[HOST_NAME_MAX + 1] = "";

        if (gethostname(host, sizeof host) < 0)
                return -errno;
        /* kubelet lowercases the host name the same way. */
        for (char *p = host; *p; p++)
                *p = (char) tolower((unsigned char) *p);
        *ret = strdup(host);
        return *ret ? 0 : -ENOMEM;
}

static bool short_intervals_allowed = false;

void config_allow_short_intervals(bool allow) {
        short_intervals_allowed = allow;
}

/* Bounds that keep a value from hammering the API server or a driver, or
 * from making a timeout meaningless; the message says the range and why. */
static int check_duration_range(ParseState *st, const KeyDef *k, unsigned line, const char *value, uint64_t usec) {
        char lo[32], hi[32];
        uint64_t min = (uint64_t) k->min * USEC_PER_SEC, max = (uint64_t) k->max * USEC_PER_SEC;

        if (short_intervals_allowed)
                min = MIN(min, USEC_PER_MSEC);
        if (usec >= min && usec <= max)
                return 0;
        fail(st, line, "%s: %s is out of range: from %s to %s%s (%s)", k->key, value,
             config_format_duration(min, lo), config_format_duration(max, hi),
             k->type == VALUE_DURATION_OR_OFF ? ", or 0 for off" : "", k->why);
        return -ERANGE;
}

/* [volumes] runner-kinds: the pod volume sources the runner sets up itself,
 * by their field name in the pod spec (nfs, iscsi, image, ...) or a PV's.
 * kvolumed sets up every other source or refuses the pod's volume; naming
 * one of its own sources here would leave a volume to nobody (or to two),
 * so that is an error.  Kept as one normalised "a, b" string. */
static int parse_volume_types(ParseState *st, const KeyDef *k, unsigned line, const char *value, char **str) {
        static const char *const owned[] = { "csi",      "persistentVolumeClaim", "ephemeral", "configMap",
                                             "secret",   "downwardAPI",           "projected", "emptyDir",
                                             "hostPath", "local" };
        _cleanup_free_ char *copy = strdup(value), *out = NULL;
        size_t size = 0;
        FILE *f;

        if (!copy)
                return -ENOMEM;
        f = open_memstream(&out, &size);
        if (!f)
                return -ENOMEM;
        for (char *save = NULL, *t = strtok_r(copy, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
                bool ok = isalpha((unsigned char) t[0]) && strlen(t) <= 63;
                for (const char *c = t; ok && *c; c++)
                        ok = isalnum((unsigned char) *c);
                if (!ok) {
                        fclose(f);
                        fail(st, line, "%s: \"%s\" is not a volume source name (the field of the pod's volume, "
                             "e.g. nfs, iscsi, image)", k->key, t);
                        return -EINVAL;
                }
                for (size_t i = 0; i < ELEMENTSOF(owned); i++)
                        if (streq(t, owned[i])) {
                                fclose(f);
                                fail(st, line, "%s: kvolumed sets up %s volumes itself; only a source it does not "
                                     "set up (nfs, iscsi, image, ...) can be left to the runner", k->key, t);
                                return -EINVAL;
                        }
                fprintf(f, "%s%s", ftell(f) > 0 ? ", " : "", t);
        }
        if (fclose(f) != 0 || !out)
                return -ENOMEM;
        free(*str);
        *str = isempty(out) ? NULL : TAKE_PTR(out);
        return 0;
}

static int set_value(ParseState *st, const KeyDef *k, const char *value, bool from_default) {
        void *field = (uint8_t *) st->config + k->offset;
        char **str = field;
        unsigned line = from_default ? 0 : st->line;
        uint64_t usec;
        int r;

        /* An empty value means the default, except where empty means "off". */
        if (!from_default && isempty(value)) {
                if (k->type == VALUE_OPTIONAL_PATH || k->type == VALUE_HTTPS_URL || k->type == VALUE_LISTEN ||
                    k->type == VALUE_UNIX_ENDPOINT || k->type == VALUE_GROUP || k->type == VALUE_VOLUME_TYPES) {
                        *str = mfree_str(*str);
                        return 0;
                }
                if (k->type == VALUE_NODE_NAME)
                        return 0;
                return set_value(st, k, k->def, true);
        }

        switch (k->type) {
        case VALUE_NODE_NAME:
                if (validate_dns1123_subdomain(value) < 0) {
                        fail(st, line, "%s: \"%s\" is not a valid node name (a DNS-1123 subdomain: lowercase "
                             "letters, digits, '-' and '.')", k->key, value);
                        return -EINVAL;
                }
                return free_and_strdup(str, value);

        case VALUE_PATH:
        case VALUE_OPTIONAL_PATH:
                if (validate_absolute_path(value) < 0) {
                        fail(st, line, "%s: \"%s\" is not an absolute, normalised path", k->key, value);
                        return -EINVAL;
                }
                return free_and_strdup(str, value);

        case VALUE_HTTPS_URL:
                if (strncmp(value, "https://", 8) != 0 || !value[8] || strpbrk(value, " \t")) {
                        fail(st, line, "%s: \"%s\" is not an https:// URL", k->key, value);
                        return -EINVAL;
                }
                return free_and_strdup(str, value);

        case VALUE_DURATION:
                r = config_parse_duration(value, &usec);
                if (r < 0 || usec == 0) {
                        fail(st, line, "%s: \"%s\" is not a positive duration (integers with h, m, s or ms, "
                             "largest first, e.g. 90s or 1m30s)", k->key, value);
                        return -EINVAL;
                }
                if (check_duration_range(st, k, line, value, usec) < 0)
                        return -EINVAL;
                *(uint64_t *) field = usec;
                return 0;

        case VALUE_DURATION_OR_OFF:
                if (streq(value, "0")) {
                        *(uint64_t *) field = 0;
                        return 0;
                }
                if (config_parse_duration(value, &usec) < 0) {
                        fail(st, line, "%s: \"%s\" is neither a duration (integers with h, m, s or ms, largest "
                             "first, e.g. 90s or 1m30s) nor 0 (off)", k->key, value);
                        return -EINVAL;
                }
                if (usec > 0 && check_duration_range(st, k, line, value, usec) < 0)
                        return -EINVAL;
                *(uint64_t *) field = usec;
                return 0;

        case VALUE_UNSIGNED: {
                char *end;
                unsigned long n;
                errno = 0;
                n = isdigit((unsigned char) value[0]) ? strtoul(value, &end, 10) : (end = (char *) value, 0);
                if (errno != 0 || end == value || *end || n < k->min || n > k->max) {
                        fail(st, line, "%s: \"%s\" is not an integer from %u to %u", k->key, value, k->min, k->max);
                        return -EINVAL;
                }
                *(unsigned *) field = (unsigned) n;
                return 0;
        }

        case VALUE_UNIX_ENDPOINT: {
                /* crictl and kubelet's --container-runtime-endpoint take both forms;
                 * kept as unix:// so that the listing shows one form. */
                _cleanup_free_ char *url = NULL;
                if (value[0] == '/' && asprintf(&url, "unix://%s", value) < 0)
                        return -ENOMEM;
                if (unix_endpoint_path(url ?: value, NULL) < 0) {
                        fail(st, line, "%s: \"%s\" is neither a unix:// endpoint nor an absolute socket path "
                             "(shorter than 108 bytes)", k->key, value);
                        return -EINVAL;
                }
                return free_and_strdup(str, url ?: value);
        }

        case VALUE_LISTEN:
                if (config_validate_listen_address(value) < 0) {
                        fail(st, line, "%s: \"%s\" is not a listen address (IPV4:PORT, [IPV6]:PORT or "
                             "localhost:PORT)", k->key, value);
                        return -EINVAL;
                }
                return free_and_strdup(str, value);

        case VALUE_GROUP:
                /* Resolved in validate_combinations(), once the file is read. */
                if (strpbrk(value, " \t:/")) {
                        fail(st, line, "%s: \"%s\" is not a group name or a numeric gid", k->key, value);
                        return -EINVAL;
                }
                return free_and_strdup(str, value);

        case VALUE_VOLUME_TYPES:
                return parse_volume_types(st, k, line, value, str);

        case VALUE_LOG_LEVEL:
                r = log_level_from_string(value);
                if (r < 0) {
                        fail(st, line, "%s: \"%s\" is not one of debug, info, notice, warning, err", k->key, value);
                        return -EINVAL;
                }
                *(int *) field = r;
                return 0;

        case VALUE_BOOL:
                if (!streq(value, "true") && !streq(value, "false")) {
                        fail(st, line, "%s: \"%s\" is not true or false", k->key, value);
                        return -EINVAL;
                }
                *(bool *) field = streq(value, "true");
                return 0;

        case VALUE_MOUNT_SOURCE:
                if (!streq(value, "auto") && !streq(value, "mountinfo")) {
                        fail(st, line, "%s: \"%s\" is not auto or mountinfo", k->key, value);
                        return -EINVAL;
                }
                *(bool *) field = streq(value, "mountinfo");
                return 0;
        }
        return -EINVAL;
}

/* [driver "NAME"] → NAME (allocated), or NULL when the header is not of that form. */
static char *driver_section_name(const char *section) {
        size_t n = strlen(DRIVER_SECTION);
        const char *p, *q;

        if (strncmp(section, DRIVER_SECTION, n) != 0 || !isspace((unsigned char) section[n]))
                return NULL;
        p = section + n;
        while (isspace((unsigned char) *p))
                p++;
        if (*p != '"')
                return NULL;
        q = strchr(p + 1, '"');
        if (!q || q[1] != '\0')
                return NULL;
        return strndup(p + 1, q - p - 1);
}

static bool known_section(const char *s) {
        for (size_t i = 0; i < N_KEYS; i++)
                if (streq(key_table[i].section, s))
                        return true;
        return false;
}

static int finish_driver(ParseState *st) {
        if (st->driver && !st->driver->endpoint) {
                fail(st, st->driver->line, "[driver \"%s\"] has no endpoint (endpoint = unix:///path/to/csi.sock)",
                     st->driver->name);
                return -EINVAL;
        }
        return 0;
}

/* Called by the reader on each new line: section headers are checked here,
 * where their line number is known and before inih sees them. */
static int check_section_header(ParseState *st, const char *line, size_t len) {
        _cleanup_free_ char *header = NULL;
        const char *close;
        char *name;

        while (len > 0 && isspace((unsigned char) *line))
                line++, len--;
        if (len == 0 || line[0] != '[')
                return 0;
        close = memchr(line, ']', len);
        if (!close)
                return 0; /* inih reports the syntax error */
        header = strndup(line + 1, close - line - 1);
        if (!header)
                return -ENOMEM;
        /* Trim like inih trims keys, so "[ agent ]" is [agent]. */
        name = header;
        while (isspace((unsigned char) *name))
                name++;
        for (size_t n = strlen(name); n > 0 && isspace((unsigned char) name[n - 1]); n--)
                name[n - 1] = '\0';

        if (finish_driver(st) < 0)
                return -EINVAL;
        st->driver = NULL;
        st->section = NULL;

        for (size_t i = 0; i < st->n_sections; i++)
                if (streq(st->sections[i], name)) {
                        fail(st, st->line, "section [%s] repeated (first on line %u)", name, st->section_lines[i]);
                        return -EINVAL;
                }

        if (!known_section(name)) {
                _cleanup_free_ char *driver = driver_section_name(name);
                if (!driver) {
                        fail(st, st->line, "unknown section [%s] (known: agent, kubernetes, csi, driver \"NAME\", "
                             "volumes, runtime, api, metrics, log)", name);
                        return -EINVAL;
                }
                if (validate_csi_driver_name(driver) < 0) {
                        fail(st, st->line, "\"%s\" is not a valid CSI driver name (at most 63 alphanumerics, '-' "
                             "and '.', alphanumeric at both ends)", driver);
                        return -EINVAL;
                }
                /* The same driver in a later file (drop-in) replaces it. */
                DriverConfig *d = (DriverConfig *) config_find_driver(st->config, driver);
                if (d)
                        d->endpoint = mfree_str(d->endpoint);
                else {
                        d = reallocarray(st->config->drivers, st->config->n_drivers + 1, sizeof *d);
                        if (!d)
                                return -ENOMEM;
                        st->config->drivers = d;
                        d = &d[st->config->n_drivers++];
                        *d = (DriverConfig){ .name = TAKE_PTR(driver) };
                }
                d->line = st->line;
                d->file = st->name;
                st->driver = d;
                st->section = DRIVER_SECTION;
        }

        char **s = reallocarray(st->sections, st->n_sections + 1, sizeof *s);
        if (!s)
                return -ENOMEM;
        st->sections = s;
        unsigned *l = reallocarray(st->section_lines, st->n_sections + 1, sizeof *l);
        if (!l)
                return -ENOMEM;
        st->section_lines = l;
        st->sections[st->n_sections] = strdup(name);
        if (!st->sections[st->n_sections])
                return -ENOMEM;
        st->section_lines[st->n_sections++] = st->line;
        if (!st->section)
                st->section = st->sections[st->n_sections - 1];
        return 0;
}

/* fgets-like reader over the text that counts lines for the handler. */
static char *reader(char *buf, int size, void *stream) {
        ParseState *st = stream;
        size_t rest, n;
        const char *nl;

        if (st->error || !st->text[st->pos] || size < 2)
                return NULL;
        if (st->at_line_start) {
                const char *line = st->text + st->pos;
                const char *end = strchr(line, '\n');
                st->line++;
                if (check_section_header(st, line, end ? (size_t) (end - line) : strlen(line)) < 0) {
                        if (!st->error)
                                fail(st, st->line, "out of memory");
                        return NULL;
                }
        }
        rest = strlen(st->text + st->pos);
        nl = memchr(st->text + st->pos, '\n', rest);
        n = nl ? (size_t) (nl - (st->text + st->pos)) + 1 : rest;
        if (n > (size_t) size - 1)
                n = (size_t) size - 1;
        memcpy(buf, st->text + st->pos, n);
        buf[n] = '\0';
        st->pos += n;
        st->at_line_start = n > 0 && buf[n - 1] == '\n';
        return buf;
}

static int handler(void *user, const char *section, const char *name, const char *value) {
        ParseState *st = user;

        if (!st->section) {
                fail(st, st->line, "key \"%s\" outside of any section", name);
                return 0;
        }
        if (streq(st->section, DRIVER_SECTION)) {
                if (!streq(name, "endpoint")) {
                        fail(st, st->line, "unknown key \"%s\" in section [driver \"%s\"] (known: endpoint)", name,
                             st->driver->name);
                        return 0;
                }
                if (st->driver->endpoint) {
                        fail(st, st->line, "key \"endpoint\" repeated in section [driver \"%s\"]", st->driver->name);
                        return 0;
                }
                if (unix_endpoint_path(value, NULL) < 0) {
                        fail(st, st->line, "endpoint: \"%s\" is not a unix:// endpoint with an absolute socket path "
                             "(shorter than 108 bytes)", value);
                        return 0;
                }
                if (free_and_strdup(&st->driver->endpoint, value) < 0) {
                        fail(st, st->line, "out of memory");
                        return 0;
                }
                return 1;
        }
        for (size_t i = 0; i < N_KEYS; i++) {
                const KeyDef *k = &key_table[i];
                if (!streq(k->section, st->section) || !streq(k->key, name))
                        continue;
                if (st->key_line[i] > 0) {
                        fail(st, st->line, "key \"%s\" repeated in section [%s] (first on line %u)", name,
                             st->section, st->key_line[i]);
                        return 0;
                }
                st->key_line[i] = st->line;
                st->key_source[i] = (ConfigSource){ .file = st->name, .line = st->line };
                if (set_value(st, k, value, false) < 0) {
                        if (!st->error)
                                fail(st, st->line, "out of memory");
                        return 0;
                }
                return 1;
        }
        fail(st, st->line, "unknown key \"%s\" in section [%s]", name, st->section);
        return 0;
}

static size_t key_index(const char *section, const char *key) {
        for (size_t i = 0; i < N_KEYS; i++)
                if (streq(key_table[i].section, section) && streq(key_table[i].key, key))
                        return i;
        abort();
}

/* Rules that involve several keys, checked once the whole file is read. */
static int validate_combinations(ParseState *st) {
        Config *c = st->config;
        ConfigSource server_at = st->key_source[key_index("kubernetes", "server")];
        ConfigSource kubeconfig_at = st->key_source[key_index("kubernetes", "kubeconfig")];
        static const char *const server_only[] = { "token-file", "certificate-authority", "client-certificate",
                                                   "client-key" };
        int r;

        if (!c->node_name) {
                r = default_node_name(&c->node_name);
                if (r < 0)
                        return r;
                if (validate_dns1123_subdomain(c->node_name) < 0) {
                        fail(st, 0, "[agent] node-name is not set and the host name \"%s\" is not a valid node "
                             "name (DNS-1123 subdomain); set node-name", c->node_name);
                        return -EINVAL;
                }
        }
        c->api_gid = (gid_t) -1;
        if (c->api_socket && strlen(c->api_socket) >= sizeof(((struct sockaddr_un *) NULL)->sun_path)) {
                fail(st, st->key_line[key_index("api", "socket")], "socket: \"%s\" is longer than a unix socket "
                     "path may be (%zu bytes)", c->api_socket, sizeof(((struct sockaddr_un *) NULL)->sun_path) - 1);
                return -EINVAL;
        }
        if (c->api_group) {
                const struct group *g = NULL;
                char *end;
                unsigned long gid;

                errno = 0;
                gid = strtoul(c->api_group, &end, 10);
                if (isdigit((unsigned char) c->api_group[0]) && errno == 0 && *end == '\0' && gid < (gid_t) -1)
                        c->api_gid = (gid_t) gid;
                else if ((g = getgrnam(c->api_group)))
                        c->api_gid = g->gr_gid;
                else {
                        fail(st, st->key_line[key_index("api", "group")], "group: no group \"%s\" on this host",
                             c->api_group);
                        return -EINVAL;
                }
        }
        if (streq(c->root_dir, "/")) {
                fail_at(st, st->key_source[key_index("agent", "root-dir")], "root-dir: \"/\" is not allowed");
                return -EINVAL;
        }

        if (c->server) {
                /* The default kubeconfig only applies when no server is given. */
                if (kubeconfig_at.line > 0 && c->kubeconfig) {
                        if (kubeconfig_at.file == server_at.file)
                                fail_at(st, server_at, "server and kubeconfig are both set (line %u); set one "
                                        "of them", kubeconfig_at.line);
                        else
                                fail_at(st, server_at, "server and kubeconfig are both set (%s:%u); set one of "
                                        "them", kubeconfig_at.file, kubeconfig_at.line);
                        return -EINVAL;
                }
                c->kubeconfig = mfree_str(c->kubeconfig);
        } else {
                for (size_t i = 0; i < ELEMENTSOF(server_only); i++) {
                        ConfigSource at = st->key_source[key_index("kubernetes", server_only[i])];
                        if (at.line > 0 && *(char **) ((uint8_t *) c + key_table[key_index("kubernetes",
                                                                                       server_only[i])].offset)) {
                                fail_at(st, at, "%s is only used with server; the kubeconfig names its own "
                                        "credentials", server_only[i]);
                                return -EINVAL;
                        }
                }
        }
        if (!!c->client_certificate != !!c->client_key) {
                const char *missing = c->client_certificate ? "client-key" : "client-certificate";
                ConfigSource at = st->key_source[key_index("kubernetes", c->client_certificate ? "client-certificate"
                                                                                               : "client-key")];
                fail_at(st, at, "client-certificate and client-key go together; %s is missing", missing);
                return -EINVAL;
        }
        return 0;
}

static int record_sources(ParseState *st) {
        Config *c = st->config;

        c->sources = calloc(N_KEYS, sizeof *c->sources);
        if (!c->sources)
                return -ENOMEM;
        memcpy(c->sources, st->key_source, N_KEYS * sizeof *c->sources);
        c->files = TAKE_PTR(st->files);
        st->n_files = 0;
        return 0;
}

ConfigSource config_key_source(const Config *c, const char *section, const char *key) {
        for (size_t i = 0; i < N_KEYS; i++)
                if (streq(key_table[i].section, section) && streq(key_table[i].key, key))
                        return c->sources ? c->sources[i] : (ConfigSource){};
        return (ConfigSource){};
}

char *config_key_location(const Config *c, const char *section, const char *key) {
        ConfigSource s = config_key_source(c, section, key);
        char *text;

        if (!s.file)
                return strdup(c->path);
        if (asprintf(&text, "%s:%u", s.file, s.line) < 0)
                return NULL;
        return text;
}

static Config *config_new_defaults(ParseState *st) {
        Config *c = calloc(1, sizeof *c);
        if (!c)
                return NULL;
        st->config = c;
        for (size_t i = 0; i < N_KEYS; i++)
                if (key_table[i].def && set_value(st, &key_table[i], key_table[i].def, true) < 0)
                        return config_free(c);
        return c;
}

/* One file, on top of what the files before it set. */
static int parse_file(ParseState *st, const char *text, const char *name) {
        char **files;
        int r;

        files = reallocarray(st->files, st->n_files + 2, sizeof *files);
        if (!files)
                return -ENOMEM;
        st->files = files;
        files[st->n_files] = strdup(name);
        if (!files[st->n_files])
                return -ENOMEM;
        st->name = files[st->n_files++];
        files[st->n_files] = NULL;

        /* Repeats are errors within a file; a later file overrides. */
        for (size_t i = 0; i < st->n_sections; i++)
                free(st->sections[i]);
        st->n_sections = 0;
        memset(st->key_line, 0, sizeof st->key_line);
        st->section = NULL;
        st->driver = NULL;
        st->text = text;
        st->pos = strncmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
        st->line = 0;
        st->at_line_start = true;

        /* Debian's inih exposes its options at run time: strict, one error at
         * a time, long lines allowed, no configparser-style continuation lines
         * (an indented key would silently become part of the previous value). */
        ini_allow_multiline = false;
        ini_stop_on_first_error = true;
        ini_use_stack = false;
        ini_allow_realloc = true;
        ini_max_line = 16384;

        r = ini_parse_stream(reader, st, handler, st);
        if (r > 0 && !st->error)
                fail(st, (unsigned) r, "syntax error: expected \"key = value\", \"[section]\" or a comment");
        else if (r < 0 && !st->error)
                fail(st, 0, "out of memory while parsing");
        if (!st->error)
                (void) finish_driver(st);
        return st->error ? -EINVAL : 0;
}

static void parse_state_done(ParseState *st) {
        for (size_t i = 0; i < st->n_sections; i++)
                free(st->sections[i]);
        free(st->sections);
        free(st->section_lines);
        for (size_t i = 0; i < st->n_files; i++)
                free(st->files[i]);
        free(st->files);
}

static int parse_finish(ParseState *st, const char *main_name, Config **ret, char **ret_error) {
        _cleanup_(config_freep) Config *c = st->config;
        int r;

        st->name = main_name;
        if (!st->error)
                (void) validate_combinations(st);
        if (!st->error && record_sources(st) < 0)
                fail(st, 0, "out of memory");
        if (!st->error && (r = free_and_strdup(&c->path, main_name)) < 0)
                fail(st, 0, "out of memory");
        parse_state_done(st);

        if (st->error) {
                if (ret_error)
                        *ret_error = st->error;
                else
                        free(st->error);
                return -EINVAL;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

int config_parse_string(const char *text, const char *name, Config **ret, char **ret_error) {
        ParseState st = {};

        if (!config_new_defaults(&st))
                return -ENOMEM;
        (void) parse_file(&st, text, name);
        return parse_finish(&st, name, ret, ret_error);
}

/* Reads "path" after secure_open()'s checks: configuration only root may
 * write (systemd/secure-file.h says the rule and why). */
static int read_text(const char *path, char **ret, char **ret_error) {
        _cleanup_free_ char *text = NULL;
        _cleanup_(fclosep) FILE *f = NULL;
        size_t size = 0;
        int fd, r;

        fd = secure_open(path, false, ret_error);
        if (fd == -EPERM || fd == -ENOMEM)
                return fd;
        if (fd >= 0) {
                f = fdopen(fd, "r");
                if (!f) {
                        r = -errno;
                        (void) close(fd);
                        fd = r;
                }
        }
        if (fd < 0) {
                r = fd;
                if (ret_error && asprintf(ret_error, "%s: cannot read: %s", path, strerror(-r)) < 0)
                        *ret_error = NULL;
                return r;
        }
        FILE *mem = open_memstream(&text, &size);
        if (!mem)
                return -ENOMEM;
        char buf[8192];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0)
                if (fwrite(buf, 1, n, mem) != n)
                        break;
        r = ferror(f) ? -EIO : 0;
        fclose(mem);
        if (r < 0) {
                if (ret_error && asprintf(ret_error, "%s: cannot read: %s", path, strerror(-r)) < 0)
                        *ret_error = NULL;
                return r;
        }
        if (memchr(text, '\0', size)) {
                if (ret_error && asprintf(ret_error, "%s: contains a NUL byte; not a text file", path) < 0)
                        *ret_error = NULL;
                return -EINVAL;
        }
        *ret = TAKE_PTR(text);
        return 0;
}

static int dropin_filter(const struct dirent *de) {
        size_t n = strlen(de->d_name);
        /* Hidden files are editors' and package managers' leftovers. */
        return de->d_name[0] != '.' && n > 5 && streq(de->d_name + n - 5, ".conf");
}

static int dropin_compare(const struct dirent **a, const struct dirent **b) {
        /* Byte order, whatever the locale: 10-a.conf before 20-b.conf, always. */
        return strcmp((*a)->d_name, (*b)->d_name);
}

char *config_dropin_dir(const char *path) {
        char *dir;
        return asprintf(&dir, "%s.d", path) < 0 ? NULL : dir;
}

int config_load(const char *path, Config **ret, char **ret_error) {
        _cleanup_free_ char *text = NULL, *dir = NULL;
        _cleanup_close_ int dir_fd = -EBADF;
        struct dirent **entries = NULL;
        ParseState st = {};
        int n, r;

        r = read_text(path, &text, ret_error);
        if (r < 0)
                return r;
        dir = config_dropin_dir(path);
        if (!dir)
                return -ENOMEM;
        /* Every entry of the directory is read: it must be root's alone, and
         * is listed through the descriptor that was checked. */
        dir_fd = secure_open(dir, true, ret_error);
        if (dir_fd == -EPERM || dir_fd == -ENOMEM)
                return dir_fd;
        if (dir_fd == -ENOENT || dir_fd == -ENOTDIR)
                n = 0;
        else if (dir_fd < 0)
                n = -1, errno = -dir_fd;
        else
                n = scandirat(dir_fd, ".", &entries, dropin_filter, dropin_compare);
        if (n < 0) {
                r = -errno;
                if (ret_error && asprintf(ret_error, "%s: cannot read the drop-in directory: %s", dir,
                                          strerror(-r)) < 0)
                        *ret_error = NULL;
                return r;
        }

        if (!config_new_defaults(&st))
                r = -ENOMEM;
        else if (parse_file(&st, text, path) >= 0)
                for (int i = 0; i < n; i++) {
                        _cleanup_free_ char *file = NULL, *dropin = NULL;
                        if (asprintf(&file, "%s/%s", dir, entries[i]->d_name) < 0) {
                                r = -ENOMEM;
                                break;
                        }
                        r = read_text(file, &dropin, &st.error);
                        if (r < 0 || parse_file(&st, dropin, file) < 0)
                                break;
                }
        for (int i = 0; i < n; i++)
                free(entries[i]);
        free(entries);
        if (r == -ENOMEM) {
                config_free(st.config);
                parse_state_done(&st);
                free(st.error);
                return r;
        }
        return parse_finish(&st, path, ret, ret_error);
}

Config *config_free(Config *c) {
        if (!c)
                return NULL;
        free(c->path);
        for (size_t i = 0; c->files && c->files[i]; i++)
                free(c->files[i]);
        free(c->files);
        free(c->sources);
        free(c->node_name);
        free(c->root_dir);
        free(c->kubeconfig);
        free(c->server);
        free(c->token_file);
        free(c->certificate_authority);
        free(c->client_certificate);
        free(c->client_key);
        free(c->registration_dir);
        for (size_t i = 0; i < c->n_drivers; i++) {
                free(c->drivers[i].name);
                free(c->drivers[i].endpoint);
        }
        free(c->drivers);
        free(c->runtime_endpoint);
        free(c->runner_kinds);
        free(c->api_socket);
        free(c->api_group);
        free(c->metrics_listen);
        free(c);
        return NULL;
}

const DriverConfig *config_find_driver(const Config *c, const char *name) {
        for (size_t i = 0; i < c->n_drivers; i++)
                if (streq(c->drivers[i].name, name))
                        return &c->drivers[i];
        return NULL;
}

bool config_listen_is_loopback(const char *s) {
        struct sockaddr_storage sa;
        socklen_t len;

        if (parse_listen_address(s, &sa, &len) < 0)
                return false;
        if (sa.ss_family == AF_INET)
                return (ntohl(((const struct sockaddr_in *) &sa)->sin_addr.s_addr) >> 24) == 127;
        if (sa.ss_family == AF_INET6)
                return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *) &sa)->sin6_addr);
        return false;
}

void config_print_warnings(const Config *c, FILE *out) {
        if (c->metrics_listen && !config_listen_is_loopback(c->metrics_listen))
                fprintf(out, "warning: [metrics] listen = %s is reachable beyond this host: /metrics and /healthz "
                        "are served there without authentication (/volumes is not: it is on the local API socket "
                        "and on loopback addresses only)\n", c->metrics_listen);
        if (!c->runtime_endpoint)
                fputs("warning: [runtime] endpoint is empty: kvolumed unpublishes a pod's volumes as soon as the API "
                      "says the pod is gone or finished, without asking the container runtime; a pod force-deleted "
                      "while its containers still run has its volumes unpublished under them\n",
                      out);
}

/* With drop-ins, which file a value came from is no longer obvious: say it. */
static void print_source(const Config *c, ConfigSource where, bool sources, FILE *out) {
        if (!sources || !c->files || !c->files[0] || !c->files[1])
                return;
        if (where.file)
                fprintf(out, "  # %s:%u", where.file, where.line);
        else
                fputs("  # default", out);
}

static void print_listing(const Config *c, bool sources, FILE *out) {
        char buf[32];

        for (size_t i = 0; i < N_KEYS; i++) {
                const KeyDef *k = &key_table[i];
                const void *field = (const uint8_t *) c + k->offset;

                fprintf(out, "%s.%s = ", k->section, k->key);
                switch (k->type) {
                case VALUE_NODE_NAME:
                case VALUE_PATH:
                case VALUE_OPTIONAL_PATH:
                case VALUE_HTTPS_URL:
                case VALUE_LISTEN:
                case VALUE_UNIX_ENDPOINT:
                case VALUE_GROUP:
                case VALUE_VOLUME_TYPES:
                        fputs(strempty(*(char *const *) field), out);
                        break;
                case VALUE_DURATION:
                        fputs(config_format_duration(*(const uint64_t *) field, buf), out);
                        break;
                case VALUE_DURATION_OR_OFF:
                        fputs(*(const uint64_t *) field ? config_format_duration(*(const uint64_t *) field, buf)
                                                        : "0",
                              out);
                        break;
                case VALUE_UNSIGNED:
                        fprintf(out, "%u", *(const unsigned *) field);
                        break;
                case VALUE_LOG_LEVEL:
                        fputs(strempty(log_level_to_string(*(const int *) field)), out);
                        break;
                case VALUE_BOOL:
                        fputs(*(const bool *) field ? "true" : "false", out);
                        break;
                case VALUE_MOUNT_SOURCE:
                        fputs(*(const bool *) field ? "mountinfo" : "auto", out);
                        break;
                }
                print_source(c, c->sources ? c->sources[i] : (ConfigSource){}, sources, out);
                fputc('\n', out);
        }
        for (size_t i = 0; i < c->n_drivers; i++) {
                fprintf(out, "driver \"%s\".endpoint = %s", c->drivers[i].name, c->drivers[i].endpoint);
                print_source(c, (ConfigSource){ .file = c->drivers[i].file, .line = c->drivers[i].line }, sources,
                             out);
                fputc('\n', out);
        }
}

void config_print(const Config *c, FILE *out) {
        print_listing(c, false, out);
}

void config_print_with_sources(const Config *c, FILE *out) {
        print_listing(c, true, out);
}
