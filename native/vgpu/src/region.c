/* The shared region (layout and robustness rules in region.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "region.h"

static struct vgpu_region *region;
static int my_slot = -1;
static pid_t my_pid;
static int my_priority;
static char host_pids_path[4096]; /* <region's dir>/host-pids, written by the node agent */

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

struct vgpu_region *vgpu_region_get(void)
{
	return region;
}

/* Reads a small /proc file into buf, NUL-terminated; -1 if it cannot. */
static int read_proc(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

uint64_t vgpu_proc_start_time(int pid)
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (read_proc(path, buf, sizeof(buf)) < 0 || (p = strrchr(buf, ')')) == NULL)
		return 0;
	/* after ')' come fields 3 (state) .. 22 (starttime) */
	for (int field = 3; field <= 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (p == NULL || sscanf(p + 1, "%llu", &start) != 1)
		return 0;
	return start;
}

#define PROC_PID_INIT_INO 0xEFFFFFFCUL /* the kernel's initial pid namespace */

int32_t vgpu_host_pid(void)
{
	char buf[4096], link[64], *p, *end;
	unsigned long ino = 0;
	ssize_t n;
	long pid;
	int count = 0;

	if (read_proc("/proc/self/status", buf, sizeof(buf)) < 0)
		return 0;
	/* NStgid lists this process's pid in each pid namespace visible from this /proc, outermost
	 * first. More than one entry: the first is the host's (or the outermost we can see). One
	 * entry: it is the host pid only if we live in the initial pid namespace. */
	if ((p = strstr(buf, "\nNStgid:")) == NULL)
		return 0;
	p += 8;
	pid = strtol(p, &end, 10);
	for (char *q = p; *q && *q != '\n'; q = end) {
		long v = strtol(q, &end, 10);
		if (end == q)
			break;
		count += v > 0;
	}
	if (count > 1)
		return (int32_t)pid;
	n = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
	if (n > 0) {
		link[n] = '\0';
		sscanf(link, "pid:[%lu]", &ino);
	}
	return ino == PROC_PID_INIT_INO ? (int32_t)pid : 0;
}

/* thorough: also compare start times (pid reuse), which costs a /proc read per slot. */
static bool slot_dead(const struct vgpu_region_slot *s, bool thorough)
{
	int32_t pid = LOAD(&s->pid);
	uint64_t st;

	if (pid == 0)
		return false;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return true;
	if (!thorough)
		return false;
	st = vgpu_proc_start_time(pid);
	return st != 0 && s->start_time != 0 && st != s->start_time;
}

static void free_slot(struct vgpu_region_slot *s)
{
	for (int d = 0; d < VGPU_MAX_DEVICES; d++)
		STORE(&s->used[d], 0);
	STORE(&s->pid, 0);
}

/* Caller holds the lock. */
static int sweep_locked(bool thorough)
{
	int freed = 0;
	uint32_t hw = region->high_water;

	if (hw > VGPU_REGION_SLOTS)
		hw = VGPU_REGION_SLOTS;
	for (uint32_t i = 0; i < hw; i++) {
		if (slot_dead(&region->slots[i], thorough)) {
			LOG_INFO("freeing the slot of dead process %d", region->slots[i].pid);
			free_slot(&region->slots[i]);
			freed++;
		}
	}
	while (hw > 0 && LOAD(&region->slots[hw - 1].pid) == 0)
		hw--;
	STORE(&region->high_water, hw);
	return freed;
}

int vgpu_region_lock(void)
{
	int rc = pthread_mutex_lock(&region->lock);

	if (rc == EOWNERDEAD) {
		LOG_WARN("shared region lock holder died; recovering");
		pthread_mutex_consistent(&region->lock);
		sweep_locked(true);
		rc = 0;
	}
	return rc ? -1 : 0;
}

void vgpu_region_unlock(void)
{
	pthread_mutex_unlock(&region->lock);
}

/* Caller holds the lock. */
static int claim_slot_locked(void)
{
	pid_t pid = getpid();
	struct vgpu_region_slot *s;

	sweep_locked(false);
	for (int i = 0; i < VGPU_REGION_SLOTS; i++) {
		s = &region->slots[i];
		if (LOAD(&s->pid) != 0)
			continue;
		free_slot(s);
		s->host_pid = vgpu_host_pid();
		s->start_time = vgpu_proc_start_time(pid);
		s->priority = my_priority;
		s->sm_util = 0;
		s->launches = 0;
		STORE(&s->pid, pid);
		if ((uint32_t)i >= region->high_water)
			STORE(&region->high_water, (uint32_t)i + 1);
		return i;
	}
	return -1;
}

static int init_locked(int fd, const char *path)
{
	pthread_mutexattr_t attr;
	struct stat st;

	if (fstat(fd, &st) < 0)
		goto fail_errno;
	if (st.st_size != 0 && st.st_size != (off_t)sizeof(*region)) {
		/* Left as it is: e.g. a version-1 region (libvgpu before version 2) of a claim whose
		 * older containers still run. Its header names its version when it is one. */
		uint32_t head[2] = {0, 0};

		if (pread(fd, head, sizeof(head), 0) == (ssize_t)sizeof(head) &&
		    head[0] == VGPU_REGION_MAGIC)
			LOG_ERR("shared region %s is version %u (%lld bytes), this libvgpu needs version "
				"%u (%zu bytes); remove the file once no GPU process uses it", path,
				head[1], (long long)st.st_size, VGPU_REGION_VERSION, sizeof(*region));
		else
			LOG_ERR("shared region %s has %lld bytes, this libvgpu expects version %u of "
				"%zu bytes; remove the file once no GPU process uses it", path,
				(long long)st.st_size, VGPU_REGION_VERSION, sizeof(*region));
		return -1;
	}
	if (st.st_size == 0 && ftruncate(fd, sizeof(*region)) < 0)
		goto fail_errno;
	region = mmap(NULL, sizeof(*region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (region == MAP_FAILED) {
		region = NULL;
		goto fail_errno;
	}
	if (LOAD(&region->magic) == VGPU_REGION_MAGIC) {
		if (region->version == VGPU_REGION_VERSION && region->size == sizeof(*region))
			return 0;
		LOG_ERR("shared region %s is version %u (%llu bytes), this libvgpu needs version %u; "
			"remove the file once no GPU process uses it", path, region->version,
			(unsigned long long)region->size, VGPU_REGION_VERSION);
		goto fail_unmap;
	}
	/* New (ftruncate zero-fills), or its creator died before finishing: (re)initialise under
	 * the file lock. */
	if (st.st_size != 0)
		memset(region, 0, sizeof(*region));
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&region->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	region->version = VGPU_REGION_VERSION;
	region->size = sizeof(*region);
	STORE(&region->magic, VGPU_REGION_MAGIC);
	return 0;
fail_errno:
	LOG_ERR("shared region %s: %s", path, strerror(errno));
fail_unmap:
	if (region)
		munmap(region, sizeof(*region));
	region = NULL;
	return -1;
}

static void mkdir_parent(const char *path)
{
	char dir[4096], *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	if ((slash = strrchr(dir, '/')) == NULL || slash == dir)
		return;
	*slash = '\0';
	if (mkdir(dir, 01777) == 0)
		chmod(dir, 01777); /* shared by every user of the container, like /tmp */
}

static void release_at_exit(void)
{
	if (region && my_slot >= 0 && my_pid == getpid())
		free_slot(&region->slots[my_slot]);
}

static int register_self(void)
{
	int slot;

	if (vgpu_region_lock() < 0)
		return -1;
	slot = claim_slot_locked();
	vgpu_region_unlock();
	if (slot < 0) {
		LOG_ERR("shared region: all %d process slots are in use", VGPU_REGION_SLOTS);
		return -1;
	}
	my_slot = slot;
	my_pid = getpid();
	return 0;
}

int vgpu_open_shared_file(const char *path, int extra_flags)
{
	for (int attempt = 0; attempt < 3; attempt++) {
		int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | extra_flags, 0666);

		if (fd >= 0) {
			if (fchmod(fd, 0666) < 0)
				LOG_DEBUG("%s: fchmod: %s", path, strerror(errno));
			return fd;
		}
		if (errno != EEXIST)
			return -1;
		fd = open(path, O_RDWR | O_CLOEXEC | extra_flags);
		if (fd >= 0 || errno != ENOENT)
			return fd;
		/* removed between the two opens: create it again */
	}
	return -1;
}

static void set_host_pids_path(const char *region_path)
{
	const char *slash = strrchr(region_path, '/');
	int dir_len = slash ? (int)(slash - region_path) + 1 : 0;

	snprintf(host_pids_path, sizeof(host_pids_path), "%.*s%s", dir_len, region_path,
		 VGPU_HOST_PIDS_FILE);
}

/* A forked child is a new process: it gets its own slot on first use. */
static void forget_parent_slot(void)
{
	my_slot = -1;
}

static void register_fork_handler(void)
{
	pthread_atfork(NULL, NULL, forget_parent_slot);
}

int vgpu_region_open(const char *path, int priority)
{
	static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
	int fd = -1, rc = -1;

	pthread_once(&fork_once, register_fork_handler);
	my_priority = priority;
	set_host_pids_path(path);
	mkdir_parent(path);
	fd = vgpu_open_shared_file(path, 0);
	if (fd < 0) {
		LOG_ERR("shared region %s: %s", path, strerror(errno));
		goto fail;
	}
	if (flock(fd, LOCK_EX) < 0) {
		LOG_ERR("shared region %s: flock: %s", path, strerror(errno));
		goto fail;
	}
	rc = init_locked(fd, path);
	flock(fd, LOCK_UN);
	if (rc < 0)
		goto fail;
	if ((rc = register_self()) < 0)
		goto fail;
	atexit(release_at_exit);
fail:
	if (fd >= 0)
		close(fd);
	return rc;
}


static struct vgpu_region_slot *self_slot(void)
{
	if (region == NULL)
		return NULL;
	if (my_slot < 0 && register_self() < 0)
		return NULL; /* reset in a forked child by forget_parent_slot() */
	return &region->slots[my_slot];
}

int vgpu_region_device(const char *uuid, uint64_t mem_limit, unsigned int sm_limit)
{
	struct vgpu_region_device *e;
	int found = -1;
	uint32_t n;

	if (region == NULL)
		return -1;
	n = LOAD(&region->ndev);
	for (uint32_t i = 0; i < n && i < VGPU_MAX_DEVICES; i++)
		if (strcmp(region->devices[i].uuid, uuid) == 0)
			return (int)i;
	if (vgpu_region_lock() < 0)
		return -1;
	n = region->ndev;
	for (uint32_t i = 0; i < n && i < VGPU_MAX_DEVICES; i++)
		if (strcmp(region->devices[i].uuid, uuid) == 0)
			found = (int)i;
	if (found < 0 && n < VGPU_MAX_DEVICES) {
		e = &region->devices[n];
		memset(e, 0, sizeof(*e));
		snprintf(e->uuid, sizeof(e->uuid), "%s", uuid);
		e->mem_limit = mem_limit;
		e->sm_limit = sm_limit;
		STORE(&region->ndev, n + 1);
		found = (int)n;
	}
	vgpu_region_unlock();
	return found;
}

static uint64_t sum_used(int d)
{
	uint32_t hw = LOAD(&region->high_water);
	uint64_t sum = 0;

	for (uint32_t i = 0; i < hw && i < VGPU_REGION_SLOTS; i++)
		if (LOAD(&region->slots[i].pid) != 0)
			sum += LOAD(&region->slots[i].used[d]);
	return sum;
}

uint64_t vgpu_region_used(int d)
{
	if (region == NULL || d < 0 || d >= VGPU_MAX_DEVICES)
		return 0;
	return sum_used(d);
}

int vgpu_region_reserve(int d, uint64_t bytes, uint64_t limit)
{
	struct vgpu_region_slot *s = self_slot();
	uint64_t used;
	int rc = 0;

	if (s == NULL || d < 0 || d >= VGPU_MAX_DEVICES)
		return limit ? -1 : 0;
	if (limit == 0) {
		__atomic_add_fetch(&s->used[d], bytes, __ATOMIC_ACQ_REL);
		return 0;
	}
	if (vgpu_region_lock() < 0)
		return -1;
	used = sum_used(d);
	if (used + bytes > limit || used + bytes < used) {
		/* Before refusing, make sure no dead process still holds part of the limit. */
		if (sweep_locked(true) > 0)
			used = sum_used(d);
	}
	if (used + bytes > limit || used + bytes < used) {
		__atomic_add_fetch(&region->devices[d].refused, 1, __ATOMIC_RELAXED);
		rc = -1;
	} else
		__atomic_add_fetch(&s->used[d], bytes, __ATOMIC_ACQ_REL);
	vgpu_region_unlock();
	return rc;
}

void vgpu_region_release(int d, uint64_t bytes)
{
	struct vgpu_region_slot *s = self_slot();

	if (s == NULL || d < 0 || d >= VGPU_MAX_DEVICES)
		return;
	__atomic_sub_fetch(&s->used[d], bytes, __ATOMIC_ACQ_REL);
}

int vgpu_region_sweep(bool thorough)
{
	int n;

	if (region == NULL || vgpu_region_lock() < 0)
		return -1;
	n = sweep_locked(thorough);
	vgpu_region_unlock();
	return n;
}

/* A live slot whose owner could not tell its host pid. */
struct unresolved {
	int32_t pid;
	uint64_t start_time;
};

enum host_pids_outcome { HP_UNREAD, HP_READ, HP_MISSING, HP_UNREADABLE, HP_FOREIGN };

/* Logs the file's outcome once per change of it (one debug line, not one per tick). */
static void note_host_pids(enum host_pids_outcome outcome, int err)
{
	static enum host_pids_outcome last = HP_UNREAD;

	if (outcome == last)
		return;
	last = outcome;
	if (outcome == HP_READ)
		LOG_DEBUG("host pids: reading %s", host_pids_path);
	else if (outcome == HP_FOREIGN)
		LOG_DEBUG("host pids: %s is not a \"%s\" file; host pids unknown",
			  host_pids_path, VGPU_HOST_PIDS_HEADER);
	else
		LOG_DEBUG("host pids: %s: %s; host pids unknown", host_pids_path, strerror(err));
}

/* Opens the agent's file for reading: a regular file only (a FIFO must not block the watcher). */
static FILE *open_host_pids(void)
{
	struct stat st;
	FILE *f;
	int fd = open(host_pids_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0) {
		note_host_pids(errno == ENOENT ? HP_MISSING : HP_UNREADABLE, errno);
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		note_host_pids(HP_UNREADABLE, EINVAL);
		close(fd);
		return NULL;
	}
	if ((f = fdopen(fd, "r")) == NULL) {
		note_host_pids(HP_UNREADABLE, errno);
		close(fd);
	}
	return f;
}

/* Looks the unresolved slots up in the agent's host-pids file (format in region.h); appends the
 * host pids found to out and returns their count (at most max). A slot found is crossed off
 * (pid 0), so a repeated line cannot count a process twice. */
static int lookup_host_pids(struct unresolved *want, int nwant, int32_t *out, int max)
{
	char line[128];
	long long pid, host;
	unsigned long long start;
	int n = 0;
	FILE *f = open_host_pids();

	if (f == NULL)
		return 0;
	if (fgets(line, sizeof(line), f) == NULL || strcmp(line, VGPU_HOST_PIDS_HEADER "\n") != 0) {
		note_host_pids(HP_FOREIGN, 0);
		fclose(f);
		return 0;
	}
	note_host_pids(HP_READ, 0);
	while (n < max && fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "%lld %llu %lld", &pid, &start, &host) != 3 || host <= 0 ||
		    host > INT32_MAX)
			continue;
		for (int i = 0; i < nwant; i++)
			if (want[i].pid != 0 && want[i].pid == pid && want[i].start_time == start) {
				out[n++] = (int32_t)host;
				want[i].pid = 0;
				break;
			}
	}
	fclose(f);
	return n;
}

int vgpu_region_host_pids(int32_t *out, int max)
{
	struct unresolved want[VGPU_REGION_SLOTS];
	uint32_t hw;
	int n = 0, nwant = 0;

	if (region == NULL)
		return 0;
	hw = LOAD(&region->high_water);
	for (uint32_t i = 0; i < hw && i < VGPU_REGION_SLOTS && n < max; i++) {
		const struct vgpu_region_slot *s = &region->slots[i];
		int32_t pid = LOAD(&s->pid);

		if (pid == 0)
			continue;
		if (s->host_pid > 0)
			out[n++] = s->host_pid;
		else if (s->start_time != 0)
			want[nwant++] = (struct unresolved){pid, s->start_time};
	}
	if (nwant > 0 && n < max)
		n += lookup_host_pids(want, nwant, out + n, max - n);
	return n;
}

void vgpu_region_publish(uint64_t launches, uint32_t sm_util)
{
	struct vgpu_region_slot *s = self_slot();

	if (s == NULL)
		return;
	__atomic_add_fetch(&s->launches, launches, __ATOMIC_RELAXED);
	__atomic_store_n(&s->sm_util, sm_util, __ATOMIC_RELAXED);
}
