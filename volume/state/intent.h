/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The intent record: a small file kvolumed keeps for each volume directory
 * it manages (the staging volume dir and the per-pod volume dir), in its own
 * tree under root-dir (path_intent_record(), volume/host/paths.h), never in the
 * volume dir itself, where it would fail kubelet's teardown; saying which
 * mount-changing operation was last begun there,
 * whether it finished, and in which boot.  It is written and made durable
 * before every CSI call that can create or remove a mount, and rewritten
 * (lazily) when the call succeeds, so that reconstruction after a crash or
 * a reboot knows what may exist: kubelet keeps no such journal and has to
 * assume "maybe mounted" for everything it finds. */

#include <stdbool.h>

#include "systemd/macro.h"
#include "volume/host/paths.h"
#include "volume/host/rootdir.h"

#define BOOT_ID_MAX 37 /* a UUID and NUL */

/* The format of the records this build writes ("version"): bumped when a
 * change would make an older kvolumed misread a record (a rollback).  A
 * record without one is version 1 (kvolumed before the field). */
#define INTENT_VERSION 1

typedef enum OpKind {
        OP_STAGE,
        OP_PUBLISH,
        OP_UNPUBLISH,
        OP_UNSTAGE,
        _OP_KIND_MAX,
        _OP_KIND_INVALID = -1,
} OpKind;

const char *op_kind_to_string(OpKind kind);
OpKind op_kind_from_string(const char *s);

typedef struct Intent {
        OpKind operation;
        bool done;                   /* the call succeeded; false: begun, maybe in flight when we died */
        bool mount;                  /* done: the target was a mount point afterwards */
        char boot_id[BOOT_ID_MAX];   /* the boot it happened in */
        char *pod;                   /* "namespace/name" of a publish's pod, for logs and events */
        /* A raw block publish: the device the driver published, as
         * volume/kinds/csi/blockmap.h identifies it (each NULL when unknown). */
        char *device;                /* "major:minor" */
        char *device_serial;         /* udev's ID_SERIAL or ID_WWN */
        char *device_link;           /* a /dev/disk/by-id/ link */
} Intent;

int intent_format(const Intent *i, char **ret);
/* -EBADMSG for anything that is not a record of ours; -EPROTONOSUPPORT for a
 * record of a newer format than INTENT_VERSION (a newer kvolumed's, after a
 * rollback): it must be left as it is, and its volume neither torn down nor
 * set up again on what this build would guess of it. */
int intent_parse(const char *text, Intent *ret);
/* The version a record says it has (1 without the field), -EBADMSG. */
int intent_version(const char *text);
void intent_done(Intent *i);

/* Creates the dirs a record at relpath (from path_intent_record()) goes in. */
int intent_record_dirs(RootDir *root, const char *relpath);
/* Removes a record and the dirs of RECORDS_DIR it leaves empty. */
int intent_record_remove(RootDir *root, const char *relpath);

/* The kernel's boot ID (/proc/sys/kernel/random/boot_id): mounts and loop
 * devices do not survive a change of it. */
int boot_id_read(char ret[static BOOT_ID_MAX]);
