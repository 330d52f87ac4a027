/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The INI configuration of DESIGN.md §2: parsing, defaults, validation and the
 * effective-settings listing of --check-config.  Errors are reported as
 * "FILE:LINE: what is wrong" so that an operator can jump to the line. */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "systemd/macro.h"

#define CONFIG_DEFAULT_PATH "/etc/kvolumed/kvolumed.conf"

typedef struct DriverConfig {
        char *name;     /* CSI driver name from [driver "NAME"] */
        char *endpoint; /* unix:///absolute/path */
        unsigned line;  /* of the section header, for messages */
} DriverConfig;

typedef struct Config {
        char *path;

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

        /* [runtime] */
        char *runtime_endpoint; /* unix:///path of the CRI socket; NULL: the API alone decides teardown */

        /* [metrics] */
        char *metrics_listen; /* NULL: endpoint off */

        /* [log] */
        int log_level; /* LOG_DEBUG .. LOG_ERR */
} Config;

/* Loads and validates "path".  On a configuration error returns -EINVAL (or
 * -errno when the file cannot be read) and stores a message "FILE:LINE: ..."
 * in *ret_error. */
int config_load(const char *path, Config **ret, char **ret_error);

/* The same on text in memory; "name" stands for the file in messages. */
int config_parse_string(const char *text, const char *name, Config **ret, char **ret_error);

Config *config_free(Config *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(Config *, config_free);

/* Writes one "section.key = value" line per setting, defaults included. */
void config_print(const Config *c, FILE *out);

/* The settings that are valid but risky, one "warning: ..." line each
 * (--check-config writes them to stderr, apart from the listing). */
void config_print_warnings(const Config *c, FILE *out);

const DriverConfig *config_find_driver(const Config *c, const char *name);

/* Durations: an integer with an ms, s, m or h suffix ("90s", "5m", "1500ms").
 * A bare integer is rejected: the unit must be explicit. */
int config_parse_duration(const char *s, uint64_t *ret_usec);
/* The shortest exact form: 300000000 → "5m".  Returns a static-size buffer. */
const char *config_format_duration(uint64_t usec, char buf[static 32]);

/* "HOST:PORT" with a numeric IPv4, "[IPv6]" or "localhost" host; port 0 lets
 * the kernel choose.  0 or -EINVAL. */
int config_validate_listen_address(const char *s);
