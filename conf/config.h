/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The INI configuration of DESIGN.md §2: parsing, defaults, validation and the
 * effective-settings listing of --check-config.  Errors are reported as
 * "FILE:LINE: what is wrong" so that an operator can jump to the line. */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "systemd/macro.h"

#define CONFIG_DEFAULT_PATH "/etc/kvolumed/kvolumed.conf"

typedef struct DriverConfig {
        char *name;     /* CSI driver name from [driver "NAME"] */
        char *endpoint; /* unix:///absolute/path */
        const char *file; /* where the section is (a drop-in replaces an earlier one); one of Config.files */
        unsigned line;  /* of the section header, for messages */
} DriverConfig;

/* Where a setting's effective value was written: the file (the main one or
 * a drop-in) and line; file NULL for a default. */
typedef struct ConfigSource {
        const char *file; /* one of Config.files */
        unsigned line;
} ConfigSource;

typedef struct Config {
        char *path;
        char **files;           /* the files read, main first; NULL-terminated */
        ConfigSource *sources;  /* one per key of the listing, in its order */

        /* [agent] */
        char *node_name; /* never empty after loading: defaults to the host name */
        char *root_dir;
        uint64_t resync_interval_usec;
        bool mount_source_mountinfo; /* mount-source = mountinfo (else auto: the kernel's events where it has them) */

        /* [kubernetes]: either kubeconfig, or server and its credentials */
        char *kubeconfig;
        char *server;
        char *token_file;
        char *certificate_authority;
        char *client_certificate;
        char *client_key;

        /* [csi] */
        char *registration_dir; /* NULL: plugin registration off */
        uint64_t call_timeout_usec;
        unsigned max_parallel;
        uint64_t republish_interval_usec;
        uint64_t stats_interval_usec; /* NodeGetVolumeStats rounds; 0: off */
        uint64_t attach_limit_refresh_usec; /* NodeGetInfo again for max_volumes_per_node; 0: off */
        DriverConfig *drivers;
        size_t n_drivers;

        /* [volumes] */
        bool selinux_mount_all; /* context= for any volume whose pod asks MountOption, not only RWOP */
        uint64_t expand_check_interval_usec; /* published volumes' claims read for online expansion */
        char *runner_kinds; /* volume sources left to the pod runner, "nfs, image"; NULL: none */

        /* [runtime] */
        char *runtime_endpoint; /* unix:///path of the CRI socket; NULL: the API alone decides teardown */

        /* [api]: the local volumes API for the pod runner */
        char *api_socket; /* NULL: off */
        char *api_group;  /* as written (a name or a gid); NULL: root only */
        gid_t api_gid;    /* api_group resolved; (gid_t) -1 when none */

        /* [metrics] */
        char *metrics_listen; /* NULL: endpoint off */

        /* [log] */
        int log_level; /* LOG_DEBUG .. LOG_ERR */
} Config;

/* Loads and validates "path", then the drop-ins "<path>.d/NAME.conf" in byte
 * order: a key set in a later file overrides it, a [driver "NAME"] in a later
 * file replaces that driver; within one file a repeat is an error.  On a
 * configuration error returns -EINVAL (or -errno when a file cannot be read)
 * and stores a message "FILE:LINE: ..." naming the file at fault in
 * *ret_error. */
int config_load(const char *path, Config **ret, char **ret_error);
/* "<path>.d", the drop-in directory of a configuration file; malloc'd. */
char *config_dropin_dir(const char *path);

/* The same on text in memory; "name" stands for the file in messages. */
int config_parse_string(const char *text, const char *name, Config **ret, char **ret_error);

Config *config_free(Config *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(Config *, config_free);

/* Writes one "section.key = value" line per setting, defaults included. */
void config_print(const Config *c, FILE *out);
/* The same for --check-config: when drop-ins were read, each line ends with
 * "  # FILE:LINE" (or "  # default"), where its value came from. */
void config_print_with_sources(const Config *c, FILE *out);

/* Whether a line of config_print() ("section.key = value", or a
 * [driver "NAME"] section's) is a setting a SIGHUP applies to the running
 * agent; every other one is read at start-up only. */
bool config_setting_reloadable(const char *line);

/* The settings that are valid but risky, one "warning: ..." line each
 * (--check-config writes them to stderr, apart from the listing). */
void config_print_warnings(const Config *c, FILE *out);

/* Where "section.key" got its effective value; NULL file: the default. */
ConfigSource config_key_source(const Config *c, const char *section, const char *key);
/* "FILE:LINE" where "section.key" was set, or the main file's path for a
 * default: where an operator goes to change it.  malloc'd. */
char *config_key_location(const Config *c, const char *section, const char *key);

/* TEST ONLY: the intervals' lower bounds (which keep a value from hammering
 * the API server or a driver) down to a millisecond, so that the integration
 * suite can run a round a second.  Process-wide, like the log level. */
void config_allow_short_intervals(bool allow);

const DriverConfig *config_find_driver(const Config *c, const char *name);

/* Durations: integers with an h, m, s or ms suffix, largest unit first and
 * each once ("90s", "5m", "1m30s", "1h5m", "2s500ms").  A bare integer is
 * rejected: the unit must be explicit. */
int config_parse_duration(const char *s, uint64_t *ret_usec);
/* The shortest exact form: 300000000 → "5m".  Returns a static-size buffer. */
const char *config_format_duration(uint64_t usec, char buf[static 32]);

/* "HOST:PORT" with a numeric IPv4, "[IPv6]" or "localhost" host; port 0 lets
 * the kernel choose.  0 or -EINVAL. */
int config_validate_listen_address(const char *s);
/* Whether a valid listen address is on the loopback interface only
 * (127.0.0.0/8, ::1, localhost): /volumes is not served beyond it. */
bool config_listen_is_loopback(const char *s);
