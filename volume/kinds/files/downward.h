/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The downward API as kubelet renders it into files (pkg/volume/downwardapi
 * CollectData, pkg/fieldpath, pkg/api/v1/resource): the values a downwardAPI
 * volume, or the downwardAPI source of a projected volume, writes, and the
 * fields a container's env may name (for subPathExpr).  Pure functions of the
 * pod and the Node: no I/O, no event loop. */

#include <stdbool.h>

#include "k8s/objects.h"
#include "volume/host/atomicwriter.h"

/* Go's strconv.Quote: "\"" + s with \a \b \f \n \r \t \v \\ \" escaped, other
 * control bytes and invalid UTF-8 as \xNN, non-printable runes as \uNNNN or
 * \UNNNNNNNN, printable ones kept as they are. */
int downward_quote(const char *s, char **ret);

/* fieldpath.FormatMap: "k=\"v\"" lines sorted by key (bytewise, as Go's
 * sort of strings), joined by "\n", no newline after the last. */
int downward_format_map(const K8sStringMap *m, char **ret);

/* The value of fieldRef.fieldPath.  env false: what a volume may name
 * (fieldpath.ExtractFieldPathAsString: metadata.name, namespace, uid,
 * labels, annotations, labels['k'], annotations['k']); env true: also
 * kubelet's podFieldSelectorRuntimeValue fields (spec.nodeName,
 * spec.serviceAccountName, status.hostIP(s), status.podIP(s); a list joined
 * by ","), for a container's env.  -EINVAL with *ret_error (kubelet's
 * message) for a field it does not support or a bad subscript. */
int downward_field_value(const K8sPod *pod, const char *field_path, bool env, char **ret, char **ret_error);

/* The value of a resourceFieldRef for container (the ref's own name when
 * NULL): limits.* and requests.* of cpu, memory, ephemeral-storage and
 * hugepages-<size>, divided by the divisor ("0" counts as "1") and rounded
 * up.  A limit of cpu, memory or ephemeral-storage the container does not set
 * (or sets to 0) is the Node's allocatable (MergeContainerResourceLimits);
 * allocatable NULL: none known, the value is 0.  The container is looked up
 * among containers, then initContainers. */
int downward_resource_value(const K8sPod *pod, const K8sResourceFieldRef *ref, const char *container,
                            const K8sStringMap *allocatable, char **ret, char **ret_error);

/* Whether any item names a resource (then the Node's allocatable counts). */
bool downward_needs_node(const K8sDownwardAPIProjection *d);

/* CollectData: one file per item into p, mode the item's, else
 * default_mode (the volume's, or the projected volume's for a projection),
 * owner ATOMIC_UID_NONE.  Every item is tried; on failure the messages
 * joined as Go's errors aggregate them ("a" or "[a, b]") in *ret_error and
 * -EINVAL; p then holds what could be rendered. */
int downward_collect(const K8sPod *pod, const K8sDownwardAPIProjection *d, int64_t default_mode,
                     const K8sStringMap *allocatable, AtomicPayload *p, char **ret_error);
