/* SPDX-License-Identifier: Apache-2.0 */
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>

#include "agent/agent.h"
#include "agent/check.h"
#include "agent/kubeletcheck.h"
#include "agent/status.h"
#include "agent/version.h"
#include "conf/config.h"
#include "systemd/curl-loop.h"
#include "systemd/log.h"
#include "systemd/testhook.h"
#include "volume/host/rootlock.h"
#include "volume/host/rootshared.h"

/* Exit codes of DESIGN.md §2. */
enum {
        EXIT_CLEAN_STOP = 0,
        EXIT_CONFIG_ERROR = 1,
        EXIT_STARTUP_FAILURE = 2,
};

static void help(void) {
        printf("Usage: kvolumed [--config PATH]\n"
               "       kvolumed --check-config [--online] [--config PATH]\n"
               "       kvolumed status [--socket PATH | --config PATH] [NAMESPACE/NAME | UID]\n"
               "       kvolumed --version | --help\n"
               "\n"
               "Kubernetes CSI volume node agent: sets up and tears down the CSI volumes of the\n"
               "pods bound to this node, at kubelet's paths.\n"
               "\n"
               "  -c --config PATH   configuration file (default: " CONFIG_DEFAULT_PATH ")\n"
               "     --check-config  validate the configuration, print the effective settings\n"
               "                     and exit 0, or print FILE:LINE: reason and exit 1; the\n"
               "                     kubeconfig, CA, client certificate, key and token files\n"
               "                     are opened and parsed as at start\n"
               "     --online        with --check-config: ask the API server who kvolumed is\n"
               "     --quiet         with --check-config: print errors only (the unit's reload)\n"
               "  -h --help          show this help\n"
               "     --version       show the version, the commit and the build type\n"
               "  status [POD]       the node's volumes as a table, read from the local API\n"
               "\n"
               "Signals: SIGTERM/SIGINT stop (volumes stay), SIGHUP reloads the configuration.\n");
}

/* glibc's defaults suit a short program, not a daemon that should stay at a
 * few MiB for months.  Its mmap threshold rises to the largest block freed
 * so far (up to 32 MiB): after one 4 MiB buffer (a gRPC reply's limit, the
 * initial LIST) every later block of that size came from the heap, where the
 * small ones allocated around it kept its pages.  Measured beside 1,000
 * volumes (test/bench/mount.sh): a 14 MiB arena holding 4.2 MiB, 6.1 MiB of
 * it resident; with a fixed threshold, which gives big blocks back when they
 * are freed, 5.8 MiB (1.5 → 1.1 MiB on an empty node).  One arena: the
 * root-dir sync and fsGroup threads allocate little, and a second arena is
 * memory malloc_trim() seldom returns. */
static void malloc_tune(void) {
        (void) mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        (void) mallopt(M_ARENA_MAX, 1);
}

int main(int argc, char *argv[]) {
        enum { ARG_CHECK_CONFIG = 0x100, ARG_ONLINE, ARG_QUIET, ARG_VERSION };
        static const struct option options[] = {
                { "config", required_argument, NULL, 'c' },
                { "check-config", no_argument, NULL, ARG_CHECK_CONFIG },
                { "online", no_argument, NULL, ARG_ONLINE },
                { "quiet", no_argument, NULL, ARG_QUIET },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                {},
        };
        _cleanup_(config_freep) Config *config = NULL;
        /* Before the agent: released after it, which borrows it. */
        _cleanup_(root_lock_freep) RootLock *root_lock = NULL;
        _cleanup_(agent_freep) Agent *agent = NULL;
        _cleanup_free_ char *error = NULL;
        const char *config_path = CONFIG_DEFAULT_PATH;
        bool check_config = false, online = false, quiet = false;
        int c, r;

        /* A client of the running daemon, not the daemon. */
        if (argc > 1 && streq(argv[1], "status"))
                return status_main(argc - 1, argv + 1);

        while ((c = getopt_long(argc, argv, "c:h", options, NULL)) >= 0)
                switch (c) {
                case 'c':
                        config_path = optarg;
                        break;
                case ARG_CHECK_CONFIG:
                        check_config = true;
                        break;
                case ARG_ONLINE:
                        online = true;
                        break;
                case ARG_QUIET:
                        quiet = true;
                        break;
                case 'h':
                        help();
                        return EXIT_CLEAN_STOP;
                case ARG_VERSION:
                        printf("kvolumed " KVOLUMED_BUILD_VERSION "\n"
                               "commit: " KVOLUMED_COMMIT "\n"
                               "build type: " KVOLUMED_BUILD_TYPE "\n");
                        return EXIT_CLEAN_STOP;
                default:
                        fprintf(stderr, "Try 'kvolumed --help'.\n");
                        return EXIT_CONFIG_ERROR;
                }
        if ((online || quiet) && !check_config) {
                fprintf(stderr, "kvolumed: --online and --quiet go with --check-config; try 'kvolumed --help'.\n");
                return EXIT_CONFIG_ERROR;
        }
        if (optind < argc) {
                fprintf(stderr, "kvolumed: unexpected argument \"%s\"; try 'kvolumed --help'.\n", argv[optind]);
                return EXIT_CONFIG_ERROR;
        }

        malloc_tune();

        /* TEST ONLY: the integration suite runs its rounds every second. */
        if (test_hook_getenv("SHORT_INTERVALS"))
                config_allow_short_intervals(true);
        r = config_load(config_path, &config, &error);
        if (r < 0) {
                fprintf(stderr, "%s\n", error ? error : strerror(-r));
                return EXIT_CONFIG_ERROR;
        }
        if (check_config) {
                /* What the daemon would refuse at start fails the check too. */
                r = check_credentials(config, &error);
                if (r >= 0)
                        r = check_api_socket(config, &error);
                if (r < 0) {
                        fprintf(stderr, "%s\n", error ? error : strerror(-r));
                        return EXIT_CONFIG_ERROR;
                }
                if (!quiet) {
                        config_print_with_sources(config, stdout);
                        config_print_warnings(config, stderr);
                        check_print_warnings(config, stderr);
                }
                if (fflush(stdout) != 0)
                        return EXIT_CONFIG_ERROR;
                if (online) {
                        r = check_online(config, stdout, &error);
                        fflush(stdout);
                        if (r < 0) {
                                fprintf(stderr, "online: %s\n", error ? error : strerror(-r));
                                return EXIT_CONFIG_ERROR;
                        }
                }
                return EXIT_CLEAN_STOP;
        }

        log_setup();
        log_set_max_level(config->log_level);

        /* A file the configuration names that is missing or broken is the
         * operator's to fix, not the network's: exit 1, which systemd does
         * not restart (RestartPreventExitStatus=1), with the key to fix. */
        r = check_credentials(config, &error);
        /* An [api] socket directory others could write (or a symlink) too:
         * no restart fixes it.  A socket another process answers on is
         * found later, when binding, and exits 2: systemd's restart takes
         * it over once that process is gone. */
        if (r >= 0)
                r = check_api_socket(config, &error);
        if (r < 0) {
                log_error("%s", error ? error : strerror(-r));
                return EXIT_CONFIG_ERROR;
        }

        /* Before anything reads root-dir or calls a driver; held until exit.
         * Another kvolumed there is a setup error that a restart cannot fix:
         * the configuration-error code stops systemd's restart loop
         * (RestartPreventExitStatus=1). */
        r = root_lock_take(config->root_dir, ROOT_LOCK_DIR, &root_lock);
        if (r == -EBUSY)
                return EXIT_CONFIG_ERROR;
        if (r == -ENOENT || r == -ENOTDIR) {
                /* Its parent is missing: a typo in root-dir, which no restart fixes. */
                _cleanup_free_ char *where = config_key_location(config, "agent", "root-dir");
                log_error("%s: [agent] root-dir %s cannot be created: its parent directory does not exist",
                          strempty(where), config->root_dir);
                return EXIT_CONFIG_ERROR;
        }
        if (r < 0)
                return EXIT_STARTUP_FAILURE;
        /* A kubelet serving on this root-dir runs its own volume manager
         * there: refused before kvolumed touches root-dir, with exit 1 (no
         * restart loop; the operator stops kubelet, then starts kvolumed). */
        r = kubelet_check_root_dir(root_lock_fd(root_lock), root_lock_path(root_lock));
        if (r == -EADDRINUSE)
                return EXIT_CONFIG_ERROR;
        if (r < 0)
                return EXIT_STARTUP_FAILURE;

        /* root-dir a shared mount, as kubelet's setupDataDirs makes it, so
         * that a node plugin's Bidirectional mounts reach the host.  After the
         * lock (a second kvolumed stops there, before it could stack a bind
         * over the running one's root-dir) and before anything else opens
         * root-dir.  The lock's own descriptor names the directory under a
         * bind made now: it is taken again through the bind.  A failure stops
         * kvolumed as it stops kubelet ("error configuring root directory");
         * systemd's restart tries again. */
        if (test_hook_getenv("ROOT_DIR_PRIVATE"))
                /* TEST ONLY: the suite's tests move and rename mounts under
                 * root-dir, which the kernel refuses under a shared mount. */
                log_debug("Leaving root-dir %s as it is (KVOLUMED_TEST_ROOT_DIR_PRIVATE)", config->root_dir);
        else {
                r = rootdir_make_shared(root_lock_path(root_lock));
                if (r < 0) {
                        log_error("Error configuring root directory %s: it cannot be made a shared mount; stopping",
                                  config->root_dir);
                        return EXIT_STARTUP_FAILURE;
                }
                if (r > 0) {
                        root_lock = root_lock_free(root_lock);
                        r = root_lock_take(config->root_dir, ROOT_LOCK_DIR, &root_lock);
                        if (r < 0)
                                return r == -EBUSY ? EXIT_CONFIG_ERROR : EXIT_STARTUP_FAILURE;
                }
        }

        if (curl_loop_global_init() < 0)
                return EXIT_STARTUP_FAILURE;
        r = agent_new(config_path, TAKE_PTR(config), root_lock, &agent);
        if (r < 0)
                return EXIT_STARTUP_FAILURE;
        r = agent_run(agent);
        return r < 0 ? EXIT_STARTUP_FAILURE : r > 0 ? EXIT_CONFIG_ERROR : EXIT_CLEAN_STOP;
}
