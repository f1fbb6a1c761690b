/*
 * The shared region: one file per container (CUDA_DEVICE_MEMORY_SHARED_CACHE) mapped by every
 * CUDA process in it, so that all of them share one limit. This header is the only definition
 * of its layout. Any change to the layout bumps VGPU_REGION_VERSION; a file of another version
 * or size is refused (fail closed) with a message naming the file.
 *
 * Layout, version 2 (the same bytes on x86-64 and aarch64 glibc; all integers native-endian,
 * i.e. little-endian on both):
 *   offset 0     u32  magic      VGPU_REGION_MAGIC, written last when the file is initialised
 *   offset 4     u32  version    VGPU_REGION_VERSION
 *   offset 8     u64  size       sizeof(struct vgpu_region)
 *   offset 16    lock (64 bytes): a process-shared, robust pthread_mutex_t (40 bytes on x86-64,
 *                48 on aarch64) at the start of a fixed 64-byte field
 *   offset 80    u32  ndev       devices[0..ndev) are in use
 *   offset 84    u32  high_water slots[0..high_water) may be in use
 *   offset 88    devices[16]     struct vgpu_region_device (64 bytes each)
 *   offset 1112  slots[1024]     struct vgpu_region_slot (224 bytes each)
 *   230,488 bytes in all.
 * Version 1 (x86-64 only; libvgpu before version 2) had the bare 40-byte mutex: ndev at 56,
 * devices at 64, slots at 1088, 230,464 bytes; device and slot entries were as in version 2.
 * A version-2 libvgpu refuses a version-1 file (its size differs) and an older one refuses a
 * version-2 file, so processes of both never share one region; the node agent
 * (vgpu_bridge/node/region.py) reads both. The offsets it reads are asserted below.
 *
 * Rules that make it robust to kill -9 at any instruction:
 *  - The lock is a robust mutex: a holder's death hands the next locker EOWNERDEAD, which marks
 *    it consistent and sweeps (below) before going on.
 *  - A slot belongs to the process whose pid it holds; only the owner changes its counters,
 *    with atomic adds and subtracts. Claiming a slot (under the lock) zeroes the counters first
 *    and writes pid last; freeing writes pid = 0 last. A half-claimed slot of a dead process is
 *    a dead slot like any other.
 *  - Slots never move, so a process's slot index stays valid for its whole life (no stale
 *    pointers after compaction). Compaction = sweeping dead slots (pid gone, or start time
 *    changed, i.e. pid reuse) to free and lowering high_water past free tail slots. Sweeps run
 *    on registration, before refusing an allocation, after EOWNERDEAD, and from memory queries.
 *  - A device entry is written (uuid, limits) before ndev is raised.
 * Usage per device = the sum of used[d] over live slots, read with atomic loads.
 * devices[d].refused counts refusals under the lock; readers load it atomically.
 *
 * Host pids. A slot's host_pid is what its owner could tell from its own /proc (NStgid); in a
 * container with its own pid namespace and /proc that is nothing (0). The node agent, on the
 * host, finds those owners (same start time, innermost NSpid = slot pid) and writes, next to the
 * region, the text file VGPU_HOST_PIDS_FILE (replaced atomically, only when it changes):
 *     vgpu-host-pids 1
 *     <slot pid> <slot start_time> <host pid>      one line per slot it resolved, decimal
 * The file is advisory and read-only for libvgpu: a slot is never written by anyone but its owner,
 * and a missing file, or one of another first line, means "host pid unknown".
 */
#ifndef VGPU_REGION_H
#define VGPU_REGION_H

#include <pthread.h>
#include <stdint.h>

#include "vgpu.h"

#define VGPU_REGION_MAGIC 0x55504756u /* "VGPU" */
#define VGPU_REGION_VERSION 2u
#define VGPU_REGION_SLOTS 1024
#define VGPU_HOST_PIDS_FILE "host-pids"         /* in the region's directory */
#define VGPU_HOST_PIDS_HEADER "vgpu-host-pids 1" /* its first line: format, version 1 */

struct vgpu_region_device {
	char uuid[48];       /* "GPU-xxxxxxxx-...", NUL-terminated */
	uint64_t mem_limit;  /* bytes, 0 = none; as configured by the first process to see it */
	uint32_t sm_limit;   /* percent, 0 = none */
	uint32_t refused;    /* allocations refused over mem_limit, all processes (wraps); for the
			      * node agent's metrics. Was a zero reserved field: older files read 0 */
};

struct vgpu_region_slot {
	int32_t pid;          /* owner's pid in the container's pid namespace; 0 = free */
	int32_t host_pid;     /* outermost pid from /proc/self/status NStgid; 0 = unknown (see
			       * "Host pids" above for how the watcher finds it then) */
	uint64_t start_time;  /* owner's start time (clock ticks after boot): guards pid reuse */
	int32_t priority;     /* CUDA_TASK_PRIORITY */
	uint32_t sm_util;     /* last container utilisation this process measured, percent */
	uint64_t used[VGPU_MAX_DEVICES]; /* bytes charged per region device */
	uint64_t launches;    /* kernel launches seen (all devices), for metrics */
	uint64_t reserved[8];
};

struct vgpu_region {
	uint32_t magic;
	uint32_t version;
	uint64_t size;
	union {
		pthread_mutex_t lock;
		unsigned char lock_field[64]; /* fixes the size: the mutex's differs by architecture */
	};
	uint32_t ndev;
	uint32_t high_water;
	struct vgpu_region_device devices[VGPU_MAX_DEVICES];
	struct vgpu_region_slot slots[VGPU_REGION_SLOTS];
};

/* The layout the node agent reads at fixed offsets (vgpu_bridge/node/region.py): the same on
 * every architecture, or the build stops here. */
_Static_assert(sizeof(pthread_mutex_t) <= 64, "the mutex fits its 64-byte field");
_Static_assert(_Alignof(pthread_mutex_t) <= 8, "the mutex needs no more than 8-byte alignment");
_Static_assert(__builtin_offsetof(struct vgpu_region, magic) == 0, "magic offset");
_Static_assert(__builtin_offsetof(struct vgpu_region, version) == 4, "version offset");
_Static_assert(__builtin_offsetof(struct vgpu_region, size) == 8, "size offset");
_Static_assert(__builtin_offsetof(struct vgpu_region, lock) == 16, "lock offset");
_Static_assert(__builtin_offsetof(struct vgpu_region, ndev) == 80, "ndev offset");
_Static_assert(__builtin_offsetof(struct vgpu_region, high_water) == 84, "high_water offset");
_Static_assert(__builtin_offsetof(struct vgpu_region, devices) == 88, "devices offset");
_Static_assert(__builtin_offsetof(struct vgpu_region, slots) == 1112, "slots offset");
_Static_assert(sizeof(struct vgpu_region) == 230488, "region size");
_Static_assert(sizeof(struct vgpu_region_device) == 64, "device entry size");
_Static_assert(__builtin_offsetof(struct vgpu_region_device, mem_limit) == 48, "mem_limit offset");
_Static_assert(__builtin_offsetof(struct vgpu_region_device, sm_limit) == 56, "sm_limit offset");
_Static_assert(__builtin_offsetof(struct vgpu_region_device, refused) == 60, "refused offset");
_Static_assert(sizeof(struct vgpu_region_slot) == 224, "slot size");
_Static_assert(__builtin_offsetof(struct vgpu_region_slot, host_pid) == 4, "host_pid offset");
_Static_assert(__builtin_offsetof(struct vgpu_region_slot, start_time) == 8, "start_time offset");
_Static_assert(__builtin_offsetof(struct vgpu_region_slot, sm_util) == 20, "sm_util offset");
_Static_assert(__builtin_offsetof(struct vgpu_region_slot, used) == 24, "used offset");
_Static_assert(__builtin_offsetof(struct vgpu_region_slot, launches) == 152, "launches offset");

/* Opens a file that processes of several users share (read-write), creating it with mode 0666
 * when missing: O_CREAT|O_EXCL first, then fchmod (the umask is process-wide: clearing it would
 * race other threads); otherwise a plain open of the existing file, since an O_CREAT open of
 * another user's file in a sticky directory is refused under fs.protected_regular. -1 with
 * errno. `extra_flags`: e.g. O_NOFOLLOW. */
int vgpu_open_shared_file(const char *path, int extra_flags);
/* Maps (creating if needed) the region at `path` and registers this process. 0 or -1. The first
 * call also registers the fork handler by which a forked child takes a slot of its own. */
int vgpu_region_open(const char *path, int priority);
/* Region device index for `uuid`, adding it with these limits if new; -1 if the table is full. */
int vgpu_region_device(const char *uuid, uint64_t mem_limit, unsigned int sm_limit);
/* Charges `bytes` on device `d` to this process unless the container's usage would pass `limit`
 * (0 = none). 0, or -1 when over the limit. Takes the lock. */
int vgpu_region_reserve(int d, uint64_t bytes, uint64_t limit);
void vgpu_region_release(int d, uint64_t bytes);
/* Container usage of device d (bytes). */
uint64_t vgpu_region_used(int d);
/* Frees slots of dead processes (thorough: also of reused pids, a /proc read per slot).
 * Returns how many were freed, -1 if the region is unavailable. */
int vgpu_region_sweep(bool thorough);
/* Host pids of live processes of the container; returns the count (at most max). A slot without
 * one (host_pid 0) is looked up by (pid, start_time) in the node agent's host-pids file (below),
 * read once per call and only when such a slot exists. For the SM watcher (one call per tick). */
int vgpu_region_host_pids(int32_t *out, int max);
/* Adds to this process's launch count and records the measured utilisation (metrics). */
void vgpu_region_publish(uint64_t launches, uint32_t sm_util);
/* Test hook: the mapped region or NULL. */
struct vgpu_region *vgpu_region_get(void);
int vgpu_region_lock(void);
void vgpu_region_unlock(void);
/* Pids from /proc: outermost NStgid of this process (0 if unknown) and a process's start time. */
int32_t vgpu_host_pid(void);
uint64_t vgpu_proc_start_time(int pid);

#endif
