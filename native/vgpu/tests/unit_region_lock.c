/* The shared region itself (src/region.c linked in): the robust lock after its holder is
 * killed, compaction without moving slots, pid reuse, half-initialised and foreign files, host
 * pids from NStgid and from the node agent's host-pids file. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "region.h"

static char path[256];

static void fresh_region(const char *name)
{
	snprintf(path, sizeof(path), "%s/%s", getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp", name);
	unlink(path);
}

static int wait_status(pid_t pid)
{
	int st = 0;
	while (waitpid(pid, &st, 0) < 0)
		;
	return st;
}

static void a_lock_holder_killed_by_sigkill_does_not_deadlock(void)
{
	int fds[2];
	char c;
	pid_t pid;

	fresh_region("lock");
	CHECK(vgpu_region_open(path, 1) == 0);
	CHECK(pipe(fds) == 0);
	if ((pid = fork()) == 0) {
		vgpu_region_lock();
		CHECK(write(fds[1], "x", 1) == 1);
		pause();
		_exit(0);
	}
	CHECK(read(fds[0], &c, 1) == 1);
	kill(pid, SIGKILL);
	wait_status(pid);
	alarm(5); /* a deadlock ends the test here */
	CHECK(vgpu_region_lock() == 0);
	vgpu_region_unlock();
	CHECK(vgpu_region_reserve(0, 100, 1000) == 0);
	vgpu_region_release(0, 100);
	alarm(0);
}

static void dead_slots_are_compacted_and_live_slots_never_move(void)
{
	struct vgpu_region *r;
	uint32_t mine = 0;

	fresh_region("compact");
	CHECK(vgpu_region_open(path, 1) == 0);
	r = vgpu_region_get();
	CHECK(r != NULL);
	if (r == NULL)
		return;
	CHECK(vgpu_region_reserve(0, 7, 0) == 0);
	for (uint32_t i = 0; i < r->high_water; i++)
		if (r->slots[i].pid == getpid())
			mine = i;
	int ready[2], go[2];
	pid_t pids[40];
	char c;
	CHECK(pipe(ready) == 0 && pipe(go) == 0);
	for (int i = 0; i < 40; i++) {
		if ((pids[i] = fork()) == 0) {
			vgpu_region_reserve(0, 1000, 0);
			close(go[1]);
			CHECK(write(ready[1], "x", 1) == 1);
			CHECK(read(go[0], &c, 1) == 0); /* until the parent closes it */
			if (i % 2)
				exit(0); /* hands its slot back at exit */
			_exit(0);        /* dies like kill -9: the slot stays until swept */
		}
	}
	for (int i = 0; i < 40; i++)
		CHECK(read(ready[0], &c, 1) == 1);
	CHECK(r->high_water >= mine + 41);
	close(go[1]);
	for (int i = 0; i < 40; i++)
		wait_status(pids[i]);
	CHECK_EQ(vgpu_region_used(0), 7 + 20 * 1000); /* the dead still hold theirs */
	CHECK_EQ(vgpu_region_sweep(true), 20);
	CHECK_EQ(r->high_water, mine + 1);
	for (uint32_t i = 0; i < VGPU_REGION_SLOTS; i++)
		if (i != mine)
			CHECK_EQ(r->slots[i].pid, 0);
	CHECK_EQ(r->slots[mine].pid, getpid());
	CHECK_EQ(vgpu_region_used(0), 7);
	vgpu_region_release(0, 7);
}

static void a_reused_pid_is_not_mistaken_for_the_dead_owner(void)
{
	struct vgpu_region *r;
	struct vgpu_region_slot *s;

	fresh_region("reuse");
	CHECK(vgpu_region_open(path, 1) == 0);
	r = vgpu_region_get();
	vgpu_region_lock();
	s = &r->slots[r->high_water];
	s->used[0] = 5;
	s->start_time = 1; /* pid 1 is alive, but it did not start at tick 1 */
	s->pid = 1;
	r->high_water++;
	vgpu_region_unlock();
	CHECK_EQ(vgpu_region_used(0), 5);
	CHECK_EQ(vgpu_region_sweep(true), 1);
	CHECK_EQ(vgpu_region_used(0), 0);
}

static void a_creator_killed_mid_initialisation_is_recovered(void)
{
	int fd;

	fresh_region("halfinit");
	fd = open(path, O_RDWR | O_CREAT, 0666);
	CHECK(ftruncate(fd, sizeof(struct vgpu_region)) == 0); /* sized, magic never written */
	close(fd);
	CHECK(vgpu_region_open(path, 1) == 0);
	CHECK(vgpu_region_get() && vgpu_region_get()->magic == VGPU_REGION_MAGIC);
	CHECK(vgpu_region_reserve(0, 10, 100) == 0);
	CHECK(vgpu_region_reserve(0, 91, 100) == -1);
	vgpu_region_release(0, 10);
}

static void a_region_of_another_version_is_refused(void)
{
	struct vgpu_region *r = calloc(1, sizeof(*r));
	int fd;

	fresh_region("version");
	r->magic = VGPU_REGION_MAGIC;
	r->version = VGPU_REGION_VERSION + 1;
	r->size = sizeof(*r);
	fd = open(path, O_RDWR | O_CREAT, 0666);
	CHECK(write(fd, r, sizeof(*r)) == (ssize_t)sizeof(*r));
	close(fd);
	free(r);
	CHECK(vgpu_region_open(path, 1) == -1);
}

/* A version-1 region (libvgpu before version 2: a bare 40-byte mutex, ndev at 56, slots at
 * 1088, 230,464 bytes) of a claim whose older containers still run is refused and left exactly
 * as it is: never reinitialised under them, never read with this layout. */
static void a_version_1_region_is_refused_and_left_untouched(void)
{
	enum { V1_SIZE = 1088 + VGPU_REGION_SLOTS * 224 };
	unsigned char *v1 = calloc(1, V1_SIZE), *after = calloc(1, V1_SIZE);
	uint32_t head[2] = {VGPU_REGION_MAGIC, 1};
	uint64_t size = V1_SIZE;
	int fd;

	CHECK(V1_SIZE != sizeof(struct vgpu_region));
	fresh_region("version1");
	memcpy(v1, head, sizeof(head));
	memcpy(v1 + 8, &size, sizeof(size));
	memcpy(v1 + 56, (uint32_t[]){1, 1}, 8); /* ndev, high_water */
	memcpy(v1 + 1088, (int32_t[]){(int32_t)getpid()}, 4); /* a live process's slot */
	fd = open(path, O_RDWR | O_CREAT, 0666);
	CHECK(write(fd, v1, V1_SIZE) == V1_SIZE);
	CHECK(vgpu_region_open(path, 1) == -1);
	CHECK(pread(fd, after, V1_SIZE, 0) == V1_SIZE);
	CHECK(memcmp(v1, after, V1_SIZE) == 0);
	CHECK(lseek(fd, 0, SEEK_END) == V1_SIZE);
	close(fd);
	free(v1);
	free(after);
}

static void host_pid_comes_from_nstgid(void)
{
	char buf[4096] = "", link[64] = "", *p;
	FILE *f = fopen("/proc/self/status", "r");
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	long first, second = 0;
	ssize_t l;

	fclose(f);
	buf[n] = '\0';
	p = strstr(buf, "NStgid:");
	CHECK(p != NULL);
	if (p == NULL)
		return;
	sscanf(p + 7, "%ld %ld", &first, &second);
	l = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
	link[l > 0 ? l : 0] = '\0';
	if (second > 0 || strcmp(link, "pid:[4026531836]") == 0)
		CHECK_EQ(vgpu_host_pid(), first); /* outermost visible pid */
	else
		CHECK_EQ(vgpu_host_pid(), 0); /* inside a pid namespace we cannot see out of */
	CHECK(vgpu_proc_start_time(getpid()) > 0);
	CHECK_EQ(vgpu_proc_start_time(getpid()), vgpu_proc_start_time(getpid()));
}

static int write_text(const char *file, const char *text)
{
	FILE *f;

	unlink(file);
	if ((f = fopen(file, "w")) == NULL)
		return -1;
	fputs(text, f);
	return fclose(f);
}

/* A slot whose owner could not tell its host pid (in a pod) is looked up in the node agent's
 * host-pids file beside the region, by pid and start time; anything else there is ignored. */
static void slots_without_a_host_pid_are_looked_up_in_the_agents_file(void)
{
	char file[300], text[1024];
	struct vgpu_region_slot *mine = NULL;
	struct vgpu_region *r;
	unsigned long long start;
	int32_t pids[8];
	int me = (int)getpid();

	fresh_region("hostpids/region");
	CHECK(vgpu_region_open(path, 1) == 0);
	r = vgpu_region_get();
	for (uint32_t i = 0; r && i < r->high_water; i++)
		if (r->slots[i].pid == me)
			mine = &r->slots[i];
	CHECK(mine != NULL);
	if (mine == NULL)
		return;
	mine->host_pid = 0; /* as in a pod: unknown */
	start = (unsigned long long)mine->start_time;
	snprintf(file, sizeof(file), "%.*s/host-pids", (int)(strrchr(path, '/') - path), path);
	unlink(file);
	CHECK_EQ(vgpu_region_host_pids(pids, 8), 0); /* no file: unknown */
	snprintf(text, sizeof(text), "vgpu-host-pids 2\n%d %llu 777\n", me, start);
	CHECK(write_text(file, text) == 0);
	CHECK_EQ(vgpu_region_host_pids(pids, 8), 0); /* another version: unknown */
	unlink(file);
	CHECK(mkfifo(file, 0644) == 0);
	alarm(5); /* a FIFO must not block the watcher */
	CHECK_EQ(vgpu_region_host_pids(pids, 8), 0);
	alarm(0);
	snprintf(text, sizeof(text),
		 "vgpu-host-pids 1\nnot a line\n%d %llu 0\n%d %llu 778\n%d %llu 779\n%d %llu 777\n"
		 "%d %llu 777\n",
		 me, start, me, start + 1, me + 1, start, me, start, me, start);
	CHECK(write_text(file, text) == 0);
	CHECK_EQ(vgpu_region_host_pids(pids, 8), 1); /* once, though listed twice */
	CHECK_EQ(pids[0], 777);
	CHECK_EQ(mine->host_pid, 0); /* read, never written back */
	mine->host_pid = 4242;       /* a known host pid wins; no lookup */
	CHECK_EQ(vgpu_region_host_pids(pids, 8), 1);
	CHECK_EQ(pids[0], 4242);
}

static void reservations_never_pass_the_limit_under_contention(void)
{
	pid_t pids[8];

	fresh_region("contend");
	CHECK(vgpu_region_open(path, 1) == 0);
	for (int i = 0; i < 8; i++) {
		if ((pids[i] = fork()) == 0) {
			int got = 0;
			for (int k = 0; k < 2000; k++) {
				if (vgpu_region_reserve(0, 10, 1000) == 0)
					got++;
				if (vgpu_region_used(0) > 1000)
					_exit(3);
				if (got > 5) {
					vgpu_region_release(0, 10);
					got--;
				}
			}
			exit(0);
		}
	}
	for (int i = 0; i < 8; i++) {
		int st = wait_status(pids[i]);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	CHECK_EQ(vgpu_region_used(0), 0);
}

/* The node agent's refusal counter: every refusal over the limit, by any process of the
 * container, counts on its device; admitted reservations do not. */
static void refusals_are_counted_per_device_for_every_process(void)
{
	struct vgpu_region *r;
	int d, other;
	pid_t pid;

	fresh_region("refused");
	CHECK(vgpu_region_open(path, 1) == 0);
	r = vgpu_region_get();
	CHECK(r != NULL);
	if (r == NULL)
		return;
	d = vgpu_region_device("GPU-refused-0", 1000, 0);
	other = vgpu_region_device("GPU-refused-1", 1000, 0);
	CHECK(d >= 0 && other >= 0);
	CHECK(vgpu_region_reserve(d, 600, 1000) == 0);
	CHECK(vgpu_region_reserve(d, 600, 1000) < 0);
	if ((pid = fork()) == 0)
		_exit(vgpu_region_reserve(d, 500, 1000) < 0 ? 0 : 1);
	CHECK_EQ(WEXITSTATUS(wait_status(pid)), 0);
	CHECK(vgpu_region_reserve(d, 400, 1000) == 0);
	CHECK_EQ(__atomic_load_n(&r->devices[d].refused, __ATOMIC_RELAXED), 2);
	CHECK_EQ(__atomic_load_n(&r->devices[other].refused, __ATOMIC_RELAXED), 0);
	vgpu_region_release(d, 1000);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(a_lock_holder_killed_by_sigkill_does_not_deadlock),
		CASE(dead_slots_are_compacted_and_live_slots_never_move),
		CASE(a_reused_pid_is_not_mistaken_for_the_dead_owner),
		CASE(a_creator_killed_mid_initialisation_is_recovered),
		CASE(a_region_of_another_version_is_refused),
		CASE(a_version_1_region_is_refused_and_left_untouched),
		CASE(host_pid_comes_from_nstgid),
		CASE(slots_without_a_host_pid_are_looked_up_in_the_agents_file),
		CASE(reservations_never_pass_the_limit_under_contention),
		CASE(refusals_are_counted_per_device_for_every_process),
	};
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
