/*
 * Task priority across containers (CUDA_TASK_PRIORITY: 0 = high, >= 1 = low), without a node
 * monitor. Every claimed container maps the same host directory, CUDA_TASK_PRIORITY_DIR, which
 * holds one small "board" file per device UUID. Before each launch on a device, a priority-0
 * process stamps that device's board with the time of the launch (at most once per ms); a
 * lower-priority process holds the launch while the stamp is younger than HOLD
 * (CUDA_TASK_PRIORITY_HOLD_MS, default 200 ms), sleeping in steps of at most 20 ms, then
 * launches. A priority-0 process never waits.
 *
 * The board is lock-free: one atomic word is all that matters, so kill -9 at any instruction
 * leaves nothing held; a dead priority-0 process's stamp simply ages out. The board is advisory,
 * not a limit: when the directory or a board cannot be used, one warning says so and launches
 * run unblocked (fail open).
 *
 * Board file <dir>/<uuid>.board, layout version 1 (128 bytes, native-endian):
 *   offset 0    u64 ident    VGPU_BOARD_MAGIC | VGPU_BOARD_VERSION << 32; set once, by a
 *                            compare-and-swap from 0, by whichever process maps it first
 *   offset 8    56 bytes     reserved (0)
 *   offset 64   u64 high_ns  CLOCK_BOOTTIME (ns) of the last priority-0 launch; 0 = never.
 *                            CLOCK_BOOTTIME is one clock for every container of the node.
 *   offset 72   i32 high_pid host pid of the process that wrote high_ns (informational)
 *   offset 76   52 bytes     reserved (0)
 * A file of another size, magic or version is left alone (warning, priority not enforced on
 * that device). Opened by vgpu_open_shared_file (region.h): created 0666 by whoever comes first,
 * never refused by fs.protected_regular in the sticky (1777) directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "region.h"
#include "vgpu.h"

#define VGPU_BOARD_MAGIC 0x4f525056u /* "VPRO" */
#define VGPU_BOARD_VERSION 1u
#define VGPU_BOARD_IDENT ((uint64_t)VGPU_BOARD_VERSION << 32 | VGPU_BOARD_MAGIC)

struct vgpu_board {
	uint64_t ident;
	uint64_t reserved0[7];
	uint64_t high_ns; /* its own cache line: the only word written while tasks run */
	int32_t high_pid;
	uint32_t reserved1;
	uint64_t reserved2[6];
};
_Static_assert(sizeof(struct vgpu_board) == 128, "board size");
_Static_assert(__builtin_offsetof(struct vgpu_board, high_ns) == 64, "high_ns offset");

#define STAMP_EVERY_NS 1000000ULL /* a priority-0 process writes the board at most once per ms */
#define STEP_NS 20000000ULL       /* a waiting launch looks at the board again after at most this */

enum { BOARD_UNKNOWN, BOARD_MAPPED, BOARD_NONE };
static struct vgpu_board *boards[VGPU_MAX_DEVICES];
static int board_state[VGPU_MAX_DEVICES]; /* per CUDA ordinal */
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static int dir_warned, waited_before;
static int32_t my_pid; /* host pid written beside stamps; 0 until known (atomic) */

/* Opens (creating if needed) the board file; -1 with one warning per process. */
static int open_board_file(const char *path)
{
	int fd = vgpu_open_shared_file(path, O_NOFOLLOW);

	if (fd < 0 && !__atomic_exchange_n(&dir_warned, 1, __ATOMIC_RELAXED))
		LOG_WARN("priority board %s: %s (is CUDA_TASK_PRIORITY_DIR mounted read-write?); "
			 "CUDA_TASK_PRIORITY=%d not enforced, launches run unblocked",
			 path, strerror(errno), vgpu_cfg.priority);
	return fd;
}

/* Maps the board at `path`, initialising a new (all-zero) one; NULL after one warning. */
static struct vgpu_board *map_board(const char *path)
{
	struct vgpu_board *b;
	struct stat st;
	uint64_t ident = 0;
	int fd;

	if ((fd = open_board_file(path)) < 0)
		return NULL;
	if (fstat(fd, &st) < 0)
		goto fail_errno;
	/* 0 bytes: new, or its creator died before sizing it; several sizing it at once agree */
	if (st.st_size == 0 && ftruncate(fd, sizeof(*b)) < 0)
		goto fail_errno;
	if (st.st_size != 0 && st.st_size != (off_t)sizeof(*b)) {
		LOG_WARN("priority board %s has %lld bytes, this libvgpu expects version %u of %zu "
			 "bytes; CUDA_TASK_PRIORITY not enforced on this device",
			 path, (long long)st.st_size, VGPU_BOARD_VERSION, sizeof(*b));
		goto fail;
	}
	b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (b == MAP_FAILED)
		goto fail_errno;
	close(fd);
	if (!__atomic_compare_exchange_n(&b->ident, &ident, VGPU_BOARD_IDENT, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE) &&
	    ident != VGPU_BOARD_IDENT) {
		LOG_WARN("priority board %s is not a version-%u board (ident %#llx); "
			 "CUDA_TASK_PRIORITY not enforced on this device",
			 path, VGPU_BOARD_VERSION, (unsigned long long)ident);
		munmap(b, sizeof(*b));
		return NULL;
	}
	return b;
fail_errno:
	LOG_WARN("priority board %s: %s; CUDA_TASK_PRIORITY not enforced on this device", path,
		 strerror(errno));
fail:
	close(fd);
	return NULL;
}

/* A forked child inherits the mappings; the lock and its pid are new. */
static void forget_parent_pid(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	open_mu = fresh;
	my_pid = 0;
}

static void register_fork_handler(void)
{
	pthread_atfork(NULL, NULL, forget_parent_pid);
}

/* The board of CUDA ordinal `dev`, mapped on first use; NULL when priority is not enforced. */
static struct vgpu_board *board(int dev)
{
	static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
	char uuid[64], path[sizeof(vgpu_cfg.priority_dir) + 80];
	int st;

	if (dev < 0 || dev >= VGPU_MAX_DEVICES)
		return NULL;
	st = __atomic_load_n(&board_state[dev], __ATOMIC_ACQUIRE);
	if (st != BOARD_UNKNOWN)
		return st == BOARD_MAPPED ? boards[dev] : NULL;
	/* before the lock is first taken and before any stamp (my_pid) */
	pthread_once(&fork_once, register_fork_handler);
	pthread_mutex_lock(&open_mu);
	if (board_state[dev] == BOARD_UNKNOWN) {
		if (vgpu_dev_uuid(dev, uuid, sizeof(uuid)) < 0) {
			/* "cuda-ordinal-N" is no key another container shares */
			LOG_WARN("device %d has no UUID; CUDA_TASK_PRIORITY not enforced on it", dev);
		} else {
			snprintf(path, sizeof(path), "%s/%s.board", vgpu_cfg.priority_dir, uuid);
			boards[dev] = map_board(path);
		}
		__atomic_store_n(&board_state[dev], boards[dev] ? BOARD_MAPPED : BOARD_NONE,
				 __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&open_mu);
	return boards[dev];
}

/* How long launches of a low-priority task still wait for the stamp `last`: 0 = not at all. A
 * stamp up to HOLD in the future (another process read the clock a moment after us) counts as
 * now; one further out is no stamp of this clock, and ignored rather than obeyed forever. */
static uint64_t hold_left(uint64_t last, uint64_t now, uint64_t hold)
{
	if (last == 0)
		return 0;
	if (last > now)
		return last - now < hold ? hold : 0;
	return now - last < hold ? hold - (now - last) : 0;
}

static void wait_for_high(struct vgpu_board *b, int dev)
{
	uint64_t hold = (uint64_t)vgpu_cfg.priority_hold_ms * 1000000ULL;
	uint64_t now = vgpu_clock_ns(CLOCK_BOOTTIME), start = now, left;

	left = hold_left(__atomic_load_n(&b->high_ns, __ATOMIC_ACQUIRE), now, hold);
	if (left == 0)
		return;
	if (!__atomic_exchange_n(&waited_before, 1, __ATOMIC_RELAXED))
		LOG_INFO("CUDA_TASK_PRIORITY=%d: launches on device %d wait while a priority-0 task "
			 "(host pid %d) launches there, until it has been idle for %u ms",
			 vgpu_cfg.priority, dev, (int)__atomic_load_n(&b->high_pid, __ATOMIC_RELAXED),
			 vgpu_cfg.priority_hold_ms);
	do {
		vgpu_sleep_ns(left < STEP_NS ? left : STEP_NS);
		now = vgpu_clock_ns(CLOCK_BOOTTIME);
		left = hold_left(__atomic_load_n(&b->high_ns, __ATOMIC_ACQUIRE), now, hold);
	} while (left);
	LOG_DEBUG("launch on device %d held %.1f ms for a priority-0 task", dev,
		  (double)(now - start) / 1e6);
}

static void stamp(struct vgpu_board *b)
{
	uint64_t now = vgpu_clock_ns(CLOCK_BOOTTIME);
	int32_t pid = __atomic_load_n(&my_pid, __ATOMIC_RELAXED);

	/* unsigned: a stamp "in the future" (another clock) is overwritten too */
	if (now - __atomic_load_n(&b->high_ns, __ATOMIC_RELAXED) < STAMP_EVERY_NS)
		return;
	if (pid == 0) {
		if ((pid = vgpu_host_pid()) <= 0)
			pid = (int32_t)getpid();
		__atomic_store_n(&my_pid, pid, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&b->high_pid, pid, __ATOMIC_RELAXED);
	__atomic_store_n(&b->high_ns, now, __ATOMIC_RELEASE);
}

void vgpu_priority_launch(void)
{
	int dev = vgpu_current_device();
	struct vgpu_board *b = board(dev);

	if (b == NULL)
		return;
	if (vgpu_cfg.priority == 0)
		stamp(b);
	else
		wait_for_high(b, dev);
}
