/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>

#include <ini.h>
#include <syslog.h>

#include "conf/config.h"
#include "systemd/log.h"
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
} ValueType;

typedef struct KeyDef {
        const char *section;
        const char *key;
        ValueType type;
        size_t offset;      /* into Config */
        const char *def;    /* default, in configuration syntax; NULL: unset */
        unsigned min, max;  /* VALUE_UNSIGNED range */
} KeyDef;

#define FIELD(f) offsetof(Config, f)

/* The order is the order of --check-config's listing and of the example file. */
static const KeyDef key_table[] = {
        { "agent", "node-name", VALUE_NODE_NAME, FIELD(node_name), NULL, 0, 0 },
        { "agent", "root-dir", VALUE_PATH, FIELD(root_dir), "/var/lib/kubelet", 0, 0 },
        { "agent", "resync-interval", VALUE_DURATION, FIELD(resync_interval_usec), "5m", 0, 0 },
        { "agent", "mount-source", VALUE_MOUNT_SOURCE, FIELD(mount_source_mountinfo), "auto", 0, 0 },
        { "kubernetes", "kubeconfig", VALUE_OPTIONAL_PATH, FIELD(kubeconfig), "/etc/kvolumed/kubeconfig", 0, 0 },
        { "kubernetes", "server", VALUE_HTTPS_URL, FIELD(server), NULL, 0, 0 },
        { "kubernetes", "token-file", VALUE_OPTIONAL_PATH, FIELD(token_file), NULL, 0, 0 },
        { "kubernetes", "certificate-authority", VALUE_OPTIONAL_PATH, FIELD(certificate_authority), NULL, 0, 0 },
        { "kubernetes", "client-certificate", VALUE_OPTIONAL_PATH, FIELD(client_certificate), NULL, 0, 0 },
        { "kubernetes", "client-key", VALUE_OPTIONAL_PATH, FIELD(client_key), NULL, 0, 0 },
        { "csi", "registration-dir", VALUE_OPTIONAL_PATH, FIELD(registration_dir), "/var/lib/kubelet/plugins_registry", 0, 0 },
        { "csi", "call-timeout", VALUE_DURATION, FIELD(call_timeout_usec), "2m", 0, 0 },
        { "csi", "max-parallel", VALUE_UNSIGNED, FIELD(max_parallel), "64", 1, 4096 },
        { "csi", "republish-interval", VALUE_DURATION, FIELD(republish_interval_usec), "1m", 0, 0 },
        { "csi", "stats-interval", VALUE_DURATION_OR_OFF, FIELD(stats_interval_usec), "1m", 0, 0 },
        { "csi", "attach-limit-refresh-interval", VALUE_DURATION_OR_OFF, FIELD(attach_limit_refresh_usec), "0", 0, 0 },
        { "volumes", "selinux-mount-all", VALUE_BOOL, FIELD(selinux_mount_all), "false", 0, 0 },
        { "volumes", "expand-check-interval", VALUE_DURATION, FIELD(expand_check_interval_usec), "1m", 0, 0 },
        { "runtime", "endpoint", VALUE_UNIX_ENDPOINT, FIELD(runtime_endpoint), NULL, 0, 0 },
        { "metrics", "listen", VALUE_LISTEN, FIELD(metrics_listen), "127.0.0.1:10284", 0, 0 },
        { "log", "level", VALUE_LOG_LEVEL, FIELD(log_level), "info", 0, 0 },
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

        unsigned key_line[N_KEYS]; /* 0: not set in the file */
        unsigned driver_endpoint_line;
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

int config_parse_duration(const char *s, uint64_t *ret_usec) {
        static const struct {
                const char *suffix;
                uint64_t usec;
        } units[] = { { "ms", USEC_PER_MSEC }, { "s", USEC_PER_SEC }, { "m", USEC_PER_MINUTE }, { "h", USEC_PER_HOUR } };
        char *end;
        unsigned long long n;

        if (!s || !isdigit((unsigned char) s[0]))
                return -EINVAL;
        errno = 0;
        n = strtoull(s, &end, 10);
        if (errno != 0 || end == s)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(units); i++)
                if (streq(end, units[i].suffix)) {
                        if (n > UINT64_MAX / units[i].usec)
                                return -ERANGE;
                        *ret_usec = n * units[i].usec;
                        return 0;
                }
        return -EINVAL;
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

static int set_value(ParseState *st, const KeyDef *k, const char *value, bool from_default) {
        void *field = (uint8_t *) st->config + k->offset;
        char **str = field;
        unsigned line = from_default ? 0 : st->line;
        uint64_t usec;
        int r;

        /* An empty value means the default, except where empty means "off". */
        if (!from_default && isempty(value)) {
                if (k->type == VALUE_OPTIONAL_PATH || k->type == VALUE_HTTPS_URL || k->type == VALUE_LISTEN ||
                    k->type == VALUE_UNIX_ENDPOINT) {
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
                        fail(st, line, "%s: \"%s\" is not a positive duration (an integer with ms, s, m or h, "
                             "e.g. 90s)", k->key, value);
                        return -EINVAL;
                }
                *(uint64_t *) field = usec;
                return 0;

        case VALUE_DURATION_OR_OFF:
                if (streq(value, "0")) {
                        *(uint64_t *) field = 0;
                        return 0;
                }
                if (config_parse_duration(value, &usec) < 0) {
                        fail(st, line, "%s: \"%s\" is neither a duration (an integer with ms, s, m or h, e.g. 90s) "
                             "nor 0 (off)", k->key, value);
                        return -EINVAL;
                }
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
                             "volumes, runtime, metrics, log)", name);
                        return -EINVAL;
                }
                if (validate_csi_driver_name(driver) < 0) {
                        fail(st, st->line, "\"%s\" is not a valid CSI driver name (at most 63 alphanumerics, '-' "
                             "and '.', alphanumeric at both ends)", driver);
                        return -EINVAL;
                }
                DriverConfig *d = reallocarray(st->config->drivers, st->config->n_drivers + 1, sizeof *d);
                if (!d)
                        return -ENOMEM;
                st->config->drivers = d;
                d = &d[st->config->n_drivers++];
                *d = (DriverConfig){ .name = TAKE_PTR(driver), .line = st->line };
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
        unsigned server_line = st->key_line[key_index("kubernetes", "server")];
        unsigned kubeconfig_line = st->key_line[key_index("kubernetes", "kubeconfig")];
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
        if (streq(c->root_dir, "/")) {
                fail(st, st->key_line[key_index("agent", "root-dir")], "root-dir: \"/\" is not allowed");
                return -EINVAL;
        }

        if (c->server) {
                /* The default kubeconfig only applies when no server is given. */
                if (kubeconfig_line > 0 && c->kubeconfig) {
                        fail(st, server_line, "server and kubeconfig are both set (line %u); set one of them",
                             kubeconfig_line);
                        return -EINVAL;
                }
                c->kubeconfig = mfree_str(c->kubeconfig);
        } else {
                for (size_t i = 0; i < ELEMENTSOF(server_only); i++) {
                        unsigned line = st->key_line[key_index("kubernetes", server_only[i])];
                        if (line > 0 && *(char **) ((uint8_t *) c + key_table[key_index("kubernetes",
                                                                                       server_only[i])].offset)) {
                                fail(st, line, "%s is only used with server; the kubeconfig names its own "
                                     "credentials", server_only[i]);
                                return -EINVAL;
                        }
                }
        }
        if (!!c->client_certificate != !!c->client_key) {
                const char *missing = c->client_certificate ? "client-key" : "client-certificate";
                unsigned line = st->key_line[key_index("kubernetes", c->client_certificate ? "client-certificate"
                                                                                           : "client-key")];
                fail(st, line, "client-certificate and client-key go together; %s is missing", missing);
                return -EINVAL;
        }
        return finish_driver(st);
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

int config_parse_string(const char *text, const char *name, Config **ret, char **ret_error) {
        _cleanup_(config_freep) Config *c = NULL;
        ParseState st = { .name = name, .text = text, .at_line_start = true };
        int r;

        c = config_new_defaults(&st);
        if (!c)
                return -ENOMEM;
        r = free_and_strdup(&c->path, name);
        if (r < 0)
                return r;

        /* Debian's inih exposes its options at run time: strict, one error at
         * a time, long lines allowed, no configparser-style continuation lines
         * (an indented key would silently become part of the previous value). */
        ini_allow_multiline = false;
        ini_stop_on_first_error = true;
        ini_use_stack = false;
        ini_allow_realloc = true;
        ini_max_line = 16384;

        if (strncmp(text, "\xEF\xBB\xBF", 3) == 0)
                st.pos = 3;
        r = ini_parse_stream(reader, &st, handler, &st);
        if (r > 0 && !st.error)
                fail(&st, (unsigned) r, "syntax error: expected \"key = value\", \"[section]\" or a comment");
        else if (r < 0 && !st.error)
                fail(&st, 0, "out of memory while parsing");
        if (!st.error)
                (void) validate_combinations(&st);

        for (size_t i = 0; i < st.n_sections; i++)
                free(st.sections[i]);
        free(st.sections);
        free(st.section_lines);

        if (st.error) {
                if (ret_error)
                        *ret_error = st.error;
                else
                        free(st.error);
                return -EINVAL;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

int config_load(const char *path, Config **ret, char **ret_error) {
        _cleanup_free_ char *text = NULL;
        _cleanup_(fclosep) FILE *f = NULL;
        size_t size = 0;
        int r;

        f = fopen(path, "re");
        if (!f) {
                r = -errno;
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
        return config_parse_string(text, path, ret, ret_error);
}

Config *config_free(Config *c) {
        if (!c)
                return NULL;
        free(c->path);
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

void config_print_warnings(const Config *c, FILE *out) {
        if (!c->runtime_endpoint)
                fputs("warning: [runtime] endpoint is empty: kvolumed unpublishes a pod's volumes as soon as the API "
                      "says the pod is gone or finished, without asking the container runtime; a pod force-deleted "
                      "while its containers still run has its volumes unpublished under them\n",
                      out);
}

void config_print(const Config *c, FILE *out) {
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
                fputc('\n', out);
        }
        for (size_t i = 0; i < c->n_drivers; i++)
                fprintf(out, "driver \"%s\".endpoint = %s\n", c->drivers[i].name, c->drivers[i].endpoint);
}
