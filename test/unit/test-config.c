/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "conf/config.h"

static Config *parse_ok(const char *text) {
        Config *c = NULL;
        char *error = NULL;
        int r = config_parse_string(text, "t.conf", &c, &error);
        if (r < 0)
                fail_msg("unexpected error: %s", error);
        assert_non_null(c);
        return c;
}

/* Asserts that text fails with exactly this message. */
static void parse_fails(const char *text, const char *expected) {
        Config *c = NULL;
        char *error = NULL;
        int r = config_parse_string(text, "t.conf", &c, &error);
        assert_int_equal(r, -EINVAL);
        assert_null(c);
        assert_non_null(error);
        if (!streq(error, expected))
                fail_msg("got \"%s\"\nwanted \"%s\"", error, expected);
        free(error);
}

static void test_defaults(void **state) {
        Config *c = parse_ok("[agent]\nnode-name = node-a\n");
        assert_string_equal(c->node_name, "node-a");
        assert_string_equal(c->root_dir, "/var/lib/kubelet");
        assert_int_equal(c->resync_interval_usec, 5 * USEC_PER_MINUTE);
        assert_string_equal(c->kubeconfig, "/etc/kvolumed/kubeconfig");
        assert_null(c->server);
        assert_null(c->token_file);
        assert_string_equal(c->registration_dir, "/var/lib/kubelet/plugins_registry");
        assert_int_equal(c->call_timeout_usec, 2 * USEC_PER_MINUTE);
        assert_int_equal(c->max_parallel, 64);
        assert_int_equal(c->republish_interval_usec, USEC_PER_MINUTE);
        assert_int_equal(c->stats_interval_usec, USEC_PER_MINUTE);
        assert_int_equal(c->n_drivers, 0);
        assert_string_equal(c->metrics_listen, "127.0.0.1:10284");
        assert_null(c->runtime_endpoint); /* off unless configured: today's teardown */
        assert_string_equal(c->api_socket, "/run/kvolumed/kvolumed.sock");
        assert_null(c->api_group);
        assert_int_equal(c->api_gid, (gid_t) -1); /* root only */
        assert_int_equal(c->log_level, LOG_INFO);
        config_free(c);
}

static void test_api_socket_and_group(void **state) {
        Config *c = parse_ok("[agent]\nnode-name = n\n[api]\nsocket =\n");
        assert_null(c->api_socket); /* off */
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\n[api]\nsocket = /run/x/api.sock\ngroup = 4242\n");
        assert_string_equal(c->api_socket, "/run/x/api.sock");
        assert_string_equal(c->api_group, "4242");
        assert_int_equal(c->api_gid, 4242);
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\n[api]\ngroup = root\n");
        assert_int_equal(c->api_gid, 0);
        config_free(c);
        parse_fails("[agent]\nnode-name = n\n[api]\ngroup = no-such-group-kv\n",
                    "t.conf:4: group: no group \"no-such-group-kv\" on this host");
        parse_fails("[agent]\nnode-name = n\n[api]\nsocket = run/api.sock\n",
                    "t.conf:4: socket: \"run/api.sock\" is not an absolute, normalised path");
        parse_fails("[agent]\nnode-name = n\n[api]\nsocket = /run/"
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.sock\n",
                    "t.conf:4: socket: \"/run/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                    "aaaaaaaaaaa.sock\" is longer than a unix socket path may be (107 bytes)");
}

static void test_listen_loopback(void **state) {
        assert_true(config_listen_is_loopback("127.0.0.1:10284"));
        assert_true(config_listen_is_loopback("127.3.2.1:1"));
        assert_true(config_listen_is_loopback("[::1]:9000"));
        assert_true(config_listen_is_loopback("localhost:9000"));
        assert_false(config_listen_is_loopback("0.0.0.0:10284"));
        assert_false(config_listen_is_loopback("[::]:10284"));
        assert_false(config_listen_is_loopback("10.1.2.3:10284"));
        assert_false(config_listen_is_loopback("bogus"));
}

static void test_runtime_endpoint(void **state) {
        Config *c = parse_ok("[agent]\nnode-name = n\n[runtime]\nendpoint = /run/containerd/containerd.sock\n");
        assert_string_equal(c->runtime_endpoint, "unix:///run/containerd/containerd.sock");
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\n[runtime]\nendpoint = unix:///run/crio/crio.sock\n");
        assert_string_equal(c->runtime_endpoint, "unix:///run/crio/crio.sock");
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\n[runtime]\nendpoint =\n");
        assert_null(c->runtime_endpoint);
        config_free(c);
        parse_fails("[agent]\nnode-name = n\n[runtime]\nendpoint = unix://rel.sock\n",
                    "t.conf:4: endpoint: \"unix://rel.sock\" is neither a unix:// endpoint nor an absolute socket "
                    "path (shorter than 108 bytes)");
}

static void test_every_key(void **state) {
        Config *c = parse_ok("[agent]\n"
                             "node-name = worker-7.example\n"
                             "root-dir = /srv/kubelet\n"
                             "resync-interval = 90s\n"
                             "[kubernetes]\n"
                             "server = https://10.0.0.1:6443\n"
                             "token-file = /run/token\n"
                             "certificate-authority = /etc/ca.crt\n"
                             "client-certificate = /etc/c.crt\n"
                             "client-key = /etc/c.key\n"
                             "[csi]\n"
                             "registration-dir =\n"
                             "call-timeout = 1500ms\n"
                             "max-parallel = 8\n"
                             "republish-interval = 2h\n"
                             "stats-interval = 30s\n"
                             "[driver \"hostpath.csi.k8s.io\"]\n"
                             "endpoint = unix:///run/hp/csi.sock ; static\n"
                             "[driver \"other.example.com\"]\n"
                             "endpoint = unix:///run/o.sock\n"
                             "[runtime]\n"
                             "endpoint = unix:///run/containerd/containerd.sock\n"
                             "[metrics]\n"
                             "listen = [::1]:9000\n"
                             "[log]\n"
                             "level = debug\n");
        assert_string_equal(c->node_name, "worker-7.example");
        assert_string_equal(c->root_dir, "/srv/kubelet");
        assert_int_equal(c->resync_interval_usec, 90 * USEC_PER_SEC);
        assert_null(c->kubeconfig); /* server replaces the default kubeconfig */
        assert_string_equal(c->server, "https://10.0.0.1:6443");
        assert_string_equal(c->token_file, "/run/token");
        assert_string_equal(c->certificate_authority, "/etc/ca.crt");
        assert_string_equal(c->client_certificate, "/etc/c.crt");
        assert_string_equal(c->client_key, "/etc/c.key");
        assert_null(c->registration_dir);
        assert_int_equal(c->call_timeout_usec, 1500 * USEC_PER_MSEC);
        assert_int_equal(c->max_parallel, 8);
        assert_int_equal(c->republish_interval_usec, 2 * USEC_PER_HOUR);
        assert_int_equal(c->stats_interval_usec, 30 * USEC_PER_SEC);
        assert_int_equal(c->n_drivers, 2);
        assert_string_equal(c->drivers[0].name, "hostpath.csi.k8s.io");
        assert_string_equal(c->drivers[0].endpoint, "unix:///run/hp/csi.sock");
        assert_int_equal(c->drivers[0].line, 17);
        assert_string_equal(config_find_driver(c, "other.example.com")->endpoint, "unix:///run/o.sock");
        assert_null(config_find_driver(c, "nope"));
        assert_string_equal(c->metrics_listen, "[::1]:9000");
        assert_int_equal(c->log_level, LOG_DEBUG);

        char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);
        config_print(c, f);
        fclose(f);
        assert_string_equal(text, "agent.node-name = worker-7.example\n"
                                  "agent.root-dir = /srv/kubelet\n"
                                  "agent.resync-interval = 90s\n"
                                  "agent.mount-source = auto\n"
                                  "kubernetes.kubeconfig = \n"
                                  "kubernetes.server = https://10.0.0.1:6443\n"
                                  "kubernetes.token-file = /run/token\n"
                                  "kubernetes.certificate-authority = /etc/ca.crt\n"
                                  "kubernetes.client-certificate = /etc/c.crt\n"
                                  "kubernetes.client-key = /etc/c.key\n"
                                  "csi.registration-dir = \n"
                                  "csi.call-timeout = 1500ms\n"
                                  "csi.max-parallel = 8\n"
                                  "csi.republish-interval = 2h\n"
                                  "csi.stats-interval = 30s\n"
                                  "csi.attach-limit-refresh-interval = 0\n"
                                  "volumes.selinux-mount-all = false\n"
                                  "volumes.expand-check-interval = 1m\n"
                                  "volumes.runner-kinds = \n"
                                  "runtime.endpoint = unix:///run/containerd/containerd.sock\n"
                                  "api.socket = /run/kvolumed/kvolumed.sock\n"
                                  "api.group = \n"
                                  "metrics.listen = [::1]:9000\n"
                                  "log.level = debug\n"
                                  "driver \"hostpath.csi.k8s.io\".endpoint = unix:///run/hp/csi.sock\n"
                                  "driver \"other.example.com\".endpoint = unix:///run/o.sock\n");
        free(text);
        config_free(c);
}

static void test_empty_means_default_or_off(void **state) {
        Config *c = parse_ok("[agent]\nnode-name = n\nroot-dir =\nresync-interval =\n[metrics]\nlisten =\n"
                             "[kubernetes]\nkubeconfig =\n");
        assert_string_equal(c->root_dir, "/var/lib/kubelet");
        assert_int_equal(c->resync_interval_usec, 5 * USEC_PER_MINUTE);
        assert_null(c->metrics_listen);
        assert_null(c->kubeconfig); /* both empty: in-cluster service account */
        config_free(c);
}

static void test_hostname_default(void **state) {
        Config *c = NULL;
        char *error = NULL;
        int r = config_parse_string("", "t.conf", &c, &error);
        char host[256] = "";
        gethostname(host, sizeof host);
        if (r == 0) {
                for (char *p = host; *p; p++)
                        *p = (char) tolower((unsigned char) *p);
                assert_string_equal(c->node_name, host);
                config_free(c);
        } else {
                /* A host name that is no DNS-1123 subdomain must be named. */
                assert_non_null(strstr(error, "is not a valid node name"));
                free(error);
        }
}

static void test_indented_key_and_bom(void **state) {
        Config *c = parse_ok("\xEF\xBB\xBF[agent]\n  node-name = n\n    root-dir = /x\n");
        assert_string_equal(c->node_name, "n");
        assert_string_equal(c->root_dir, "/x");
        config_free(c);
}

static void test_errors_name_file_and_line(void **state) {
        parse_fails("[agent]\nnode-name = n\nbogus = 1\n", "t.conf:3: unknown key \"bogus\" in section [agent]");
        parse_fails("# c\n[agnet]\n", "t.conf:2: unknown section [agnet] (known: agent, kubernetes, csi, "
                                      "driver \"NAME\", volumes, runtime, api, metrics, log)");
        parse_fails("[agent]\nnode-name = n\n[csi]\n[agent]\n", "t.conf:4: section [agent] repeated (first on line 1)");
        parse_fails("[agent]\nnode-name = n\nnode-name = m\n",
                    "t.conf:3: key \"node-name\" repeated in section [agent] (first on line 2)");
        parse_fails("node-name = n\n", "t.conf:1: key \"node-name\" outside of any section");
        parse_fails("[agent]\nnode-name = Node_A\n", "t.conf:2: node-name: \"Node_A\" is not a valid node name (a "
                                                     "DNS-1123 subdomain: lowercase letters, digits, '-' and '.')");
        parse_fails("[agent]\nnode-name = n\nroot-dir = var/lib\n",
                    "t.conf:3: root-dir: \"var/lib\" is not an absolute, normalised path");
        parse_fails("[agent]\nnode-name = n\nroot-dir = /\n", "t.conf:3: root-dir: \"/\" is not allowed");
        parse_fails("[agent]\nnode-name = n\nresync-interval = 5\n",
                    "t.conf:3: resync-interval: \"5\" is not a positive duration (integers with h, m, s or ms, "
                    "largest first, e.g. 90s or 1m30s)");
        parse_fails("[agent]\nnode-name = n\nmount-source = fanotify\n",
                    "t.conf:3: mount-source: \"fanotify\" is not auto or mountinfo");
        parse_fails("[agent]\nnode-name = n\nresync-interval = 0s\n",
                    "t.conf:3: resync-interval: \"0s\" is not a positive duration (integers with h, m, s or ms, "
                    "largest first, e.g. 90s or 1m30s)");
        parse_fails("[agent]\nnode-name = n\n[csi]\nmax-parallel = 0\n",
                    "t.conf:4: max-parallel: \"0\" is not an integer from 1 to 4096");
        parse_fails("[agent]\nnode-name = n\n[csi]\nmax-parallel = 12x\n",
                    "t.conf:4: max-parallel: \"12x\" is not an integer from 1 to 4096");
        parse_fails("[agent]\nnode-name = n\n[csi]\nmax-parallel = -1\n",
                    "t.conf:4: max-parallel: \"-1\" is not an integer from 1 to 4096");
        parse_fails("[agent]\nnode-name = n\n[metrics]\nlisten = 0.0.0.0\n",
                    "t.conf:4: listen: \"0.0.0.0\" is not a listen address (IPV4:PORT, [IPV6]:PORT or "
                    "localhost:PORT)");
        parse_fails("[agent]\nnode-name = n\n[metrics]\nlisten = 1.2.3.4:70000\n",
                    "t.conf:4: listen: \"1.2.3.4:70000\" is not a listen address (IPV4:PORT, [IPV6]:PORT or "
                    "localhost:PORT)");
        parse_fails("[agent]\nnode-name = n\n[log]\nlevel = verbose\n",
                    "t.conf:4: level: \"verbose\" is not one of debug, info, notice, warning, err");
        parse_fails("[agent]\nnode-name = n\n[kubernetes]\nserver = http://x\n",
                    "t.conf:4: server: \"http://x\" is not an https:// URL");
        parse_fails("[agent]\nnode-name = n\n[driver \"d.example\"]\nendpoint = tcp://1.2.3.4:1\n",
                    "t.conf:4: endpoint: \"tcp://1.2.3.4:1\" is not a unix:// endpoint with an absolute socket path "
                    "(shorter than 108 bytes)");
        parse_fails("[agent]\nnode-name = n\n[driver \"d.example\"]\n[log]\n",
                    "t.conf:3: [driver \"d.example\"] has no endpoint (endpoint = unix:///path/to/csi.sock)");
}

/* [volumes] runner-kinds: source names, normalised; a source kvolumed sets
 * up itself, or something that is no field name, is refused. */
static void test_runner_kinds(void **state) {
        Config *c = parse_ok("[agent]\nnode-name = n\n");
        assert_null(c->runner_kinds);
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\n[volumes]\nrunner-kinds = nfs,image   iscsi\n");
        assert_string_equal(c->runner_kinds, "nfs, image, iscsi");
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\n[volumes]\nrunner-kinds =\n");
        assert_null(c->runner_kinds);
        config_free(c);
        parse_fails("[agent]\nnode-name = n\n[volumes]\nrunner-kinds = nfs, configMap\n",
                    "t.conf:4: runner-kinds: kvolumed sets up configMap volumes itself; only a source it does not "
                    "set up (nfs, iscsi, image, ...) can be left to the runner");
        parse_fails("[agent]\nnode-name = n\n[volumes]\nrunner-kinds = nfs/x\n",
                    "t.conf:4: runner-kinds: \"nfs/x\" is not a volume source name (the field of the pod's volume, "
                    "e.g. nfs, iscsi, image)");
}

static void test_bool(void **state) {
        Config *c = parse_ok("[agent]\nnode-name = n\n");
        assert_false(c->selinux_mount_all);
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\n[volumes]\nselinux-mount-all = true\n");
        assert_true(c->selinux_mount_all);
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\n[volumes]\nselinux-mount-all =\n");
        assert_false(c->selinux_mount_all); /* empty: the default */
        config_free(c);
        parse_fails("[agent]\nnode-name = n\n[volumes]\nselinux-mount-all = yes\n",
                    "t.conf:4: selinux-mount-all: \"yes\" is not true or false");
        /* [agent] mount-source: auto by default, mountinfo forces the fallback. */
        c = parse_ok("[agent]\nnode-name = n\n");
        assert_false(c->mount_source_mountinfo);
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\nmount-source = mountinfo\n");
        assert_true(c->mount_source_mountinfo);
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\nmount-source = auto\n");
        assert_false(c->mount_source_mountinfo);
        config_free(c);
}

static void test_more_errors(void **state) {
        parse_fails("[agent]\nnode-name = n\n[driver \"d.example\"]\nsocket = unix:///a\n",
                    "t.conf:4: unknown key \"socket\" in section [driver \"d.example\"] (known: endpoint)");
        parse_fails("[driver \"bad/name\"]\n",
                    "t.conf:1: \"bad/name\" is not a valid CSI driver name (at most 63 alphanumerics, '-' and '.', "
                    "alphanumeric at both ends)");
        parse_fails("[driver hostpath]\n", "t.conf:1: unknown section [driver hostpath] (known: agent, kubernetes, "
                                           "csi, driver \"NAME\", volumes, runtime, api, metrics, log)");
        parse_fails("[agent]\nnode-name = n\n[driver \"d\"]\nendpoint = unix:///a\n[driver \"d\"]\n",
                    "t.conf:5: section [driver \"d\"] repeated (first on line 3)");
        parse_fails("[agent]\nnode-name = n\n[driver \"d\"]\nendpoint = unix:///a\nendpoint = unix:///b\n",
                    "t.conf:5: key \"endpoint\" repeated in section [driver \"d\"]");
        parse_fails("[agent]\nnode-name = n\n[kubernetes]\nkubeconfig = /k\nserver = https://h\n",
                    "t.conf:5: server and kubeconfig are both set (line 4); set one of them");
        parse_fails("[agent]\nnode-name = n\n[kubernetes]\ntoken-file = /t\n",
                    "t.conf:4: token-file is only used with server; the kubeconfig names its own credentials");
        parse_fails("[agent]\nnode-name = n\n[kubernetes]\nserver = https://h\nclient-key = /k\n",
                    "t.conf:5: client-certificate and client-key go together; client-certificate is missing");
        parse_fails("[agent]\nnode-name = n\nthis line has no equals sign\n",
                    "t.conf:3: syntax error: expected \"key = value\", \"[section]\" or a comment");
        parse_fails("[agent\nnode-name = n\n",
                    "t.conf:1: syntax error: expected \"key = value\", \"[section]\" or a comment");
}

static void test_driver_without_endpoint_at_end(void **state) {
        parse_fails("[agent]\nnode-name = n\n[driver \"d.example\"]\n",
                    "t.conf:3: [driver \"d.example\"] has no endpoint (endpoint = unix:///path/to/csi.sock)");
}

static void test_long_line(void **state) {
        char text[1200];
        char path[1000] = "/";
        memset(path + 1, 'p', 900);
        path[901] = '\0';
        snprintf(text, sizeof text, "[agent]\nnode-name = n\nroot-dir = %s\n", path);
        Config *c = parse_ok(text);
        assert_string_equal(c->root_dir, path);
        config_free(c);
}

static void test_duration_or_off(void **state) {
        Config *c = parse_ok("[agent]\nnode-name = n\n[csi]\nstats-interval = 0\n");
        assert_int_equal(c->stats_interval_usec, 0);
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\n[csi]\nstats-interval = 0s\n");
        assert_int_equal(c->stats_interval_usec, 0);
        config_free(c);
        c = parse_ok("[agent]\nnode-name = n\n[csi]\nstats-interval = 10s500ms\n");
        assert_int_equal(c->stats_interval_usec, 10500 * USEC_PER_MSEC);
        config_free(c);
        parse_fails("[agent]\nnode-name = n\n[csi]\nstats-interval = 5\n",
                    "t.conf:4: stats-interval: \"5\" is neither a duration (integers with h, m, s or ms, largest "
                    "first, e.g. 90s or 1m30s) nor 0 (off)");
}

static void test_durations(void **state) {
        uint64_t u = 0;
        char buf[32];

        assert_int_equal(config_parse_duration("250ms", &u), 0);
        assert_int_equal(u, 250 * USEC_PER_MSEC);
        assert_int_equal(config_parse_duration("3h", &u), 0);
        assert_int_equal(u, 3 * USEC_PER_HOUR);
        assert_int_equal(config_parse_duration("10", &u), -EINVAL);
        assert_int_equal(config_parse_duration("s", &u), -EINVAL);
        assert_int_equal(config_parse_duration(" 1s", &u), -EINVAL);
        assert_int_equal(config_parse_duration("1.5s", &u), -EINVAL);
        assert_int_equal(config_parse_duration("1d", &u), -EINVAL);
        assert_int_equal(config_parse_duration("99999999999999999999h", &u), -EINVAL);
        assert_int_equal(config_parse_duration("9999999999999h", &u), -ERANGE);
        /* Compound: largest unit first, each once. */
        assert_int_equal(config_parse_duration("1m30s", &u), 0);
        assert_int_equal(u, 90 * USEC_PER_SEC);
        assert_int_equal(config_parse_duration("1h5m", &u), 0);
        assert_int_equal(u, 65 * USEC_PER_MINUTE);
        assert_int_equal(config_parse_duration("2s500ms", &u), 0);
        assert_int_equal(u, 2500 * USEC_PER_MSEC);
        assert_int_equal(config_parse_duration("1h0m0s", &u), 0);
        assert_int_equal(u, USEC_PER_HOUR);
        assert_int_equal(config_parse_duration("30s1m", &u), -EINVAL);
        assert_int_equal(config_parse_duration("1m1m", &u), -EINVAL);
        assert_int_equal(config_parse_duration("1m30", &u), -EINVAL);
        assert_int_equal(config_parse_duration("1ms5s", &u), -EINVAL);
        assert_int_equal(config_parse_duration("1m+30s", &u), -EINVAL);
        assert_int_equal(config_parse_duration("5124095576h59m", &u), -ERANGE);
        assert_string_equal(config_format_duration(5 * USEC_PER_MINUTE, buf), "5m");
        assert_string_equal(config_format_duration(90 * USEC_PER_SEC, buf), "90s");
        assert_string_equal(config_format_duration(2 * USEC_PER_HOUR, buf), "2h");
        assert_string_equal(config_format_duration(1500 * USEC_PER_MSEC, buf), "1500ms");
}

static void test_example_file(void **state) {
        const char *root = getenv("KVOLUMED_SOURCE_ROOT");
        char path[4096];
        Config *c = NULL;
        char *error = NULL;

        assert_non_null(root);
        snprintf(path, sizeof path, "%s/conf/kvolumed.conf", root);
        int r = config_load(path, &c, &error);
        /* The example leaves node-name empty: it only fails on an odd host name. */
        if (r < 0)
                assert_non_null(strstr(error, "host name"));
        else {
                assert_string_equal(c->root_dir, "/var/lib/kubelet");
                assert_string_equal(c->kubeconfig, "/etc/kvolumed/kubeconfig");
                config_free(c);
        }
}

static void test_unreadable_file(void **state) {
        Config *c = NULL;
        char *error = NULL;
        assert_int_equal(config_load("/nonexistent/kvolumed.conf", &c, &error), -ENOENT);
        assert_string_equal(error, "/nonexistent/kvolumed.conf: cannot read: No such file or directory");
        free(error);
}

/* Configuration only root may write (systemd/secure-file.h), in a private
 * directory under /tmp (root's, sticky: passes as a directory above). */
static char *write_file(const char *dir, const char *name, const char *text, mode_t mode) {
        char *path = NULL;
        FILE *f;

        assert_true(asprintf(&path, "%s/%s", dir, name) > 0);
        f = fopen(path, "we");
        assert_non_null(f);
        fputs(text, f);
        assert_int_equal(fclose(f), 0);
        assert_int_equal(chmod(path, mode), 0);
        return path;
}

static void load_refused(const char *path, const char *expected_start) {
        Config *c = NULL;
        char *error = NULL;

        assert_int_not_equal(config_load(path, &c, &error), 0);
        assert_null(c);
        assert_non_null(error);
        if (strncmp(error, expected_start, strlen(expected_start)) != 0)
                fail_msg("error \"%s\", expected \"%s...\"", error, expected_start);
        free(error);
}

static void load_ok(const char *path) {
        Config *c = NULL;
        char *error = NULL;

        if (config_load(path, &c, &error) < 0)
                fail_msg("unexpected error: %s", error);
        config_free(c);
}

static void test_only_root_may_write(void **state) {
        char dir[] = "/tmp/test-config-XXXXXX", expected[4096];
        char *main_conf, *dropins = NULL, *dropin, *fifo = NULL, *target_dir = NULL, *target, *link = NULL;
        const char *text = "[agent]\nnode-name = n1\n[kubernetes]\nkubeconfig =\n";

        assert_non_null(mkdtemp(dir));
        main_conf = write_file(dir, "k.conf", text, 0644);
        load_ok(main_conf);

        /* The main file, writable by its group or by others. */
        assert_int_equal(chmod(main_conf, 0664), 0);
        snprintf(expected, sizeof expected, "%s: writable by its group (mode 0664, owner uid %u): refusing "
                 "configuration that a user other than root could change", main_conf, (unsigned) geteuid());
        load_refused(main_conf, expected);
        assert_int_equal(chmod(main_conf, 0646), 0);
        snprintf(expected, sizeof expected, "%s: writable by others (mode 0646", main_conf);
        load_refused(main_conf, expected);
        assert_int_equal(chmod(main_conf, 0600), 0);
        load_ok(main_conf);

        /* The drop-in directory and a drop-in. */
        assert_true(asprintf(&dropins, "%s.d", main_conf) > 0);
        assert_int_equal(mkdir(dropins, 0755), 0);
        dropin = write_file(dropins, "10-x.conf", "[log]\nlevel = debug\n", 0666);
        snprintf(expected, sizeof expected, "%s: writable by its group and by others (mode 0666, owner uid %u)",
                 dropin, (unsigned) geteuid());
        load_refused(main_conf, expected);
        assert_int_equal(chmod(dropin, 0644), 0);
        load_ok(main_conf);
        /* Even with the sticky bit: anyone could add a drop-in. */
        assert_int_equal(chmod(dropins, 01777), 0);
        snprintf(expected, sizeof expected, "%s: writable by its group and by others (mode 1777", dropins);
        load_refused(main_conf, expected);
        assert_int_equal(chmod(dropins, 0755), 0);

        /* A FIFO drop-in is refused without being opened (it would block). */
        assert_true(asprintf(&fifo, "%s/20-fifo.conf", dropins) > 0);
        assert_int_equal(mkfifo(fifo, 0600), 0);
        snprintf(expected, sizeof expected, "%s: cannot read: a FIFO, not a regular file", fifo);
        load_refused(main_conf, expected);
        assert_int_equal(unlink(fifo), 0);
        load_ok(main_conf);

        /* A symlinked configuration: followed, and the directories of its
         * target are checked as well as its own. */
        assert_true(asprintf(&target_dir, "%s/srv", dir) > 0);
        assert_int_equal(mkdir(target_dir, 0755), 0);
        target = write_file(target_dir, "real.conf", text, 0644);
        assert_true(asprintf(&link, "%s/linked.conf", dir) > 0);
        assert_int_equal(symlink(target, link), 0);
        load_ok(link);
        assert_int_equal(chmod(target_dir, 0777), 0);
        snprintf(expected, sizeof expected, "%s: writable by its group and by others (mode 0777, owner uid %u), "
                 "above %s: refusing", target_dir, (unsigned) geteuid(), link);
        load_refused(link, expected);
        assert_int_equal(chmod(target_dir, 0755), 0);

        /* A directory above the file. */
        assert_int_equal(chmod(dir, 0770), 0);
        snprintf(expected, sizeof expected, "%s: writable by its group (mode 0770", dir);
        load_refused(main_conf, expected);
        assert_int_equal(chmod(dir, 0700), 0);
        load_ok(main_conf);

        assert_int_equal(unlink(link), 0);
        assert_int_equal(unlink(target), 0);
        assert_int_equal(rmdir(target_dir), 0);
        assert_int_equal(unlink(dropin), 0);
        assert_int_equal(rmdir(dropins), 0);
        assert_int_equal(unlink(main_conf), 0);
        assert_int_equal(rmdir(dir), 0);
        free(main_conf), free(dropins), free(dropin), free(fifo), free(target_dir), free(target), free(link);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_every_key),
                cmocka_unit_test(test_runtime_endpoint),
                cmocka_unit_test(test_empty_means_default_or_off),
                cmocka_unit_test(test_hostname_default),
                cmocka_unit_test(test_indented_key_and_bom),
                cmocka_unit_test(test_errors_name_file_and_line),
                cmocka_unit_test(test_more_errors),
                cmocka_unit_test(test_bool),
                cmocka_unit_test(test_runner_kinds),
                cmocka_unit_test(test_driver_without_endpoint_at_end),
                cmocka_unit_test(test_long_line),
                cmocka_unit_test(test_durations),
                cmocka_unit_test(test_duration_or_off),
                cmocka_unit_test(test_example_file),
                cmocka_unit_test(test_api_socket_and_group),
                cmocka_unit_test(test_listen_loopback),
                cmocka_unit_test(test_unreadable_file),
                cmocka_unit_test(test_only_root_may_write),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
